/*
 * conv_idle.c - a conversation's log: opened when the actor starts (its
 * state rebuilt off the loop), let go when idle, opened again on demand.
 *
 * A conversation nobody has asked anything of for o->idle_close_ms, with
 * nothing in flight, lets its log go (asleep): the store closes the files
 * once no reader holds them either, so an idle conversation costs neither
 * file descriptors nor the log's index. Everything else stays (the
 * sequencer's state, subscribers); the first request that needs the log
 * opens it again (log_only) before it is handled, and STATUS is answered
 * without it. Requests that come while the log is being opened wait, in
 * order, and are handled (or refused, if it cannot be opened) after.
 *
 * Past the store's bound of open logs (st_store_max_open_logs), a quiet
 * conversation lets its log go as soon as it is quiet, not after
 * idle_close_ms, and the store closes logs nobody holds at once: file
 * descriptors stay bounded however many conversations are touched.
 */
#include "conv_impl.h"

#include "runtime/log.h"
#include "runtime/metrics.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void conv_set_open(conv *c, bool open)
{
    if (c->open != open)
        atomic_fetch_add_explicit(&conv_metrics_g.open, open ? 1 : -1, memory_order_relaxed);
    c->open = open;
}

void conv_arm_idle(conv *c, uint64_t ms)
{
    if (c->o->idle_close_ms != UINT64_MAX)
        rt_timer_start(c->self, ms, 0, CONV_IDLE_CHECK, 0);
}

/* Nothing waits on the log or the store: no unit, hold, deferral, save,
 * sync or early request. */
static bool quiet(const conv *c)
{
    return c->open && !c->deleted && !seq_inflight(c->sq) && !seq_waiting(c->sq) &&
           c->waiters == NULL && c->syncs == NULL && c->early_head == NULL && c->confirm == NULL &&
           c->refresh == NULL && c->meta_queue == NULL && c->saves_done == c->saves_sent;
}

/* What a client asks (as opposed to news of the conversation's own work). */
static bool is_request(uint32_t kind)
{
    return kind == CONV_APPEND || kind == CONV_CONTROL || kind == CONV_SUBSCRIBE ||
           kind == CONV_UNSUBSCRIBE || kind == CONV_EXPIRE || kind == CONV_STATUS ||
           kind == CONV_SYNC || kind == CONV_DELETE || kind == CONV_SET_META;
}

/* May it let its whole tree go (convs_retire)? Nothing may be lost that
 * a new tree would not rebuild from the log: no subscriber but its stuck
 * detector (whose window a new one refills from the log), nothing held or
 * deferred (quiet), and not running: a new tree finding `running` in the
 * log would take it for a crash mid-run. */
static bool may_retire(const conv *c)
{
    bool detector_only = c->nsubs == 0 || (c->nsubs == 1 && c->subs[0].notes && !c->subs[0].told);
    return detector_only && seq_status_committed(c->sq) != CONV_RUNNING &&
           seq_status(c->sq) == seq_status_committed(c->sq);
}

/* Let the log go (and, if it may, the whole tree). Crowded (too many
 * open), a short tail is not worth a checkpoint: it is replayed faster
 * than the checkpoint is written. */
static void go_to_sleep(conv *c, bool crowded)
{
    bool retire = may_retire(c);
    /* a quick open after a restart (and for a new tree); the save holds
     * the conversation */
    if (c->since_ckpt > 0 && (retire || !crowded || c->since_ckpt >= 64))
        conv_checkpoint(c);
    st_conv_release(c->sc);
    c->sc = NULL;
    c->log = NULL;
    conv_set_open(c, false);
    c->asleep = true;
    seq_rest(c->sq);
    if (retire && convs_retire(c->ctx, c->self))
        c->retired = true;
}

void conv_pass_on(conv *c, rt_msg *m)
{
    rt_promise p = rt_msg_promise(m);
    if (m->kind == CONV_UNSUBSCRIBE) { /* its old detector, stopping with it */
        conv_answer(&p, conv_reply_new(&(conv_reply_spec){.outcome = PL_DONE}));
        return;
    }
    rt_actor *a;
    if (p.to == NULL || !is_request(m->kind) || convs_get(c->ctx->svc, &c->ctx->id, &a) != 0) {
        rt_promise_fail(&p, RT_ECLOSED); /* not a client's, or deleted meanwhile */
        return;
    }
    rt_buf *b = m->buf != NULL ? rt_buf_ref(m->buf) : NULL;
    if (rt_promise_forward(&p, a, m->kind, m->arg, b) != 0) { /* else the new tree answers */
        rt_buf_unref(b);
        rt_promise_fail(&p, RT_ECLOSED);
    }
    rt_actor_unref(a);
}

void conv_idle_check(conv *c)
{
    if (!c->open)
        return;
    uint64_t idle = conv_mono_ms() - c->last_ms, after = c->o->idle_close_ms;
    if (idle < after || !quiet(c)) {
        conv_arm_idle(c, idle < after ? after - idle : after);
        return;
    }
    go_to_sleep(c, false);
}

void conv_sleep_if_crowded(conv *c)
{
    st_store *st = c->ctx->svc->store;
    if (c->open && quiet(c) && st_store_open_logs(st) > st_store_max_open_logs(st))
        go_to_sleep(c, true);
}

/* What an asleep conversation answers without its log. */
static bool needs_no_log(uint32_t kind)
{
    return kind == CONV_STATUS || kind == CONV_UNSUBSCRIBE || kind == CONV_FILE_SAVED ||
           kind == CONV_META_SAVED || kind == CONV_TICK || kind == CONV_IDLE_CHECK ||
           kind == CONV_REFRESH_LATE || kind == CONV_STOPPING;
}

static bool keep(conv *c, rt_msg *m);

bool conv_keep_early(conv *c, rt_msg *m)
{
    if ((c->recovering || c->confirm != NULL || c->refresh != NULL) && is_request(m->kind))
        return keep(c, m); /* in order, behind what waits (conv_confirm.c, conv_refresh.c) */
    /* a status where other nodes may have appended reads the log first */
    if (c->open ||
        (c->asleep && needs_no_log(m->kind) && !(m->kind == CONV_STATUS && conv_may_lag(c))))
        return false;
    return keep(c, m);
}

void conv_recovered(conv *c)
{
    if (c->recovering && !seq_inflight(c->sq)) {
        c->recovering = false;
        conv_run_early(c, PL_DONE, NULL);
    }
}

static bool keep(conv *c, rt_msg *m)
{
    conv_early *e = calloc(1, sizeof(*e));
    if (e == NULL) {
        rt_promise p = rt_msg_promise(m);
        rt_promise_fail(&p, RT_ENOMEM);
        return true;
    }
    e->kind = m->kind;
    e->arg = m->arg;
    e->buf = m->buf != NULL ? rt_buf_ref(m->buf) : NULL;
    e->reply = rt_msg_promise(m);
    if (c->early_tail != NULL)
        c->early_tail->next = e;
    else
        c->early_head = e;
    c->early_tail = e;
    if (c->asleep && !c->waking) {
        rt_runtime *rt = rt_actor_runtime(c->self);
        int r = conv_open_start(c->ctx, c->self, rt_runtime_uv(rt, rt_actor_loop(c->self)), true);
        if (r < 0)
            conv_run_early(c, PL_BUSY, "cannot open the conversation's log: out of memory");
        c->waking = r == 0;
    }
    return true;
}

void conv_run_early(conv *c, pl_outcome o, const char *why)
{
    /* an append set aside for its checks (conv_confirm.c), or a status
     * reading what other nodes appended (conv_refresh.c), stops the run:
     * what follows it waits for it */
    while (c->early_head != NULL && (why != NULL || (c->confirm == NULL && c->refresh == NULL))) {
        conv_early *e = c->early_head;
        if ((c->early_head = e->next) == NULL)
            c->early_tail = NULL;
        conv_early_end(c, e, o, why);
    }
}

conv_early *conv_early_new(uint32_t kind, uint64_t arg, const rt_buf *buf, rt_promise *reply)
{
    conv_early *e = calloc(1, sizeof(*e));
    if (e == NULL)
        return NULL;
    e->kind = kind;
    e->arg = arg;
    e->buf = buf != NULL ? rt_buf_ref((rt_buf *)(uintptr_t)buf) : NULL;
    e->reply = *reply;
    *reply = (rt_promise){0};
    return e;
}

void conv_early_end(conv *c, conv_early *e, pl_outcome o, const char *why)
{
    if (why != NULL)
        conv_answer(&e->reply, conv_reply_detail(o, 0, "%s", why));
    else
        conv_dispatch(c, e->kind, e->arg, e->buf, &e->reply);
    rt_promise_fail(&e->reply, RT_ENOREPLY); /* no-op if it was answered */
    rt_buf_unref(e->buf);
    free(e);
}

/* The log is open and the state rebuilt: the sequencer takes it over,
 * recovers from a crash mid-run, and goes on with what was waiting. */
static int on_opened(conv *c, conv_opened *o)
{
    seq_opts so = {.policy = o->policy >= 0 ? (conv_policy)o->policy : c->o->policy,
                   .defer_max = c->o->defer_max,
                   .hold_max = c->o->hold_max,
                   .defer_timeout_ms = c->o->defer_timeout_ms,
                   .hold_timeout_ms = c->o->hold_timeout_ms,
                   .measure = c->o->measure,
                   .slim = true};
    c->sc = o->sc;
    o->sc = NULL;
    c->log = o->log;
    seq_log lg = conv_seq_log(c);
    c->sq = seq_new(&so, &lg, o->g, o->status, o->count);
    o->g = NULL;
    if (c->sq == NULL) {
        conv_opened_free(o);
        return RT_ENOMEM;
    }
    seq_set_findings(c->sq, o->findings);
    seq_on_decided(c->sq, conv_count_decision, NULL);
    seq_set_time(c->sq, conv_mono_ms(), conv_wall_ms());
    memcpy(c->updated, o->updated, sizeof(c->updated));
    conv_set_open(c, true);
    size_t i;
    json_t *d;
    json_array_foreach(o->deferred, i, d)
    {
        const char *after = json_string_value(json_object_get(d, "after"));
        seq_restore_deferred(c->sq, json_object_get(d, "event"),
                             (uint64_t)json_integer_value(json_object_get(d, "deadline")), after);
    }
    c->gen_sent = c->gen_saved = seq_deferred_gen(c->sq);
    conv_opened_free(o);
    seq_recover(c->sq);
    conv_drive(c);
    /* a crash mid-run leaves events to append: until they are durable,
     * nobody is told the conversation is in error while its log says
     * running */
    c->recovering = seq_inflight(c->sq);
    conv_arm_idle(c, c->o->idle_close_ms);
    return 0;
}

int conv_on_open_result(conv *c, conv_opened *o)
{
    int err = o->err;
    /* a log that grew while it slept, on a node that does not write it:
     * another node's appends, which a status reads (conv_refresh.c) */
    bool moved = err == 0 && c->asleep && o->count != seq_count(c->sq) &&
                 !(o->count > seq_count(c->sq) && conv_may_lag(c));
    if (moved) {
        snprintf(o->detail, sizeof(o->detail),
                 "the log of an idle conversation went from %" PRIu64 " to %" PRIu64
                 " events while it was closed: starting again from the log",
                 seq_count(c->sq), o->count);
        err = -EIO;
    }
    if (err != 0) {
        rt_log(RT_LOG_ERROR, "conversation", "%s", o->detail);
        conv_run_early(c, moved ? PL_BUSY : o->why, o->detail);
        conv_opened_free(o);
        c->waking = false;
        /* asleep, it keeps its state and tries again at the next request;
         * a first open fails the actor, and its supervisor decides */
        return c->asleep && !moved ? 0 : err;
    }
    if (c->asleep && seq_wake(c->sq) < 0) {
        conv_run_early(c, PL_BUSY, "cannot open the conversation's log: out of memory");
        conv_opened_free(o);
        c->waking = false;
        return 0; /* still asleep: the next request tries again */
    }
    if (c->asleep) {
        c->sc = o->sc;
        o->sc = NULL;
        c->log = o->log;
        c->asleep = c->waking = false;
        conv_set_open(c, true);
        conv_opened_free(o);
        conv_arm_idle(c, c->o->idle_close_ms);
    } else {
        int r = on_opened(c, o);
        if (r < 0) {
            conv_run_early(c, PL_BUSY, "cannot open the conversation: out of memory");
            return r;
        }
        if (c->recovering)
            return 0; /* conv_recovered goes on once it is durable */
    }
    conv_run_early(c, PL_DONE, NULL);
    return 0;
}
