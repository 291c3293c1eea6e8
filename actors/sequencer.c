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
#include "actors/seq_impl.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* --------------------------------------------------------------- state --- */

static uint64_t clock_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

char *seq__strdup(const char *s)
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
        rt_buf_unref(u->items[i].note);
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
    if (s->g != s->gc)
        gate_free(s->g);
    gate_free(s->gc);
    free(s);
}

/* At rest the live gate is the committed one, so it is shared rather than
 * copied: an idle conversation keeps one gate. Nothing changes the live
 * state while the conversation rests (every offer needs its log, and
 * opening it again calls seq_wake first). */
void seq_rest(sequencer *s)
{
    if (s->g != s->gc && !seq_inflight(s) && !seq_waiting(s) && s->tentative == NULL) {
        gate_free(s->g);
        s->g = s->gc;
    }
}

int seq_wake(sequencer *s)
{
    if (s->g != s->gc)
        return 0;
    gate *g = gate_clone(s->gc);
    if (g == NULL)
        return -ENOMEM;
    s->g = g;
    return 0;
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

/* ------------------------------------------------------------- lookups --- */

deferred *seq__deferred_find(const sequencer *s, const char *id)
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

static int compare(const ev *offered, const ev *kept)
{
    seq_print p, k;
    if (seq_print_of(offered, &p) != 0 || seq_print_of(kept, &k) != 0)
        return 2; /* what cannot be compared is not the same */
    return seq__same_print(&p, &k) ? 1 : 2;
}

/* The same against an accepted event, which may be slim: then it is read
 * again from its bytes (a retry while the first is in flight). */
static int compare_item(const ev *offered, const seq_item *it)
{
    if (it->e.doc != NULL)
        return compare(offered, &it->e);
    ev kept;
    if (ev_parse((const char *)rt_buf_data(it->bytes), rt_buf_len(it->bytes), &kept, NULL, 0) != 0)
        return 2;
    int r = compare(offered, &kept);
    ev_free(&kept);
    return r;
}

/* An id is taken once it is in the log, accepted on its way there, or
 * promised to a deferred message. */
static int lk_known(void *ctx, const ev *e)
{
    sequencer *s = ctx;
    deferred *d = seq__deferred_find(s, e->id);
    if (d != NULL)
        return compare(e, &d->e);
    seq_item *it = inflight_find(s, e->id, NULL, 0);
    if (it != NULL)
        return compare_item(e, it);
    seq_print kept, p;
    int r = s->log.find(s->log.ctx, e->id, &kept);
    if (r == 0)
        return 0;
    if (r < 0 || seq_print_of(e, &p) != 0)
        return 2;
    return seq__same_print(&p, &kept) ? 1 : 2;
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

void seq__accept_state(sequencer *s, gate *g, const ev *e)
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
    seq__accept_state(s, s->g, e);
    int st = conv_status_of(e);
    if (st >= 0)
        s->status = (conv_status)st;
    it->status = (int8_t)st;
    it->finding = (uint8_t)conv_finding_of(e);
    it->keylen = (uint32_t)gate_key(e, it->key, sizeof(it->key));
    it->e = *e;
    u->n++;
    s->accepted++;
    return 0;
}

/* e alone, in a unit of its own that token waits for. */
void seq__accept_alone(sequencer *s, ev *e, void *token, bool success, seq_was was,
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
        seq_verdict f = {.kind = SEQ_FAILED, .detail = seq__fmt("cannot append: %s", strerror(-r))};
        seq__answer(s, token, &f);
        return;
    }
    u->token = token;
    u->success = success;
    seq__decide(s, &u->items[0].e, v, was, index);
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
        seq__answer(s, token, &v);
        return;
    }
    x->token = token;
    x->ids = ids;
    seq_echo **pp = &last->echoes;
    while (*pp != NULL)
        pp = &(*pp)->next;
    *pp = x;
}

/* ------------------------------------------------------- the decisions --- */

static void defer(sequencer *s, ev *e, void *token, seq_was was, void *tag)
{
    if (s->ndefs >= s->o.defer_max) {
        seq__refuse(s, e, token, was, SEQ_BUSY, 1, "%s",
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
        seq__refuse(s, e, token, was, SEQ_FAILED, 0, "cannot defer: out of memory");
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
    seq__decide(s, &d->e, &v, was, 0);
    seq__answer(s, token, &v);
}

static void hold(sequencer *s, ev *e, void *token, seq_was was)
{
    if (s->stopping) { /* its parent could only come after a restart */
        seq__refuse(s, e, token, was, SEQ_BUSY, 0, "the server is stopping: retry");
        ev_free(e);
        return;
    }
    if (s->nholds >= s->o.hold_max) {
        seq__refuse(s, e, token, was, SEQ_BUSY, 1,
                    "too many events waiting for their parent in this conversation");
        ev_free(e);
        return;
    }
    held *h = calloc(1, sizeof(*h));
    if (h == NULL) {
        seq__refuse(s, e, token, was, SEQ_FAILED, 0, "cannot hold: out of memory");
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
    seq__decide(s, &h->e, &v, was, 0);
}

/* The gate said the event is there already (taken). */
static void already(sequencer *s, ev *e, void *token, seq_was was)
{
    deferred *d = seq__deferred_find(s, e->id);
    seq_verdict v = {.kind = d != NULL ? SEQ_DEFERRED : SEQ_DUPLICATE,
                     .ids = json_pack("[s]", e->id),
                     .gen = d != NULL ? d->gen : 0};
    seq__decide(s, e, &v, was, 0);
    if (d != NULL)
        seq__answer(s, token, &v);
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
    deferred *d = e->parent_id != NULL ? seq__deferred_find(s, e->parent_id) : NULL;
    return d != NULL ? ev_set_parent(e, d->after) : 0;
}

/* The way in for every single event. Takes e. */
static void offer_tagged(sequencer *s, ev *e, void *token, seq_was was, void *tag);

void seq__offer(sequencer *s, ev *e, void *token, seq_was was, void *tag)
{
    void *outer = s->tag;
    s->tag = tag;
    offer_tagged(s, e, token, was, tag);
    s->tag = outer;
}

static void offer_tagged(sequencer *s, ev *e, void *token, seq_was was, void *tag)
{
    if (reparent(s, e) < 0) {
        seq__refuse(s, e, token, was, SEQ_FAILED, 0, "out of memory");
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
        seq__refuse(s, e, token, was, SEQ_INVALID, 0, "execution_status cannot go from %s to %s",
                    conv_status_name(s->status), conv_status_name((conv_status)st));
        ev_free(e);
        return;
    }
    seq_verdict ok = {.kind = SEQ_ACCEPTED};
    char observed[1200] = "", detail[1024];
    if (s->o.policy == CONV_OBSERVE && v != GATE_ACCEPT && rule != GATE_DUPLICATE_EVENT_ID) {
        seq__rule_detail(s, rule, e, detail, sizeof(detail));
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
        seq__reject(s, e, token, was, rule, NULL);
        ev_free(e);
        return;
    default:
        break;
    }
    bool user_msg = e->kind == EV_MESSAGE && e->source == EV_SRC_USER;
    seq__accept_alone(s, e, token, false, was, &ok);
    if (observed[0] != '\0')
        seq__record_violation(s, observed);
    if (user_msg)
        seq__back_to_idle(s);
}

/* Held events whose parent is now known, and deferred messages once no call
 * is pending, are offered again (in arrival order), until nothing moves. */
void seq__settle(sequencer *s)
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
            seq__offer(s, &h->e, h->token, SEQ_WAS_HELD, h->token);
            free(h);
            moved = true;
            break;
        }
        if (!moved && s->defs != NULL && gate_pending_count(s->g) == 0) {
            deferred *d = s->defs;
            s->defs = d->next;
            s->ndefs--;
            seq__offer(s, &d->e, NULL, SEQ_WAS_DEFERRED, d->tag);
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
    seq__offer(s, e, token, SEQ_NEW, token);
    seq__settle(s);
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
        seq__answer(s, token, &f);
        return;
    }
    s->tentative = u;
    s->tag = token;
    bool user_msg = false;
    size_t i = 0;
    for (; i < n; i++) {
        ev *e = &evs[i];
        if (reparent(s, e) < 0) {
            seq__refuse(s, e, token, SEQ_NEW, SEQ_FAILED, 0, "out of memory");
            break;
        }
        gate_rule rule;
        gate_verdict v = check(s, e, &rule);
        if (v == GATE_ALREADY && seq__deferred_find(s, e->id) != NULL) {
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
            seq__refuse(s, e, token, SEQ_NEW, SEQ_INVALID, 0,
                        "event %zu: execution_status cannot go from %s to %s", i,
                        conv_status_name(s->status), conv_status_name((conv_status)st));
            break;
        }
        if (v != GATE_ACCEPT && s->o.policy == CONV_OBSERVE && rule != GATE_DUPLICATE_EVENT_ID) {
            char detail[1024], text[1200];
            seq__rule_detail(s, rule, e, detail, sizeof(detail));
            snprintf(text, sizeof(text), "observed %s: %s", gate_rule_name(rule), detail);
            json_array_append_new(observed, json_string(text));
            json_array_append_new(details,
                                  json_pack("{s:i, s:s}", "rule", (int)rule, "detail", detail));
        } else if (v != GATE_ACCEPT) {
            seq__reject(s, e, token, SEQ_NEW, rule,
                        v == GATE_DEFER || v == GATE_HOLD ? wait_in_array[v] : NULL);
            break;
        } else {
            json_array_append_new(details, json_null());
        }
        user_msg |= e->kind == EV_MESSAGE && e->source == EV_SRC_USER;
        if (accept_into(s, u, e) < 0) { /* e is freed */
            seq_verdict f = {.kind = SEQ_FAILED, .detail = strdup("out of memory")};
            seq__answer(s, token, &f);
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
            seq__decide(s, &u->items[k].e, &ok, SEQ_NEW, saved_accepted + k);
        }
        s->tag = NULL;
        unit_ready(s, u);
        json_t *text;
        json_array_foreach(observed, i, text) seq__record_violation(s, json_string_value(text));
        if (user_msg)
            seq__back_to_idle(s);
    }
    s->tag = NULL;
    json_decref(observed);
    json_decref(details);
    seq__settle(s);
}
