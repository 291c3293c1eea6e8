/*
 * conv_commit.c - between the sequencer and the store: the units the
 * sequencer made go to the store's committer in order; when one is
 * durable, the sequencer's committed state moves on, its events go to the
 * subscribers, and whoever waits is answered. The deferred set is saved
 * whenever it changed (after the units made with it, so that a message
 * taken out of it is in the log before the set without it replaces the
 * old), and a deferral is answered only once a set holding it is durable.
 * Checkpoints are taken from the committed state, so they never describe
 * an event that is not in the log.
 *
 * An I/O failure of the store fails the actor: its supervisor restarts
 * it, and the new incarnation rebuilds itself from the log, so no state
 * that a failed commit would contradict survives.
 */
#include "conv_impl.h"

#include "runtime/log.h"
#include "runtime/metrics.h"
#include "runtime/json.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* --------------------------------------------------------- the log ------ */

/* What the sequencer asks is answered on the loop, without a wait for
 * another machine (st_log_check: conv_confirm.c asked the thread pool
 * first where one would wait). One that would wait all the same (the
 * store's memory changed meanwhile) is answered "no", and the actor is
 * unsure: nothing it decided is stored or told (conv_drive). */
static uint64_t known(const conv *c)
{
    return c->sq != NULL ? seq_count(c->sq) : 0;
}

static int unsure(conv *c)
{
    c->unsure = true;
    return 0;
}

static int find(void *ctx, const char *id, seq_print *print)
{
    conv *c = ctx;
    uint64_t at;
    int e = st_log_check(c->log, id, strlen(id), known(c), &at);
    if (e != 0)
        return e == -EWOULDBLOCK ? unsure(c) : 0;
    if (print == NULL)
        return 1;
    st_page *p;
    int r = -1;
    if ((e = st_log_read_now(c->log, at, 1, &p)) == -EWOULDBLOCK)
        return unsure(c);
    if (e == 0) {
        ev kept;
        if (p->n == 1 && ev_parse((const char *)rt_buf_data(p->bytes) + p->ev[0].off,
                                  p->ev[0].len, &kept, NULL, 0) == 0) {
            if (seq_print_of(&kept, print) == 0)
                r = 1;
            ev_free(&kept);
        }
        st_page_free(p);
    }
    return r;
}

static bool has_key(void *ctx, const char *key, size_t len)
{
    conv *c = ctx;
    uint64_t at;
    int e = st_log_check_key(c->log, key, len, known(c), &at);
    return e == -EWOULDBLOCK ? unsure(c) : e == 0;
}

seq_log conv_seq_log(conv *c)
{
    return (seq_log){c, find, has_key};
}

/* ------------------------------------------------------------ answers --- */

/* The ids (a JSON array) with their indexes in the log, if there. */
static rt_buf *events_reply(conv *c, pl_outcome o, json_t *ids, const char *detail)
{
    size_t n = json_array_size(ids);
    pl_event_ref *refs = calloc(n ? n : 1, sizeof(*refs));
    if (refs == NULL)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        json_t *id = json_array_get(ids, i);
        uint64_t at = PL_NO_INDEX;
        if (o == PL_DUPLICATE &&
            st_log_check(c->log, json_string_value(id), json_string_length(id), known(c), &at) != 0)
            at = PL_NO_INDEX;
        refs[i] = (pl_event_ref){.id = json_string_value(id), .index = at};
    }
    rt_buf *b = conv_reply_new(
        &(conv_reply_spec){.outcome = o, .detail = detail, .nevents = n, .events = refs});
    free(refs);
    return b;
}

static const char deferred_detail[] = "deferred until the pending tool calls complete";

void conv_answer_verdict(conv *c, rt_promise *p, const seq_verdict *v)
{
    rt_buf *b = NULL;
    switch (v->kind) {
    case SEQ_DUPLICATE:
        b = events_reply(c, PL_DUPLICATE, v->ids, NULL);
        break;
    case SEQ_DEFERRED:
        if (c->gen_saved < v->gen) { /* once a set holding it is durable */
            conv_waiter *w = calloc(1, sizeof(*w));
            const char *id = json_string_value(json_array_get(v->ids, 0));
            if (w != NULL && (w->id = strdup(id != NULL ? id : "")) != NULL) {
                w->reply = p;
                w->gen = v->gen;
                w->next = c->waiters;
                c->waiters = w;
                return;
            }
            free(w);
            b = conv_reply_detail(PL_FAILED, 0, "cannot defer: out of memory");
            break;
        }
        b = events_reply(c, PL_DEFERRED, v->ids, deferred_detail);
        break;
    case SEQ_REJECTED: {
        char full[1300];
        snprintf(full, sizeof(full), "%s: %s", gate_rule_name(v->rule), v->detail);
        b = conv_reply_new(&(conv_reply_spec){.outcome = PL_REJECTED,
                                              .detail = full,
                                              .rule = gate_rule_name(v->rule),
                                              .event_id = v->event_id,
                                              .pending = v->pending});
        break;
    }
    default: {
        static const pl_outcome of[] = {
            [SEQ_ACCEPTED] = PL_COMMITTED, [SEQ_HELD] = PL_HELD,
            [SEQ_INVALID] = PL_INVALID,    [SEQ_CONFLICT] = PL_CONFLICT,
            [SEQ_BUSY] = PL_BUSY,          [SEQ_FAILED] = PL_FAILED,
            [SEQ_DONE] = PL_DONE,          [SEQ_DUPLICATE] = PL_DUPLICATE,
        };
        b = conv_reply_new(&(conv_reply_spec){
            .outcome = of[v->kind], .detail = v->detail, .retry_after = v->retry_after});
    }
    }
    conv_note(c);
    conv_answer(p, b);
    free(p);
}

/* A deferred set is durable (or could not be saved: err): the deferrals
 * it holds are answered. */
static void answer_waiters(conv *c, int err)
{
    for (conv_waiter **pp = &c->waiters; *pp != NULL;) {
        conv_waiter *w = *pp;
        if (w->gen > c->gen_saved) {
            pp = &w->next;
            continue;
        }
        *pp = w->next;
        json_t *ids = json_pack("[s]", w->id);
        conv_answer(w->reply, err != 0
                                  ? conv_reply_store_error(err, "cannot keep the deferred message")
                                  : events_reply(c, PL_DEFERRED, ids, deferred_detail));
        json_decref(ids);
        free(w->reply);
        free(w->id);
        free(w);
    }
}

/* ----------------------------------------------------------- files ------ */

typedef struct saving {
    rt_actor *a;
    uint64_t gen; /* the deferred set it holds; 0 for a checkpoint */
} saving;

static void on_saved(void *ctx, int status, uint64_t first)
{
    (void)first;
    saving *s = ctx;
    uint64_t err = (uint64_t)(status < 0 ? -status : 0) & 0xff;
    rt_notify(s->a, CONV_FILE_SAVED, s->gen << 8 | err, NULL);
    rt_actor_unref(s->a);
    free(s);
}

/* Write a file of the conversation's (data taken) after the appends made
 * so far. */
static void put_file(conv *c, const char *name, rt_buf *data, uint64_t gen, bool durable)
{
    if (data == NULL)
        return;
    if (c->deleted) {
        rt_buf_unref(data);
        return;
    }
    c->saves_sent++;
    saving *s = malloc(sizeof(*s));
    if (s != NULL)
        *s = (saving){rt_actor_ref(c->self), gen};
    if (s == NULL || st_conv_put_file(c->sc, name, data, durable, on_saved, s) < 0) {
        if (s != NULL) {
            rt_actor_unref(s->a);
            free(s);
        }
        conv_file_saved(c, gen, 0); /* counted, so that waiters still get an answer */
    }
    rt_buf_unref(data);
}

void conv_file_saved(conv *c, uint64_t gen, int err)
{
    c->saves_done++;
    if (gen > c->gen_saved) {
        c->gen_saved = gen;
        answer_waiters(c, err);
    }
}

static void save_deferred(conv *c)
{
    c->gen_sent = seq_deferred_gen(c->sq);
    rt_buf *b = rt_json_buf(seq_deferred_json(c->sq));
    if (b != NULL)
        put_file(c, CONV_DEFERRED_FILE, b, c->gen_sent, true);
}

/* A checkpoint is rebuilt from the log when lost, cut short or ahead of
 * it (conv_open.c checks): it needs no sync. */
void conv_checkpoint(conv *c)
{
    conv_findings f = seq_findings(c->sq);
    put_file(c, CONV_STATE_FILE,
             conv_state_json(seq_count(c->sq), seq_status_committed(c->sq),
                             seq_gate_committed(c->sq), &f),
             0, false);
    c->since_ckpt = 0;
}

/* ---------------------------------------------------------- units ------ */

typedef struct storing {
    rt_actor *a; /* held */
    uint32_t inc;
} storing;

static void on_stored(void *ctx, int status, uint64_t first)
{
    storing *w = ctx;
    /* news the actor is owed: not refused by its mailbox bound */
    if (status == 0)
        rt_notify(w->a, CONV_STORED, conv_stored_arg(first, w->inc), NULL);
    else
        rt_notify(w->a, CONV_STORE_FAILED, conv_stored_arg((uint64_t)-status, w->inc), NULL);
    rt_actor_unref(w->a);
    free(w);
}

/* Hand u to the committer; it answers in order. */
static int submit(conv *c, seq_unit *u)
{
    st_item stack[8], *items = u->n <= 8 ? stack : calloc(u->n, sizeof(*items));
    if (items == NULL)
        return -ENOMEM;
    for (size_t i = 0; i < u->n; i++) {
        seq_item *it = &u->items[i];
        items[i] = (st_item){.id = it->e.id,
                             .idlen = (uint32_t)strlen(it->e.id),
                             .key = it->key,
                             .keylen = it->keylen,
                             .payload = it->bytes};
    }
    storing *w = malloc(sizeof(*w));
    int r = w == NULL ? -ENOMEM : 0;
    if (w != NULL) {
        *w = (storing){rt_actor_ref(c->self), c->incarnation};
        r = st_append_at(c->sc, seq_unit_first(c->sq, u), items, u->n, on_stored, w);
    }
    if (items != stack)
        free(items);
    if (r < 0 && w != NULL) {
        rt_actor_unref(c->self);
        free(w);
    }
    return r;
}

static void ensure_tick(conv *c)
{
    bool waiting = seq_waiting(c->sq);
    if (c->tick == 0 && waiting)
        c->tick = rt_timer_start(c->self, 100, 100, CONV_TICK, 0);
    else if (c->tick != 0 && !waiting) {
        rt_timer_stop(c->self, c->tick);
        c->tick = 0;
    }
}

void conv_drive(conv *c)
{
    if (c->sq == NULL)
        return;
    if (c->unsure && c->failed == 0) {
        rt_log(RT_LOG_WARN, "conversation",
               "a check of the log would have waited for another machine: nothing of what "
               "was decided is kept, the conversation restarts from the log");
        c->failed = -ESTALE;
    }
    seq_unit *u;
    while ((u = seq_take(c->sq)) != NULL) {
        int r = c->failed != 0 ? c->failed : c->deleted ? -ENOENT : submit(c, u);
        if (r < 0 && c->failed == 0 && !c->deleted) {
            /* the sequencer counted on it: start again from the log */
            rt_log(RT_LOG_ERROR, "conversation", "cannot append: %s: restarting from the log",
                   strerror(-r));
            c->failed = r;
        }
    }
    if (!c->unsure && seq_deferred_gen(c->sq) != c->gen_sent)
        save_deferred(c);
    void *token;
    seq_verdict v;
    while (seq_answer(c->sq, &token, &v)) {
        if (!c->unsure) {
            conv_answer_verdict(c, token, &v);
        } else if (token != NULL) { /* decided on an answer it did not have */
            conv_answer(token, conv_reply_detail(PL_BUSY, 1,
                                                 "the conversation is restarting: "
                                                 "retry (the same event ids)"));
            free(token);
        }
        seq_verdict_clear(&v);
    }
    ensure_tick(c);
}

/* The 201 of a durable unit: its events with their indexes; for an array
 * that mixed retries with new events, one entry per posted event, in the
 * order posted, the retries with their index and duplicate set. */
static rt_buf *committed_reply(conv *c, const seq_unit *u, uint64_t first)
{
    size_t n = u->posted != NULL ? json_array_size(u->posted) : u->n;
    pl_event_ref stack[16], *refs = n <= 16 ? stack : calloc(n, sizeof(*refs));
    if (refs == NULL)
        return NULL;
    for (size_t k = 0; u->posted == NULL && k < n; k++)
        refs[k] = (pl_event_ref){.id = u->items[k].e.id, .index = first + k};
    for (size_t i = 0; u->posted != NULL && i < n; i++) {
        json_t *id = json_array_get(u->posted, i);
        const char *s = json_string_value(id);
        uint64_t at = PL_NO_INDEX;
        for (size_t k = 0; k < u->n && at == PL_NO_INDEX; k++)
            if (strcmp(u->items[k].e.id, s) == 0)
                at = first + k;
        bool dup = at == PL_NO_INDEX;          /* in the log before this append */
        for (size_t k = 0; k < i && !dup; k++) /* posted twice: the second is a retry */
            dup = json_equal(json_array_get(u->posted, k), id);
        if (at == PL_NO_INDEX && st_log_check(c->log, s, strlen(s), known(c), &at) != 0)
            at = PL_NO_INDEX;
        refs[i] = (pl_event_ref){.id = s, .index = at, .duplicate = dup};
    }
    rt_buf *b =
        conv_reply_new(&(conv_reply_spec){.outcome = PL_COMMITTED, .nevents = n, .events = refs});
    if (refs != stack)
        free(refs);
    return b;
}

void conv_stored(conv *c, uint64_t arg)
{
    uint64_t first;
    if (!conv_stored_mine(arg, c->incarnation, &first) || c->sq == NULL)
        return; /* an append of an incarnation that failed since */
    if (seq_inflight(c->sq) && first != seq_count(c->sq)) {
        /* the log holds events the sequencer did not count (another node's
         * or a failed incarnation's, stored after this one opened): its
         * indexes are not the log's, so it answers nothing more and starts
         * again from the log; the clients' retries find their events */
        rt_log(RT_LOG_ERROR, "conversation",
               "an append was stored at index %" PRIu64 ", the conversation counted %" PRIu64
               ": restarting from the log",
               first, seq_count(c->sq));
        c->failed = -ESTALE;
        return;
    }
    seq_unit *u = seq_durable(c->sq);
    if (u == NULL)
        return;
    for (size_t i = 0; i < u->n; i++)
        conv_publish(c, first + i, &u->items[i].e, u->items[i].bytes, u->items[i].note);
    rt_count(&conv_metrics_g.appended, u->n);
    if (u->n > 0 && u->items[u->n - 1].e.timestamp != NULL) {
        const char *ts = u->items[u->n - 1].e.timestamp; /* no printf: every append */
        size_t n = strnlen(ts, sizeof(c->updated) - 1);
        memcpy(c->updated, ts, n);
        c->updated[n] = '\0';
    }
    conv_note(c); /* a list asked after the answer shows these events */
    if (u->token != NULL) {
        rt_promise *p = u->token;
        conv_answer(p, u->success ? conv_reply_new(&(conv_reply_spec){.outcome = PL_DONE})
                                  : committed_reply(c, u, first));
        free(p);
    }
    for (seq_echo *x = u->echoes; x != NULL; x = x->next) {
        conv_answer(x->token, events_reply(c, PL_DUPLICATE, x->ids, NULL));
        free(x->token);
    }
    c->since_ckpt += u->n;
    if (c->since_ckpt >= c->o->checkpoint_every)
        conv_checkpoint(c);
    seq_unit_free(u);
    conv_check_syncs(c);
    conv_recovered(c);
}

void conv_refuse_waiting(conv *c, pl_outcome o, const char *why)
{
    seq_unit *u;
    while (c->sq != NULL && (u = seq_abandon(c->sq)) != NULL) {
        if (u->token != NULL) {
            conv_answer(u->token, conv_reply_detail(o, 0, "%s", why));
            free(u->token);
        }
        for (seq_echo *x = u->echoes; x != NULL; x = x->next) {
            conv_answer(x->token, conv_reply_detail(o, 0, "%s", why));
            free(x->token);
        }
        seq_unit_free(u);
    }
    if (c->sq != NULL) {
        seq_refuse_holds(c->sq, why, false);
        void *token;
        seq_verdict v;
        while (seq_answer(c->sq, &token, &v)) {
            conv_answer_verdict(c, token, &v);
            seq_verdict_clear(&v);
        }
    }
    for (conv_waiter *w = c->waiters, *next; w != NULL; w = next) {
        next = w->next;
        conv_answer(w->reply, conv_reply_detail(o, 0, "%s", why));
        free(w->reply);
        free(w->id);
        free(w);
    }
    c->waiters = NULL;
}
