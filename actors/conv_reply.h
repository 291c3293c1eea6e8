/*
 * conv_reply.h - what a conversation actor answers, typed: every request
 * (CONV_APPEND, CONV_CONTROL, CONV_DELETE, CONV_STATUS, CONV_SUBSCRIBE,
 * CONV_SYNC, ...) gets one CONV_RESULT whose arg is the outcome
 * (pl_outcome) and whose buf is a conv_reply: the verdict (parley.h) and
 * what the conversation knows at that moment, in one immutable buffer
 * (the verdict's strings and arrays point into it). Nothing here speaks
 * HTTP: net/ maps a verdict to a status and a body, the public API hands
 * it to a callback.
 */
#ifndef CONV_REPLY_H
#define CONV_REPLY_H

#include "actors/conv_status.h"
#include "parley.h"
#include "runtime/rt.h"

#include <jansson.h>

typedef struct conv_reply {
    pl_verdict v;
    conv_status status;     /* STATUS: live; SUBSCRIBE: durable */
    uint64_t count;         /* durable events (SUBSCRIBE: the index of the first
                               event the subscriber gets live) */
    uint32_t pending;       /* STATUS: tool calls pending */
    uint64_t gate_ns;       /* STATUS: time in the gate (conv_opts.measure) */
    char updated[40];       /* STATUS: the last durable event's timestamp, or "" */
    conv_findings findings; /* STATUS: violations and stuck findings in the log */
} conv_reply;

/* What goes into a reply; strings and arrays are copied. */
typedef struct conv_reply_spec {
    pl_outcome outcome;
    const char *detail;   /* NULL: "" */
    const char *rule;     /* REJECTED */
    const char *event_id; /* REJECTED */
    json_t *pending;      /* REJECTED: an array of strings, or NULL */
    size_t nevents;       /* COMMITTED, DUPLICATE, DEFERRED */
    const pl_event_ref *events;
    unsigned retry_after;
    const conv_reply *info; /* status, count...: NULL for none */
} conv_reply_spec;

/* One buffer holding the reply; NULL if out of memory. */
rt_buf *conv_reply_new(const conv_reply_spec *s);
/* Just an outcome and a one-line detail (printf). */
rt_buf *conv_reply_detail(pl_outcome o, unsigned retry_after, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The outcome of a store error (errno, either sign): NO_SPACE when the
 * disk is full (ENOSPC, EDQUOT), FAILED otherwise. */
pl_outcome conv_store_outcome(int err);
/* A store error that says the store did not answer (a cluster unreachable,
 * timed out, without a leader: ENOTCONN, ETIMEDOUT, EAGAIN): a client
 * retries later (BUSY, 503), the store reconnects meanwhile. */
bool conv_store_unavailable(int err);

/* A store error (errno, either sign) while doing what fmt says: NO_SPACE
 * "the disk is full: <what> (<strerror>)", or FAILED "<what>: <strerror>". */
rt_buf *conv_reply_store_error(int err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The reply a CONV_RESULT carries, or NULL if m is something else. */
const conv_reply *conv_reply_of(const rt_msg *m);

/* Answer p (if anyone waits) with a reply (taken); out of memory: the
 * promise fails with RT_ENOMEM, so the asker still gets one answer. */
void conv_answer(rt_promise *p, rt_buf *reply);

#endif
