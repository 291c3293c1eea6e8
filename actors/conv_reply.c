/*
 * conv_reply.c - typed replies in one buffer (conv_reply.h).
 *
 * Layout: the conv_reply, then the event refs, then the pending ids'
 * pointers, then every string, NUL-terminated. The pointers are absolute:
 * the buffer's bytes never move, and nobody writes to them once sent.
 */
#include "actors/conv_reply.h"
#include "actors/conversation.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const outcome_names[] = {
    [PL_COMMITTED] = "committed", [PL_DUPLICATE] = "duplicate", [PL_DEFERRED] = "deferred",
    [PL_HELD] = "held",           [PL_REJECTED] = "rejected",   [PL_INVALID] = "invalid",
    [PL_CONFLICT] = "conflict",   [PL_NOT_FOUND] = "not_found", [PL_BUSY] = "busy",
    [PL_FAILED] = "failed",       [PL_DONE] = "done",           [PL_NO_SPACE] = "no_space",
    [PL_TOO_LARGE] = "too_large",
};

const char *pl_outcome_name(pl_outcome o)
{
    return (unsigned)o <= PL_TOO_LARGE ? outcome_names[o] : "unknown";
}

pl_outcome conv_store_outcome(int err)
{
    return err == ENOSPC || err == -ENOSPC || err == EDQUOT || err == -EDQUOT ? PL_NO_SPACE
                                                                              : PL_FAILED;
}

bool conv_store_unavailable(int err)
{
    int e = err < 0 ? -err : err;
    return e == ENOTCONN || e == ETIMEDOUT || e == EAGAIN;
}

static size_t slen(const char *s)
{
    return s != NULL ? strlen(s) + 1 : 0;
}

/* Copy s to *at (moving it on); NULL stays NULL. */
static const char *put(char **at, const char *s)
{
    if (s == NULL)
        return NULL;
    size_t n = strlen(s) + 1;
    memcpy(*at, s, n);
    const char *r = *at;
    *at += n;
    return r;
}

rt_buf *conv_reply_new(const conv_reply_spec *s)
{
    size_t np = json_array_size(s->pending);
    size_t size = sizeof(conv_reply) + s->nevents * sizeof(pl_event_ref) + np * sizeof(char *);
    size += slen(s->detail != NULL ? s->detail : "") + slen(s->rule) + slen(s->event_id);
    for (size_t i = 0; i < s->nevents; i++)
        size += slen(s->events[i].id);
    for (size_t i = 0; i < np; i++)
        size += slen(json_string_value(json_array_get(s->pending, i)));
    rt_buf *b = rt_buf_new(size);
    if (b == NULL)
        return NULL;
    uint8_t *base = rt_buf_wdata(b);
    conv_reply *r = (conv_reply *)(void *)base;
    memset(r, 0, sizeof(*r));
    if (s->info != NULL)
        *r = *s->info;
    pl_event_ref *evs = (pl_event_ref *)(void *)(base + sizeof(conv_reply));
    const char **pend = (const char **)(void *)(evs + s->nevents);
    char *at = (char *)(pend + np);
    r->v = (pl_verdict){.outcome = s->outcome,
                        .detail = put(&at, s->detail != NULL ? s->detail : ""),
                        .rule = put(&at, s->rule),
                        .event_id = put(&at, s->event_id),
                        .pending = np > 0 ? pend : NULL,
                        .npending = np,
                        .events = s->nevents > 0 ? evs : NULL,
                        .nevents = s->nevents,
                        .retry_after = s->retry_after};
    for (size_t i = 0; i < s->nevents; i++) {
        evs[i] = s->events[i];
        evs[i].id = put(&at, s->events[i].id);
    }
    for (size_t i = 0; i < np; i++)
        pend[i] = put(&at, json_string_value(json_array_get(s->pending, i)));
    return b;
}

rt_buf *conv_reply_detail(pl_outcome o, unsigned retry_after, const char *fmt, ...)
{
    char detail[1200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof(detail), fmt, ap);
    va_end(ap);
    return conv_reply_new(
        &(conv_reply_spec){.outcome = o, .detail = detail, .retry_after = retry_after});
}

rt_buf *conv_reply_store_error(int err, const char *fmt, ...)
{
    char what[1000];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    err = err < 0 ? -err : err;
    pl_outcome o = conv_store_outcome(err);
    return o == PL_NO_SPACE
               ? conv_reply_detail(o, 0, "the disk is full: %s (%s)", what, strerror(err))
               : conv_reply_detail(o, 0, "%s: %s", what, strerror(err));
}

const conv_reply *conv_reply_of(const rt_msg *m)
{
    if (m->buf == NULL || rt_buf_len(m->buf) < sizeof(conv_reply))
        return NULL;
    return (const conv_reply *)(const void *)rt_buf_data(m->buf);
}

void conv_answer(rt_promise *p, rt_buf *reply)
{
    if (p->to == NULL) {
        rt_buf_unref(reply);
        return;
    }
    if (reply == NULL) {
        rt_promise_fail(p, RT_ENOMEM);
        return;
    }
    const conv_reply *r = (const conv_reply *)(const void *)rt_buf_data(reply);
    if (rt_promise_reply(p, CONV_RESULT, 0, (uint64_t)r->v.outcome, reply) < 0)
        rt_buf_unref(reply);
}
