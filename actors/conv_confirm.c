/*
 * conv_confirm.c - an append whose checks the store cannot answer from
 * memory (issue 22). The sequencer asks about the durable log in the
 * middle of a verdict (is this id there, is this parent, was this tool
 * call's key written?), and expects the answer at once, as the local
 * store gives it. A cluster node answers from memory too, except for an
 * id or key whose hash matches an event older than the tail it keeps (a
 * retry of an old event, a parent far back, or a collision): confirming
 * that takes a read of the cluster, which must not be made on a loop.
 *
 * So before the sequencer sees an append, every question its verdict may
 * ask is put to the store as conv_commit.c asks it (st_log_check, without
 * a wait, of the events the sequencer knows); if one would wait, the append
 * is set aside and the questions are asked in the thread pool, where the
 * store reads those events and keeps them (store/nats_tail.c). The answer
 * comes back as CONV_CONFIRMED, and the append is handled then, its
 * checks answered from memory. Until it is, every later request of the
 * conversation waits in the early queue, in order (conv_idle.c), so
 * verdicts and their order are those the local store gives. If the
 * cluster cannot be read, the append is refused with 503 and the reason;
 * nothing of it was decided.
 */
#include "conv_impl.h"

#include "actors/conv_read.h"
#include "runtime/runtime.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A question: 'i' an id, 'k' a key; then its bytes. */
typedef struct question {
    char tag;
    uint8_t len;
    char v[256];
} question;

typedef struct confirm_job {
    uv_work_t req;
    rt_actor *self; /* held until the answer is posted */
    st_store *store;
    rt_uuid id;
    size_t n;
    question *q;
    int err; /* 0, or the store's error (detail says it) */
    char detail[300];
} confirm_job;

/* The key gate_check asks about: tag, ':', the call id. */
static bool key_of(char tag, const char *call, question *q)
{
    size_t n = strlen(call);
    if (n + 2 > 255)
        return false;
    q->tag = 'k';
    q->len = (uint8_t)(n + 2);
    q->v[0] = tag;
    q->v[1] = ':';
    memcpy(q->v + 2, call, n);
    return true;
}

static bool id_of(const char *id, question *q)
{
    size_t n = id != NULL ? strlen(id) : 0;
    if (n == 0 || n > 255)
        return false;
    q->tag = 'i';
    q->len = (uint8_t)n;
    memcpy(q->v, id, n);
    return true;
}

/* The questions the verdicts of evs may ask (gate_check, sequencer.c). */
static size_t questions(const ev *evs, size_t n, question *q)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        const ev *e = &evs[i];
        k += id_of(e->id, &q[k]);
        if (e->parent_id != NULL && strcmp(e->parent_id, "__root__") != 0)
            k += id_of(e->parent_id, &q[k]);
        if (e->tool_call_id != NULL) {
            k += key_of('a', e->tool_call_id, &q[k]);
            k += key_of('o', e->tool_call_id, &q[k]);
        }
    }
    return k;
}

/* Would asking q wait for another machine (conv_commit.c asks it so)? */
static bool waits(st_log *log, uint64_t upto, const question *q)
{
    uint64_t at;
    int r = q->tag == 'i' ? st_log_check(log, q->v, q->len, upto, &at)
                          : st_log_check_key(log, q->v, q->len, upto, &at);
    if (r == 0 && q->tag == 'i') { /* its print is read too (conv_commit.c) */
        st_page *p = NULL;
        r = st_log_read_now(log, at, 1, &p);
        st_page_free(p);
    }
    return r == -EWOULDBLOCK;
}

static void confirm_work(uv_work_t *req)
{
    confirm_job *j = req->data;
    conv_reader rd; /* a reference of its own: the actor may stop meanwhile */
    pl_outcome why;
    if (conv_read_open(j->store, &j->id, &rd, NULL, &why, j->detail, sizeof(j->detail)) < 0) {
        j->err = -EIO; /* detail says why */
        return;
    }
    st_log_count(rd.log); /* memory up to the log, for the checks (log.h) */
    for (size_t i = 0; i < j->n && j->err == 0; i++) {
        const question *q = &j->q[i];
        uint64_t at;
        int r = q->tag == 'i' ? st_log_find(rd.log, q->v, q->len, &at)
                              : st_log_find_key(rd.log, q->v, q->len, &at);
        if (r == 0 && q->tag == 'i') {
            st_page *p = NULL;
            r = st_log_read(rd.log, at, 1, &p);
            st_page_free(p);
        }
        if (r < 0 && r != -ENOENT) {
            j->err = r;
            char hex[37];
            rt_uuid_dashed(&j->id, hex);
            char what[200];
            snprintf(j->detail, sizeof(j->detail),
                     "cannot check the events against the log of conversation %s: %s", hex,
                     st_store_strerror(j->store, r, what, sizeof(what)));
        }
    }
    conv_read_close(&rd);
}

static void confirm_done(uv_work_t *req, int status)
{
    confirm_job *j = req->data;
    if (status < 0 && j->err == 0) { /* cancelled: the loop is closing */
        j->err = -ESHUTDOWN;
        snprintf(j->detail, sizeof(j->detail), "the server is stopping");
    }
    rt_buf *b = j->err != 0 ? rt_buf_copy(j->detail, strlen(j->detail)) : NULL;
    /* owed: the actor waits for it (a NULL buf with a non-zero arg: out of memory) */
    if (rt_notify(j->self, CONV_CONFIRMED, j->err != 0, b) != 0)
        rt_buf_unref(b);
    rt_actor_unref(j->self);
    free(j->q);
    free(j);
}

int conv_confirm(conv *c, const ev *evs, size_t n, const rt_buf *body, rt_promise *reply)
{
    if (!st_log_may_wait(c->log))
        return 0; /* the local store's answer at once: nothing to ask first */
    question *q = malloc(n * 4 * sizeof(*q));
    if (q == NULL)
        return -ENOMEM;
    size_t k = questions(evs, n, q), w = 0;
    for (size_t i = 0; i < k; i++)
        if (waits(c->log, seq_count(c->sq), &q[i]))
            q[w++] = q[i];
    confirm_job *j = w > 0 ? calloc(1, sizeof(*j)) : NULL;
    if (j == NULL) {
        free(q);
        return w > 0 ? -ENOMEM : 0;
    }
    j->req.data = j;
    j->self = rt_actor_ref(c->self);
    j->store = c->ctx->svc->store;
    j->id = c->ctx->id;
    j->q = q;
    j->n = w;
    rt_runtime *rt = rt_actor_runtime(c->self);
    if (uv_queue_work(rt_runtime_uv(rt, rt_actor_loop(c->self)), &j->req, confirm_work,
                      confirm_done) != 0) {
        rt_actor_unref(c->self);
        free(q);
        free(j);
        return -ESHUTDOWN;
    }
    /* the job is queued: its answer is owed, so the append waits for it */
    c->confirm = conv_early_new(CONV_APPEND, 0, body, reply);
    return c->confirm != NULL ? 1 : -ENOMEM;
}

void conv_confirmed(conv *c, const rt_msg *m)
{
    conv_early *e = c->confirm;
    c->confirm = NULL;
    if (e == NULL)
        return;
    if (m->arg != 0) {
        const char *why = m->buf != NULL ? (const char *)rt_buf_data(m->buf) : "out of memory";
        int len = m->buf != NULL ? (int)rt_buf_len(m->buf) : (int)strlen(why);
        char line[400];
        snprintf(line, sizeof(line), "%.*s", len, why);
        conv_answer(&e->reply, conv_reply_detail(PL_BUSY, 1, "%s", line));
        conv_early_end(c, e, PL_BUSY, line); /* answered already: only freed */
    } else {
        c->confirmed = true; /* its checks are answered from memory now */
        conv_early_end(c, e, PL_DONE, NULL);
        c->confirmed = false;
    }
    conv_run_early(c, PL_DONE, NULL); /* what came meanwhile, in order */
}

void conv_refuse_confirm(conv *c, pl_outcome o, const char *why)
{
    conv_early *e = c->confirm;
    c->confirm = NULL;
    if (e != NULL)
        conv_early_end(c, e, o, why);
}
