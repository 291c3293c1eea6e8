/*
 * parley.h - the public API for programs that embed parley.
 *
 * Link with libparley.a (and libuv, jansson, mbedTLS, wslay, pthread, m).
 * Every public name starts with pl_. Functions return 0 or a negative
 * error code that pl_strerror describes in one line.
 *
 *   pl_instance *p;
 *   char err[256];
 *   pl_options o = {.workers = 2, .data_dir = "parley-data"};
 *   if (pl_open(&o, &p, err, sizeof err) != 0) ...;
 *   ...
 *   pl_close(p);   // clean stop: drains work, joins threads, frees all
 *
 * The API grows with the server: conversations, appends and subscriptions
 * come with the store and the conversation actors.
 */
#ifndef PARLEY_H
#define PARLEY_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pl_instance pl_instance;

typedef struct pl_options {
    int workers;            /* worker loops (threads); 0 = number of cores */
    const char *data_dir;   /* created if missing; NULL = "parley-data" */
    const char *durability; /* "full" (default), "interval=250ms", "none" */
    /* Bounds of the compliance gate, per conversation (0 = the default):
     * user or environment messages deferred while a tool call is pending,
     * and events held for a parent that has not arrived yet. */
    unsigned long long defer_timeout_ms; /* default 10 minutes */
    unsigned defer_max;                  /* default 64 */
    unsigned long long hold_timeout_ms;  /* default 5 seconds */
    unsigned hold_max;                   /* default 64 */
    /* WebSocket subscribers per conversation (0 = the default, 1000) */
    unsigned max_subscribers;
    /* A conversation without requests for this long closes its log (its
     * files and index), and opens it again on the next request that needs
     * it. 0 = the default, 5 minutes; ULLONG_MAX = never. */
    unsigned long long idle_close_ms;
} pl_options;

/* The library's version, e.g. "0.1.0". */
const char *pl_version(void);
/* One line describing an error code returned by a pl_ function. */
const char *pl_strerror(int err);

/* Start an instance: open the store in the data directory (creating it,
 * locking it against other processes, replaying its journal), then start
 * the worker loops and the conversation service (each conversation opens
 * on first use). On failure, `err` (if not NULL) gets one line saying
 * why: e.g. that another process has the directory. */
int pl_open(const pl_options *o, pl_instance **out, char *err, size_t errlen);
/* Number of worker loops the instance runs. */
int pl_workers(const pl_instance *p);
/* Number of conversations in its store. */
size_t pl_conversations(pl_instance *p);
/* Stop cleanly and free everything. Not from a parley thread. */
void pl_close(pl_instance *p);

#ifdef __cplusplus
}
#endif

#endif
