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
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pl_instance pl_instance;

/* ---- verdicts: what a conversation answers ----------------------------- */

/* The outcome of a request to a conversation (an append, a control, a
 * delete). parley serve maps them to HTTP: COMMITTED and DUPLICATE 201,
 * DEFERRED 202, REJECTED and CONFLICT 409, INVALID 422, NOT_FOUND 404,
 * BUSY 503, FAILED 500, DONE 200. */
typedef enum pl_outcome {
    PL_COMMITTED = 0, /* durable: events[] with their indexes (a retried one
                         among new ones has duplicate set) */
    PL_DUPLICATE,     /* all of it was in the log already (an idempotent
                         retry): events[] with their indexes */
    PL_DEFERRED,      /* kept durably; committed once the pending tool calls
                         complete (or expired, with a ConversationErrorEvent) */
    PL_HELD,          /* waiting for its parent: only `parley lint` reports
                         it; an append is answered once it is resolved */
    PL_REJECTED,      /* a compliance rule refused it: rule, event_id,
                         pending[]; nothing was appended */
    PL_INVALID,       /* not a valid event, or not allowed now (a status it
                         cannot move to): detail says why */
    PL_CONFLICT,      /* a control the status does not allow (run while
                         running) */
    PL_NOT_FOUND,     /* no such conversation (any more) */
    PL_BUSY,          /* a bound was reached: retry after retry_after s */
    PL_FAILED,        /* the store (or memory) failed: detail says how */
    PL_DONE,          /* a control, delete or sync is done */
} pl_outcome;

#define PL_NO_INDEX UINT64_MAX

typedef struct pl_event_ref {
    const char *id;
    uint64_t index; /* its place in the log; PL_NO_INDEX if not known */
    int duplicate;  /* it was in the log before this append */
} pl_event_ref;

/* Valid for the duration of the callback that gets it. */
typedef struct pl_verdict {
    pl_outcome outcome;
    const char *detail;         /* one line ("" when there is nothing to say) */
    const char *rule;           /* PL_REJECTED: "interleaved_message", ...; else NULL */
    const char *event_id;       /* PL_REJECTED: the refused event's id, or NULL */
    const char *const *pending; /* PL_REJECTED: the tool calls pending */
    size_t npending;
    const pl_event_ref *events; /* COMMITTED, DUPLICATE, DEFERRED */
    size_t nevents;
    unsigned retry_after; /* PL_BUSY: seconds; 0 if unsaid */
} pl_verdict;

/* "committed", "duplicate", ... */
const char *pl_outcome_name(pl_outcome o);

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
