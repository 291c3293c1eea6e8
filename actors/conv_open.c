/*
 * conv_open.c - opening a conversation off the loop.
 *
 * Opening reads the log (store), then rebuilds the conversation's state
 * (status, the gate: pending calls, their turn, the head, and the count of
 * findings: violations and stuck findings) from the last state checkpoint
 * plus the events after it, never from a scan of the whole history; a
 * checkpoint that cannot be used is reported and the state is rebuilt from
 * the start instead. So is one written before checkpoints counted
 * findings: once, and the next checkpoint has them. Then it reads the deferred messages still
 * waiting to be committed. All of this is blocking I/O, so it runs in
 * libuv's thread pool; the conversation actor gets the result as a message.
 */
#include "conv_impl.h"

#include "actors/conv_read.h"

#include "runtime/log.h"

#include "runtime/json.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

rt_buf *conv_state_json(uint64_t index, conv_status status, const gate *g, const conv_findings *f)
{
    rt_text w = {0};
    rt_text_puts(&w, "{\"index\":");
    rt_text_u64(&w, index);
    rt_text_puts(&w, ",\"status\":");
    const char *name = conv_status_name(status);
    rt_text_json_string(&w, name, strlen(name));
    rt_text_puts(&w, ",\"gate\":");
    gate_write(&w, g);
    rt_text_puts(&w, ",\"findings\":{\"violations\":");
    rt_text_u64(&w, f->violations);
    rt_text_puts(&w, ",\"stuck\":");
    rt_text_u64(&w, f->stuck);
    rt_text_puts(&w, "}}");
    if (w.failed) {
        free(w.p);
        return NULL;
    }
    return rt_buf_take(w.p, w.len);
}

void conv_opened_free(conv_opened *o)
{
    if (o == NULL)
        return;
    gate_free(o->g);
    json_decref(o->deferred);
    st_conv_release(o->sc);
    free(o);
}

/* Apply the events [from, to) of the log to the state, in order. */
static int replay(conv_opened *o, uint64_t from)
{
    for (uint64_t at = from; at < o->count;) {
        st_page *p;
        int r = st_log_read(o->log, at, 100, &p);
        if (r < 0)
            return r;
        for (uint32_t i = 0; i < p->n; i++) {
            const char *bytes = (const char *)rt_buf_data(p->bytes) + p->ev[i].off;
            ev e;
            char err[256];
            if (ev_parse(bytes, p->ev[i].len, &e, err, sizeof(err)) != 0) {
                /* stored events were valid when stored: say so, go on */
                rt_log(RT_LOG_WARN, "conversation", "skipping unreadable event %" PRIu64 ": %s",
                       at + i, err);
                continue;
            }
            gate_accept(o->g, &e);
            int s = conv_status_of(&e);
            if (s >= 0)
                o->status = (conv_status)s;
            conv_findings_add(&o->findings, conv_finding_of(&e));
            ev_free(&e);
        }
        at += p->n > 0 ? p->n : 1;
        st_page_free(p);
    }
    return 0;
}

/* The checkpoint's index, if it can be used (and the state loaded from it). */
static uint64_t load_checkpoint(conv_opened *o)
{
    char *data;
    size_t len;
    if (st_conv_get_file(o->sc, CONV_STATE_FILE, &data, &len) != 0)
        return 0;
    json_t *j = rt_json_read(data, len, 0, NULL);
    free(data);
    json_t *index = json_object_get(j, "index");
    int status = conv_status_parse(json_string_value(json_object_get(j, "status")));
    json_t *f = json_object_get(j, "findings");
    json_t *nv = json_object_get(f, "violations"), *ns = json_object_get(f, "stuck");
    uint64_t at = 0;
    if (json_is_integer(index) && json_integer_value(index) >= 0 &&
        (uint64_t)json_integer_value(index) <= o->count && status >= 0 && json_is_integer(nv) &&
        json_integer_value(nv) >= 0 && json_is_integer(ns) && json_integer_value(ns) >= 0 &&
        gate_load(o->g, json_object_get(j, "gate")) == 0) {
        at = (uint64_t)json_integer_value(index);
        o->status = (conv_status)status;
        o->findings =
            (conv_findings){(uint64_t)json_integer_value(nv), (uint64_t)json_integer_value(ns)};
    } else {
        gate_free(o->g);
        o->g = gate_new();
        if (f == NULL) /* an older parley's: expected, once */
            rt_log(RT_LOG_INFO, "conversation",
                   "state checkpoint without findings, counting them from the first event");
        else
            rt_log(RT_LOG_WARN, "conversation",
                   "ignoring an unusable state checkpoint, rebuilding from the first event");
    }
    json_decref(j);
    return at;
}

/* Deferred messages that a restart interrupted: those not in the log yet. */
static void load_deferred(conv_opened *o)
{
    char *data;
    size_t len;
    o->deferred = json_array();
    if (st_conv_get_file(o->sc, CONV_DEFERRED_FILE, &data, &len) != 0)
        return;
    json_t *all = rt_json_read(data, len, 0, NULL);
    free(data);
    size_t i;
    json_t *d;
    json_array_foreach(all, i, d)
    {
        const char *id = json_string_value(json_object_get(json_object_get(d, "event"), "id"));
        uint64_t at;
        if (id != NULL && json_is_integer(json_object_get(d, "deadline")) &&
            st_log_find(o->log, id, strlen(id), &at) != 0)
            json_array_append(o->deferred, d);
    }
    json_decref(all);
}

/* The conversation's own compliance policy, if its info says one. */
static int policy_of(st_conv *sc)
{
    rt_buf *m = st_conv_meta(sc);
    json_t *j =
        m != NULL ? rt_json_read((const char *)rt_buf_data(m), rt_buf_len(m), 0, NULL) : NULL;
    rt_buf_unref(m);
    const char *p = json_string_value(json_object_get(j, CONV_META_POLICY));
    int r = p == NULL                   ? -1
            : strcmp(p, "observe") == 0 ? CONV_OBSERVE
            : strcmp(p, "reject") == 0  ? CONV_REJECT
                                        : -1;
    json_decref(j);
    return r;
}

typedef struct open_job {
    uv_work_t req;
    rt_actor *self; /* held until the result is posted */
    st_store *store;
    rt_uuid id;
    bool log_only;
    conv_opened *out;
} open_job;

/* When the conversation last changed: its last event's timestamp. */
static void last_timestamp(conv_opened *o)
{
    st_page *pg;
    if (o->count == 0 || st_log_read(o->log, o->count - 1, 1, &pg) != 0)
        return;
    if (pg->n == 1) {
        json_t *e = rt_json_read((const char *)rt_buf_data(pg->bytes) + pg->ev[0].off,
                                 pg->ev[0].len, 0, NULL);
        const char *t = json_string_value(json_object_get(e, "timestamp"));
        if (t != NULL)
            snprintf(o->updated, sizeof(o->updated), "%s", t);
        json_decref(e);
    }
    st_page_free(pg);
}

static void open_work(uv_work_t *req)
{
    open_job *j = req->data;
    conv_opened *o = j->out;
    char hex[37];
    rt_uuid_dashed(&j->id, hex);
    conv_reader rd;
    if (conv_read_open(j->store, &j->id, &rd, NULL, &o->why, o->detail, sizeof(o->detail)) < 0) {
        o->err = -EIO;
        return;
    }
    o->sc = rd.sc;
    o->log = rd.log;
    o->policy = policy_of(o->sc);
    o->count = st_log_count(o->log);
    if (j->log_only)
        return;
    last_timestamp(o);
    uint64_t from = load_checkpoint(o);
    int r = replay(o, from);
    if (r < 0) {
        o->err = r;
        o->why = PL_FAILED;
        snprintf(o->detail, sizeof(o->detail), "cannot read conversation %s: %s", hex,
                 strerror(-r));
        return;
    }
    load_deferred(o);
    rt_log(RT_LOG_DEBUG, "conversation",
           "opened id=%s events=%" PRIu64 " replayed=%" PRIu64 " status=%s pending=%zu", hex,
           o->count, o->count - from, conv_status_name(o->status), gate_pending_count(o->g));
}

conv_opened *conv_open_fresh(st_conv *sc)
{
    conv_opened *o = calloc(1, sizeof(*o));
    st_open_report rep;
    if (o == NULL || (o->g = gate_new()) == NULL || (o->deferred = json_array()) == NULL ||
        st_conv_log(sc, &o->log, &rep) != 0 || st_log_count(o->log) != 0) {
        if (o != NULL) {
            gate_free(o->g);
            json_decref(o->deferred);
            free(o);
        }
        return NULL;
    }
    o->status = CONV_IDLE;
    o->policy = policy_of(sc);
    o->sc = sc;
    return o;
}

static void open_done(uv_work_t *req, int status)
{
    (void)status;
    open_job *j = req->data;
    if (rt_send(j->self, CONV_OPENED, (uintptr_t)j->out, NULL) != 0)
        conv_opened_free(j->out); /* the actor is gone */
    rt_actor_unref(j->self);
    free(j);
}

int conv_open_start(const conv_ctx *ctx, rt_actor *self, uv_loop_t *loop, bool log_only)
{
    open_job *j = calloc(1, sizeof(*j));
    conv_opened *o = calloc(1, sizeof(*o));
    if (j == NULL || o == NULL || (o->g = gate_new()) == NULL) {
        free(j);
        free(o);
        return -ENOMEM;
    }
    o->status = CONV_IDLE;
    o->policy = -1;
    j->req.data = j;
    j->self = rt_actor_ref(self);
    j->store = ctx->svc->store;
    j->id = ctx->id;
    j->log_only = log_only;
    j->out = o;
    int r = uv_queue_work(loop, &j->req, open_work, open_done);
    if (r < 0) {
        rt_actor_unref(self);
        conv_opened_free(o);
        free(j);
    }
    return r;
}
