/*
 * nats_replies.c - the inboxes that requests with many answers (direct
 * gets of a page's records, a request forwarded to the owner node) read
 * their replies from: subscriptions kept for the connection's life and
 * reused, never one made and destroyed per request.
 *
 * Why: libnats 3.4.1 (Debian 12) looks a message's subscription up under
 * its lock and uses it after letting the lock go; a synchronous
 * subscription destroyed in that window (its last reply just taken, a
 * late replica's answer arriving) is freed memory to the reading thread,
 * whose mutex call then fails and aborts the process without a word
 * (fixed in libnats 3.6.1, nats.c#637). Kept subscriptions are destroyed
 * only after the connection is closed, once its reading thread is gone.
 * It also saves a SUB and an UNSUB per request.
 *
 * Each use takes a new generation: replies go to <inbox>.<gen>.<i>, and a
 * late answer to an earlier use (another replica's, one after a timeout)
 * is told apart and dropped.
 */
#include "nats_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { PENDING_MAX = 1024 }; /* replies held per inbox; past it they drop */

struct stn_replies {
    natsSubscription *sub;
    char inbox[96];
    uint64_t gen;
    struct stn_replies *next;
};

natsStatus stn_replies_take(st_nats *n, stn_replies **out)
{
    pthread_mutex_lock(&n->mu);
    stn_replies *r = n->replies;
    if (r != NULL)
        n->replies = r->next;
    pthread_mutex_unlock(&n->mu);
    natsStatus s = NATS_OK;
    if (r == NULL) {
        natsInbox *inbox = NULL;
        char wild[128];
        if ((r = calloc(1, sizeof(*r))) == NULL)
            return NATS_NO_MEMORY;
        s = natsInbox_Create(&inbox);
        if (s == NATS_OK) {
            snprintf(r->inbox, sizeof r->inbox, "%s", inbox);
            snprintf(wild, sizeof wild, "%s.>", inbox);
            s = natsConnection_SubscribeSync(&r->sub, n->nc, wild);
        }
        if (s == NATS_OK)
            s = natsSubscription_SetPendingLimits(r->sub, PENDING_MAX, -1);
        natsInbox_Destroy(inbox);
        if (s != NATS_OK) {
            /* not yet used by any reply: destroying it now is safe */
            natsSubscription_Destroy(r->sub);
            free(r);
            return s;
        }
    }
    r->gen++;
    *out = r;
    return NATS_OK;
}

void stn_replies_give(st_nats *n, stn_replies *r)
{
    if (r == NULL)
        return;
    /* what came late for this use: dropped now rather than held */
    int pending = 0;
    if (natsSubscription_GetPending(r->sub, &pending, NULL) == NATS_OK)
        for (natsMsg *m; pending-- > 0 && natsSubscription_NextMsg(&m, r->sub, 1) == NATS_OK;)
            natsMsg_Destroy(m);
    pthread_mutex_lock(&n->mu);
    r->next = n->replies;
    n->replies = r;
    pthread_mutex_unlock(&n->mu);
}

void stn_replies_subject(const stn_replies *r, size_t i, char *out, size_t cap)
{
    snprintf(out, cap, "%s.%llu.%zu", r->inbox, (unsigned long long)r->gen, i);
}

natsStatus stn_replies_next(stn_replies *r, int64_t timeout_ms, natsMsg **m, size_t *i)
{
    int64_t until = stn_now_ms() + timeout_ms;
    size_t plen = strlen(r->inbox);
    for (bool first = true;; first = false) {
        int64_t left = until - stn_now_ms();
        if (left <= 0 && !first)
            return NATS_TIMEOUT;
        natsStatus s = natsSubscription_NextMsg(m, r->sub, left > 0 ? left : 1);
        if (s != NATS_OK)
            return s;
        const char *subj = natsMsg_GetSubject(*m);
        char *end;
        unsigned long long gen = 0, k = 0;
        bool ours = strncmp(subj, r->inbox, plen) == 0 && subj[plen] == '.';
        if (ours) {
            gen = strtoull(subj + plen + 1, &end, 10);
            ours = *end == '.' && gen == r->gen;
        }
        if (ours) {
            k = strtoull(end + 1, &end, 10);
            ours = *end == '\0';
        }
        if (ours) {
            *i = (size_t)k;
            return NATS_OK;
        }
        natsMsg_Destroy(*m); /* a late answer to an earlier use */
        *m = NULL;
    }
}

void stn_replies_free(st_nats *n)
{
    for (stn_replies *r = n->replies, *next; r != NULL; r = next) {
        next = r->next;
        natsSubscription_Destroy(r->sub);
        free(r);
    }
    n->replies = NULL;
}
