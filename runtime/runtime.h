/*
 * runtime.h - the set of worker loops that actors run on.
 *
 * rt_runtime_new starts W worker threads, each running one libuv loop with a
 * root supervisor. rt_runtime_shutdown (any thread, also from a handler)
 * begins a clean stop: sends and spawns from outside the loops are refused
 * from then on, each root supervisor stops its children in reverse start
 * order (each handles what was already queued for it), then every loop
 * drains and closes its handles. rt_runtime_free waits for all that, joins
 * the threads and frees everything; it must not run on a loop thread. Actor
 * references still held then may be given back afterwards: every mailbox is
 * empty by then, so only the actor's memory (and its arg_free) is left.
 */
#ifndef RT_RUNTIME_H
#define RT_RUNTIME_H

#include <uv.h>

typedef struct rt_runtime rt_runtime;
typedef struct rt_actor rt_actor;

typedef struct rt_opts {
    int loops; /* worker threads; 0 = number of cores */
    /* Called on a loop thread whenever a root supervisor's child (one
     * spawned without a parent, or a top-level supervisor) fails, after the
     * child's stop ran and before it is restarted (permanent, transient) or
     * closed. `a` is borrowed. Failures are logged either way. */
    void (*on_failure)(void *ctx, rt_actor *a, int reason);
    void *ctx;
} rt_opts;

int rt_runtime_new(const rt_opts *o, rt_runtime **out);
void rt_runtime_shutdown(rt_runtime *rt);
/* Blocks until the shutdown has finished (starting it if needed) and the
 * threads are joined, but keeps the runtime's memory: other threads may
 * still post to its actors (their sends fail with RT_ECLOSED). Use it when
 * something outside the runtime (the store's committer) may still answer
 * actors; free the runtime once that has stopped. Not on a loop thread. */
void rt_runtime_wait(rt_runtime *rt);
/* rt_runtime_wait, then free everything. */
void rt_runtime_free(rt_runtime *rt);

int rt_runtime_loops(const rt_runtime *rt);
/* The libuv loop of worker i, for network code that runs on it. */
uv_loop_t *rt_runtime_uv(rt_runtime *rt, int i);
/* Index of the loop this thread runs, or -1 on other threads. */
int rt_current_loop(void);

#endif
