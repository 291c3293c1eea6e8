/*
 * conversation.c - the conversation actor: the one place a conversation's
 * events are ordered, checked and committed.
 *
 * An offered event is checked by the gate against the conversation as it
 * will be once everything accepted so far is durable (the "live" state);
 * if accepted it is stamped, serialized once, keyed by its tool call id and
 * handed to the store's committer as part of a unit (one request's events,
 * or one event the actor made itself). Units complete in order; only then
 * is the producer answered, the event published to subscribers, and the
 * "committed" copy of the state moved on: checkpoints are taken from that
 * copy, so they never describe an event that is not in the log.
 *
 * Held events wait in memory for their parent (their producer waits too).
 * Deferred messages are answered 202 once written to deferred.json, and
 * are offered again, in order, as soon as no tool call is pending; both
 * expire (CONV_TICK) after their bound. An I/O failure of the store fails
 * the actor: its supervisor restarts it, and the new incarnation rebuilds
 * itself from the log, so no optimistic state survives a failed commit.
 *
 * A conversation nobody has asked anything of for o->idle_close_ms, with
 * nothing in flight, lets its log go (asleep): the store closes the files
 * once no reader holds them either, so an idle conversation costs neither
 * file descriptors nor the log's index. Everything else stays (status,
 * gates, subscribers); the first request that needs the log opens it again
 * (log_only) before it is handled, and STATUS is answered without it.
 */
#include "conv_impl.h"
#include "runtime/metrics.h"
#include "runtime/text.h"

#include "runtime/json.h"
#include "runtime/log.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct item {
    ev e; /* stamped; kept until durable, for the committed state */
    rt_buf *bytes;
    char key[256];
    uint32_t keylen;
} item;

enum { REPLY_EVENTS = 0, REPLY_SUCCESS };

/* A retry of events that are already accepted: answered, like every 201,
 * only once they are durable, which they are when the unit it waits on is. */
typedef struct echo {
    struct echo *next;
    rt_promise reply;
    json_t *ids; /* the events' ids, as strings */
} echo;

typedef struct unit {
    struct unit *next;
    rt_promise reply; /* zero when nobody waits */
    int reply_kind;   /* REPLY_EVENTS: the ids and indexes; REPLY_SUCCESS */
    size_t n, cap;
    item *items;
    echo *echoes;
    json_t *posted; /* an array mixing retries and new events: every id, as
                       posted, so that the answer has one entry per event */
} unit;

typedef struct held {
    struct held *next;
    ev e;
    rt_promise reply;
    uint64_t deadline; /* monotonic ms */
} held;

typedef struct deferred {
    struct deferred *next;
    ev e;              /* stamped with id and timestamp, not yet with a parent */
    uint64_t deadline; /* wall-clock ms: it survives restarts */
    char *after;       /* the head when it was deferred (NULL: none) */
    uint64_t save;     /* the put_file that made it durable */
} deferred;

typedef struct waiter { /* a deferral answered once deferred.json is durable */
    struct waiter *next;
    rt_promise reply;
    char *id;
    uint64_t save; /* the put_file that covers it */
} waiter;

typedef struct flush { /* a CONV_SYNC waiting for subscribers and commits */
    struct flush *next;
    rt_promise reply;
    uint64_t id;
    size_t waiting;    /* subscribers yet to answer */
    uint64_t asked_at; /* durable events when they were asked (UINT64_MAX: not yet) */
} flush;

typedef struct early { /* a message that came before the log was open */
    struct early *next;
    uint32_t kind;
    uint64_t arg;
    rt_buf *buf;
    rt_promise reply;
} early;

typedef struct conv {
    conv_ctx *ctx;
    const conv_opts *o;
    rt_actor *self;
    bool open;        /* the log is open: sc and log are set */
    bool asleep;      /* it let its log go while idle, and kept its state */
    bool waking;      /* asleep, and opening the log again */
    bool stopping;    /* the server is: nothing is held any more */
    uint64_t last_ms; /* when a request last came (monotonic) */
    st_conv *sc;
    st_log *log;
    gate *g;  /* live: everything accepted */
    gate *gc; /* committed: everything durable */
    conv_status status, status_c;
    uint64_t count_c; /* durable events */
    char updated[40]; /* the last durable event's timestamp */
    bool deleted;     /* CONV_DELETE was accepted: sc is gone */
    rt_promise delete_reply;
    unit *uhead, *utail, *tentative;
    held *holds;
    size_t nholds;
    deferred *defs;
    size_t ndefs;
    waiter *waiters;
    uint64_t saves_sent, saves_done;
    struct sub {
        rt_actor *a;
        bool notes; /* wants CONV_NOTE */
        bool told;  /* wants CONV_DROPPED */
    } * subs;
    size_t nsubs, subs_cap, ntold;
    rt_timer_id tick;
    uint64_t since_ckpt;
    flush *syncs;
    uint64_t sync_seq;
    uint64_t gate_ns; /* with o->measure: time spent in the gate */
    early *early_head, *early_tail;
} conv;

/* Monotonic wall time: a vDSO call, where thread CPU time would be a system
 * call per gate check (the loop thread does nothing else meanwhile). */
static uint64_t gate_clock_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The gate, timed when asked to (its own code does not block): the
 * benchmark reports its share. */
static gate_verdict check(conv *c, const ev *e, const gate_lookup *lk, gate_rule *rule)
{
    uint64_t t0 = c->o->measure ? gate_clock_ns() : 0;
    gate_verdict v = gate_check(c->g, e, lk, rule);
    if (c->o->measure)
        c->gate_ns += gate_clock_ns() - t0;
    return v;
}

static void accept_state(conv *c, gate *g, const ev *e)
{
    uint64_t t0 = c->o->measure ? gate_clock_ns() : 0;
    gate_accept(g, e);
    if (c->o->measure)
        c->gate_ns += gate_clock_ns() - t0;
}

static uint64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* ------------------------------------------------------------- replies --- */

/* Answer with a body already written (not taken). */
static void reply_text(rt_promise *p, int code, const rt_text *body)
{
    if (p->to == NULL)
        return;
    rt_buf *b = body->failed ? NULL : rt_buf_copy(body->p, body->len);
    if (b == NULL) {
        rt_promise_fail(p, -ENOMEM);
        return;
    }
    if (rt_promise_reply(p, CONV_RESULT, 0, (uint64_t)code, b) < 0)
        rt_buf_unref(b);
}

static void reply_json(rt_promise *p, int code, json_t *body)
{
    if (p->to == NULL) {
        json_decref(body);
        return;
    }
    char *s = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    rt_buf *b = s != NULL ? rt_buf_copy(s, strlen(s)) : NULL;
    free(s);
    if (b == NULL) {
        rt_promise_fail(p, -ENOMEM);
        return;
    }
    if (rt_promise_reply(p, CONV_RESULT, 0, (uint64_t)code, b) < 0)
        rt_buf_unref(b);
}

static void reply_detail(rt_promise *p, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void reply_detail(rt_promise *p, int code, const char *fmt, ...)
{
    char detail[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof(detail), fmt, ap);
    va_end(ap);
    reply_json(p, code, json_pack("{s:s}", "detail", detail));
}

static json_t *pending_ids(const gate *g)
{
    json_t *a = json_array();
    for (size_t i = 0; i < gate_pending_count(g); i++)
        json_array_append_new(a, json_string(gate_pending_call(g, i, NULL, NULL)));
    return a;
}

/* One line saying why the rule refused e. */
static void rule_detail(const conv *c, gate_rule r, const ev *e, char *out, size_t cap)
{
    const char *id = e->id != NULL ? e->id : "(no id)";
    switch (r) {
    case GATE_INTERLEAVED_MESSAGE:
        snprintf(out, cap, "%s %s from %s while %zu tool call(s) are pending",
                 ev_kind_name(e->kind), id, ev_source_name(e->source), gate_pending_count(c->g));
        break;
    case GATE_INTERLEAVED_ACTION:
        snprintf(out, cap,
                 "action %s (tool call %s) belongs to another LLM response (%s) than the %zu "
                 "pending call(s)",
                 id, e->tool_call_id, e->llm_response_id, gate_pending_count(c->g));
        break;
    case GATE_DUPLICATE_TOOL_CALL_ID:
        snprintf(out, cap, "action %s reuses tool call id %s", id, e->tool_call_id);
        break;
    case GATE_UNMATCHED_TOOL_RESULT:
        snprintf(out, cap, "%s %s answers tool call %s, which no action made",
                 ev_kind_name(e->kind), id, e->tool_call_id);
        break;
    case GATE_DUPLICATE_TOOL_RESULT:
        snprintf(out, cap, "%s %s answers tool call %s, which was answered already",
                 ev_kind_name(e->kind), id, e->tool_call_id);
        break;
    case GATE_UNKNOWN_PARENT:
        snprintf(out, cap, "event %s names parent %s, which never arrived", id, e->parent_id);
        break;
    case GATE_STALE_PARENT:
        snprintf(out, cap, "event %s names parent %s, which is not the head of the conversation",
                 id, e->parent_id);
        break;
    case GATE_DUPLICATE_EVENT_ID:
        snprintf(out, cap, "an event with id %s is already in the conversation, with other content",
                 id);
        break;
    default:
        snprintf(out, cap, "event %s is not valid", id);
    }
}

static void reply_rejected(const conv *c, rt_promise *p, gate_rule r, const ev *e,
                           const char *extra)
{
    char detail[1024];
    rule_detail(c, r, e, detail, sizeof(detail));
    if (extra != NULL)
        snprintf(detail + strlen(detail), sizeof(detail) - strlen(detail), " (%s)", extra);
    char full[1200];
    snprintf(full, sizeof(full), "%s: %s", gate_rule_name(r), detail);
    if ((int)r < RT_METRIC_RULES)
        rt_count(&rt_metrics_g.events_rejected[r], 1);
    reply_json(p, 409,
               json_pack("{s:s, s:s, s:s?, s:o}", "detail", full, "rule", gate_rule_name(r),
                         "event_id", e->id, "pending_tool_call_ids", pending_ids(c->g)));
}

/* ------------------------------------------------------------- lookups --- */

/* Does `s` (an event with e's id; taken) say the same as e? 1 yes, 2 no.
 * Its parent_id says where it went, not what it says (a deferred message
 * commits after a head its producer could not name), so it is never
 * compared; nor is a timestamp the producer left out. */
static int same_content(const ev *e, json_t *s)
{
    json_t *x = json_deep_copy(e->obj);
    int r = 2;
    if (s != NULL && x != NULL) {
        json_object_del(x, "parent_id");
        json_object_del(s, "parent_id");
        if (json_object_get(x, "timestamp") == NULL)
            json_object_del(s, "timestamp");
        char *a = ev_canonical_json(x), *b = ev_canonical_json(s);
        r = a != NULL && b != NULL && strcmp(a, b) == 0 ? 1 : 2;
        free(a);
        free(b);
    }
    json_decref(s);
    json_decref(x);
    return r;
}

static int same_bytes(const ev *e, const uint8_t *stored, size_t len)
{
    return same_content(e, rt_json_read((const char *)stored, len, JSON_ALLOW_NUL, NULL));
}

static deferred *deferred_find(const conv *c, const char *id)
{
    for (deferred *d = c->defs; d != NULL; d = d->next)
        if (strcmp(d->e.id, id) == 0)
            return d;
    return NULL;
}

/* Among the accepted events not durable yet, and those of the array being
 * checked: the one with this id, or this key. */
static item *inflight_find(const conv *c, const char *id, const char *key, size_t keylen)
{
    for (int pass = 0; pass < 2; pass++) {
        unit *u = pass == 0 ? c->uhead : c->tentative;
        for (; u != NULL; u = pass == 0 ? u->next : NULL) {
            for (item *it = u->items; it < u->items + u->n; it++) {
                if (id != NULL && strcmp(it->e.id, id) == 0)
                    return it;
                if (key != NULL && it->keylen == keylen && memcmp(it->key, key, keylen) == 0)
                    return it;
            }
        }
    }
    return NULL;
}

/* An id is taken once it is in the log, accepted on its way there, or
 * promised to a deferred message. */
static int lk_known(void *ctx, const ev *e)
{
    conv *c = ctx;
    deferred *d = deferred_find(c, e->id);
    if (d != NULL)
        return same_content(e, json_deep_copy(d->e.obj));
    item *it = inflight_find(c, e->id, NULL, 0);
    if (it != NULL)
        return same_bytes(e, rt_buf_data(it->bytes), rt_buf_len(it->bytes));
    uint64_t at;
    if (st_log_find(c->log, e->id, strlen(e->id), &at) != 0)
        return 0;
    st_page *p;
    int r = 2;
    if (st_log_read(c->log, at, 1, &p) == 0) {
        if (p->n == 1)
            r = same_bytes(e, rt_buf_data(p->bytes) + p->ev[0].off, p->ev[0].len);
        st_page_free(p);
    }
    return r;
}

static bool lk_has_id(void *ctx, const char *id)
{
    conv *c = ctx;
    uint64_t at;
    return inflight_find(c, id, NULL, 0) != NULL || st_log_find(c->log, id, strlen(id), &at) == 0;
}

static bool lk_has_key(void *ctx, const char *key, size_t len)
{
    conv *c = ctx;
    uint64_t at;
    return inflight_find(c, NULL, key, len) != NULL || st_log_find_key(c->log, key, len, &at) == 0;
}

static gate_lookup lookup_of(conv *c)
{
    return (gate_lookup){c, lk_known, lk_has_id, lk_has_key};
}

/* ------------------------------------------------------ making events --- */

static int make_event(json_t *obj, ev *out)
{
    char err[256];
    int r = ev_from_json(obj, out, err, sizeof(err));
    json_decref(obj);
    if (r != 0)
        rt_log(RT_LOG_ERROR, "conversation", "an event the conversation made is invalid: %s", err);
    return r;
}

static int status_event(conv_status s, ev *out)
{
    return make_event(json_pack("{s:s, s:s, s:s, s:s}", "source", "environment", "key",
                                "execution_status", "value", conv_status_name(s), "kind",
                                "ConversationStateUpdateEvent"),
                      out);
}

static int error_event(const char *code, const char *detail, ev *out)
{
    return make_event(json_pack("{s:s, s:s, s:s, s:s}", "source", "environment", "code", code,
                                "detail", detail, "kind", "ConversationErrorEvent"),
                      out);
}

static int message_event(const char *source, const char *text, ev *out)
{
    return make_event(json_pack("{s:s, s:{s:s, s:[{s:s, s:s}]}, s:s}", "source", source,
                                "llm_message", "role", "user", "content", "type", "text", "text",
                                text, "kind", "MessageEvent"),
                      out);
}

/* --------------------------------------------------- accepting events --- */

static unit *unit_new(size_t cap)
{
    unit *u = calloc(1, sizeof(*u));
    if (u != NULL && (u->items = calloc(cap ? cap : 1, sizeof(item))) == NULL) {
        free(u);
        return NULL;
    }
    if (u != NULL)
        u->cap = cap ? cap : 1;
    return u;
}

static void unit_free(unit *u)
{
    for (echo *x = u->echoes, *next; x != NULL; x = next) {
        next = x->next;
        json_decref(x->ids);
        free(x);
    }
    json_decref(u->posted);
    for (size_t i = 0; i < u->n; i++) {
        ev_free(&u->items[i].e);
        rt_buf_unref(u->items[i].bytes);
    }
    free(u->items);
    free(u);
}

/* e (checked, accepted) joins u: stamped, the live state moved on, bytes
 * made once. Takes e. */
static int accept_into(conv *c, unit *u, ev *e)
{
    int r = ev_stamp(e, gate_head(c->g));
    if (r < 0) {
        ev_free(e);
        return r;
    }
    accept_state(c, c->g, e);
    int s = conv_status_of(e);
    if (s >= 0)
        c->status = (conv_status)s;
    item *it = &u->items[u->n];
    it->bytes = ev_serialize(e);
    if (it->bytes == NULL) {
        ev_free(e);
        return -ENOMEM;
    }
    it->keylen = (uint32_t)gate_key(e, it->key, sizeof(it->key));
    it->e = *e;
    u->n++;
    return 0;
}

static void on_stored(void *ctx, int status, uint64_t first)
{
    rt_actor *a = ctx;
    /* news the actor is owed: not refused by its mailbox bound */
    if (status == 0)
        rt_notify(a, CONV_STORED, first, NULL);
    else
        rt_notify(a, CONV_STORE_FAILED, (uint64_t)-status, NULL);
    rt_actor_unref(a);
}

/* Hand u to the committer; it answers in order. */
static int submit(conv *c, unit *u)
{
    st_item *items = calloc(u->n, sizeof(*items));
    if (items == NULL)
        return -ENOMEM;
    for (size_t i = 0; i < u->n; i++) {
        item *it = &u->items[i];
        items[i] = (st_item){.id = it->e.id,
                             .idlen = (uint32_t)strlen(it->e.id),
                             .key = it->key,
                             .keylen = it->keylen,
                             .payload = it->bytes};
    }
    int r = st_append(c->sc, items, u->n, on_stored, rt_actor_ref(c->self));
    free(items);
    if (r < 0) {
        rt_actor_unref(c->self);
        return r;
    }
    if (c->utail != NULL)
        c->utail->next = u;
    else
        c->uhead = u;
    c->utail = u;
    return 0;
}

static void offer(conv *c, ev *e, rt_promise *reply);

/* Make and offer an event of the conversation's own (nobody waits). */
static void offer_own(conv *c, int made, ev *e)
{
    rt_promise none = {0};
    if (made == 0)
        offer(c, e, &none);
}

static void set_status(conv *c, conv_status s)
{
    ev e;
    if (s != c->status && conv_transition_ok(c->status, s))
        offer_own(c, status_event(s, &e), &e);
}

/* Observe mode: what the gate would have refused, said when it is checked
 * (the pending calls it names are those of that moment)... */
static void violation_text(const conv *c, gate_rule r, const ev *e, char *out, size_t cap)
{
    char detail[1024];
    rule_detail(c, r, e, detail, sizeof(detail));
    snprintf(out, cap, "observed %s: %s", gate_rule_name(r), detail);
}

/* ...and recorded right after the event. */
static void record_violation(conv *c, const char *text)
{
    ev err;
    offer_own(c, error_event("ComplianceViolation", text, &err), &err);
}

/* A user's message brings a finished or stuck conversation back to idle. */
static void back_to_idle(conv *c)
{
    if (c->status == CONV_FINISHED || c->status == CONV_STUCK)
        set_status(c, CONV_IDLE);
}

static json_t *indexed(const conv *c, json_t *ids)
{
    json_t *out = json_array(), *id;
    size_t i;
    json_array_foreach(ids, i, id)
    {
        json_t *one = json_pack("{s:O}", "id", id);
        uint64_t at;
        if (st_log_find(c->log, json_string_value(id), json_string_length(id), &at) == 0)
            json_object_set_new(one, "index", json_integer((json_int_t)at));
        json_array_append_new(out, one);
    }
    return out;
}

/* A retry of events the conversation has (ids; taken): 201 with their
 * indexes, once everything accepted before it is durable. */
static void answer_already(conv *c, rt_promise *reply, json_t *ids)
{
    if (c->utail == NULL) {
        reply_json(reply, 201, json_pack("{s:o, s:b}", "events", indexed(c, ids), "duplicate", 1));
        json_decref(ids);
        return;
    }
    echo *x = calloc(1, sizeof(*x));
    if (x == NULL) {
        json_decref(ids);
        reply_detail(reply, 500, "out of memory");
        return;
    }
    x->reply = *reply;
    *reply = (rt_promise){0};
    x->ids = ids;
    x->next = c->utail->echoes;
    c->utail->echoes = x;
}

static void accept_alone(conv *c, ev *e, rt_promise *reply, int reply_kind)
{
    unit *u = unit_new(1);
    int r = u != NULL ? 0 : -ENOMEM;
    if (r == 0)
        r = accept_into(c, u, e);
    else
        ev_free(e);
    if (r == 0) {
        u->reply = *reply;
        u->reply_kind = reply_kind;
        *reply = (rt_promise){0};
        r = submit(c, u);
    }
    if (r < 0) {
        reply_detail(reply, 500, "cannot append: %s", strerror(-r));
        if (u != NULL) {
            reply_detail(&u->reply, 500, "cannot append: %s", strerror(-r));
            unit_free(u);
        }
    }
}

static void save_deferred(conv *c);
static void ensure_tick(conv *c);
static void check_syncs(conv *c);
static void set_open(conv *c, bool open);
static void arm_idle(conv *c, uint64_t ms);

static json_t *deferred_body(const char *id)
{
    return json_pack("{s:[{s:s}], s:s}", "events", "id", id, "detail",
                     "deferred until the pending tool calls complete");
}

/* 202 for a deferred message, once deferred.json holds it. */
static void answer_deferred(conv *c, rt_promise *reply, const deferred *d)
{
    if (c->saves_done >= d->save) {
        reply_json(reply, 202, deferred_body(d->e.id));
        return;
    }
    waiter *w = calloc(1, sizeof(*w));
    if (w == NULL || (w->id = strdup(d->e.id)) == NULL) {
        free(w);
        reply_detail(reply, 500, "out of memory");
        return;
    }
    w->reply = *reply;
    *reply = (rt_promise){0};
    w->save = d->save;
    w->next = c->waiters;
    c->waiters = w;
}

/* A deferred message commits after whatever the head is then: the parent
 * its producer named (checked: the head now) is dropped, and remembered as
 * where it was deferred. */
static void defer(conv *c, ev *e, rt_promise *reply)
{
    rt_count(&rt_metrics_g.events_deferred, 1);
    if (c->ndefs >= c->o->defer_max) {
        reply_json(reply, 503,
                   json_pack("{s:s, s:i}", "detail",
                             "too many deferred messages in this conversation: retry once the "
                             "pending tool calls complete",
                             "retry_after", 1));
        ev_free(e);
        return;
    }
    deferred *d = calloc(1, sizeof(*d));
    const char *head = gate_head(c->g);
    if (d == NULL || ev_stamp(e, NULL) < 0 || (head != NULL && (d->after = strdup(head)) == NULL)) {
        free(d);
        ev_free(e);
        reply_detail(reply, 500, "cannot defer: out of memory");
        return;
    }
    ev_set_parent(e, NULL);
    d->e = *e;
    d->deadline = conv_wall_ms() + c->o->defer_timeout_ms;
    d->save = c->saves_sent + 1; /* the save below */
    deferred **pp = &c->defs;
    while (*pp != NULL)
        pp = &(*pp)->next;
    *pp = d;
    c->ndefs++;
    save_deferred(c);
    answer_deferred(c, reply, d);
    ensure_tick(c);
}

static void deferred_free(deferred *d)
{
    ev_free(&d->e);
    free(d->after);
    free(d);
}

/* An event whose parent is a deferred message (recorded upstream logs have
 * them: the result of a call that was running when the user spoke) goes
 * where that message was deferred, that is before it: the message commits
 * once the call is answered. */
static int reparent(conv *c, ev *e)
{
    deferred *d = e->parent_id != NULL ? deferred_find(c, e->parent_id) : NULL;
    return d != NULL ? ev_set_parent(e, d->after) : 0;
}

/* The gate said the event is there already (taken). */
static void already(conv *c, ev *e, rt_promise *reply)
{
    deferred *d = deferred_find(c, e->id);
    if (d != NULL)
        answer_deferred(c, reply, d);
    else
        answer_already(c, reply, json_pack("[s]", e->id));
    ev_free(e);
}

static void hold(conv *c, ev *e, rt_promise *reply)
{
    rt_count(&rt_metrics_g.events_held, 1);
    if (c->stopping) { /* its parent could only come after a restart */
        reply_detail(reply, 503, "the server is stopping: retry");
        ev_free(e);
        return;
    }
    if (c->nholds >= c->o->hold_max) {
        reply_json(reply, 503,
                   json_pack("{s:s, s:i}", "detail",
                             "too many events waiting for their parent in this conversation",
                             "retry_after", 1));
        ev_free(e);
        return;
    }
    held *h = calloc(1, sizeof(*h));
    if (h == NULL) {
        ev_free(e);
        reply_detail(reply, 500, "cannot hold: out of memory");
        return;
    }
    h->e = *e;
    h->reply = *reply;
    *reply = (rt_promise){0};
    h->deadline = mono_ms() + c->o->hold_timeout_ms;
    held **pp = &c->holds;
    while (*pp != NULL)
        pp = &(*pp)->next;
    *pp = h;
    c->nholds++;
    ensure_tick(c);
}

/* The way in for every single event: the gate's verdict, then what it
 * implies. Takes e; answers reply (now, or once durable). */
static void offer(conv *c, ev *e, rt_promise *reply)
{
    if (reparent(c, e) < 0) {
        reply_detail(reply, 500, "out of memory");
        ev_free(e);
        return;
    }
    gate_lookup lk = lookup_of(c);
    gate_rule rule;
    gate_verdict v = check(c, e, &lk, &rule);
    if (v == GATE_ALREADY) { /* a retry is answered as before, whatever the status now */
        already(c, e, reply);
        return;
    }
    int s = conv_status_of(e);
    if (s >= 0 && !conv_transition_ok(c->status, (conv_status)s)) {
        reply_detail(reply, 422, "execution_status cannot go from %s to %s",
                     conv_status_name(c->status), conv_status_name((conv_status)s));
        ev_free(e);
        return;
    }
    char observed[1200] = "";
    if (c->o->policy == CONV_OBSERVE && v != GATE_ACCEPT && rule != GATE_DUPLICATE_EVENT_ID) {
        violation_text(c, rule, e, observed, sizeof(observed));
        v = GATE_ACCEPT;
    }
    switch (v) {
    case GATE_DEFER:
        defer(c, e, reply);
        return;
    case GATE_HOLD:
        hold(c, e, reply);
        return;
    case GATE_REJECT:
        reply_rejected(c, reply, rule, e, NULL);
        ev_free(e);
        return;
    default:
        break;
    }
    bool user_msg = e->kind == EV_MESSAGE && e->source == EV_SRC_USER;
    accept_alone(c, e, reply, REPLY_EVENTS);
    if (observed[0] != '\0')
        record_violation(c, observed);
    if (user_msg)
        back_to_idle(c);
}

/* Held events whose parent is now known, and deferred messages once no call
 * is pending, are offered again (in arrival order), until nothing moves. */
static void settle(conv *c)
{
    bool moved = true, defs_changed = false;
    while (moved) {
        moved = false;
        for (held **pp = &c->holds; *pp != NULL; pp = &(*pp)->next) {
            held *h = *pp;
            if (!lk_has_id(c, h->e.parent_id))
                continue;
            *pp = h->next;
            c->nholds--;
            offer(c, &h->e, &h->reply);
            free(h);
            moved = true;
            break;
        }
        if (!moved && c->defs != NULL && gate_pending_count(c->g) == 0) {
            deferred *d = c->defs;
            c->defs = d->next;
            c->ndefs--;
            rt_promise none = {0};
            offer(c, &d->e, &none);
            free(d->after);
            free(d);
            moved = defs_changed = true;
        }
    }
    if (defs_changed)
        save_deferred(c);
}

/* ------------------------------------------------- appends by producers --- */

static int parse_events(const rt_buf *b, json_t **out, char *err, size_t errlen)
{
    json_error_t je;
    json_t *j =
        rt_json_read((const char *)rt_buf_data(b), rt_buf_len(b), JSON_REJECT_DUPLICATES, &je);
    if (j == NULL) {
        snprintf(err, errlen, "body is not valid JSON: %s (at line %d, column %d)", je.text,
                 je.line, je.column);
        return -EINVAL;
    }
    if (!json_is_object(j) && !json_is_array(j)) {
        json_decref(j);
        snprintf(err, errlen, "body must be an event object or an array of events");
        return -EINVAL;
    }
    if (json_is_array(j) && json_array_size(j) == 0) {
        json_decref(j);
        snprintf(err, errlen, "the array of events is empty");
        return -EINVAL;
    }
    *out = j;
    return 0;
}

int conv_storable(const ev *e, char *err, size_t errlen)
{
    if (ev_kind_transient(e->kind)) {
        snprintf(err, errlen, "%s events are not stored; they cannot be appended",
                 ev_kind_name(e->kind));
        return -EINVAL;
    }
    if (e->id != NULL && strlen(e->id) > 255) {
        snprintf(err, errlen, "event id longer than 255 bytes");
        return -EINVAL;
    }
    if (e->tool_call_id != NULL && strlen(e->tool_call_id) > 253) {
        snprintf(err, errlen, "tool_call_id longer than 253 bytes");
        return -EINVAL;
    }
    return 0;
}

/* An array is all or nothing: each event is checked against the state the
 * earlier ones leave; one that cannot be accepted now (refused, or that
 * would have to wait) takes the whole array back. */
static void append_array(conv *c, ev *evs, size_t n, rt_promise *reply)
{
    gate *saved = gate_clone(c->g);
    conv_status saved_status = c->status;
    unit *u = unit_new(n);
    json_t *already = json_array(), *observed = json_array(), *posted = json_array();
    if (saved == NULL || u == NULL || already == NULL || observed == NULL) {
        gate_free(saved);
        if (u != NULL)
            unit_free(u);
        json_decref(already);
        json_decref(observed);
        for (size_t i = 0; i < n; i++)
            ev_free(&evs[i]);
        reply_detail(reply, 500, "out of memory");
        return;
    }
    c->tentative = u;
    gate_lookup lk = lookup_of(c);
    bool user_msg = false;
    size_t i = 0;
    for (; i < n; i++) {
        ev *e = &evs[i];
        if (reparent(c, e) < 0) {
            reply_detail(reply, 500, "out of memory");
            break;
        }
        gate_rule rule;
        gate_verdict v = check(c, e, &lk, &rule);
        if (v == GATE_ALREADY && deferred_find(c, e->id) != NULL) {
            v = GATE_DEFER; /* it waits already, on its own */
            rule = GATE_INTERLEAVED_MESSAGE;
        }
        if (v == GATE_ALREADY) {
            json_array_append_new(already, json_string(e->id));
            json_array_append_new(posted, json_string(e->id));
            ev_free(e);
            continue;
        }
        int s = conv_status_of(e);
        if (s >= 0 && !conv_transition_ok(c->status, (conv_status)s)) {
            reply_detail(reply, 422, "event %zu: execution_status cannot go from %s to %s", i,
                         conv_status_name(c->status), conv_status_name((conv_status)s));
            break;
        }
        if (v != GATE_ACCEPT && c->o->policy == CONV_OBSERVE && rule != GATE_DUPLICATE_EVENT_ID) {
            char text[1200];
            violation_text(c, rule, e, text, sizeof(text));
            json_array_append_new(observed, json_string(text));
        } else if (v != GATE_ACCEPT) {
            reply_rejected(c, reply, rule, e,
                           v == GATE_DEFER  ? "it would have to be deferred: arrays are all or "
                                              "nothing, post it on its own"
                           : v == GATE_HOLD ? "it would have to wait for its parent: arrays are "
                                              "all or nothing, post it on its own"
                                            : NULL);
            break;
        }
        user_msg |= e->kind == EV_MESSAGE && e->source == EV_SRC_USER;
        if (accept_into(c, u, e) < 0) {
            reply_detail(reply, 500, "out of memory");
            i++;
            break;
        }
        json_array_append_new(posted, json_string(u->items[u->n - 1].e.id));
    }
    c->tentative = NULL;
    if (json_array_size(already) > 0 && i == n)
        u->posted = json_incref(posted);
    json_decref(posted);
    if (i < n) { /* take it all back */
        for (size_t k = i; k < n; k++)
            ev_free(&evs[k]);
        gate_free(c->g);
        c->g = saved;
        c->status = saved_status;
        unit_free(u);
        json_decref(already);
        json_decref(observed);
        return;
    }
    gate_free(saved);
    if (u->n == 0) { /* an idempotent retry of the whole array */
        unit_free(u);
        answer_already(c, reply, already);
        json_decref(observed);
        return;
    }
    json_decref(already);
    u->reply = *reply;
    *reply = (rt_promise){0};
    int r = submit(c, u);
    if (r < 0) {
        reply_detail(&u->reply, 500, "cannot append: %s", strerror(-r));
        unit_free(u);
        json_decref(observed);
        return;
    }
    json_t *text;
    json_array_foreach(observed, i, text) record_violation(c, json_string_value(text));
    json_decref(observed);
    if (user_msg)
        back_to_idle(c);
}

static void on_append(conv *c, const rt_buf *body, rt_promise *reply)
{
    char err[1024];
    json_t *j;
    if (body == NULL || parse_events(body, &j, err, sizeof(err)) != 0) {
        reply_detail(reply, 422, "%s", body == NULL ? "no body" : err);
        return;
    }
    size_t n = json_is_array(j) ? json_array_size(j) : 1;
    ev *evs = calloc(n, sizeof(*evs));
    size_t ok = 0;
    for (; evs != NULL && ok < n; ok++) {
        json_t *o = json_is_array(j) ? json_array_get(j, ok) : j;
        if (ev_from_json(o, &evs[ok], err, sizeof(err)) != 0 ||
            conv_storable(&evs[ok], err, sizeof(err)) != 0) {
            if (evs[ok].obj != NULL)
                ev_free(&evs[ok]);
            break;
        }
    }
    bool array = json_is_array(j);
    json_decref(j);
    if (evs == NULL || ok < n) {
        for (size_t k = 0; evs != NULL && k < ok; k++)
            ev_free(&evs[k]);
        if (evs == NULL)
            reply_detail(reply, 500, "out of memory");
        else if (array)
            reply_detail(reply, 422, "event %zu: %s", ok, err);
        else
            reply_detail(reply, 422, "%s", err);
        free(evs);
        return;
    }
    if (array)
        append_array(c, evs, n, reply);
    else
        offer(c, &evs[0], reply);
    free(evs);
}

/* --------------------------------------------------------- durability --- */

/* Forget subscriber i; a told one learns it (why: as CONV_DROPPED's arg). */
static void drop_sub(conv *c, size_t i, uint64_t why)
{
    if (c->subs[i].told) {
        rt_notify(c->subs[i].a, CONV_DROPPED, why, NULL);
        c->ntold--;
    }
    rt_actor_unref(c->subs[i].a);
    c->subs[i] = c->subs[--c->nsubs];
}

/* The event to every subscriber, as its bytes or as its stuck note (made
 * once, from the parsed event). A subscriber that is gone, or not keeping
 * up with its bounded mailbox, is dropped. */
static void publish(conv *c, uint64_t index, const ev *e, rt_buf *bytes)
{
    rt_buf *note = NULL;
    for (size_t i = 0; i < c->nsubs;) {
        rt_buf *b = bytes;
        if (c->subs[i].notes) {
            if (note == NULL && (note = rt_buf_new(sizeof(stuck_note))) != NULL)
                stuck_note_of(e, (stuck_note *)rt_buf_wdata(note));
            b = note;
        }
        if (b != NULL && rt_send(c->subs[i].a, c->subs[i].notes ? CONV_NOTE : CONV_EVENT, index,
                                 rt_buf_ref(b)) == 0) {
            i++;
            continue;
        }
        rt_buf_unref(b);
        drop_sub(c, i, 0);
    }
    rt_buf_unref(note);
}

static void on_saved(void *ctx, int status, uint64_t first)
{
    (void)first;
    rt_actor *a = ctx;
    rt_notify(a, CONV_FILE_SAVED, (uint64_t)(status < 0 ? -status : 0), NULL);
    rt_actor_unref(a);
}

static void put_file(conv *c, const char *name, rt_buf *data)
{
    if (data == NULL)
        return;
    if (c->deleted) {
        rt_buf_unref(data);
        return;
    }
    c->saves_sent++;
    if (st_conv_put_file(c->sc, name, data, on_saved, rt_actor_ref(c->self)) < 0) {
        rt_actor_unref(c->self);
        c->saves_done++; /* counted, so that waiters still get an answer */
    }
    rt_buf_unref(data);
}

static void save_deferred(conv *c)
{
    json_t *all = json_array();
    for (deferred *d = c->defs; d != NULL; d = d->next)
        json_array_append_new(all, json_pack("{s:O, s:I, s:s*}", "event", d->e.obj, "deadline",
                                             (json_int_t)d->deadline, "after", d->after));
    char *s = json_dumps(all, JSON_COMPACT);
    json_decref(all);
    if (s != NULL) {
        put_file(c, CONV_DEFERRED_FILE, rt_buf_copy(s, strlen(s)));
        free(s);
    }
}

static void checkpoint(conv *c)
{
    put_file(c, CONV_STATE_FILE, conv_state_json(c->count_c, c->status_c, c->gc));
    c->since_ckpt = 0;
}

/* {"id", "index" (when known), "duplicate": true (a retry)}. */
static void put_entry(rt_text *t, bool first, const char *id, uint64_t at, bool dup)
{
    char tail[64];
    rt_text_puts(t, first ? "{\"id\":" : ",{\"id\":");
    rt_text_json_string(t, id, strlen(id));
    if (at != UINT64_MAX)
        snprintf(tail, sizeof(tail), ",\"index\":%" PRIu64 "%s}", at,
                 dup ? ",\"duplicate\":true" : "");
    else
        snprintf(tail, sizeof(tail), "%s}", dup ? ",\"duplicate\":true" : "");
    rt_text_puts(t, tail);
}

/* The 201 of a durable unit, written directly (it is on every append's
 * path): its events with their indexes; for an array that mixed retries
 * with new events, one entry per posted event, in the order posted, the
 * retries with their index and "duplicate": true. */
static void events_answer(const conv *c, const unit *u, uint64_t first, rt_text *t)
{
    rt_text_puts(t, "{\"events\":[");
    for (size_t k = 0; u->posted == NULL && k < u->n; k++)
        put_entry(t, k == 0, u->items[k].e.id, first + k, false);
    size_t i;
    json_t *id;
    json_array_foreach(u->posted, i, id)
    {
        const char *s = json_string_value(id);
        uint64_t at = UINT64_MAX;
        for (size_t k = 0; k < u->n && at == UINT64_MAX; k++)
            if (strcmp(u->items[k].e.id, s) == 0)
                at = first + k;
        bool dup = at == UINT64_MAX;           /* in the log before this append */
        for (size_t k = 0; k < i && !dup; k++) /* posted twice: the second is a retry */
            dup = json_equal(json_array_get(u->posted, k), id);
        if (at == UINT64_MAX && st_log_find(c->log, s, strlen(s), &at) != 0)
            at = UINT64_MAX;
        put_entry(t, i == 0, s, at, dup);
    }
    rt_text_puts(t, "]}");
}

static void on_stored_msg(conv *c, uint64_t first)
{
    unit *u = c->uhead;
    if (u == NULL)
        return;
    c->uhead = u->next;
    if (c->uhead == NULL)
        c->utail = NULL;
    for (size_t i = 0; i < u->n; i++) {
        item *it = &u->items[i];
        accept_state(c, c->gc, &it->e);
        int s = conv_status_of(&it->e);
        if (s >= 0)
            c->status_c = (conv_status)s;
        publish(c, first + i, &it->e, it->bytes);
    }
    c->count_c = first + u->n;
    rt_count(&rt_metrics_g.events_appended, u->n);
    if (u->n > 0 && u->items[u->n - 1].e.timestamp != NULL)
        snprintf(c->updated, sizeof(c->updated), "%s", u->items[u->n - 1].e.timestamp);
    if (u->reply_kind == REPLY_SUCCESS) {
        reply_json(&u->reply, 200, json_pack("{s:b}", "success", 1));
    } else if (u->reply.to != NULL) {
        rt_text evs = {0};
        events_answer(c, u, first, &evs);
        reply_text(&u->reply, 201, &evs);
        free(evs.p);
    }
    for (echo *x = u->echoes; x != NULL; x = x->next)
        reply_json(&x->reply, 201,
                   json_pack("{s:o, s:b}", "events", indexed(c, x->ids), "duplicate", 1));
    c->since_ckpt += u->n;
    if (c->since_ckpt >= c->o->checkpoint_every)
        checkpoint(c);
    unit_free(u);
    check_syncs(c);
}

static void on_file_saved(conv *c, int err)
{
    c->saves_done++;
    for (waiter **pp = &c->waiters; *pp != NULL;) {
        waiter *w = *pp;
        if (w->save > c->saves_done) {
            pp = &w->next;
            continue;
        }
        *pp = w->next;
        if (err != 0)
            reply_detail(&w->reply, 500, "cannot keep the deferred message: %s", strerror(err));
        else
            reply_json(&w->reply, 202, deferred_body(w->id));
        free(w->id);
        free(w);
    }
}

/* ------------------------------------------------------------- expiry --- */

static void ensure_tick(conv *c)
{
    if (c->tick == 0 && (c->holds != NULL || c->defs != NULL))
        c->tick = rt_timer_start(c->self, 100, 100, CONV_TICK, 0);
}

static void expire(conv *c, bool all)
{
    uint64_t now = mono_ms(), wall = conv_wall_ms();
    for (held **pp = &c->holds; *pp != NULL;) {
        held *h = *pp;
        if (!all && h->deadline > now) {
            pp = &h->next;
            continue;
        }
        *pp = h->next;
        c->nholds--;
        reply_rejected(c, &h->reply, GATE_UNKNOWN_PARENT, &h->e, NULL);
        ev_free(&h->e);
        free(h);
    }
    bool changed = false;
    for (deferred **pp = &c->defs; *pp != NULL;) {
        deferred *d = *pp;
        if (!all && d->deadline > wall) {
            pp = &d->next;
            continue;
        }
        *pp = d->next;
        c->ndefs--;
        changed = true;
        char detail[1024], full[1200];
        rule_detail(c, GATE_INTERLEAVED_MESSAGE, &d->e, detail, sizeof(detail));
        snprintf(full, sizeof(full),
                 "interleaved_message: %s; it was deferred and expired before they completed, "
                 "so it was not added",
                 detail);
        ev err;
        offer_own(c, error_event("DeferredMessageExpired", full, &err), &err);
        deferred_free(d);
    }
    if (changed)
        save_deferred(c);
    if (c->holds == NULL && c->defs == NULL && c->tick != 0) {
        rt_timer_stop(c->self, c->tick);
        c->tick = 0;
    }
}

/* ----------------------------------------------------------- controls --- */

/* Offer a sequence the conversation makes, answering `reply` with success
 * once the last of them is durable. */
static void control(conv *c, conv_control what, rt_promise *reply)
{
    conv_status to = what == CONV_RUN ? CONV_RUNNING : CONV_PAUSED;
    if (what == CONV_RUN && c->status == CONV_RUNNING) {
        reply_detail(reply, 409, "conversation is already running");
        return;
    }
    if (what != CONV_RUN && c->status == CONV_PAUSED) { /* as upstream: nothing to do */
        reply_json(reply, 200, json_pack("{s:b}", "success", 1));
        return;
    }
    if (!conv_transition_ok(c->status, to) || c->status == to) {
        reply_detail(reply, 409, "cannot %s a conversation that is %s",
                     what == CONV_RUN     ? "run"
                     : what == CONV_PAUSE ? "pause"
                                          : "interrupt",
                     conv_status_name(c->status));
        return;
    }
    ev e;
    if (what != CONV_RUN &&
        make_event(json_pack("{s:s, s:s}", "source", "user", "kind",
                             what == CONV_PAUSE ? "PauseEvent" : "InterruptEvent"),
                   &e) == 0) {
        rt_promise none = {0};
        accept_alone(c, &e, &none, REPLY_EVENTS);
    }
    if (status_event(to, &e) == 0)
        accept_alone(c, &e, reply, REPLY_SUCCESS);
    else
        reply_detail(reply, 500, "cannot change the status");
}

static void on_stuck(conv *c, stuck_rule rule)
{
    if (c->status == CONV_STUCK || !conv_transition_ok(c->status, CONV_STUCK))
        return;
    char detail[256];
    snprintf(detail, sizeof(detail), "stuck: %s: the agent repeats itself without progress",
             stuck_rule_name(rule));
    rt_log(RT_LOG_INFO, "conversation", "stuck rule=%s", stuck_rule_name(rule));
    ev e;
    offer_own(c, error_event("StuckPatternDetected", detail, &e), &e);
    set_status(c, CONV_STUCK);
}

/* ---------------------------------------------------------- subscribers --- */

static void subscribe(conv *c, rt_promise *reply, uint64_t arg)
{
    bool told = (arg & CONV_SUB_TOLD) != 0;
    if (told && c->ntold >= c->o->max_subscribers) {
        reply_detail(reply, 503, "Too many connections for this conversation (at most %u)",
                     c->o->max_subscribers);
        return;
    }
    if (c->nsubs == c->subs_cap) {
        size_t cap = c->subs_cap ? 2 * c->subs_cap : 4;
        struct sub *s = realloc(c->subs, cap * sizeof(*s));
        if (s == NULL) {
            reply_detail(reply, 500, "out of memory");
            return;
        }
        c->subs = s;
        c->subs_cap = cap;
    }
    bool notes = (arg & CONV_SUB_NOTES) != 0;
    rt_actor *sub = rt_actor_ref(reply->to);
    c->subs[c->nsubs++] = (struct sub){sub, notes, told};
    c->ntold += told;
    /* the last few durable events first (the stuck detector's window) */
    uint64_t tail = arg & 0xff;
    if (tail > STUCK_WINDOW)
        tail = STUCK_WINDOW;
    uint64_t from = c->count_c > tail ? c->count_c - tail : 0;
    st_page *p;
    if (from < c->count_c && st_log_read(c->log, from, (uint32_t)(c->count_c - from), &p) == 0) {
        for (uint32_t i = 0; i < p->n; i++) {
            const char *bytes = (const char *)rt_buf_data(p->bytes) + p->ev[i].off;
            rt_buf *b = NULL;
            ev e;
            if (!notes)
                b = rt_buf_copy(bytes, p->ev[i].len);
            else if (ev_parse(bytes, p->ev[i].len, &e, NULL, 0) == 0) {
                if ((b = rt_buf_new(sizeof(stuck_note))) != NULL)
                    stuck_note_of(&e, (stuck_note *)rt_buf_wdata(b));
                ev_free(&e);
            }
            if (b != NULL && rt_send(sub, notes ? CONV_NOTE : CONV_EVENT, p->ev[i].index, b) < 0)
                rt_buf_unref(b);
        }
        st_page_free(p);
    }
    reply_json(reply, 200,
               json_pack("{s:I, s:s}", "count", (json_int_t)c->count_c, "status",
                         conv_status_name(c->status_c)));
}

static void unsubscribe(conv *c, rt_actor *sub)
{
    for (size_t i = 0; i < c->nsubs; i++) {
        if (c->subs[i].a == sub) {
            c->ntold -= c->subs[i].told;
            rt_actor_unref(c->subs[i].a);
            c->subs[i] = c->subs[--c->nsubs];
            return;
        }
    }
}

/* ---------------------------------------------------------------- sync --- */

/* A sync is answered once nothing accepted is on its way to the disk and
 * every subscriber has answered an ask sent after the last event was
 * published to it (its mailbox is in order, so it has handled them all).
 * Commits that come meanwhile (a deferred message let go) mean asking
 * again. */
static void check_syncs(conv *c)
{
    if (c->uhead != NULL)
        return;
    for (flush **pp = &c->syncs; *pp != NULL;) {
        flush *s = *pp;
        if (s->waiting > 0) {
            pp = &s->next;
            continue;
        }
        if (s->asked_at != c->count_c) {
            s->asked_at = c->count_c;
            for (size_t i = 0; i < c->nsubs; i++)
                if (rt_ask(c->subs[i].a, CONV_SYNC, s->id, NULL, c->self) == 0)
                    s->waiting++;
            if (s->waiting > 0) {
                pp = &s->next;
                continue;
            }
        }
        *pp = s->next;
        reply_json(&s->reply, 200, json_pack("{s:I}", "events", (json_int_t)c->count_c));
        free(s);
    }
}

static void start_sync(conv *c, rt_promise *reply)
{
    flush *s = calloc(1, sizeof(*s));
    if (s == NULL) {
        reply_detail(reply, 500, "out of memory");
        return;
    }
    s->reply = *reply;
    *reply = (rt_promise){0};
    s->id = ++c->sync_seq;
    s->asked_at = UINT64_MAX;
    flush **pp = &c->syncs;
    while (*pp != NULL)
        pp = &(*pp)->next;
    *pp = s;
    check_syncs(c);
}

/* A subscriber answered (or, arg == 0, one failed to: the oldest sync
 * waiting stops waiting for it). */
static void sync_answered(conv *c, uint64_t id)
{
    for (flush *s = c->syncs; s != NULL; s = s->next) {
        if (s->waiting > 0 && (id == 0 || s->id == id)) {
            s->waiting--;
            break;
        }
    }
    check_syncs(c);
}

/* ---------------------------------------------------------------- open --- */

/* The log is open and the state rebuilt: take it over, recover from a crash
 * mid-run, and go on with what was waiting. */
static void on_opened(conv *c, conv_opened *o)
{
    c->sc = o->sc;
    o->sc = NULL;
    c->log = o->log;
    c->gc = o->g;
    o->g = NULL;
    c->g = gate_clone(c->gc);
    c->status = c->status_c = o->status;
    c->count_c = o->count;
    memcpy(c->updated, o->updated, sizeof(c->updated));
    set_open(c, true);
    size_t i;
    json_t *d;
    json_array_foreach(o->deferred, i, d)
    {
        deferred *x = calloc(1, sizeof(*x));
        if (x == NULL || ev_from_json(json_object_get(d, "event"), &x->e, NULL, 0) != 0) {
            free(x);
            continue;
        }
        x->deadline = (uint64_t)json_integer_value(json_object_get(d, "deadline"));
        const char *after = json_string_value(json_object_get(d, "after"));
        x->after = after != NULL ? strdup(after) : NULL;
        deferred **pp = &c->defs;
        while (*pp != NULL)
            pp = &(*pp)->next;
        *pp = x;
        c->ndefs++;
    }
    conv_opened_free(o);
    if (c->status == CONV_RUNNING) {
        /* the process died mid-run: the run is over, and the tools it was
         * running will not answer (spec §5.4) */
        set_status(c, CONV_ERROR);
        size_t n = gate_pending_count(c->g);
        char **calls = calloc(n ? n : 1, sizeof(char *)),
             **tools = calloc(n ? n : 1, sizeof(char *));
        for (size_t k = 0; calls != NULL && tools != NULL && k < n; k++) {
            const char *tool;
            calls[k] = strdup(gate_pending_call(c->g, k, NULL, &tool));
            tools[k] = strdup(tool != NULL ? tool : "unknown");
        }
        for (size_t k = 0; calls != NULL && tools != NULL && k < n; k++) {
            ev e;
            offer_own(c,
                      make_event(json_pack("{s:s, s:s, s:s, s:s, s:{s:s, s:b, s:s}, s:s}", "source",
                                           "agent", "tool_name", tools[k], "tool_call_id", calls[k],
                                           "error",
                                           "A restart occurred while this tool was in progress; "
                                           "its result is lost.",
                                           "classification", "kind", "internal", "retryable", 0,
                                           "user_action", "none", "kind", "AgentErrorEvent"),
                                 &e),
                      &e);
            free(calls[k]);
            free(tools[k]);
        }
        free(calls);
        free(tools);
    }
    settle(c);
    ensure_tick(c);
    arm_idle(c, c->o->idle_close_ms);
}

/* ---------------------------------------------------------- idle close --- */

static void set_open(conv *c, bool open)
{
    if (c->open != open)
        atomic_fetch_add_explicit(&rt_metrics_g.conversations_open, open ? 1 : -1,
                                  memory_order_relaxed);
    c->open = open;
}

static void arm_idle(conv *c, uint64_t ms)
{
    if (c->o->idle_close_ms != UINT64_MAX)
        rt_timer_start(c->self, ms, 0, CONV_IDLE_CHECK, 0);
}

/* Nothing waits on the log or the store: no unit, hold, deferral, save,
 * sync or early request. */
static bool quiet(const conv *c)
{
    return c->open && !c->deleted && c->uhead == NULL && c->tentative == NULL && c->holds == NULL &&
           c->defs == NULL && c->waiters == NULL && c->syncs == NULL && c->early_head == NULL &&
           c->saves_done == c->saves_sent;
}

static void idle_check(conv *c)
{
    if (!c->open)
        return;
    uint64_t idle = mono_ms() - c->last_ms, after = c->o->idle_close_ms;
    if (idle < after || !quiet(c)) {
        arm_idle(c, idle < after ? after - idle : after);
        return;
    }
    if (c->since_ckpt > 0)
        checkpoint(c); /* a quick open after a restart; the save holds the conversation */
    st_conv_release(c->sc);
    c->sc = NULL;
    c->log = NULL;
    set_open(c, false);
    c->asleep = true;
}

/* What an asleep conversation answers without its log. */
static bool needs_no_log(uint32_t kind)
{
    return kind == CONV_STATUS || kind == CONV_UNSUBSCRIBE || kind == CONV_FILE_SAVED ||
           kind == CONV_TICK || kind == CONV_IDLE_CHECK || kind == CONV_STOPPING;
}

/* Answer every held event 503 (why), and hold none of them any more. */
static void refuse_holds(conv *c, const char *why)
{
    for (held *h = c->holds, *next; h != NULL; h = next) {
        next = h->next;
        reply_detail(&h->reply, 503, "%s", why);
        ev_free(&h->e);
        free(h);
    }
    c->holds = NULL;
    c->nholds = 0;
}

/* The server is stopping: refuse what is held (and, from now, what would
 * be), so that its producers are answered at once rather than when the
 * server's grace for requests in flight runs out. */
static void stopping(conv *c)
{
    c->stopping = true;
    refuse_holds(c, "the server is stopping: retry");
}

/* ----------------------------------------------------------- the actor --- */

static int conv_init(rt_actor *self, void *arg, void **state)
{
    conv_ctx *ctx = arg;
    conv *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return RT_ENOMEM;
    c->ctx = ctx;
    c->o = &ctx->svc->o;
    c->self = self;
    rt_runtime *rt = rt_actor_runtime(self);
    int r = conv_open_start(ctx, self, rt_runtime_uv(rt, rt_actor_loop(self)), false);
    if (r < 0) {
        free(c);
        return r;
    }
    c->last_ms = mono_ms();
    *state = c;
    return 0;
}

static void dispatch(conv *c, uint32_t kind, uint64_t arg, const rt_buf *buf, rt_promise *reply);

static void keep_early(conv *c, rt_msg *m)
{
    early *e = calloc(1, sizeof(*e));
    if (e == NULL) {
        rt_promise p = rt_msg_promise(m);
        rt_promise_fail(&p, RT_ENOMEM);
        return;
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
}

/* The requests that came while the log was opening: handled, or (it could
 * not be opened) answered 503 with the reason. */
static void run_early(conv *c, const char *failed)
{
    for (early *e = c->early_head, *next; e != NULL; e = next) {
        next = e->next;
        if (failed != NULL)
            reply_detail(&e->reply, 503, "%s", failed);
        else
            dispatch(c, e->kind, e->arg, e->buf, &e->reply);
        rt_buf_unref(e->buf);
        free(e);
    }
    c->early_head = c->early_tail = NULL;
}

static int on_open_result(conv *c, conv_opened *o)
{
    int err = o->err;
    bool moved = err == 0 && c->asleep && o->count != c->count_c;
    if (moved) {
        snprintf(o->detail, sizeof(o->detail),
                 "the log of an idle conversation went from %" PRIu64 " to %" PRIu64
                 " events while it was closed: starting again from the log",
                 c->count_c, o->count);
        err = -EIO;
    }
    if (err != 0) {
        rt_log(RT_LOG_ERROR, "conversation", "%s", o->detail);
        run_early(c, o->detail);
        conv_opened_free(o);
        c->waking = false;
        /* asleep, it keeps its state and tries again at the next request;
         * a first open fails the actor, and its supervisor decides */
        return c->asleep && !moved ? 0 : err;
    }
    if (c->asleep) {
        c->sc = o->sc;
        o->sc = NULL;
        c->log = o->log;
        c->asleep = c->waking = false;
        set_open(c, true);
        conv_opened_free(o);
        arm_idle(c, c->o->idle_close_ms);
    } else {
        on_opened(c, o);
    }
    run_early(c, NULL);
    return 0;
}

static int conv_handle(rt_actor *self, void *state, rt_msg *m)
{
    conv *c = state;
    if (m->kind == CONV_OPENED)
        return on_open_result(c, (conv_opened *)(uintptr_t)m->arg);
    if (m->kind != CONV_IDLE_CHECK && m->kind != CONV_STATUS && m->kind != CONV_TICK &&
        m->kind != CONV_STOPPING)
        c->last_ms = mono_ms();
    if (!c->open && !(c->asleep && needs_no_log(m->kind))) {
        keep_early(c, m);
        if (c->asleep && !c->waking) {
            rt_runtime *rt = rt_actor_runtime(self);
            int r = conv_open_start(c->ctx, self, rt_runtime_uv(rt, rt_actor_loop(self)), true);
            if (r < 0)
                run_early(c, "cannot open the conversation's log: out of memory");
            c->waking = r == 0;
        }
        return 0;
    }
    if (m->kind == CONV_STORE_FAILED) {
        rt_log(RT_LOG_ERROR, "conversation", "an append failed (%s): restarting from the log",
               strerror((int)m->arg));
        return -(int)m->arg;
    }
    rt_promise reply = rt_msg_promise(m);
    dispatch(c, m->kind, m->arg, m->buf, &reply);
    rt_promise_fail(&reply, RT_ENOREPLY); /* no-op if it was answered */
    return 0;
}

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
    expire(c, true);
    if (st_conv_delete(c->sc, on_deleted, rt_actor_ref(c->self)) < 0) {
        rt_actor_unref(c->self);
        reply_detail(reply, 503, "the store is closing");
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
        reply_detail(&c->delete_reply, 500, "cannot remove the conversation's files: %s",
                     strerror((int)err));
    else
        reply_json(&c->delete_reply, 200, json_pack("{s:b}", "success", 1));
    convs_stop(c->ctx->svc, &c->ctx->id);
}

static void dispatch(conv *c, uint32_t kind, uint64_t arg, const rt_buf *buf, rt_promise *reply)
{
    if (c->deleted && (kind == CONV_APPEND || kind == CONV_CONTROL || kind == CONV_SUBSCRIBE ||
                       kind == CONV_DELETE || kind == CONV_STATUS)) {
        char id[37];
        rt_uuid_dashed(&c->ctx->id, id);
        reply_detail(reply, 404, "Conversation not found: %s", id);
        return;
    }
    switch (kind) {
    case CONV_APPEND:
        on_append(c, buf, reply);
        break;
    case CONV_CONTROL:
        control(c, (conv_control)arg, reply);
        break;
    case CONV_SUBSCRIBE:
        if (reply->to != NULL)
            subscribe(c, reply, arg);
        break;
    case CONV_UNSUBSCRIBE:
        if (reply->to != NULL) {
            unsubscribe(c, reply->to);
            reply_json(reply, 200, json_pack("{s:b}", "success", 1));
        }
        break;
    case CONV_EXPIRE:
        expire(c, true);
        reply_json(reply, 200, json_pack("{s:b}", "success", 1));
        break;
    case CONV_STATUS:
        reply_json(reply, 200,
                   json_pack("{s:s, s:I, s:i, s:I, s:s*}", "status", conv_status_name(c->status),
                             "events", (json_int_t)c->count_c, "pending_tool_calls",
                             (int)gate_pending_count(c->g), "gate_ns", (json_int_t)c->gate_ns,
                             "updated_at", c->updated[0] != '\0' ? c->updated : NULL));
        break;
    case CONV_STORED:
        on_stored_msg(c, arg);
        break;
    case CONV_DELETE:
        delete_conv(c, reply);
        break;
    case CONV_DELETED:
        deleted(c, arg);
        break;
    case CONV_SYNC:
        start_sync(c, reply);
        break;
    case CONV_SYNC_DONE:
        sync_answered(c, arg);
        break;
    case RT_KIND_ERROR:
        if (arg == CONV_SYNC) /* a subscriber that could not answer */
            sync_answered(c, 0);
        break;
    case CONV_FILE_SAVED:
        on_file_saved(c, (int)arg);
        break;
    case CONV_TICK:
        expire(c, false);
        break;
    case CONV_IDLE_CHECK:
        idle_check(c);
        break;
    case CONV_STOPPING:
        stopping(c);
        break;
    case CONV_NUDGE: {
        ev e;
        char text[1024];
        size_t n = buf != NULL && rt_buf_len(buf) < sizeof(text) ? rt_buf_len(buf) : 0;
        memcpy(text, buf != NULL ? rt_buf_data(buf) : (const uint8_t *)"", n);
        text[n] = '\0';
        offer_own(c, message_event("environment", text, &e), &e);
        break;
    }
    case CONV_STUCK_FOUND:
        on_stuck(c, (stuck_rule)arg);
        break;
    default:
        break;
    }
    settle(c);
}

static void conv_stop(rt_actor *self, void *state)
{
    (void)self;
    conv *c = state;
    for (unit *u = c->uhead, *next; u != NULL; u = next) {
        next = u->next;
        reply_detail(&u->reply, 503, "the conversation is restarting: retry");
        for (echo *x = u->echoes; x != NULL; x = x->next)
            reply_detail(&x->reply, 503, "the conversation is restarting: retry");
        unit_free(u);
    }
    refuse_holds(c, "the conversation is restarting: retry");
    for (deferred *d = c->defs, *next; d != NULL; d = next) {
        next = d->next; /* kept in deferred.json for the next incarnation */
        deferred_free(d);
    }
    for (waiter *w = c->waiters, *next; w != NULL; w = next) {
        next = w->next;
        reply_detail(&w->reply, 503, "the conversation is restarting: retry");
        free(w->id);
        free(w);
    }
    for (flush *s = c->syncs, *next; s != NULL; s = next) {
        next = s->next;
        reply_detail(&s->reply, 503, "the conversation is restarting: retry");
        free(s);
    }
    for (early *e = c->early_head, *next; e != NULL; e = next) {
        next = e->next;
        reply_detail(&e->reply, 503, "the conversation is restarting: retry");
        rt_buf_unref(e->buf);
        free(e);
    }
    while (c->nsubs > 0)
        drop_sub(c, c->nsubs - 1, 1);
    free(c->subs);
    /* a last checkpoint, for a quick reopen (the committer does it after the
     * appends already queued) */
    if (c->open && !c->deleted && c->uhead == NULL && c->since_ckpt > 0)
        checkpoint(c);
    reply_detail(&c->delete_reply, 503, "the conversation stopped while being deleted");
    gate_free(c->g);
    gate_free(c->gc);
    st_conv_release(c->sc);
    set_open(c, false);
    free(c);
}

const rt_behaviour conv_behaviour = {
    .name = "conversation",
    .init = conv_init,
    .handle = conv_handle,
    .stop = conv_stop,
};
