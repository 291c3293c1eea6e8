/*
 * parley.h - the public API for programs that embed parley.
 *
 * Link with libparley.a (and libuv, jansson, mbedTLS, wslay, pthread, m).
 * Every public name starts with pl_. Functions return 0 or a negative
 * error code that pl_strerror describes in one line.
 *
 *   pl_instance *p;
 *   pl_options o = {.workers = 2, .data_dir = "parley-data"};
 *   if (pl_open(&o, &p) != 0) ...;
 *   ...
 *   pl_close(p);   // clean stop: drains work, joins threads, frees all
 *
 * The API grows with the server: conversations, appends and subscriptions
 * come with the store and the conversation actors.
 */
#ifndef PARLEY_H
#define PARLEY_H

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pl_instance pl_instance;

typedef struct pl_options {
    int workers;          /* worker loops (threads); 0 = number of cores */
    const char *data_dir; /* created if missing; NULL = "parley-data" */
} pl_options;

/* The library's version, e.g. "0.1.0". */
const char *pl_version(void);
/* One line describing an error code returned by a pl_ function. */
const char *pl_strerror(int err);

/* Start an instance: create the data directory, start the worker loops. */
int pl_open(const pl_options *o, pl_instance **out);
/* Number of worker loops the instance runs. */
int pl_workers(const pl_instance *p);
/* Stop cleanly and free everything. Not from a parley thread. */
void pl_close(pl_instance *p);

#ifdef __cplusplus
}
#endif

#endif
