/*
 * api_events.c - /api/conversations/{id}/events: search, count, get,
 * batch get, post a user message, and the producer route (append).
 *
 * Reads go straight to the store's log in the thread pool: the stored
 * bytes are what every reader gets, so a page is the events' bytes joined,
 * never re-encoded. Search walks the log from its cursor (an event id,
 * inclusive) in the asked direction and costs what it reads: the page,
 * plus what the filters skip, and never more than SCAN_MAX events per
 * request (then next_page_id says where to go on). Writes go to the
 * conversation actor, which answers once the events are durable.
 */
#include "api.h"

#include "event_filter.h"
#include "verdict.h"

#include "actors/conv_read.h"
#include "actors/event.h"
#include "runtime/json.h"
#include "runtime/text.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
    SCAN_MAX = 65536, /* events one search may read past its filters */
    CHUNK = 128,      /* events read at a time */
    BATCH_MAX = 100,
};

/* The conversation's log, held: 0, or -1 with the outcome set (404, 503
 * out of files, 500), as every reader maps it (conv_read.h). */
static int open_log(net_req *r, net_outcome *out, conv_reader *rd)
{
    pl_outcome why;
    if (conv_read_open(r->api->store, &r->route.conv, rd, NULL, &why, out->detail,
                       sizeof(out->detail)) == 0)
        return 0;
    out->status = net_outcome_status(why);
    return -1;
}

/* A read error as the answer. */
static void read_failed(net_outcome *out, pl_outcome why, const char *detail)
{
    net_fail(out, net_outcome_status(why), "%s", detail);
}

static rt_buf *text_buf(rt_text *t, net_outcome *out)
{
    if (t->failed) {
        free(t->p);
        net_fail(out, 500, "out of memory");
        return NULL;
    }
    return rt_buf_take(t->p, t->len);
}

/* ---- search and count --------------------------------------------------------- */

typedef struct scan {
    const conv_reader *rd;
    const net_event_filter *f;
    bool desc;
    uint64_t at;    /* the next index to read */
    uint64_t count; /* events in the log when the scan began */
    bool end;
    st_page *pg;
    uint32_t i;
    uint64_t read, max; /* events examined; stop at max (0: never) */
    bool capped;        /* stopped at max: ev is the next one not examined */
    pl_outcome why;     /* a read failed: how, and why */
    char detail[256];
} scan;

/* The event the scan is at in its page (the next to examine). */
static const st_event_ref *scan_peek(const scan *s)
{
    if (s->pg == NULL || s->i >= s->pg->n)
        return NULL;
    return &s->pg->ev[s->desc ? s->pg->n - 1 - s->i : s->i];
}

/* Read the next chunk; 0, 1 at the end, or a negative errno. */
static int scan_fill(scan *s)
{
    st_page_free(s->pg);
    s->pg = NULL;
    s->i = 0;
    if (s->end)
        return 1;
    uint64_t first;
    uint32_t n;
    if (s->desc) {
        n = s->at + 1 < CHUNK ? (uint32_t)(s->at + 1) : CHUNK;
        first = s->at + 1 - n;
        s->end = first == 0;
        s->at = first - 1;
    } else {
        first = s->at;
        n = s->count - first < CHUNK ? (uint32_t)(s->count - first) : CHUNK;
        s->at += n;
        s->end = s->at >= s->count;
    }
    return conv_read_page(s->rd, first, n, &s->pg, &s->why, s->detail, sizeof(s->detail)) == 0
               ? 0
               : -EIO;
}

/* The next event that passes the filters; NULL at the end, when capped,
 * or on a read error (*err). */
static const st_event_ref *scan_next(scan *s, int *err)
{
    for (;;) {
        const st_event_ref *e = scan_peek(s);
        if (e == NULL) {
            int r = scan_fill(s);
            if (r < 0)
                *err = r;
            if (r != 0 || s->pg->n == 0)
                return NULL;
            continue;
        }
        if (s->max > 0 && s->read >= s->max) {
            s->capped = true;
            return NULL;
        }
        s->i++;
        s->read++;
        const char *base = (const char *)rt_buf_data(s->pg->bytes);
        if (net_event_filter_match(s->f, base + e->off, e->len))
            return e;
    }
}

int net_walk_events(net_req *r, net_outcome *out, bool desc, bool (*fn)(json_t *e, void *ctx),
                    void *ctx)
{
    conv_reader rd;
    if (open_log(r, out, &rd) < 0)
        return -1;
    net_event_filter all = {0};
    scan s = {.rd = &rd, .f = &all, .desc = desc, .count = conv_read_count(&rd)};
    s.at = desc ? s.count - 1 : 0;
    s.end = s.count == 0;
    int e = 0;
    const st_event_ref *ref;
    bool stop = false;
    while (!stop && (ref = scan_next(&s, &e)) != NULL) {
        json_t *j =
            rt_json_read((const char *)rt_buf_data(s.pg->bytes) + ref->off, ref->len, 0, NULL);
        stop = j != NULL && fn(j, ctx);
        json_decref(j);
    }
    st_page_free(s.pg);
    conv_read_close(&rd);
    if (e < 0) {
        read_failed(out, s.why, s.detail);
        return -1;
    }
    return 0;
}

static void search(net_req *r, net_outcome *out)
{
    const net_query *q = &r->query;
    char err[160];
    net_event_filter f;
    if (net_event_filter_parse(q, &f, err, sizeof(err)) < 0) {
        net_fail(out, 422, "%s", err);
        return;
    }
    long limit;
    if (net_query_limit(q, &limit, err, sizeof(err)) < 0) {
        net_fail(out, 422, "%s", err);
        return;
    }
    const char *so = net_query_get(q, "sort_order");
    bool desc = false;
    if (so != NULL && strcmp(so, "TIMESTAMP_DESC") == 0)
        desc = true;
    else if (so != NULL && strcmp(so, "TIMESTAMP") != 0) {
        net_fail(out, 422, "sort_order must be TIMESTAMP or TIMESTAMP_DESC, not '%.40s'", so);
        return;
    }
    conv_reader rd;
    if (open_log(r, out, &rd) < 0)
        return;
    scan s = {.rd = &rd, .f = &f, .desc = desc, .count = conv_read_count(&rd)};
    s.at = desc ? s.count - 1 : 0;
    s.end = s.count == 0;
    const char *page = net_query_get(q, "page_id");
    uint64_t at;
    /* an unknown cursor starts from the beginning (or the end), as upstream */
    if (page != NULL && page[0] != '\0' && conv_read_find(&rd, page, strlen(page), &at) == 0 &&
        at < s.count)
        s.at = at;
    s.max = f.any ? SCAN_MAX : 0;
    rt_text t = {0};
    rt_text_puts(&t, "{\"items\":[");
    long n = 0;
    int e = 0;
    const st_event_ref *ref;
    const char *next = NULL;
    size_t next_len = 0;
    char next_buf[NET_EVENT_ID_MAX + 1];
    while ((ref = scan_next(&s, &e)) != NULL) {
        const char *base = (const char *)rt_buf_data(s.pg->bytes);
        if (n == limit) {
            next = base + ref->id_off;
            next_len = ref->id_len;
            break;
        }
        if (n++ > 0)
            rt_text_puts(&t, ",");
        rt_text_put(&t, base + ref->off, ref->len);
    }
    if (s.capped && (ref = scan_peek(&s)) != NULL) {
        /* the scan stops here; the next page starts at the first event it
         * did not examine */
        next = (const char *)rt_buf_data(s.pg->bytes) + ref->id_off;
        next_len = ref->id_len;
    }
    if (next != NULL) {
        memcpy(next_buf, next, next_len);
        next_buf[next_len] = '\0';
    }
    st_page_free(s.pg);
    conv_read_close(&rd);
    if (e < 0) {
        free(t.p);
        read_failed(out, s.why, s.detail);
        return;
    }
    rt_text_puts(&t, "],\"next_page_id\":");
    if (next != NULL)
        rt_text_json_string(&t, next_buf, next_len);
    else
        rt_text_puts(&t, "null");
    rt_text_puts(&t, "}");
    out->status = 200;
    out->body = text_buf(&t, out);
}

static void count(net_req *r, net_outcome *out)
{
    char err[160];
    net_event_filter f;
    if (net_event_filter_parse(&r->query, &f, err, sizeof(err)) < 0) {
        net_fail(out, 422, "%s", err);
        return;
    }
    conv_reader rd;
    if (open_log(r, out, &rd) < 0)
        return;
    uint64_t n = 0;
    int e = 0;
    scan s = {.rd = &rd, .f = &f, .count = conv_read_count(&rd)};
    if (!f.any) {
        n = s.count;
    } else {
        s.end = s.count == 0;
        while (scan_next(&s, &e) != NULL)
            n++;
        st_page_free(s.pg);
    }
    conv_read_close(&rd);
    if (e < 0) {
        read_failed(out, s.why, s.detail);
        return;
    }
    char num[32];
    int len = snprintf(num, sizeof(num), "%llu", (unsigned long long)n);
    out->status = 200;
    out->body = rt_buf_copy(num, (size_t)len);
}

/* ---- get one, get many ----------------------------------------------------------- */

/* The event's bytes appended to t (or "null"); 0, 1 if unknown, -1 on a
 * read error (out set). */
static int put_event(rt_text *t, const conv_reader *rd, const char *id, bool null_if_unknown,
                     net_outcome *out)
{
    uint64_t at;
    st_page *pg;
    if (conv_read_find(rd, id, strlen(id), &at) != 0) {
        if (null_if_unknown)
            rt_text_puts(t, "null");
        return 1;
    }
    pl_outcome why;
    if (conv_read_page(rd, at, 1, &pg, &why, out->detail, sizeof(out->detail)) < 0) {
        out->status = net_outcome_status(why);
        return -1;
    }
    uint32_t n = pg->n;
    if (n == 1)
        rt_text_put(t, (const char *)rt_buf_data(pg->bytes) + pg->ev[0].off, pg->ev[0].len);
    else if (null_if_unknown)
        rt_text_puts(t, "null");
    st_page_free(pg);
    return n == 1 ? 0 : 1;
}

static void get_one(net_req *r, net_outcome *out)
{
    conv_reader rd;
    if (open_log(r, out, &rd) < 0)
        return;
    rt_text t = {0};
    int e = put_event(&t, &rd, r->route.event_id, false, out);
    conv_read_close(&rd);
    if (e != 0 || t.len == 0) {
        free(t.p);
        if (e >= 0)
            net_fail(out, 404, "Event not found: %.200s", r->route.event_id);
        return;
    }
    out->status = 200;
    out->body = text_buf(&t, out);
}

static void get_many(net_req *r, net_outcome *out)
{
    json_t *ids = out->arg;
    conv_reader rd;
    if (open_log(r, out, &rd) < 0)
        return;
    rt_text t = {0};
    rt_text_puts(&t, "[");
    size_t i;
    json_t *v;
    int e = 0;
    json_array_foreach(ids, i, v)
    {
        if (i > 0)
            rt_text_puts(&t, ",");
        if ((e = put_event(&t, &rd, json_string_value(v), true, out)) < 0)
            break;
    }
    conv_read_close(&rd);
    rt_text_puts(&t, "]");
    if (e < 0) { /* put_event said why */
        free(t.p);
        return;
    }
    out->status = 200;
    out->body = text_buf(&t, out);
}

static void batch(net_req *r)
{
    json_t *ids = json_array();
    for (size_t i = 0; net_query_nth(&r->query, "event_ids", i) != NULL; i++)
        json_array_append_new(ids, json_string(net_query_nth(&r->query, "event_ids", i)));
    if (json_array_size(ids) == 0 && r->http->body_len > 0) {
        json_decref(ids);
        json_t *b = net_req_json(r, "{\"event_ids\": [...]} or a list of ids");
        if (b == NULL)
            return;
        ids = json_is_array(b) ? json_incref(b) : json_incref(json_object_get(b, "event_ids"));
        json_decref(b);
    }
    size_t i;
    json_t *v;
    bool ok = json_is_array(ids) && json_array_size(ids) <= BATCH_MAX;
    json_array_foreach(ids, i, v) ok = ok && json_is_string(v) && json_string_length(v) > 0 &&
                                       json_string_length(v) <= NET_EVENT_ID_MAX;
    if (!ok) {
        json_decref(ids);
        net_reply_error(r, 422, "event_ids must be a list of at most %d event ids", BATCH_MAX);
        return;
    }
    net_api_work(r, get_many, ids, net_json_free);
}

/* ---- writes: through the conversation actor --------------------------------------- */

static void append(net_req *r)
{
    if (r->http->body == NULL || r->http->body_len == 0) {
        net_reply_error(r, 422, "the request needs a JSON body: an event object or an array");
        return;
    }
    rt_buf *b = rt_buf_copy(r->http->body, r->http->body_len);
    if (b == NULL)
        net_reply_error(r, 503, "out of memory");
    else
        net_ask_conv(r, CONV_APPEND, 0, b);
}

/* POST .../events: a user message, and a run if asked. */
static void posted(net_req *r, rt_msg *refusal)
{
    if (refusal != NULL)
        net_reply_actor(r, refusal);
    else
        net_reply(r, 200, rt_buf_wrap((void *)"{\"success\":true}", 16, NULL, NULL), NULL, NULL);
}

static void post_message(net_req *r)
{
    json_t *b = net_req_json(r, "{\"role\": \"user\", \"content\": [...], \"run\": false}");
    if (b == NULL)
        return;
    json_t *content = json_object_get(b, "content");
    json_t *role = json_object_get(b, "role");
    json_t *run = json_object_get(b, "run");
    const char *bad = !json_is_object(b)                           ? "the body must be an object"
                      : content != NULL && !json_is_array(content) ? "content must be a list"
                      : role != NULL && !json_is_string(role)      ? "role must be a string"
                      : run != NULL && !json_is_boolean(run)       ? "run must be true or false"
                                                                   : NULL;
    if (bad != NULL) {
        json_decref(b);
        net_reply_error(r, 422, "%s", bad);
        return;
    }
    if (content == NULL) /* as upstream: no content is none */
        json_object_set_new(b, "content", json_array());
    content = json_object_get(b, "content");
    rt_buf *event =
        rt_json_buf(ev_user_message(role != NULL ? json_string_value(role) : "user", content));
    bool go = json_is_true(run);
    json_decref(b);
    if (event == NULL) {
        net_reply_error(r, 503, "out of memory");
        return;
    }
    int e = net_post_event(r, &r->route.conv, event, go, posted);
    if (e < 0)
        net_reply_unreachable(r, &r->route.conv, e);
}

static void on_accepted(void *ctx, rt_msg *m)
{
    net_req *r = ctx;
    if (m->kind == CONV_RESULT && m->arg == PL_CONFLICT) { /* as upstream: running already */
        net_reply_json(r, 200, json_pack("{s:b}", "success", 1));
        return;
    }
    net_reply_actor(r, m);
}

/* Confirmation mode: accept (a run) or reject (the pending calls answered
 * by the user's rejection), as upstream's respond_to_confirmation. */
static void respond(net_req *r)
{
    json_t *b = net_req_json(r, "{\"accept\": bool, \"reason\": \"...\"}");
    if (b == NULL)
        return;
    json_t *accept = json_object_get(b, "accept"), *reason = json_object_get(b, "reason");
    const char *bad = !json_is_object(b)                          ? "the body must be an object"
                      : !json_is_boolean(accept)                  ? "accept must be true or false"
                      : reason != NULL && !json_is_string(reason) ? "reason must be a string"
                                                                  : NULL;
    if (bad != NULL) {
        json_decref(b);
        net_reply_error(r, 422, "%s", bad);
        return;
    }
    bool yes = json_is_true(accept);
    const char *why = reason != NULL ? json_string_value(reason) : "User rejected the action.";
    rt_buf *rb = yes ? NULL : rt_buf_copy(why, strlen(why));
    json_decref(b);
    if (yes) {
        net_conv_call(r, &r->route.conv, CONV_CONTROL, CONV_RUN, NULL, on_accepted, r);
        return;
    }
    net_ask_conv(r, CONV_CONTROL, CONV_REFUSE_CALLS, rb);
}

void net_api_events(net_req *r)
{
    switch (r->route.id) {
    case NET_R_EV_SEARCH:
        net_api_work(r, search, NULL, NULL);
        break;
    case NET_R_EV_COUNT:
        net_api_work(r, count, NULL, NULL);
        break;
    case NET_R_EV_GET:
        net_api_work(r, get_one, NULL, NULL);
        break;
    case NET_R_EV_BATCH:
        batch(r);
        break;
    case NET_R_EV_POST:
        post_message(r);
        break;
    case NET_R_EV_APPEND:
        append(r);
        break;
    case NET_R_EV_CONFIRM:
        respond(r);
        break;
    default:
        net_reply_error(r, 404, "no such route");
    }
}
