/*
 * parley_impl.h - the inside of the public API (parley.h), shared by the
 * files that implement it: parley.c (the instance, conversations, appends,
 * controls, reads), parley_sub.c (subscriptions), parley_actor.c (the
 * embedder's actors) and net/parley_http.c (the HTTP server). Nothing
 * outside them reaches into an instance: `parley serve` uses parley.h.
 */
#ifndef PARLEY_IMPL_H
#define PARLEY_IMPL_H

#include "actors/acp_registry.h"
#include "actors/conversation.h"
#include "parley.h"
#include "runtime/rt.h"
#include "store/store.h"

#include <pthread.h>

/* Something the instance stops and frees when it closes (an HTTP server):
 * fn(ctx, false) before its loops stop, fn(ctx, true) after. */
typedef struct pl_closer {
    struct pl_closer *next;
    void (*fn)(void *ctx, bool stopped);
    void *ctx;
} pl_closer;

struct pl_instance {
    rt_runtime *rt;
    st_store *store;
    convs *convs;
    int workers; /* the loops that host conversations and actors */
    int cb_loop; /* the one more that runs subscription callbacks */
    acp_registry agents;
    pthread_mutex_t mu;
    pl_closer *closers;
};

struct pl_conv {
    pl_instance *p;
    rt_uuid id;
    char dashed[37];
};

/* Have pl_close call fn (see pl_closer). */
int pl__at_close(pl_instance *p, void (*fn)(void *ctx, bool stopped), void *ctx);
/* The loop a request's answer comes back on: the calling one when it is
 * a worker's, else a worker in turn (never the callback loop, where a
 * slow callback could hold it up). */
int pl__loop(pl_instance *p);
/* A runtime error (m is an RT_KIND_ERROR) as a verdict. */
void pl__error_verdict(const rt_msg *m, pl_verdict *v, char *detail, size_t cap);

#endif
