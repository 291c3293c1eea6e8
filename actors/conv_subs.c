/*
 * conv_subs.c - a conversation's subscribers, and syncs.
 *
 * Subscribers get every durable event once, in log order, as the shared
 * bytes (or as its stuck note, made once from the parsed event). A
 * subscriber whose bounded mailbox is full is dropped (a told one learns
 * it); the events are in the log, so it can read what it missed and
 * subscribe again: a slow subscriber never holds the conversation up.
 *
 * A sync is answered once nothing accepted is on its way to the disk and
 * every subscriber has answered an ask sent after the last event was
 * published to it (its mailbox is in order, so it has handled them all).
 * Commits that come meanwhile (a deferred message let go, a finding)
 * mean asking again.
 */
#include "conv_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What is durable only: a status whose event is still on its way to the
 * disk is not shown (a crash would take it back), as counts are not. */
conv_reply conv_info(const conv *c)
{
    conv_reply r = {.status = seq_status_committed(c->sq),
                    .count = seq_count(c->sq),
                    .pending = (uint32_t)gate_pending_count(seq_gate(c->sq)),
                    .gate_ns = seq_gate_ns(c->sq),
                    .findings = seq_findings(c->sq)};
    memcpy(r.updated, c->updated, sizeof(r.updated));
    return r;
}

void conv_note(conv *c)
{
    if (c->sq == NULL || c->deleted || c->retired)
        return;
    conv_reply r = conv_info(c);
    if (c->noted.done && c->noted.status == r.status && c->noted.count == r.count &&
        c->noted.findings.violations == r.findings.violations &&
        c->noted.findings.stuck == r.findings.stuck)
        return;
    convs_note(c->ctx, &r);
    if (c->sc != NULL) { /* other nodes' lists: published if this node writes it */
        st_summary sum = {.status = (uint32_t)r.status,
                          .count = r.count,
                          .violations = r.findings.violations,
                          .stuck = r.findings.stuck};
        memcpy(sum.last_event, r.updated, sizeof(sum.last_event));
        st_conv_note_summary(c->sc, &sum);
    }
    c->noted.done = true;
    c->noted.status = r.status;
    c->noted.count = r.count;
    c->noted.findings = r.findings;
}

void conv_drop_sub(conv *c, size_t i, uint64_t why)
{
    if (c->subs[i].told) {
        rt_notify(c->subs[i].a, CONV_DROPPED, why, NULL);
        c->ntold--;
    }
    rt_actor_unref(c->subs[i].a);
    c->subs[i] = c->subs[--c->nsubs];
}

/* The stuck note of an event's bytes; NULL if they do not parse. */
static rt_buf *note_of_bytes(const char *bytes, size_t len)
{
    ev e;
    if (ev_parse(bytes, len, &e, NULL, 0) != 0)
        return NULL;
    rt_buf *note = stuck_note_new(&e);
    ev_free(&e);
    return note;
}

/* e's stuck note: made from its document, or from its bytes if it is slim. */
static rt_buf *note_of(const ev *e, rt_buf *bytes)
{
    return e->doc != NULL ? stuck_note_new(e)
                          : note_of_bytes((const char *)rt_buf_data(bytes), rt_buf_len(bytes));
}

void conv_publish(conv *c, uint64_t index, const ev *e, rt_buf *bytes, rt_buf *note)
{
    if (index < c->published)
        return; /* given already, as another node's (conv_follow.c) */
    c->published = index + 1;
    note = note != NULL ? rt_buf_ref(note) : NULL; /* ours; made when needed */
    for (size_t i = 0; i < c->nsubs;) {
        rt_buf *b = bytes;
        if (c->subs[i].notes) {
            if (note == NULL)
                note = note_of(e, bytes);
            b = note;
        }
        if (b != NULL && rt_send(c->subs[i].a, c->subs[i].notes ? CONV_NOTE : CONV_EVENT, index,
                                 rt_buf_ref(b)) == 0) {
            i++;
            continue;
        }
        rt_buf_unref(b);
        conv_drop_sub(c, i, 0);
    }
    rt_buf_unref(note);
}

/* The last `tail` durable events (at most the stuck detector's window), to
 * a new subscriber, before anything live: what the store answers without
 * waiting (a log that other nodes wrote since it was read here may not be
 * in memory: then none). */
static void send_tail(conv *c, rt_actor *sub, bool notes, uint64_t tail)
{
    uint64_t count = seq_count(c->sq);
    if (tail > STUCK_WINDOW)
        tail = STUCK_WINDOW;
    uint64_t from = count > tail ? count - tail : 0;
    st_page *p;
    if (from >= count || st_log_read_now(c->log, from, (uint32_t)(count - from), &p) != 0)
        return;
    for (uint32_t i = 0; i < p->n; i++) {
        const char *bytes = (const char *)rt_buf_data(p->bytes) + p->ev[i].off;
        rt_buf *b = notes ? note_of_bytes(bytes, p->ev[i].len) : rt_buf_copy(bytes, p->ev[i].len);
        if (b != NULL && rt_send(sub, notes ? CONV_NOTE : CONV_EVENT, p->ev[i].index, b) < 0)
            rt_buf_unref(b);
    }
    st_page_free(p);
}

void conv_subscribe(conv *c, rt_promise *reply, uint64_t arg)
{
    bool told = (arg & CONV_SUB_TOLD) != 0;
    if (told && c->ntold >= c->o->max_subscribers) {
        conv_answer(reply,
                    conv_reply_detail(PL_BUSY, 0,
                                      "Too many connections for this conversation (at most %u)",
                                      c->o->max_subscribers));
        return;
    }
    if (c->nsubs == c->subs_cap) {
        /* from one: most conversations have only their stuck detector */
        size_t cap = c->subs_cap ? 2 * c->subs_cap : 1;
        conv_sub *s = realloc(c->subs, cap * sizeof(*s));
        if (s == NULL) {
            conv_answer(reply, conv_reply_detail(PL_FAILED, 0, "out of memory"));
            return;
        }
        c->subs = s;
        c->subs_cap = cap;
    }
    bool notes = (arg & CONV_SUB_NOTES) != 0;
    rt_actor *sub = rt_actor_ref(reply->to);
    c->subs[c->nsubs++] = (conv_sub){sub, notes, told};
    c->ntold += told;
    send_tail(c, sub, notes, arg & 0xff);
    conv_follow_update(c);
    /* live from the next event it would be sent (conv_follow.c) */
    conv_reply info = {.status = seq_status_committed(c->sq), .count = conv_next_published(c)};
    conv_answer(reply, conv_reply_new(&(conv_reply_spec){.outcome = PL_DONE, .info = &info}));
}

void conv_unsubscribe(conv *c, rt_actor *sub)
{
    for (size_t i = 0; i < c->nsubs; i++) {
        if (c->subs[i].a == sub) {
            c->ntold -= c->subs[i].told;
            rt_actor_unref(c->subs[i].a);
            c->subs[i] = c->subs[--c->nsubs];
            conv_follow_update(c);
            return;
        }
    }
}

void conv_check_syncs(conv *c)
{
    if (c->sq != NULL && seq_inflight(c->sq))
        return;
    uint64_t count = c->sq != NULL ? seq_count(c->sq) : 0;
    for (conv_flush **pp = &c->syncs; *pp != NULL;) {
        conv_flush *s = *pp;
        if (s->waiting > 0) {
            pp = &s->next;
            continue;
        }
        if (s->asked_at != count) {
            s->asked_at = count;
            for (size_t i = 0; i < c->nsubs; i++)
                if (rt_ask(c->subs[i].a, CONV_SYNC, s->id, NULL, c->self) == 0)
                    s->waiting++;
            if (s->waiting > 0) {
                pp = &s->next;
                continue;
            }
        }
        *pp = s->next;
        conv_reply info = {.count = count};
        conv_answer(&s->reply,
                    conv_reply_new(&(conv_reply_spec){.outcome = PL_DONE, .info = &info}));
        free(s);
    }
}

void conv_start_sync(conv *c, rt_promise *reply)
{
    conv_flush *s = calloc(1, sizeof(*s));
    if (s == NULL) {
        conv_answer(reply, conv_reply_detail(PL_FAILED, 0, "out of memory"));
        return;
    }
    s->reply = *reply;
    *reply = (rt_promise){0};
    s->id = ++c->sync_seq;
    s->asked_at = UINT64_MAX;
    conv_flush **pp = &c->syncs;
    while (*pp != NULL)
        pp = &(*pp)->next;
    *pp = s;
    conv_check_syncs(c);
}

/* A subscriber answered (or, id 0, one failed to: the oldest sync waiting
 * stops waiting for it). */
void conv_sync_answered(conv *c, uint64_t id)
{
    for (conv_flush *s = c->syncs; s != NULL; s = s->next) {
        if (s->waiting > 0 && (id == 0 || s->id == id)) {
            s->waiting--;
            break;
        }
    }
    conv_check_syncs(c);
}
