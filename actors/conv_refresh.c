/*
 * conv_refresh.c - what a node that does not write a conversation says of
 * it (a store shared by nodes, store.h "several nodes"). Its actor's state
 * (status, count, gate, findings, the last event's time) is what it
 * loaded, and the owner appends without telling it; so before it answers
 * a status (GET of the conversation, and what lists keep of it), the
 * actor reads the log's count at the stream leader and the events it
 * lacks, in the thread pool, and takes them in (seq_adopt) as if it had
 * made them: the answer is the log's as of the request, as the owner's
 * would be. Its told subscribers get those events too (conv_follow.c's
 * watermark), so nothing they were given is skipped or sent twice.
 *
 * Until the answer comes, the conversation's later requests wait in the
 * early queue, in order (as behind conv_confirm.c), REFRESH_WAIT_MS at
 * most: a cluster that is slow to answer (or a log that cannot be read)
 * leaves the status answered from memory, as it was, and what the read
 * brings later is taken in then.
 * Nothing is read when this node writes the log (its memory is the log)
 * or when the actor has work of its own in flight (the log fences it).
 */
#include "conv_impl.h"

#include "actors/conv_read.h"
#include "runtime/log.h"
#include "runtime/runtime.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

enum {
    REFRESH_PAGE = 100,
    REFRESH_MAX = 10000,    /* events read for one answer, at most */
    REFRESH_WAIT_MS = 1000, /* then the status is answered from memory */
};

typedef struct refresh_job {
    uv_work_t req;
    rt_actor *self; /* held until the answer is posted */
    st_store *store;
    rt_uuid id;
    uint64_t from; /* the actor's count when asked */
    st_page **pages;
    size_t npages;
    int err;
} refresh_job;

bool conv_may_lag(const conv *c)
{
    st_store *s = c->ctx->svc->store;
    return st_store_shared(s) && !st_conv_writes_here(s, &c->ctx->id);
}

static void job_free(void *data, void *ctx)
{
    (void)ctx;
    refresh_job *j = data;
    for (size_t i = 0; i < j->npages; i++)
        st_page_free(j->pages[i]);
    free(j->pages);
    free(j);
}

static void refresh_work(uv_work_t *req)
{
    refresh_job *j = req->data;
    conv_reader rd; /* a reference of its own: the actor may stop meanwhile */
    pl_outcome why;
    char detail[200];
    if (conv_read_open(j->store, &j->id, &rd, NULL, &why, detail, sizeof(detail)) < 0) {
        j->err = -EIO;
        return;
    }
    uint64_t count = st_log_count(rd.log); /* at the leader: this node does not write it */
    if (count > j->from + REFRESH_MAX)
        count = j->from + REFRESH_MAX;
    size_t cap = (size_t)((count > j->from ? count - j->from : 0) / REFRESH_PAGE + 1);
    j->pages = calloc(cap, sizeof(*j->pages));
    if (j->pages == NULL && count > j->from)
        j->err = -ENOMEM;
    for (uint64_t at = j->from; j->err == 0 && at < count && j->npages < cap;) {
        uint64_t n = count - at;
        st_page *p = NULL;
        int r = st_log_read(rd.log, at, n < REFRESH_PAGE ? (uint32_t)n : REFRESH_PAGE, &p);
        if (r < 0) {
            j->err = r;
            break;
        }
        j->pages[j->npages++] = p;
        if (p->n == 0)
            break;
        at += p->n;
    }
    conv_read_close(&rd);
}

static void refresh_done(uv_work_t *req, int status)
{
    refresh_job *j = req->data;
    if (status < 0 && j->err == 0)
        j->err = -ESHUTDOWN; /* cancelled: the loop is closing */
    rt_actor *self = j->self;
    rt_buf *b = rt_buf_wrap(j, sizeof(*j), job_free, NULL);
    /* owed: the actor waits for it (a NULL buf: out of memory, nothing read) */
    if (b == NULL)
        job_free(j, NULL);
    if (rt_notify(self, CONV_REFRESHED, 0, b) != 0)
        rt_buf_unref(b);
    rt_actor_unref(self);
}

int conv_refresh(conv *c, uint32_t kind, uint64_t arg, const rt_buf *buf, rt_promise *reply)
{
    if (c->refreshed || c->refreshing || !c->open || c->log == NULL || c->sq == NULL ||
        seq_inflight(c->sq) || seq_waiting(c->sq) || c->confirm != NULL || c->recovering ||
        !conv_may_lag(c))
        return 0;
    refresh_job *j = calloc(1, sizeof(*j));
    conv_early *e = j != NULL ? conv_early_new(kind, arg, buf, reply) : NULL;
    if (e == NULL) {
        free(j);
        return 0; /* answered from memory */
    }
    j->req.data = j;
    j->self = rt_actor_ref(c->self);
    j->store = c->ctx->svc->store;
    j->id = c->ctx->id;
    j->from = seq_count(c->sq);
    rt_runtime *rt = rt_actor_runtime(c->self);
    if (uv_queue_work(rt_runtime_uv(rt, rt_actor_loop(c->self)), &j->req, refresh_work,
                      refresh_done) != 0) {
        rt_actor_unref(c->self);
        free(j);
        *reply = e->reply; /* given back: answered from memory */
        e->reply = (rt_promise){0};
        conv_early_end(c, e, PL_BUSY, "");
        return 0;
    }
    c->refresh = e;
    c->refreshing = true;
    rt_timer_start(c->self, REFRESH_WAIT_MS, 0, CONV_REFRESH_LATE, 0);
    return 1;
}

/* The status set aside is answered now, from memory. */
static void answer_now(conv *c)
{
    conv_early *e = c->refresh;
    c->refresh = NULL;
    if (e == NULL)
        return;
    c->refreshed = true;
    conv_early_end(c, e, PL_DONE, NULL);
    c->refreshed = false;
    conv_run_early(c, PL_DONE, NULL); /* what came meanwhile, in order */
}

void conv_refresh_late(conv *c)
{
    if (c->refresh != NULL)
        rt_log(RT_LOG_WARN, "conversation",
               "reading what other nodes appended takes over %d ms: the status is answered "
               "as this node knows it",
               REFRESH_WAIT_MS);
    answer_now(c);
}

/* Take in the events of p at the sequencer's count, in order. */
static void adopt_page(conv *c, const st_page *p)
{
    for (uint32_t i = 0; i < p->n; i++) {
        const st_event_ref *r = &p->ev[i];
        if (r->index != seq_count(c->sq))
            continue;
        ev e;
        const char *bytes = (const char *)rt_buf_data(p->bytes) + r->off;
        if (ev_parse(bytes, r->len, &e, NULL, 0) != 0) {
            rt_log(RT_LOG_WARN, "conversation",
                   "event %" PRIu64 " written by another node cannot be read: the status "
                   "is answered as it was",
                   r->index);
            return;
        }
        bool in = seq_adopt(c->sq, &e);
        if (in && e.timestamp != NULL)
            snprintf(c->updated, sizeof(c->updated), "%s", e.timestamp);
        ev_free(&e);
        if (!in)
            return;
    }
}

void conv_refreshed(conv *c, const rt_msg *m)
{
    c->refreshing = false;
    const refresh_job *j = m->buf != NULL ? (const refresh_job *)rt_buf_data(m->buf) : NULL;
    if (j != NULL && j->err != 0 && j->err != -ESHUTDOWN)
        rt_log(RT_LOG_WARN, "conversation",
               "cannot read what other nodes appended (%s): the status is answered as it was",
               strerror(-j->err));
    /* only onto the state it was read for: nothing of its own in flight */
    if (j != NULL && c->open && c->sq != NULL && j->from == seq_count(c->sq) &&
        !seq_inflight(c->sq)) {
        for (size_t i = 0; i < j->npages; i++) {
            if (c->follow != NULL) /* its told subscribers are given them once */
                conv_follow_publish(c, j->pages[i]);
            adopt_page(c, j->pages[i]);
        }
    }
    answer_now(c);
}

void conv_refuse_refresh(conv *c, pl_outcome o, const char *why)
{
    conv_early *e = c->refresh;
    c->refresh = NULL;
    if (e != NULL)
        conv_early_end(c, e, o, why);
}
