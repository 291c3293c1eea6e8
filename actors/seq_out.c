/*
 * seq_out.c - what a driver takes out of the sequencer (units, answers)
 * and what it knows (sequencer.h).
 */
#include "actors/seq_impl.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    for (size_t i = 0; s->o.slim && i < u->n; i++) {
        seq_item *it = &u->items[i];
        /* the note needs the tree; without one (no memory) the subscriber
         * makes it from the bytes, and an ev left whole is still right */
        if (it->note == NULL)
            it->note = stuck_note_new(&it->e);
        if (it->note != NULL)
            (void)ev_slim(&it->e);
    }
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
        seq__accept_state(s, s->gc, &u->items[i].e);
        if (u->items[i].status >= 0)
            s->status_c = (conv_status)u->items[i].status;
        conv_findings_add(&s->findings_c, u->items[i].finding);
    }
    s->count += u->n;
    return u;
}

bool seq_adopt(sequencer *s, const ev *e)
{
    if (seq_inflight(s) || seq_waiting(s) || s->tentative != NULL || s->accepted != s->count)
        return false;
    seq__accept_state(s, s->gc, e);
    if (s->g != s->gc) /* awake: the live gate too (at rest they are one) */
        seq__accept_state(s, s->g, e);
    int st = conv_status_of(e);
    if (st >= 0)
        s->status = s->status_c = (conv_status)st;
    conv_findings_add(&s->findings_c, conv_finding_of(e));
    s->count++;
    s->accepted++;
    return true;
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

conv_findings seq_findings(const sequencer *s)
{
    return s->findings_c;
}

void seq_set_findings(sequencer *s, conv_findings f)
{
    s->findings_c = f;
}

uint64_t seq_unit_first(const sequencer *s, const seq_unit *u)
{
    uint64_t at = s->count;
    for (const seq_unit *t = s->taken; t != NULL && t != u; t = t->next)
        at += t->n;
    return at;
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
        json_array_append_new(all, json_pack("{s:o, s:I, s:s*}", "event", ev_json(&d->e), "deadline",
                                             (json_int_t)d->deadline, "after", d->after));
    return all;
}

bool seq_deferred_tag(const sequencer *s, const char *id, void **tag)
{
    deferred *d = seq__deferred_find(s, id);
    if (d != NULL)
        *tag = d->tag;
    return d != NULL;
}

uint64_t seq_gate_ns(const sequencer *s)
{
    return s->gate_ns;
}
