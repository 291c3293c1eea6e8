/*
 * sequencer.c - a conversation's ordering rules (sequencer.h).
 *
 * An offered event is first reparented (a parent that is a deferred
 * message means "where that message was deferred"), then checked by the
 * gate against the live state. The verdict, in order of precedence: the
 * same event is there already (a retry: answered as before, whatever the
 * status now); the status it would set is not reachable (invalid); then
 * the gate's rule, which the observe policy turns into an accept plus a
 * ComplianceViolation of the conversation's own. An accepted event is
 * stamped against the live head, moves the live state on, is serialized
 * once and joins a unit.
 *
 * After every operation, settle: held events whose parent is now known
 * (in the log or on its way), then deferred messages once no call is
 * pending, are offered again in arrival order until nothing moves.
 *
 * Decisions:
 * - What is accepted but not durable is the sequencer's own (the units it
 *   made), so the gate's questions about "the log" cover both without the
 *   driver's help; the driver answers only for the durable log.
 * - A retry of events still on their way is answered once everything
 *   accepted before it is durable (an echo on the last unit), like the
 *   201 of a new event.
 * - Controls (pause, interrupt, run) bypass the gate: their events are
 *   the conversation's own and pass every tool-call rule anyway; the
 *   status events that a finding, a user message or recovery causes go
 *   through it (and through the transition rules) like any event.
 */
#include "actors/sequencer.h"

#include <errno.h>
#include <mbedtls/sha256.h>
#include <mbedtls/version.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int seq_event(json_t *obj, ev *out, char *err, size_t errlen)
{
    if (ev_from_json(obj, out, err, errlen) != 0)
        return -EINVAL;
    const char *why = NULL;
    char buf[96];
    if (ev_kind_transient(out->kind)) {
        snprintf(buf, sizeof(buf), "%s events are not stored; they cannot be appended",
                 ev_kind_name(out->kind));
        why = buf;
    } else if (out->id != NULL && strlen(out->id) > 255) {
        why = "event id longer than 255 bytes";
    } else if (out->tool_call_id != NULL && strlen(out->tool_call_id) > 253) {
        why = "tool_call_id longer than 253 bytes"; /* its key, "a:" + it, is at most 255 */
    }
    if (why == NULL)
        return 0;
    snprintf(err, errlen, "%s", why);
    ev_free(out);
    return -EINVAL;
}

/* -------------------------------------------------------------- prints --- */

static int digest(const char *p, size_t n, uint8_t out[16])
{
    unsigned char full[32];
#if MBEDTLS_VERSION_NUMBER >= 0x03000000
    int r = mbedtls_sha256((const unsigned char *)p, n, full, 0);
#else
    int r = mbedtls_sha256_ret((const unsigned char *)p, n, full, 0);
#endif
    memcpy(out, full, 16);
    return r == 0 ? 0 : -ENOMEM;
}

/* A retry may leave the stamps out, and a deferred message commits after
 * whatever head there is then: so the parent never counts, and the
 * timestamp is digested apart (left out, it matches any). */
int seq_print_of(json_t *obj, seq_print *out)
{
    memset(out, 0, sizeof(*out));
    json_t *rest = json_copy(obj); /* shallow: the members are shared */
    if (rest == NULL)
        return -ENOMEM;
    json_object_del(rest, "timestamp");
    json_object_del(rest, "parent_id");
    char *c = ev_canonical_json(rest);
    json_decref(rest);
    int r = c != NULL ? digest(c, strlen(c), out->rest) : -ENOMEM;
    free(c);
    json_t *ts = json_object_get(obj, "timestamp");
    out->ts_state = ts == NULL ? 0 : json_is_null(ts) ? 1 : 2;
    if (r == 0 && out->ts_state == 2) {
        c = ev_canonical_json(ts);
        r = c != NULL ? digest(c, strlen(c), out->ts) : -ENOMEM;
        free(c);
    }
    return r;
}

/* Does an offered event (print p) say the same as a kept one (print k)?
 * A timestamp left out matches anything; null matches only its absence
 * (canonical bytes drop nulls). */
static bool same_print(const seq_print *p, const seq_print *k)
{
    if (memcmp(p->rest, k->rest, sizeof(p->rest)) != 0)
        return false;
    if (p->ts_state == 0)
        return true;
    if (p->ts_state == 1)
        return k->ts_state != 2;
    return k->ts_state == 2 && memcmp(p->ts, k->ts, sizeof(p->ts)) == 0;
}

/* --------------------------------------------------------------- state --- */

typedef struct held {
    struct held *next;
    ev e;
    void *token;
    uint64_t deadline; /* monotonic ms */
} held;

typedef struct deferred {
    struct deferred *next;
    ev e;              /* stamped with id and timestamp, not yet with a parent */
    uint64_t deadline; /* wall-clock ms: it survives restarts */
    char *after;       /* the head when it was deferred (NULL: none) */
    uint64_t gen;      /* the deferred set that first held it */
    void *tag;         /* the token it came with (answered already: a name only) */
} deferred;

typedef struct answer {
    struct answer *next;
    void *token;
    seq_verdict v;
} answer;

struct sequencer {
    seq_opts o;
    seq_log log;
    seq_decided_fn decided;
    void *decided_ctx;
    gate *g;  /* live: everything accepted */
    gate *gc; /* committed: everything durable */
    conv_status status, status_c;
    uint64_t count;    /* durable events */
    uint64_t accepted; /* durable, plus those in units */
    held *holds;
    size_t nholds;
    deferred *defs;
    size_t ndefs;
    uint64_t gen;
    bool stopping;
    seq_unit *ready, *ready_tail; /* made, not taken */
    seq_unit *taken, *taken_tail; /* taken, not durable */
    seq_unit *tentative;          /* an array being checked */
    answer *answers, *answers_tail;
    uint64_t mono, wall;
    uint64_t gate_ns;
    void *tag; /* the tag of the event being decided */
};

static void offer(sequencer *s, ev *e, void *token, seq_was was, void *tag);
static void settle(sequencer *s);

static uint64_t clock_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static char *dup_or_null(const char *s)
{
    return s != NULL ? strdup(s) : NULL;
}

sequencer *seq_new(const seq_opts *o, const seq_log *log, gate *g, conv_status status,
                   uint64_t count)
{
    sequencer *s = calloc(1, sizeof(*s));
    if (s == NULL || (g == NULL && (g = gate_new()) == NULL)) {
        free(s);
        gate_free(g);
        return NULL;
    }
    if (o != NULL)
        s->o = *o;
    if (s->o.defer_max == 0)
        s->o.defer_max = 64;
    if (s->o.hold_max == 0)
        s->o.hold_max = 64;
    if (s->o.defer_timeout_ms == 0)
        s->o.defer_timeout_ms = 10 * 60 * 1000;
    if (s->o.hold_timeout_ms == 0)
        s->o.hold_timeout_ms = 5000;
    s->log = *log;
    s->gc = g;
    s->g = gate_clone(g);
    if (s->g == NULL) {
        gate_free(g);
        free(s);
        return NULL;
    }
    s->status = s->status_c = status;
    s->count = s->accepted = count;
    return s;
}

void seq_verdict_clear(seq_verdict *v)
{
    free(v->detail);
    free(v->event_id);
    json_decref(v->pending);
    json_decref(v->ids);
    memset(v, 0, sizeof(*v));
}

void seq_unit_free(seq_unit *u)
{
    if (u == NULL)
        return;
    for (seq_echo *x = u->echoes, *next; x != NULL; x = next) {
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

static void units_free(seq_unit *u)
{
    for (seq_unit *next; u != NULL; u = next) {
        next = u->next;
        seq_unit_free(u);
    }
}

void seq_free(sequencer *s)
{
    if (s == NULL)
        return;
    for (held *h = s->holds, *next; h != NULL; h = next) {
        next = h->next;
        ev_free(&h->e);
        free(h);
    }
    for (deferred *d = s->defs, *next; d != NULL; d = next) {
        next = d->next;
        ev_free(&d->e);
        free(d->after);
        free(d);
    }
    for (answer *a = s->answers, *next; a != NULL; a = next) {
        next = a->next;
        seq_verdict_clear(&a->v);
        free(a);
    }
    units_free(s->ready);
    units_free(s->taken);
    gate_free(s->g);
    gate_free(s->gc);
    free(s);
}

void seq_on_decided(sequencer *s, seq_decided_fn fn, void *ctx)
{
    s->decided = fn;
    s->decided_ctx = ctx;
}

void seq_set_time(sequencer *s, uint64_t mono_ms, uint64_t wall_ms)
{
    s->mono = mono_ms;
    s->wall = wall_ms;
}

/* ------------------------------------------------------------ verdicts --- */

static void decide(sequencer *s, const ev *e, const seq_verdict *v, seq_was was, uint64_t index)
{
    if (s->decided != NULL)
        s->decided(s->decided_ctx, e, v, was, index, s->tag);
}

/* Hand v (taken) to whoever waits; nobody: it is dropped. */
static void answer_token(sequencer *s, void *token, seq_verdict *v)
{
    answer *a = token != NULL ? calloc(1, sizeof(*a)) : NULL;
    if (a == NULL) {
        /* a token that cannot be answered here is answered by the driver's
         * own guarantee (every request gets exactly one reply): it fails */
        seq_verdict_clear(v);
        return;
    }
    a->token = token;
    a->v = *v;
    memset(v, 0, sizeof(*v));
    if (s->answers_tail != NULL)
        s->answers_tail->next = a;
    else
        s->answers = a;
    s->answers_tail = a;
}

static char *vfmt(const char *fmt, va_list ap)
{
    char buf[1200];
    vsnprintf(buf, sizeof(buf), fmt, ap);
    return strdup(buf);
}

static char *fmt(const char *f, ...) __attribute__((format(printf, 1, 2)));
static char *fmt(const char *f, ...)
{
    va_list ap;
    va_start(ap, f);
    char *r = vfmt(f, ap);
    va_end(ap);
    return r;
}

/* Decide e (kind, detail) and answer its token. */
static void refuse(sequencer *s, const ev *e, void *token, seq_was was, seq_kind kind,
                   unsigned retry_after, const char *f, ...) __attribute__((format(printf, 7, 8)));
static void refuse(sequencer *s, const ev *e, void *token, seq_was was, seq_kind kind,
                   unsigned retry_after, const char *f, ...)
{
    seq_verdict v = {.kind = kind, .retry_after = retry_after};
    va_list ap;
    va_start(ap, f);
    v.detail = vfmt(f, ap);
    va_end(ap);
    decide(s, e, &v, was, 0);
    answer_token(s, token, &v);
}

static json_t *pending_ids(const gate *g)
{
    json_t *a = json_array();
    for (size_t i = 0; i < gate_pending_count(g); i++)
        json_array_append_new(a, json_string(gate_pending_call(g, i, NULL, NULL)));
    return a;
}

/* One line saying why rule r refuses e, in the live state. */
static void rule_detail(const sequencer *s, gate_rule r, const ev *e, char *out, size_t cap)
{
    const char *id = e->id != NULL ? e->id : "(no id)";
    size_t pending = gate_pending_count(s->g);
    switch (r) {
    case GATE_INTERLEAVED_MESSAGE:
        snprintf(out, cap, "%s %s from %s while %zu tool call(s) are pending",
                 ev_kind_name(e->kind), id, ev_source_name(e->source), pending);
        break;
    case GATE_INTERLEAVED_ACTION:
        snprintf(out, cap,
                 "action %s (tool call %s) belongs to another LLM response (%s) than the %zu "
                 "pending call(s)",
                 id, e->tool_call_id, e->llm_response_id, pending);
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

static void reject(sequencer *s, const ev *e, void *token, seq_was was, gate_rule r,
                   const char *extra)
{
    char detail[1024];
    rule_detail(s, r, e, detail, sizeof(detail));
    if (extra != NULL)
        snprintf(detail + strlen(detail), sizeof(detail) - strlen(detail), " (%s)", extra);
    seq_verdict v = {.kind = SEQ_REJECTED,
                     .rule = r,
                     .detail = strdup(detail),
                     .event_id = dup_or_null(e->id),
                     .pending = pending_ids(s->g)};
    decide(s, e, &v, was, 0);
    answer_token(s, token, &v);
}

/* ------------------------------------------------------------- lookups --- */

static deferred *deferred_find(const sequencer *s, const char *id)
{
    for (deferred *d = s->defs; d != NULL; d = d->next)
        if (strcmp(d->e.id, id) == 0)
            return d;
    return NULL;
}

/* Among the accepted events not durable yet (and those of the array
 * being checked): the one with this id, or this key. */
static seq_item *inflight_find(const sequencer *s, const char *id, const char *key, size_t keylen)
{
    seq_unit *lists[3] = {s->taken, s->ready, s->tentative};
    for (int l = 0; l < 3; l++) {
        for (seq_unit *u = lists[l]; u != NULL; u = l < 2 ? u->next : NULL) {
            for (seq_item *it = u->items; it < u->items + u->n; it++) {
                if (id != NULL && strcmp(it->e.id, id) == 0)
                    return it;
                if (key != NULL && it->keylen == keylen && memcmp(it->key, key, keylen) == 0)
                    return it;
            }
        }
    }
    return NULL;
}

static int compare(json_t *offered, json_t *kept)
{
    seq_print p, k;
    if (seq_print_of(offered, &p) != 0 || seq_print_of(kept, &k) != 0)
        return 2; /* what cannot be compared is not the same */
    return same_print(&p, &k) ? 1 : 2;
}

/* An id is taken once it is in the log, accepted on its way there, or
 * promised to a deferred message. */
static int lk_known(void *ctx, const ev *e)
{
    sequencer *s = ctx;
    deferred *d = deferred_find(s, e->id);
    if (d != NULL)
        return compare(e->obj, d->e.obj);
    seq_item *it = inflight_find(s, e->id, NULL, 0);
    if (it != NULL)
        return compare(e->obj, it->e.obj);
    seq_print kept, p;
    int r = s->log.find(s->log.ctx, e->id, &kept);
    if (r == 0)
        return 0;
    if (r < 0 || seq_print_of(e->obj, &p) != 0)
        return 2;
    return same_print(&p, &kept) ? 1 : 2;
}

static bool has_id(const sequencer *s, const char *id)
{
    return inflight_find(s, id, NULL, 0) != NULL || s->log.find(s->log.ctx, id, NULL) != 0;
}

static bool lk_has_id(void *ctx, const char *id)
{
    return has_id(ctx, id);
}

static bool lk_has_key(void *ctx, const char *key, size_t len)
{
    sequencer *s = ctx;
    return inflight_find(s, NULL, key, len) != NULL || s->log.has_key(s->log.ctx, key, len);
}

/* The gate, timed when asked to (its own code does not block). */
static gate_verdict check(sequencer *s, const ev *e, gate_rule *rule)
{
    gate_lookup lk = {s, lk_known, lk_has_id, lk_has_key};
    uint64_t t0 = s->o.measure ? clock_ns() : 0;
    gate_verdict v = gate_check(s->g, e, &lk, rule);
    if (s->o.measure)
        s->gate_ns += clock_ns() - t0;
    return v;
}

static void accept_state(sequencer *s, gate *g, const ev *e)
{
    uint64_t t0 = s->o.measure ? clock_ns() : 0;
    gate_accept(g, e);
    if (s->o.measure)
        s->gate_ns += clock_ns() - t0;
}

/* ---------------------------------------------------------------- units --- */

static seq_unit *unit_new(size_t cap)
{
    seq_unit *u = calloc(1, sizeof(*u));
    if (u != NULL && (u->items = calloc(cap ? cap : 1, sizeof(seq_item))) == NULL) {
        free(u);
        return NULL;
    }
    if (u != NULL)
        u->cap = cap ? cap : 1;
    return u;
}

static void unit_ready(sequencer *s, seq_unit *u)
{
    if (s->ready_tail != NULL)
        s->ready_tail->next = u;
    else
        s->ready = u;
    s->ready_tail = u;
}

static seq_unit *last_unit(const sequencer *s)
{
    return s->ready_tail != NULL ? s->ready_tail : s->taken_tail;
}

/* e (checked, accepted) joins u: stamped, the live state moved on, its
 * bytes made once. Takes e. */
static int accept_into(sequencer *s, seq_unit *u, ev *e)
{
    int r = ev_stamp(e, gate_head(s->g));
    if (r < 0) {
        ev_free(e);
        return r;
    }
    seq_item *it = &u->items[u->n];
    it->bytes = ev_serialize(e);
    if (it->bytes == NULL) {
        ev_free(e);
        return -ENOMEM;
    }
    accept_state(s, s->g, e);
    int st = conv_status_of(e);
    if (st >= 0)
        s->status = (conv_status)st;
    it->keylen = (uint32_t)gate_key(e, it->key, sizeof(it->key));
    it->e = *e;
    u->n++;
    s->accepted++;
    return 0;
}

/* e alone, in a unit of its own that token waits for. */
static void accept_alone(sequencer *s, ev *e, void *token, bool success, seq_was was,
                         const seq_verdict *v)
{
    seq_unit *u = unit_new(1);
    int r = u != NULL ? 0 : -ENOMEM;
    uint64_t index = s->accepted;
    if (r == 0)
        r = accept_into(s, u, e);
    else
        ev_free(e);
    if (r < 0) {
        seq_unit_free(u);
        seq_verdict f = {.kind = SEQ_FAILED, .detail = fmt("cannot append: %s", strerror(-r))};
        answer_token(s, token, &f);
        return;
    }
    u->token = token;
    u->success = success;
    decide(s, &u->items[0].e, v, was, index);
    unit_ready(s, u);
}

/* A retry of events there already (ids, taken): answered once everything
 * accepted before it is durable. */
static void answer_duplicate(sequencer *s, void *token, json_t *ids)
{
    seq_unit *last = last_unit(s);
    seq_echo *x = token != NULL && last != NULL ? calloc(1, sizeof(*x)) : NULL;
    if (x == NULL) {
        seq_verdict v = {.kind = SEQ_DUPLICATE, .ids = ids};
        answer_token(s, token, &v);
        return;
    }
    x->token = token;
    x->ids = ids;
    seq_echo **pp = &last->echoes;
    while (*pp != NULL)
        pp = &(*pp)->next;
    *pp = x;
}

/* ------------------------------------------------------ its own events --- */

static int make(json_t *obj, ev *out)
{
    int r = obj != NULL ? ev_from_json(obj, out, NULL, 0) : -ENOMEM;
    json_decref(obj);
    return r;
}

/* Offer an event of the conversation's own (nobody waits). */
static void offer_own(sequencer *s, json_t *obj)
{
    ev e;
    if (make(obj, &e) == 0)
        offer(s, &e, NULL, SEQ_OWN, NULL);
}

static json_t *status_event(conv_status st)
{
    return json_pack("{s:s, s:s, s:s, s:s}", "source", "environment", "key", "execution_status",
                     "value", conv_status_name(st), "kind", "ConversationStateUpdateEvent");
}

static json_t *error_event(const char *code, const char *detail)
{
    return json_pack("{s:s, s:s, s:s, s:s}", "source", "environment", "code", code, "detail",
                     detail, "kind", "ConversationErrorEvent");
}

static void set_status(sequencer *s, conv_status st)
{
    if (st != s->status && conv_transition_ok(s->status, st))
        offer_own(s, status_event(st));
}

/* A user's message brings a finished or stuck conversation back to idle. */
static void back_to_idle(sequencer *s)
{
    if (s->status == CONV_FINISHED || s->status == CONV_STUCK)
        set_status(s, CONV_IDLE);
}

/* Observe mode: the violation, said as it is checked (the pending calls
 * it names are those of that moment), recorded right after the event. */
static void record_violation(sequencer *s, const char *text)
{
    offer_own(s, error_event("ComplianceViolation", text));
}

/* ------------------------------------------------------- the decisions --- */

static void defer(sequencer *s, ev *e, void *token, seq_was was, void *tag)
{
    if (s->ndefs >= s->o.defer_max) {
        refuse(s, e, token, was, SEQ_BUSY, 1, "%s",
               "too many deferred messages in this conversation: retry once the pending tool "
               "calls complete");
        ev_free(e);
        return;
    }
    deferred *d = calloc(1, sizeof(*d));
    const char *head = gate_head(s->g);
    if (d == NULL || ev_stamp(e, NULL) < 0 || (head != NULL && (d->after = strdup(head)) == NULL) ||
        ev_set_parent(e, NULL) < 0) {
        if (d != NULL)
            free(d->after);
        free(d);
        refuse(s, e, token, was, SEQ_FAILED, 0, "cannot defer: out of memory");
        ev_free(e);
        return;
    }
    d->e = *e;
    d->deadline = s->wall + s->o.defer_timeout_ms;
    d->gen = ++s->gen; /* the save that holds it */
    d->tag = tag;
    deferred **pp = &s->defs;
    while (*pp != NULL)
        pp = &(*pp)->next;
    *pp = d;
    s->ndefs++;
    seq_verdict v = {.kind = SEQ_DEFERRED, .ids = json_pack("[s]", d->e.id), .gen = d->gen};
    decide(s, &d->e, &v, was, 0);
    answer_token(s, token, &v);
}

static void hold(sequencer *s, ev *e, void *token, seq_was was)
{
    if (s->stopping) { /* its parent could only come after a restart */
        refuse(s, e, token, was, SEQ_BUSY, 0, "the server is stopping: retry");
        ev_free(e);
        return;
    }
    if (s->nholds >= s->o.hold_max) {
        refuse(s, e, token, was, SEQ_BUSY, 1,
               "too many events waiting for their parent in this conversation");
        ev_free(e);
        return;
    }
    held *h = calloc(1, sizeof(*h));
    if (h == NULL) {
        refuse(s, e, token, was, SEQ_FAILED, 0, "cannot hold: out of memory");
        ev_free(e);
        return;
    }
    h->e = *e;
    h->token = token;
    h->deadline = s->mono + s->o.hold_timeout_ms;
    held **pp = &s->holds;
    while (*pp != NULL)
        pp = &(*pp)->next;
    *pp = h;
    s->nholds++;
    seq_verdict v = {.kind = SEQ_HELD, .rule = GATE_UNKNOWN_PARENT};
    decide(s, &h->e, &v, was, 0);
}

/* The gate said the event is there already (taken). */
static void already(sequencer *s, ev *e, void *token, seq_was was)
{
    deferred *d = deferred_find(s, e->id);
    seq_verdict v = {.kind = d != NULL ? SEQ_DEFERRED : SEQ_DUPLICATE,
                     .ids = json_pack("[s]", e->id),
                     .gen = d != NULL ? d->gen : 0};
    decide(s, e, &v, was, 0);
    if (d != NULL)
        answer_token(s, token, &v);
    else
        answer_duplicate(s, token, v.ids);
    ev_free(e);
}

/* An event whose parent is a deferred message (recorded upstream logs have
 * them: the result of a call that was running when the user spoke) goes
 * where that message was deferred, that is before it: the message commits
 * once the call is answered. */
static int reparent(sequencer *s, ev *e)
{
    deferred *d = e->parent_id != NULL ? deferred_find(s, e->parent_id) : NULL;
    return d != NULL ? ev_set_parent(e, d->after) : 0;
}

/* The way in for every single event. Takes e. */
static void offer_tagged(sequencer *s, ev *e, void *token, seq_was was, void *tag);

static void offer(sequencer *s, ev *e, void *token, seq_was was, void *tag)
{
    void *outer = s->tag;
    s->tag = tag;
    offer_tagged(s, e, token, was, tag);
    s->tag = outer;
}

static void offer_tagged(sequencer *s, ev *e, void *token, seq_was was, void *tag)
{
    if (reparent(s, e) < 0) {
        refuse(s, e, token, was, SEQ_FAILED, 0, "out of memory");
        ev_free(e);
        return;
    }
    gate_rule rule;
    gate_verdict v = check(s, e, &rule);
    if (v == GATE_ALREADY) { /* a retry is answered as before, whatever the status now */
        already(s, e, token, was);
        return;
    }
    int st = conv_status_of(e);
    if (st >= 0 && !conv_transition_ok(s->status, (conv_status)st)) {
        refuse(s, e, token, was, SEQ_INVALID, 0, "execution_status cannot go from %s to %s",
               conv_status_name(s->status), conv_status_name((conv_status)st));
        ev_free(e);
        return;
    }
    seq_verdict ok = {.kind = SEQ_ACCEPTED};
    char observed[1200] = "", detail[1024];
    if (s->o.policy == CONV_OBSERVE && v != GATE_ACCEPT && rule != GATE_DUPLICATE_EVENT_ID) {
        rule_detail(s, rule, e, detail, sizeof(detail));
        snprintf(observed, sizeof(observed), "observed %s: %s", gate_rule_name(rule), detail);
        ok.rule = rule;
        ok.detail = detail;
        v = GATE_ACCEPT;
    }
    switch (v) {
    case GATE_DEFER:
        defer(s, e, token, was, tag);
        return;
    case GATE_HOLD:
        hold(s, e, token, was);
        return;
    case GATE_REJECT:
        reject(s, e, token, was, rule, NULL);
        ev_free(e);
        return;
    default:
        break;
    }
    bool user_msg = e->kind == EV_MESSAGE && e->source == EV_SRC_USER;
    accept_alone(s, e, token, false, was, &ok);
    if (observed[0] != '\0')
        record_violation(s, observed);
    if (user_msg)
        back_to_idle(s);
}

/* Held events whose parent is now known, and deferred messages once no call
 * is pending, are offered again (in arrival order), until nothing moves. */
static void settle(sequencer *s)
{
    bool moved = true, defs_changed = false;
    while (moved) {
        moved = false;
        for (held **pp = &s->holds; *pp != NULL; pp = &(*pp)->next) {
            held *h = *pp;
            if (!has_id(s, h->e.parent_id))
                continue;
            *pp = h->next;
            s->nholds--;
            offer(s, &h->e, h->token, SEQ_WAS_HELD, h->token);
            free(h);
            moved = true;
            break;
        }
        if (!moved && s->defs != NULL && gate_pending_count(s->g) == 0) {
            deferred *d = s->defs;
            s->defs = d->next;
            s->ndefs--;
            offer(s, &d->e, NULL, SEQ_WAS_DEFERRED, d->tag);
            free(d->after);
            free(d);
            moved = defs_changed = true;
        }
    }
    if (defs_changed)
        s->gen++;
}

void seq_offer(sequencer *s, ev *e, void *token)
{
    offer(s, e, token, SEQ_NEW, token);
    settle(s);
}

/* ------------------------------------------------------------- arrays --- */

static const char *const wait_in_array[] = {
    [GATE_DEFER] = "it would have to be deferred: arrays are all or nothing, post it on its own",
    [GATE_HOLD] = "it would have to wait for its parent: arrays are all or nothing, post it on "
                  "its own",
};

/* Take back what an array changed, and free what is left of it. */
static void array_undo(sequencer *s, gate *saved, conv_status status, uint64_t accepted, ev *rest,
                       size_t n)
{
    seq_unit_free(s->tentative);
    s->tentative = NULL;
    gate_free(s->g);
    s->g = saved;
    s->status = status;
    s->accepted = accepted;
    for (size_t k = 0; k < n; k++)
        ev_free(&rest[k]);
}

void seq_offer_array(sequencer *s, ev *evs, size_t n, void *token)
{
    gate *saved = gate_clone(s->g);
    conv_status saved_status = s->status;
    uint64_t saved_accepted = s->accepted;
    seq_unit *u = unit_new(n);
    json_t *already = json_array(), *observed = json_array(), *posted = json_array(),
           *details = json_array();
    if (saved == NULL || u == NULL || already == NULL || observed == NULL || posted == NULL ||
        details == NULL) {
        gate_free(saved);
        seq_unit_free(u);
        json_decref(already);
        json_decref(observed);
        json_decref(posted);
        json_decref(details);
        for (size_t i = 0; i < n; i++)
            ev_free(&evs[i]);
        seq_verdict f = {.kind = SEQ_FAILED, .detail = strdup("out of memory")};
        answer_token(s, token, &f);
        return;
    }
    s->tentative = u;
    s->tag = token;
    bool user_msg = false;
    size_t i = 0;
    for (; i < n; i++) {
        ev *e = &evs[i];
        if (reparent(s, e) < 0) {
            refuse(s, e, token, SEQ_NEW, SEQ_FAILED, 0, "out of memory");
            break;
        }
        gate_rule rule;
        gate_verdict v = check(s, e, &rule);
        if (v == GATE_ALREADY && deferred_find(s, e->id) != NULL) {
            v = GATE_DEFER; /* it waits already, on its own */
            rule = GATE_INTERLEAVED_MESSAGE;
        }
        if (v == GATE_ALREADY) {
            json_array_append_new(already, json_string(e->id));
            json_array_append_new(posted, json_string(e->id));
            ev_free(e);
            continue;
        }
        int st = conv_status_of(e);
        if (st >= 0 && !conv_transition_ok(s->status, (conv_status)st)) {
            refuse(s, e, token, SEQ_NEW, SEQ_INVALID, 0,
                   "event %zu: execution_status cannot go from %s to %s", i,
                   conv_status_name(s->status), conv_status_name((conv_status)st));
            break;
        }
        if (v != GATE_ACCEPT && s->o.policy == CONV_OBSERVE && rule != GATE_DUPLICATE_EVENT_ID) {
            char detail[1024], text[1200];
            rule_detail(s, rule, e, detail, sizeof(detail));
            snprintf(text, sizeof(text), "observed %s: %s", gate_rule_name(rule), detail);
            json_array_append_new(observed, json_string(text));
            json_array_append_new(details,
                                  json_pack("{s:i, s:s}", "rule", (int)rule, "detail", detail));
        } else if (v != GATE_ACCEPT) {
            reject(s, e, token, SEQ_NEW, rule,
                   v == GATE_DEFER || v == GATE_HOLD ? wait_in_array[v] : NULL);
            break;
        } else {
            json_array_append_new(details, json_null());
        }
        user_msg |= e->kind == EV_MESSAGE && e->source == EV_SRC_USER;
        if (accept_into(s, u, e) < 0) { /* e is freed */
            seq_verdict f = {.kind = SEQ_FAILED, .detail = strdup("out of memory")};
            answer_token(s, token, &f);
            i++;
            break;
        }
        json_array_append_new(posted, json_string(u->items[u->n - 1].e.id));
    }
    if (i < n) { /* take it all back */
        array_undo(s, saved, saved_status, saved_accepted, evs + i, n - i);
        json_decref(already);
        json_decref(observed);
        json_decref(posted);
        json_decref(details);
        s->tag = NULL;
        return;
    }
    s->tentative = NULL;
    gate_free(saved);
    if (json_array_size(already) > 0 && u->n > 0)
        u->posted = json_incref(posted);
    json_decref(posted);
    if (u->n == 0) { /* an idempotent retry of the whole array */
        seq_unit_free(u);
        answer_duplicate(s, token, already);
    } else {
        json_decref(already);
        u->token = token;
        for (size_t k = 0; k < u->n; k++) {
            json_t *d = json_array_get(details, k);
            seq_verdict ok = {.kind = SEQ_ACCEPTED,
                              .rule = (gate_rule)json_integer_value(json_object_get(d, "rule")),
                              .detail = (char *)json_string_value(json_object_get(d, "detail"))};
            decide(s, &u->items[k].e, &ok, SEQ_NEW, saved_accepted + k);
        }
        s->tag = NULL;
        unit_ready(s, u);
        json_t *text;
        json_array_foreach(observed, i, text) record_violation(s, json_string_value(text));
        if (user_msg)
            back_to_idle(s);
    }
    s->tag = NULL;
    json_decref(observed);
    json_decref(details);
    settle(s);
}

/* ------------------------------------------------------- the rest ------- */

void seq_control(sequencer *s, conv_control what, void *token)
{
    conv_status to = what == CONV_RUN ? CONV_RUNNING : CONV_PAUSED;
    seq_verdict v = {0};
    if (what == CONV_RUN && s->status == CONV_RUNNING) {
        v = (seq_verdict){.kind = SEQ_CONFLICT,
                          .detail = strdup("conversation is already running")};
    } else if (what != CONV_RUN && s->status == CONV_PAUSED) { /* as upstream: nothing to do */
        v = (seq_verdict){.kind = SEQ_DONE};
    } else if (!conv_transition_ok(s->status, to) || s->status == to) {
        v = (seq_verdict){.kind = SEQ_CONFLICT,
                          .detail = fmt("cannot %s a conversation that is %s",
                                        what == CONV_RUN     ? "run"
                                        : what == CONV_PAUSE ? "pause"
                                                             : "interrupt",
                                        conv_status_name(s->status))};
    }
    if (v.kind != SEQ_ACCEPTED) {
        answer_token(s, token, &v);
        return;
    }
    ev e;
    seq_verdict ok = {.kind = SEQ_ACCEPTED};
    if (what != CONV_RUN && make(json_pack("{s:s, s:s}", "source", "user", "kind",
                                           what == CONV_PAUSE ? "PauseEvent" : "InterruptEvent"),
                                 &e) == 0)
        accept_alone(s, &e, NULL, false, SEQ_OWN, &ok);
    if (make(status_event(to), &e) == 0) {
        accept_alone(s, &e, token, true, SEQ_OWN, &ok);
    } else {
        seq_verdict f = {.kind = SEQ_FAILED, .detail = strdup("cannot change the status")};
        answer_token(s, token, &f);
    }
    settle(s);
}

void seq_stuck(sequencer *s, stuck_rule rule)
{
    if (s->status == CONV_STUCK || !conv_transition_ok(s->status, CONV_STUCK))
        return;
    char detail[256];
    snprintf(detail, sizeof(detail), "stuck: %s: the agent repeats itself without progress",
             stuck_rule_name(rule));
    offer_own(s, error_event("StuckPatternDetected", detail));
    set_status(s, CONV_STUCK);
    settle(s);
}

void seq_nudge(sequencer *s, const char *text)
{
    offer_own(s, json_pack("{s:s, s:{s:s, s:[{s:s, s:s}]}, s:s}", "source", "environment",
                           "llm_message", "role", "user", "content", "type", "text", "text", text,
                           "kind", "MessageEvent"));
    settle(s);
}

void seq_expire(sequencer *s, bool all)
{
    for (held **pp = &s->holds; *pp != NULL;) {
        held *h = *pp;
        if (!all && h->deadline > s->mono) {
            pp = &h->next;
            continue;
        }
        *pp = h->next;
        s->nholds--;
        s->tag = h->token;
        reject(s, &h->e, h->token, SEQ_WAS_HELD, GATE_UNKNOWN_PARENT, NULL);
        s->tag = NULL;
        ev_free(&h->e);
        free(h);
    }
    bool changed = false;
    for (deferred **pp = &s->defs; *pp != NULL;) {
        deferred *d = *pp;
        if (!all && d->deadline > s->wall) {
            pp = &d->next;
            continue;
        }
        *pp = d->next;
        s->ndefs--;
        changed = true;
        char detail[1024], full[1200];
        rule_detail(s, GATE_INTERLEAVED_MESSAGE, &d->e, detail, sizeof(detail));
        snprintf(full, sizeof(full),
                 "interleaved_message: %s; it was deferred and expired before they completed, "
                 "so it was not added",
                 detail);
        seq_verdict v = {.kind = SEQ_REJECTED,
                         .rule = GATE_INTERLEAVED_MESSAGE,
                         .detail = detail,
                         .event_id = (char *)d->e.id};
        s->tag = d->tag;
        decide(s, &d->e, &v, SEQ_WAS_DEFERRED, 0);
        s->tag = NULL;
        offer_own(s, error_event("DeferredMessageExpired", full));
        ev_free(&d->e);
        free(d->after);
        free(d);
    }
    if (changed)
        s->gen++;
    settle(s);
}

void seq_recover(sequencer *s)
{
    if (s->status != CONV_RUNNING)
        return;
    set_status(s, CONV_ERROR);
    size_t n = gate_pending_count(s->g);
    json_t *calls = json_array();
    for (size_t k = 0; k < n; k++) {
        const char *tool;
        const char *call = gate_pending_call(s->g, k, NULL, &tool);
        json_array_append_new(calls, json_pack("[ss]", call, tool != NULL ? tool : "unknown"));
    }
    size_t k;
    json_t *c;
    json_array_foreach(calls, k, c)
    {
        offer_own(s, json_pack("{s:s, s:s, s:s, s:s, s:{s:s, s:b, s:s}, s:s}", "source", "agent",
                               "tool_name", json_string_value(json_array_get(c, 1)), "tool_call_id",
                               json_string_value(json_array_get(c, 0)), "error",
                               "A restart occurred while this tool was in progress; its result "
                               "is lost.",
                               "classification", "kind", "internal", "retryable", 0, "user_action",
                               "none", "kind", "AgentErrorEvent"));
    }
    json_decref(calls);
    settle(s);
}

void seq_refuse_holds(sequencer *s, const char *why, bool stopping)
{
    for (held *h = s->holds, *next; h != NULL; h = next) {
        next = h->next;
        s->tag = h->token;
        refuse(s, &h->e, h->token, SEQ_WAS_HELD, SEQ_BUSY, 0, "%s", why);
        s->tag = NULL;
        ev_free(&h->e);
        free(h);
    }
    s->holds = NULL;
    s->nholds = 0;
    s->stopping |= stopping;
}

int seq_restore_deferred(sequencer *s, json_t *event, uint64_t deadline, const char *after)
{
    deferred *x = calloc(1, sizeof(*x));
    if (x == NULL || ev_from_json(event, &x->e, NULL, 0) != 0 || x->e.id == NULL) {
        if (x != NULL && x->e.obj != NULL)
            ev_free(&x->e);
        free(x);
        return -EINVAL;
    }
    x->deadline = deadline;
    x->after = dup_or_null(after);
    x->gen = s->gen; /* saved already */
    deferred **pp = &s->defs;
    while (*pp != NULL)
        pp = &(*pp)->next;
    *pp = x;
    s->ndefs++;
    return 0;
}

/* ------------------------------------------------------------- outputs --- */

seq_unit *seq_take(sequencer *s)
{
    seq_unit *u = s->ready;
    if (u == NULL)
        return NULL;
    s->ready = u->next;
    if (s->ready == NULL)
        s->ready_tail = NULL;
    u->next = NULL;
    if (s->taken_tail != NULL)
        s->taken_tail->next = u;
    else
        s->taken = u;
    s->taken_tail = u;
    return u;
}

seq_unit *seq_durable(sequencer *s)
{
    seq_unit *u = s->taken;
    if (u == NULL)
        return NULL;
    s->taken = u->next;
    if (s->taken == NULL)
        s->taken_tail = NULL;
    u->next = NULL;
    for (size_t i = 0; i < u->n; i++) {
        accept_state(s, s->gc, &u->items[i].e);
        int st = conv_status_of(&u->items[i].e);
        if (st >= 0)
            s->status_c = (conv_status)st;
    }
    s->count += u->n;
    return u;
}

seq_unit *seq_abandon(sequencer *s)
{
    seq_unit **from = s->taken != NULL ? &s->taken : &s->ready;
    seq_unit *u = *from;
    if (u == NULL)
        return NULL;
    *from = u->next;
    if (*from == NULL) {
        if (from == &s->taken)
            s->taken_tail = NULL;
        else
            s->ready_tail = NULL;
    }
    u->next = NULL;
    return u;
}

bool seq_answer(sequencer *s, void **token, seq_verdict *v)
{
    answer *a = s->answers;
    if (a == NULL)
        return false;
    s->answers = a->next;
    if (s->answers == NULL)
        s->answers_tail = NULL;
    *token = a->token;
    *v = a->v;
    free(a);
    return true;
}

conv_status seq_status(const sequencer *s)
{
    return s->status;
}

conv_status seq_status_committed(const sequencer *s)
{
    return s->status_c;
}

const gate *seq_gate(const sequencer *s)
{
    return s->g;
}

const gate *seq_gate_committed(const sequencer *s)
{
    return s->gc;
}

uint64_t seq_count(const sequencer *s)
{
    return s->count;
}

bool seq_inflight(const sequencer *s)
{
    return s->ready != NULL || s->taken != NULL;
}

bool seq_waiting(const sequencer *s)
{
    return s->holds != NULL || s->defs != NULL;
}

size_t seq_held(const sequencer *s)
{
    return s->nholds;
}

size_t seq_deferred(const sequencer *s)
{
    return s->ndefs;
}

uint64_t seq_deferred_gen(const sequencer *s)
{
    return s->gen;
}

json_t *seq_deferred_json(const sequencer *s)
{
    json_t *all = json_array();
    for (deferred *d = s->defs; d != NULL; d = d->next)
        json_array_append_new(all, json_pack("{s:O, s:I, s:s*}", "event", d->e.obj, "deadline",
                                             (json_int_t)d->deadline, "after", d->after));
    return all;
}

bool seq_deferred_tag(const sequencer *s, const char *id, void **tag)
{
    deferred *d = deferred_find(s, id);
    if (d != NULL)
        *tag = d->tag;
    return d != NULL;
}

uint64_t seq_gate_ns(const sequencer *s)
{
    return s->gate_ns;
}
