/*
 * seq_own.c - the events a conversation makes itself (sequencer.h):
 * controls (pause, interrupt, run), stuck findings and nudges, status
 * changes, observed violations, expired holds and deferrals, recovery
 * after a crash mid-run. They go through the same way in as any event
 * (but for the controls' own, which pass every rule anyway).
 */
#include "actors/seq_impl.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------ its own events --- */

int seq__make(json_t *obj, ev *out)
{
    int r = obj != NULL ? ev_from_json(obj, out, NULL, 0) : -ENOMEM;
    json_decref(obj);
    return r;
}

/* Offer an event of the conversation's own (nobody waits). */
void seq__offer_own(sequencer *s, json_t *obj)
{
    ev e;
    if (seq__make(obj, &e) == 0)
        seq__offer(s, &e, NULL, SEQ_OWN, NULL);
}

json_t *seq__status_event(conv_status st)
{
    return json_pack("{s:s, s:s, s:s, s:s}", "source", "environment", "key", "execution_status",
                     "value", conv_status_name(st), "kind", "ConversationStateUpdateEvent");
}

static json_t *error_event(const char *code, const char *detail)
{
    return json_pack("{s:s, s:s, s:s, s:s}", "source", "environment", "code", code, "detail",
                     detail, "kind", "ConversationErrorEvent");
}

void seq__set_status(sequencer *s, conv_status st)
{
    if (st != s->status && conv_transition_ok(s->status, st))
        seq__offer_own(s, seq__status_event(st));
}

/* A user's message brings a finished or stuck conversation back to idle. */
void seq__back_to_idle(sequencer *s)
{
    if (s->status == CONV_FINISHED || s->status == CONV_STUCK)
        seq__set_status(s, CONV_IDLE);
}

/* Observe mode: the violation, said as it is checked (the pending calls
 * it names are those of that moment), recorded right after the event. */
void seq__record_violation(sequencer *s, const char *text)
{
    seq__offer_own(s, error_event(CONV_CODE_VIOLATION, text));
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
                          .detail = seq__fmt("cannot %s a conversation that is %s",
                                             what == CONV_RUN     ? "run"
                                             : what == CONV_PAUSE ? "pause"
                                                                  : "interrupt",
                                             conv_status_name(s->status))};
    }
    if (v.kind != SEQ_ACCEPTED) {
        seq__answer(s, token, &v);
        return;
    }
    ev e;
    seq_verdict ok = {.kind = SEQ_ACCEPTED};
    if (what != CONV_RUN &&
        seq__make(json_pack("{s:s, s:s}", "source", "user", "kind",
                            what == CONV_PAUSE ? "PauseEvent" : "InterruptEvent"),
                  &e) == 0)
        seq__accept_alone(s, &e, NULL, false, SEQ_OWN, &ok);
    if (seq__make(seq__status_event(to), &e) == 0) {
        seq__accept_alone(s, &e, token, true, SEQ_OWN, &ok);
    } else {
        seq_verdict f = {.kind = SEQ_FAILED, .detail = strdup("cannot change the status")};
        seq__answer(s, token, &f);
    }
    seq__settle(s);
}

void seq_reject(sequencer *s, const char *reason, void *token)
{
    size_t n = gate_pending_count(s->g);
    json_t *rejections = json_array();
    for (size_t k = 0; k < n; k++) {
        const char *action, *tool;
        const char *call = gate_pending_call(s->g, k, &action, &tool);
        json_array_append_new(rejections, json_pack("{s:s, s:s, s:s, s:s, s:s, s:s, s:s}", "source",
                                                    "user", "tool_name",
                                                    tool != NULL ? tool : "unknown", "tool_call_id",
                                                    call, "action_id", action != NULL ? action : "",
                                                    "rejection_reason", reason, "rejection_source",
                                                    "user", "kind", "UserRejectObservation"));
    }
    bool to_idle = s->status == CONV_WAITING_FOR_CONFIRMATION;
    seq_verdict ok = {.kind = SEQ_ACCEPTED};
    size_t i, last = json_array_size(rejections);
    json_t *r;
    json_array_foreach(rejections, i, r)
    {
        ev e;
        bool answers = !to_idle && i + 1 == last;
        if (seq__make(json_incref(r), &e) == 0)
            seq__accept_alone(s, &e, answers ? token : NULL, answers, SEQ_OWN, &ok);
    }
    json_decref(rejections);
    ev e;
    if (to_idle && seq__make(seq__status_event(CONV_IDLE), &e) == 0) {
        seq__accept_alone(s, &e, token, true, SEQ_OWN, &ok);
    } else if (!to_idle && last == 0) {
        seq_verdict done = {.kind = SEQ_DONE}; /* as upstream: nothing to reject */
        seq__answer(s, token, &done);
    }
    seq__settle(s);
}

void seq_stuck(sequencer *s, stuck_rule rule)
{
    if (s->status == CONV_STUCK || !conv_transition_ok(s->status, CONV_STUCK))
        return;
    char detail[256];
    snprintf(detail, sizeof(detail), "stuck: %s: the agent repeats itself without progress",
             stuck_rule_name(rule));
    seq__offer_own(s, error_event(CONV_CODE_STUCK, detail));
    seq__set_status(s, CONV_STUCK);
    seq__settle(s);
}

void seq_nudge(sequencer *s, const char *text)
{
    seq__offer_own(s, json_pack("{s:s, s:{s:s, s:[{s:s, s:s}]}, s:s}", "source", "environment",
                                "llm_message", "role", "user", "content", "type", "text", "text",
                                text, "kind", "MessageEvent"));
    seq__settle(s);
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
        seq__reject(s, &h->e, h->token, SEQ_WAS_HELD, GATE_UNKNOWN_PARENT, NULL);
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
        seq__rule_detail(s, GATE_INTERLEAVED_MESSAGE, &d->e, detail, sizeof(detail));
        snprintf(full, sizeof(full),
                 "interleaved_message: %s; it was deferred and expired before they completed, "
                 "so it was not added",
                 detail);
        seq_verdict v = {.kind = SEQ_REJECTED,
                         .rule = GATE_INTERLEAVED_MESSAGE,
                         .detail = detail,
                         .event_id = (char *)d->e.id};
        s->tag = d->tag;
        seq__decide(s, &d->e, &v, SEQ_WAS_DEFERRED, 0);
        s->tag = NULL;
        seq__offer_own(s, error_event("DeferredMessageExpired", full));
        ev_free(&d->e);
        free(d->after);
        free(d);
    }
    if (changed)
        s->gen++;
    seq__settle(s);
}

void seq_recover(sequencer *s)
{
    if (s->status != CONV_RUNNING) {
        seq__settle(s); /* deferred messages restored with no call pending go in now */
        return;
    }
    seq__set_status(s, CONV_ERROR);
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
        seq__offer_own(s,
                       json_pack("{s:s, s:s, s:s, s:s, s:{s:s, s:b, s:s}, s:s}", "source", "agent",
                                 "tool_name", json_string_value(json_array_get(c, 1)),
                                 "tool_call_id", json_string_value(json_array_get(c, 0)), "error",
                                 "A restart occurred while this tool was in progress; its result "
                                 "is lost.",
                                 "classification", "kind", "internal", "retryable", 0,
                                 "user_action", "none", "kind", "AgentErrorEvent"));
    }
    json_decref(calls);
    seq__settle(s);
}

void seq_refuse_holds(sequencer *s, const char *why, bool stopping)
{
    for (held *h = s->holds, *next; h != NULL; h = next) {
        next = h->next;
        s->tag = h->token;
        seq__refuse(s, &h->e, h->token, SEQ_WAS_HELD, SEQ_BUSY, 0, "%s", why);
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
        if (x != NULL)
            ev_free(&x->e);
        free(x);
        return -EINVAL;
    }
    x->deadline = deadline;
    x->after = seq__strdup(after);
    x->gen = s->gen; /* saved already */
    deferred **pp = &s->defs;
    while (*pp != NULL)
        pp = &(*pp)->next;
    *pp = x;
    s->ndefs++;
    return 0;
}
