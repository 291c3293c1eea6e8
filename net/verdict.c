/* verdict.c - verdicts as HTTP statuses and bodies (verdict.h). */
#include "verdict.h"

#include "runtime/text.h"
#include "runtime/json.h"

#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The 201 of an append is on every append's path: written directly. */
static rt_buf *committed(const pl_verdict *v)
{
    rt_text t = {0};
    rt_text_puts(&t, "{\"events\":[");
    for (size_t i = 0; i < v->nevents; i++) {
        const pl_event_ref *e = &v->events[i];
        rt_text_puts(&t, i == 0 ? "{\"id\":" : ",{\"id\":");
        rt_text_json_string(&t, e->id, strlen(e->id));
        if (e->index != PL_NO_INDEX) {
            rt_text_puts(&t, ",\"index\":");
            rt_text_u64(&t, e->index);
        }
        rt_text_puts(&t, e->duplicate ? ",\"duplicate\":true}" : "}");
    }
    rt_text_puts(&t, "]}");
    if (t.failed) {
        free(t.p);
        return NULL;
    }
    return rt_buf_take(t.p, t.len);
}

static json_t *refs(const pl_verdict *v, bool with_index)
{
    json_t *a = json_array();
    for (size_t i = 0; i < v->nevents; i++) {
        json_t *one = json_pack("{s:s}", "id", v->events[i].id);
        if (with_index && v->events[i].index != PL_NO_INDEX)
            json_object_set_new(one, "index", json_integer((json_int_t)v->events[i].index));
        json_array_append_new(a, one);
    }
    return a;
}

int net_verdict_http(const pl_verdict *v, rt_buf **body, unsigned *retry_after)
{
    *retry_after = 0;
    switch (v->outcome) {
    case PL_COMMITTED:
        *body = committed(v);
        return 201;
    case PL_DUPLICATE:
        *body = rt_json_buf(json_pack("{s:o, s:b}", "events", refs(v, true), "duplicate", 1));
        return 201;
    case PL_DEFERRED:
        *body = rt_json_buf(json_pack("{s:o, s:s}", "events", refs(v, false), "detail", v->detail));
        return 202;
    case PL_REJECTED: {
        json_t *pending = json_array();
        for (size_t i = 0; i < v->npending; i++)
            json_array_append_new(pending, json_string(v->pending[i]));
        *body = rt_json_buf(json_pack("{s:s, s:s, s:s?, s:o}", "detail", v->detail, "rule",
                                      v->rule != NULL ? v->rule : "", "event_id", v->event_id,
                                      "pending_tool_call_ids", pending));
        return 409;
    }
    case PL_DONE:
        *body = rt_buf_wrap((void *)"{\"success\":true}", 16, NULL, NULL);
        return 200;
    case PL_BUSY:
        *retry_after = v->retry_after > 0 ? v->retry_after : 1;
        *body = rt_json_buf(v->retry_after > 0 ? json_pack("{s:s, s:i}", "detail", v->detail,
                                                           "retry_after", (int)v->retry_after)
                                               : json_pack("{s:s}", "detail", v->detail));
        return 503;
    default:
        break;
    }
    *body = rt_json_buf(json_pack("{s:s}", "detail", v->detail));
    return net_outcome_status(v->outcome);
}

int net_outcome_status(pl_outcome o)
{
    static const int status[] = {
        [PL_COMMITTED] = 201, [PL_DUPLICATE] = 201, [PL_DEFERRED] = 202, [PL_HELD] = 202,
        [PL_REJECTED] = 409,  [PL_INVALID] = 422,   [PL_CONFLICT] = 409, [PL_NOT_FOUND] = 404,
        [PL_BUSY] = 503,      [PL_FAILED] = 500,    [PL_DONE] = 200,     [PL_NO_SPACE] = 507,
        [PL_TOO_LARGE] = 413};
    return (unsigned)o < sizeof(status) / sizeof(status[0]) ? status[o] : 500;
}
