/*
 * nats_summary.c - what lists show of a conversation, published by its
 * writer into the catalog (the key s.<hex>, nats_store.h) so that every
 * node's watch takes it in (nats_catalog.c) and its lists, searches and
 * counts say what the writer says within about a second, without reading
 * the log.
 *
 * The writer's conversation notes its summary on its loop at each change
 * (st_conv_note_summary): the note is kept, and a publication is a job
 * of the worker pool, in order with the conversation's appends and its
 * deletion. A changed status is published at once; anything else at most
 * STN_SUMMARY_MS after the last publication: until then the conversation
 * waits on the store's due list (s->dhead), which idle workers look at
 * (stn_summary_due), so the last note of a burst is published too. A
 * failed put is tried again a second later, at the next due time.
 */
#include "nats_store.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static stn_conv *C(st_conv *c)
{
    return (stn_conv *)(void *)c;
}

/* Put c on the due list for its next publication (s->mu held). */
static void schedule(stn_store *s, stn_conv *c)
{
    bool urgent = !c->sum_any || c->sum.status != c->sum_status;
    int64_t due = urgent ? stn_now_ms() : c->sum_last + STN_SUMMARY_MS;
    if (c->sum_sched == 0) {
        c->refs++; /* the list's, then the job's */
        c->sum_sched = 1;
        c->sum_due = due;
        if (s->dhead == NULL || due < s->dnext)
            s->dnext = due;
        c->dnext = s->dhead;
        s->dhead = c;
    } else if (c->sum_sched == 1 && due < c->sum_due) {
        c->sum_due = due;
        if (due < s->dnext)
            s->dnext = due;
    } else {
        return; /* due already; or a job, whose end looks again */
    }
    pthread_cond_signal(&s->cv);
}

void stn_note_summary(st_conv *gc, const st_summary *sum)
{
    stn_conv *c = C(gc);
    if (!stn_writes(c) || atomic_load(&c->gone))
        return; /* its writer publishes */
    stn_store *s = c->s;
    pthread_mutex_lock(&s->mu);
    if (!s->stop) {
        c->sum = *sum;
        c->sum_new = true;
        schedule(s, c);
    }
    pthread_mutex_unlock(&s->mu);
}

static void published(void *ctx, int status, uint64_t first)
{
    (void)first;
    stn_conv *c = ctx;
    stn_store *s = c->s;
    pthread_mutex_lock(&s->mu);
    c->sum_sched = 0;
    if (status < 0)
        c->sum_new = true; /* not published: a second later */
    if (c->sum_new && !s->stop && !atomic_load(&c->gone))
        schedule(s, c);
    pthread_mutex_unlock(&s->mu);
}

int64_t stn_summary_due(stn_store *s)
{
    if (s->dhead == NULL)
        return INT64_MAX;
    int64_t now = stn_now_ms(), next = INT64_MAX;
    if (now < s->dnext && !s->stop)
        return s->dnext;
    for (stn_conv **p = &s->dhead; *p != NULL;) {
        stn_conv *c = *p;
        stn_job *j = c->sum_due <= now || s->stop ? calloc(1, sizeof(*j)) : NULL;
        if (j == NULL) { /* not yet (or out of memory: a second later) */
            if (c->sum_due <= now)
                c->sum_due = now + STN_SUMMARY_MS;
            if (c->sum_due < next)
                next = c->sum_due;
            p = &c->dnext;
            continue;
        }
        *p = c->dnext;
        *j = (stn_job){.kind = STN_SUMMARY, .done = published, .ctx = c};
        c->sum_sched = 2;
        stn_queue_locked(s, c, j); /* with the list's hold */
    }
    s->dnext = next;
    return next;
}

int stn_summary_run(stn_conv *c)
{
    stn_store *s = c->s;
    pthread_mutex_lock(&s->mu);
    st_summary v = c->sum;
    c->sum_new = false;
    c->sum_any = true;
    c->sum_status = v.status;
    c->sum_last = stn_now_ms();
    pthread_mutex_unlock(&s->mu);
    char key[40], val[200];
    snprintf(key, sizeof key, "s.%s", c->hex);
    int n = snprintf(
        val, sizeof val, "1 %" PRIu64 " %" PRIu32 " %" PRIu64 " %" PRIu64 " %" PRIu64 " %s", c->gen,
        v.status, v.count, v.violations, v.stuck, v.last_event[0] != '\0' ? v.last_event : "-");
    uint64_t rev = 0;
    int r = stn_kv_put(s->convs, key, val, (size_t)n, &rev);
    if (r == 0) /* this node's lists too, before the watch brings it */
        stn_catalog_apply(s, key, kvOp_Put, val, (size_t)n, rev);
    return r;
}

bool stn_summary_apply(stn_entry *e, kvOperation op, const void *v, size_t len, uint64_t rev)
{
    if (rev != 0 && rev <= e->srev)
        return true; /* seen: this node's own, brought back by the watch */
    if (op != kvOp_Put) {
        e->has_sum = false;
        e->srev = rev;
        return true;
    }
    char text[200], last[40];
    unsigned version;
    uint64_t gen, count, violations, stuck;
    uint32_t status;
    snprintf(text, sizeof text, "%.*s", (int)(len < sizeof text ? len : sizeof text - 1),
             (const char *)v);
    if (sscanf(text, "%u", &version) != 1 || version != 1)
        return false; /* not one this node can read (a newer version) */
    if (sscanf(text, "%u %" SCNu64 " %" SCNu32 " %" SCNu64 " %" SCNu64 " %" SCNu64 " %39s",
               &version, &gen, &status, &count, &violations, &stuck, last) != 7)
        return false;
    e->has_sum = true;
    e->sgen = gen;
    e->srev = rev;
    e->sum =
        (st_summary){.status = status, .count = count, .violations = violations, .stuck = stuck};
    snprintf(e->sum.last_event, sizeof e->sum.last_event, "%s", strcmp(last, "-") ? last : "");
    return true;
}

int stn_summary(st_store *gs, const rt_uuid *id, st_summary *out)
{
    stn_store *s = (stn_store *)(void *)gs;
    pthread_mutex_lock(&s->mu);
    stn_entry *e = stn_catalog_find(s, id);
    bool have = e != NULL && e->live && e->has_sum && e->sgen == e->gen;
    if (have)
        *out = e->sum;
    pthread_mutex_unlock(&s->mu);
    return have ? 0 : -ENOENT;
}
