/*
 * seq_verdict.c - the sequencer's verdicts (sequencer.h): how a decision
 * is told (to the decided callback) and answered (to whoever waits), the
 * one-line detail each rule gives, and the prints a retry is compared by.
 * What an event must be to be offered at all (seq_event) is here too.
 */
#include "actors/seq_impl.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <mbedtls/sha256.h>
#include <mbedtls/version.h>

/* What every offered event must be, besides valid: storable. */
static int storable(ev *out, char *err, size_t errlen)
{
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

int seq_event(json_t *obj, ev *out, char *err, size_t errlen)
{
    return ev_from_json(obj, out, err, errlen) != 0 ? -EINVAL : storable(out, err, errlen);
}

int seq_event_at(rt_jdoc *d, uint32_t at, ev *out, char *err, size_t errlen)
{
    return ev_from_doc(d, at, out, err, errlen) != 0 ? -EINVAL : storable(out, err, errlen);
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
int seq_print_of(const ev *e, seq_print *out)
{
    memset(out, 0, sizeof(*out));
    rt_text w = {0};
    int r = ev_write(&w, e, true);
    if (r == 0)
        r = !w.failed ? digest(w.p, w.len, out->rest) : -ENOMEM;
    out->ts_state = e->timestamp != NULL ? 2 : 0; /* never null: the schema refuses it */
    if (r == 0 && e->timestamp != NULL) {
        w.len = 0;
        rt_text_json_string(&w, e->timestamp, strlen(e->timestamp));
        r = !w.failed ? digest(w.p, w.len, out->ts) : -ENOMEM;
    }
    free(w.p);
    return r;
}

/* Does an offered event (print p) say the same as a kept one (print k)?
 * A timestamp left out matches anything; null matches only its absence
 * (canonical bytes drop nulls). */
bool seq__same_print(const seq_print *p, const seq_print *k)
{
    if (memcmp(p->rest, k->rest, sizeof(p->rest)) != 0)
        return false;
    if (p->ts_state == 0)
        return true;
    if (p->ts_state == 1)
        return k->ts_state != 2;
    return k->ts_state == 2 && memcmp(p->ts, k->ts, sizeof(p->ts)) == 0;
}

/* ------------------------------------------------------------ verdicts --- */

void seq__decide(sequencer *s, const ev *e, const seq_verdict *v, seq_was was, uint64_t index)
{
    if (s->decided != NULL)
        s->decided(s->decided_ctx, e, v, was, index, s->tag);
}

/* Hand v (taken) to whoever waits; nobody: it is dropped. */
void seq__answer(sequencer *s, void *token, seq_verdict *v)
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

char *seq__fmt(const char *f, ...)
{
    va_list ap;
    va_start(ap, f);
    char *r = vfmt(f, ap);
    va_end(ap);
    return r;
}

/* Decide e (kind, detail) and answer its token. */
void seq__refuse(sequencer *s, const ev *e, void *token, seq_was was, seq_kind kind,
                 unsigned retry_after, const char *f, ...) __attribute__((format(printf, 7, 8)));
void seq__refuse(sequencer *s, const ev *e, void *token, seq_was was, seq_kind kind,
                 unsigned retry_after, const char *f, ...)
{
    seq_verdict v = {.kind = kind, .retry_after = retry_after};
    va_list ap;
    va_start(ap, f);
    v.detail = vfmt(f, ap);
    va_end(ap);
    seq__decide(s, e, &v, was, 0);
    seq__answer(s, token, &v);
}

static json_t *pending_ids(const gate *g)
{
    json_t *a = json_array();
    for (size_t i = 0; i < gate_pending_count(g); i++)
        json_array_append_new(a, json_string(gate_pending_call(g, i, NULL, NULL)));
    return a;
}

/* One line saying why rule r refuses e, in the live state. */
void seq__rule_detail(const sequencer *s, gate_rule r, const ev *e, char *out, size_t cap)
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

void seq__reject(sequencer *s, const ev *e, void *token, seq_was was, gate_rule r,
                 const char *extra)
{
    char detail[1024];
    seq__rule_detail(s, r, e, detail, sizeof(detail));
    if (extra != NULL)
        snprintf(detail + strlen(detail), sizeof(detail) - strlen(detail), " (%s)", extra);
    seq_verdict v = {.kind = SEQ_REJECTED,
                     .rule = r,
                     .detail = strdup(detail),
                     .event_id = seq__strdup(e->id),
                     .pending = pending_ids(s->g)};
    seq__decide(s, e, &v, was, 0);
    seq__answer(s, token, &v);
}
