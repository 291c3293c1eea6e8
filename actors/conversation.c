/*
 * conversation.c - the conversation actor: its messages, its start and
 * stop, and the requests that change the conversation (appends, controls,
 * delete). Which event goes into the log and when is the sequencer's to
 * say (sequencer.h); this actor feeds it what comes (requests, the stuck
 * detector's findings, timer ticks) and does what it decides (conv_commit.c).
 *
 * A request that needs the log while it is closed waits for it
 * (conv_idle.c). An I/O failure of the store fails the actor: its
 * supervisor restarts it, and the new incarnation rebuilds itself from
 * the log.
 */
#include "conv_impl.h"

#include "runtime/log.h"
#include "runtime/metrics.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The conversation's clocks, read a few times for every message it
 * handles: for idleness and the sequencer's deadlines, of seconds and
 * minutes. The coarse clocks (a tick's resolution, 4 ms here) cost a
 * third of the precise ones (30 ns a read on this VM); each is only ever
 * compared with itself. Event timestamps are read precisely
 * (ev_now_timestamp). */
static uint64_t clock_ms(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

uint64_t conv_mono_ms(void)
{
    return clock_ms(CLOCK_MONOTONIC_COARSE);
}

uint64_t conv_wall_ms(void)
{
    return clock_ms(CLOCK_REALTIME_COARSE);
}

/* The process's counters, from the sequencer's decisions. */
void conv_count_decision(void *ctx, const ev *e, const seq_verdict *v, seq_was was, uint64_t index,
                         void *tag)
{
    (void)ctx;
    (void)tag;
    (void)e;
    (void)index;
    if (v->kind == SEQ_DEFERRED && was == SEQ_NEW)
        rt_count(&conv_metrics_g.deferred, 1);
    else if (v->kind == SEQ_HELD)
        rt_count(&conv_metrics_g.held, 1);
    else if (v->kind == SEQ_REJECTED && (int)v->rule < CONV_METRIC_RULES)
        rt_count(&conv_metrics_g.rejected[v->rule], 1);
}

/* A promise on the heap: the sequencer's token for who waits. */
static rt_promise *token_of(rt_promise *reply)
{
    if (reply->to == NULL)
        return NULL;
    rt_promise *p = malloc(sizeof(*p));
    if (p == NULL) {
        rt_promise_fail(reply, RT_ENOMEM);
        return NULL;
    }
    *p = *reply;
    *reply = (rt_promise){0};
    return p;
}

/* ------------------------------------------------------------- appends --- */

static int parse_events(const rt_buf *b, rt_jdoc **out, char *err, size_t errlen)
{
    json_error_t je;
    rt_jdoc *d = rt_jdoc_read((const char *)rt_buf_data(b), rt_buf_len(b), 0, &je);
    if (d == NULL) {
        snprintf(err, errlen, "body is not valid JSON: %s (at line %d, column %d)", je.text,
                 je.line, je.column);
        return -EINVAL;
    }
    rt_jtype t = rt_jdoc_type(d, 0);
    if (t != RT_JOBJ && t != RT_JARR) {
        rt_jdoc_unref(d);
        snprintf(err, errlen, "body must be an event object or an array of events");
        return -EINVAL;
    }
    if (t == RT_JARR && d->node[0].len == 0) {
        rt_jdoc_unref(d);
        snprintf(err, errlen, "the array of events is empty");
        return -EINVAL;
    }
    *out = d;
    return 0;
}

/* What stamping (id, timestamp, parent_id) may add to an event's bytes. */
enum { STAMPS_MAX = 256 };

/* The index of the first event larger than the store keeps (its canonical
 * bytes, stamped, are what is stored: *bytes), or n if none. Measured only
 * when the body could hold one (canonical JSON is at most 3 times the
 * bytes posted: \u escapes), so appends of ordinary size pay nothing. */
static size_t too_large(conv *c, size_t body_len, const ev *evs, size_t n, size_t *bytes)
{
    size_t max = st_store_max_event(c->ctx->svc->store);
    if (max > STAMPS_MAX && body_len <= (max - STAMPS_MAX) / 3)
        return n;
    for (size_t i = 0; i < n; i++) {
        rt_buf *b = ev_serialize(&evs[i]);
        *bytes = (b != NULL ? rt_buf_len(b) : 0) + STAMPS_MAX;
        rt_buf_unref(b);
        if (*bytes > max)
            return i;
    }
    return n;
}

static void on_append(conv *c, const rt_buf *body, rt_promise *reply)
{
    char err[1024];
    rt_jdoc *d;
    if (body == NULL || parse_events(body, &d, err, sizeof(err)) != 0) {
        conv_answer(reply, conv_reply_detail(PL_INVALID, 0, "%s", body == NULL ? "no body" : err));
        return;
    }
    bool array = rt_jdoc_type(d, 0) == RT_JARR;
    size_t n = array ? d->node[0].len : 1, ok = 0;
    ev one, *evs = array ? calloc(n, sizeof(*evs)) : &one;
    uint32_t at = array ? rt_jdoc_first(d, 0) : 0;
    for (; evs != NULL && ok < n; ok++, at = array ? rt_jdoc_next(d, 0, at) : at)
        if (seq_event_at(d, at, &evs[ok], err, sizeof(err)) != 0)
            break;
    rt_jdoc_unref(d);
    if (evs == NULL || ok < n) {
        for (size_t k = 0; evs != NULL && k < ok; k++)
            ev_free(&evs[k]);
        if (evs == NULL)
            conv_answer(reply, conv_reply_detail(PL_FAILED, 0, "out of memory"));
        else if (array)
            conv_answer(reply, conv_reply_detail(PL_INVALID, 0, "event %zu: %s", ok, err));
        else
            conv_answer(reply, conv_reply_detail(PL_INVALID, 0, "%s", err));
        if (array)
            free(evs);
        return;
    }
    size_t bytes = 0, big = too_large(c, rt_buf_len(body), evs, n, &bytes);
    if (big < n) {
        char what[32] = "the event";
        if (array)
            snprintf(what, sizeof(what), "event %zu", big);
        conv_answer(reply, conv_reply_detail(PL_TOO_LARGE, 0,
                                             "%s is %zu bytes, more than the store keeps for one "
                                             "event (%zu bytes): make it smaller",
                                             what, bytes, st_store_max_event(c->ctx->svc->store)));
        for (size_t k = 0; k < n; k++)
            ev_free(&evs[k]);
        if (array)
            free(evs);
        return;
    }
    int r = c->confirmed ? 0 : conv_confirm(c, evs, n, body, reply);
    if (r != 0) {
        for (size_t k = 0; k < n; k++)
            ev_free(&evs[k]);
        if (array)
            free(evs);
        if (r < 0)
            conv_answer(reply, conv_reply_detail(PL_BUSY, 1, "%s",
                                                 r == -ENOMEM ? "out of memory"
                                                              : "the server is stopping"));
        return;
    }
    rt_promise *token = token_of(reply);
    if (array) {
        seq_offer_array(c->sq, evs, n, token);
        free(evs);
    } else {
        seq_offer(c->sq, &one, token);
    }
}

/* -------------------------------------------------------------- delete --- */

static void on_deleted(void *ctx, int status, uint64_t first)
{
    (void)first;
    rt_actor *a = ctx;
    rt_notify(a, CONV_DELETED, (uint64_t)(status < 0 ? -status : 0), NULL);
    rt_actor_unref(a);
}

/* Refuse what waits (holds, deferrals), then remove the files after the
 * appends already handed to the store. */
static void delete_conv(conv *c, rt_promise *reply)
{
    seq_expire(c->sq, true);
    conv_drive(c);
    if (st_conv_delete(c->sc, on_deleted, rt_actor_ref(c->self)) < 0) {
        rt_actor_unref(c->self);
        conv_answer(reply, conv_reply_detail(PL_BUSY, 0, "the store is closing"));
        return;
    }
    c->sc = NULL;
    c->deleted = true;
    c->delete_reply = *reply;
    *reply = (rt_promise){0};
}

static void deleted(conv *c, uint64_t err)
{
    if (err != 0)
        conv_answer(&c->delete_reply,
                    conv_reply_detail(PL_FAILED, 0, "cannot remove the conversation's files: %s",
                                      strerror((int)err)));
    else
        conv_answer(&c->delete_reply, conv_reply_new(&(conv_reply_spec){.outcome = PL_DONE}));
    convs_stop(c->ctx->svc, &c->ctx->id);
}

/* ---------------------------------------------------------- dispatch --- */

static void nudge(conv *c, const rt_buf *buf)
{
    char text[1024];
    size_t n = buf != NULL && rt_buf_len(buf) < sizeof(text) ? rt_buf_len(buf) : 0;
    memcpy(text, buf != NULL ? rt_buf_data(buf) : (const uint8_t *)"", n);
    text[n] = '\0';
    seq_nudge(c->sq, text);
}

static void done(rt_promise *reply)
{
    conv_answer(reply, conv_reply_new(&(conv_reply_spec){.outcome = PL_DONE}));
}

void conv_dispatch(conv *c, uint32_t kind, uint64_t arg, const rt_buf *buf, rt_promise *reply)
{
    if (c->deleted && (kind == CONV_APPEND || kind == CONV_CONTROL || kind == CONV_SUBSCRIBE ||
                       kind == CONV_DELETE || kind == CONV_STATUS || kind == CONV_SET_META)) {
        char id[37];
        rt_uuid_dashed(&c->ctx->id, id);
        conv_answer(reply, conv_reply_detail(PL_NOT_FOUND, 0, "Conversation not found: %s", id));
        return;
    }
    if (c->deleted && (kind == CONV_NUDGE || kind == CONV_STUCK_FOUND || kind == CONV_TICK ||
                       kind == CONV_EXPIRE || kind == CONV_STOPPING))
        return; /* nothing is appended to a conversation that is gone */
    seq_set_time(c->sq, conv_mono_ms(), conv_wall_ms());
    switch (kind) {
    case CONV_APPEND:
        on_append(c, buf, reply);
        break;
    case CONV_CONTROL:
        if (arg == CONV_REFUSE_CALLS) {
            char reason[1024] = "User rejected the action.";
            if (buf != NULL && rt_buf_len(buf) > 0)
                snprintf(reason, sizeof(reason), "%.*s", (int)rt_buf_len(buf),
                         (const char *)rt_buf_data(buf));
            seq_reject(c->sq, reason, token_of(reply));
        } else {
            seq_control(c->sq, (conv_control)arg, token_of(reply));
        }
        break;
    case CONV_SUBSCRIBE:
        if (reply->to != NULL)
            conv_subscribe(c, reply, arg);
        break;
    case CONV_UNSUBSCRIBE:
        if (reply->to != NULL) {
            conv_unsubscribe(c, reply->to);
            done(reply);
        }
        break;
    case CONV_EXPIRE:
        seq_expire(c->sq, true);
        done(reply);
        break;
    case CONV_STATUS: {
        if (conv_refresh(c, kind, arg, buf, reply) != 0)
            break; /* answered once the log is read */
        conv_note(c);
        conv_reply info = conv_info(c);
        conv_answer(reply, conv_reply_new(&(conv_reply_spec){.outcome = PL_DONE, .info = &info}));
        break;
    }
    case CONV_STORED:
        conv_stored(c, arg);
        break;
    case CONV_DELETE:
        delete_conv(c, reply);
        break;
    case CONV_SET_META:
        conv_set_meta(c, buf, reply);
        break;
    case CONV_META_SAVED:
        conv_meta_saved(c, (int)arg);
        break;
    case CONV_DELETED:
        deleted(c, arg);
        break;
    case CONV_SYNC:
        conv_start_sync(c, reply);
        break;
    case CONV_SYNC_DONE:
        conv_sync_answered(c, arg);
        break;
    case RT_KIND_ERROR:
        if (arg == CONV_SYNC) /* a subscriber that could not answer */
            conv_sync_answered(c, 0);
        break;
    case CONV_FILE_SAVED:
        conv_file_saved(c, arg >> 8, (int)(arg & 0xff));
        break;
    case CONV_TICK:
        seq_expire(c->sq, false);
        break;
    case CONV_REFRESH_LATE:
        conv_refresh_late(c);
        break;
    case CONV_IDLE_CHECK:
        conv_idle_check(c);
        break;
    case CONV_STOPPING:
        /* the server is stopping: what is held is refused at once (and what
         * would be held from now), rather than when the server's grace for
         * requests in flight runs out */
        seq_refuse_holds(c->sq, "the server is stopping: retry", true);
        break;
    case CONV_NUDGE:
        nudge(c, buf);
        break;
    case CONV_STUCK_FOUND:
        rt_log(RT_LOG_INFO, "conversation", "stuck rule=%s", stuck_rule_name((stuck_rule)arg));
        seq_stuck(c->sq, (stuck_rule)arg);
        break;
    default:
        break;
    }
    conv_drive(c);
}

/* ----------------------------------------------------------- the actor --- */

static int conv_init(rt_actor *self, void *arg, void **state)
{
    conv_ctx *ctx = arg;
    conv *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return RT_ENOMEM;
    c->ctx = ctx;
    c->incarnation = atomic_fetch_add(&ctx->incarnations, 1) + 1;
    c->o = &ctx->svc->o;
    c->self = self;
    rt_runtime *rt = rt_actor_runtime(self);
    conv_opened *fresh = atomic_exchange(&ctx->fresh, NULL);
    int r = fresh != NULL
                ? rt_send(self, CONV_OPENED, (uintptr_t)fresh, NULL)
                : conv_open_start(ctx, self, rt_runtime_uv(rt, rt_actor_loop(self)), false);
    if (r < 0) {
        conv_opened_free(fresh);
        free(c);
        return r;
    }
    c->last_ms = conv_mono_ms();
    atomic_fetch_add_explicit(&conv_metrics_g.active, 1, memory_order_relaxed);
    *state = c;
    return 0;
}

static int conv_handle(rt_actor *self, void *state, rt_msg *m)
{
    (void)self;
    conv *c = state;
    if (c->retired) {
        if (m->kind == CONV_OPENED)
            conv_opened_free((conv_opened *)(uintptr_t)m->arg);
        else
            conv_pass_on(c, m);
        return 0;
    }
    if (m->kind == CONV_OPENED) {
        /* what came while it opened has run now: past the bound of open
         * logs, one woken only to answer lets its log go again */
        int r = conv_on_open_result(c, (conv_opened *)(uintptr_t)m->arg);
        if (r == 0 && c->failed == 0) {
            conv_note(c);
            conv_sleep_if_crowded(c);
        }
        return r;
    }
    if (m->kind != CONV_IDLE_CHECK && m->kind != CONV_STATUS && m->kind != CONV_TICK &&
        m->kind != CONV_REFRESH_LATE && m->kind != CONV_STOPPING)
        c->last_ms = conv_mono_ms();
    if (m->kind == CONV_CONFIRMED || m->kind == CONV_REFRESHED) { /* what a request waited for */
        if (m->kind == CONV_CONFIRMED)
            conv_confirmed(c, m);
        else
            conv_refreshed(c, m);
        conv_drive(c);
        if (c->failed == 0) {
            conv_note(c);
            conv_sleep_if_crowded(c);
        }
        return c->failed;
    }
    if (m->kind == CONV_GREW || m->kind == CONV_FOLLOWED) {
        conv_follow_msg(c, m); /* a page read is freed with its message */
        return 0;
    }
    if (conv_keep_early(c, m))
        return 0;
    if (m->kind == CONV_STORE_FAILED) {
        uint64_t err;
        if (!conv_stored_mine(m->arg, c->incarnation, &err))
            return 0; /* an append of an incarnation that failed since */
        rt_log(RT_LOG_ERROR, "conversation", "an append failed (%s): restarting from the log",
               strerror((int)err));
        c->failed = -(int)err; /* what conv_stop tells those who wait */
        return c->failed;
    }
    rt_promise reply = rt_msg_promise(m);
    conv_dispatch(c, m->kind, m->arg, m->buf, &reply);
    rt_promise_fail(&reply, RT_ENOREPLY); /* no-op if it was answered */
    if (c->failed == 0) {
        conv_note(c);
        conv_sleep_if_crowded(c);
    }
    return c->failed;
}

static void conv_stop(rt_actor *self, void *state)
{
    (void)self;
    conv *c = state;
    bool inflight = c->sq != NULL && seq_inflight(c->sq);
    /* what lists keep of it: its durable state, unless appends it made may
     * still land or it keeps deferred messages, whose time runs out only
     * while it runs (then the next one to ask starts it); a retired one
     * noted it already, and a new tree may be noting by now. After a store
     * failure too: its supervisor starts the next tree at once, and lists
     * need not wait for that one's open, which a cluster that does not
     * answer makes long (issue 22) */
    if (!c->retired && !c->deleted && c->sq != NULL &&
        ((!inflight && !seq_waiting(c->sq)) || c->failed != 0)) {
        conv_reply info = conv_info(c);
        convs_note(c->ctx, &info);
    } else if (!c->retired && !c->deleted) {
        convs_note(c->ctx, NULL);
    }
    atomic_fetch_sub_explicit(&conv_metrics_g.active, 1, memory_order_relaxed);
    /* deferrals stay in deferred.json for the next incarnation; a full
     * disk is said as such (507), anything else is a restart (503) */
    pl_outcome o = conv_store_outcome(c->failed) == PL_NO_SPACE ? PL_NO_SPACE : PL_BUSY;
    char said[400], says[200];
    const char *why = o == PL_NO_SPACE ? "the disk is full (No space left on device): nothing was "
                                         "appended; retry once space is freed"
                                       : "the conversation is restarting: retry";
    if (conv_store_unavailable(c->failed)) { /* the cluster's words, naming it */
        snprintf(said, sizeof(said),
                 "cannot append: %s; the conversation restarts from the log: retry (the same "
                 "event ids: a duplicate if it was stored)",
                 st_store_strerror(c->ctx->svc->store, c->failed, says, sizeof(says)));
        why = said;
    }
    conv_refuse_waiting(c, o, why);
    for (conv_flush *s = c->syncs, *next; s != NULL; s = next) {
        next = s->next;
        conv_answer(&s->reply, conv_reply_detail(o, 0, "%s", why));
        free(s);
    }
    conv_refuse_confirm(c, o, why);
    conv_refuse_refresh(c, o, why);
    conv_run_early(c, o, why);
    conv_refuse_meta(c, o, why);
    conv_follow_stop(c);
    while (c->nsubs > 0)
        conv_drop_sub(c, c->nsubs - 1, 1);
    free(c->subs);
    /* a last checkpoint, for a quick reopen (the committer does it after the
     * appends already queued) */
    if (c->open && !c->deleted && c->sq != NULL && !inflight && c->since_ckpt > 0)
        conv_checkpoint(c);
    conv_answer(&c->delete_reply,
                conv_reply_detail(PL_BUSY, 0, "the conversation stopped while being deleted"));
    seq_free(c->sq);
    st_conv_release(c->sc);
    conv_set_open(c, false);
    free(c);
}

const rt_behaviour conv_behaviour = {
    .name = "conversation",
    .init = conv_init,
    .handle = conv_handle,
    .stop = conv_stop,
};
