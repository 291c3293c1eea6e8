/*
 * nats_subs.c - subscriptions given up while the connection lives (a
 * follow stopped, the forward listener at stop, a catalog watch lost):
 * unsubscribed at once, destroyed only once the connection's reading
 * thread is past them.
 *
 * Why: libnats 3.4.1 (Debian 12) looks a message's subscription up under
 * the connection's subscription lock and uses it after letting the lock
 * go (nats.c#637, fixed in 3.6.1). An asynchronous subscription is freed
 * once its user has destroyed it and its delivery thread has exited; if
 * both happen in that window the reading thread locks freed memory, and
 * libnats aborts the process without a word; a synchronous one (a KV
 * watcher's) is freed at once. nats_replies.c keeps the reply inboxes for
 * the connection's life; these are made and given up with follows and
 * watches, so they are kept only as long as it takes.
 *
 * When that is: the reading thread is the only one that parses messages
 * (a reconnection joins the old one before it starts the next), it
 * counts each message (stats.inMsgs) in the same critical section as the
 * lookup, and the unsubscription removes the subscription under that
 * lock. So a message that found the subscription was counted before the
 * count read just after unsubscribing (the mark); once the count has
 * passed the mark, the thread has begun a later message and is done with
 * every earlier one. No clock and no guess: what is retired is destroyed
 * at the first sweep after one more message, or when the store closes.
 */
#include "nats_impl.h"

#include <stdlib.h>

struct stn_retired {
    natsSubscription *sub; /* or: */
    kvWatcher *w;
    uint64_t mark; /* messages the connection had counted when unsubscribed */
    struct stn_retired *next;
};

static bool counted(st_nats *n, uint64_t *in)
{
    natsStatistics *st = NULL;
    bool ok = natsStatistics_Create(&st) == NATS_OK &&
              natsConnection_GetStats(n->nc, st) == NATS_OK &&
              natsStatistics_GetCounts(st, in, NULL, NULL, NULL, NULL) == NATS_OK;
    natsStatistics_Destroy(st);
    return ok;
}

static void destroy(natsSubscription *sub, kvWatcher *w)
{
    if (w != NULL)
        kvWatcher_Destroy(w);
    else
        natsSubscription_Destroy(sub);
}

/* Destroys those the reading thread is past; the others stay. */
static void sweep(st_nats *n, uint64_t in)
{
    struct stn_retired *done = NULL;
    pthread_mutex_lock(&n->mu);
    for (struct stn_retired **p = &n->retired; *p != NULL;) {
        struct stn_retired *r = *p;
        if (in > r->mark) {
            *p = r->next;
            r->next = done;
            done = r;
        } else {
            p = &r->next;
        }
    }
    pthread_mutex_unlock(&n->mu);
    for (struct stn_retired *next; done != NULL; done = next) {
        next = done->next;
        destroy(done->sub, done->w);
        free(done);
    }
}

static void retire(st_nats *n, natsSubscription *sub, kvWatcher *w)
{
    if (w != NULL)
        kvWatcher_Stop(w); /* its subscription's unsubscription */
    else
        natsSubscription_Unsubscribe(sub);
    struct stn_retired *r = malloc(sizeof(*r));
    uint64_t in = 0;
    if (r == NULL || !counted(n, &in)) {
        /* cannot keep or cannot tell: the old way, open to the race */
        free(r);
        destroy(sub, w);
        return;
    }
    r->sub = sub;
    r->w = w;
    r->mark = in;
    pthread_mutex_lock(&n->mu);
    r->next = n->retired;
    n->retired = r;
    pthread_mutex_unlock(&n->mu);
    sweep(n, in); /* the earlier ones the count has passed; not this one */
}

void stn_sub_retire(st_nats *n, natsSubscription *sub)
{
    if (sub != NULL)
        retire(n, sub, NULL);
}

void stn_watch_retire(st_nats *n, kvWatcher *w)
{
    if (w != NULL)
        retire(n, NULL, w);
}

void stn_subs_sweep(st_nats *n)
{
    pthread_mutex_lock(&n->mu);
    bool any = n->retired != NULL;
    pthread_mutex_unlock(&n->mu);
    uint64_t in = 0;
    if (any && counted(n, &in))
        sweep(n, in);
}

void stn_subs_free(st_nats *n)
{
    sweep(n, UINT64_MAX);
}
