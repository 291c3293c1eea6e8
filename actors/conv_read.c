/* conv_read.c - reading a conversation's log (conv_read.h). */
#include "actors/conv_read.h"
#include "actors/conv_reply.h"

#include "runtime/runtime.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

/* A store error as an outcome and a line. */
static void fail(st_store *s, int err, const rt_uuid *id, const char *what, const char *more,
                 pl_outcome *why, char *detail, size_t cap)
{
    char hex[37], says[200];
    rt_uuid_dashed(id, hex);
    if (conv_store_unavailable(err)) { /* a cluster that does not answer: retry */
        *why = PL_BUSY;
        snprintf(detail, cap, "cannot %s conversation %s: %s", what, hex,
                 st_store_strerror(s, err, says, sizeof(says)));
    } else if (err == -ENOENT) {
        *why = PL_NOT_FOUND;
        snprintf(detail, cap, "Conversation not found: %s", hex);
    } else if (err == -EMFILE || err == -ENFILE || err == -ENOMEM) {
        *why = PL_BUSY;
        snprintf(detail, cap, "cannot %s conversation %s: %s", what, hex, strerror(-err));
    } else if ((*why = conv_store_outcome(err)) == PL_NO_SPACE) {
        snprintf(detail, cap, "the disk is full: cannot %s conversation %s (%s)", what, hex,
                 strerror(-err));
    } else {
        snprintf(detail, cap, "cannot %s conversation %s: %s", what, hex,
                 more != NULL && more[0] != '\0' ? more : strerror(-err));
    }
}

int conv_read_open(st_store *s, const rt_uuid *id, conv_reader *out, st_open_report *rep,
                   pl_outcome *why, char *detail, size_t cap)
{
    st_open_report local;
    st_open_report *rp = rep != NULL ? rep : &local;
    memset(rp, 0, sizeof(*rp));
    *out = (conv_reader){.store = s};
    int r = st_conv_get(s, id, &out->sc);
    if (r == 0 && (r = st_conv_log(out->sc, &out->log, rp)) < 0) {
        st_conv_release(out->sc);
        out->sc = NULL;
    }
    if (r == 0)
        return 0;
    fail(s, r, id, "open", rp->detail, why, detail, cap);
    return -1;
}

int conv_read_open_now(st_store *s, const rt_uuid *id, conv_reader *out, pl_outcome *why,
                       char *detail, size_t cap)
{
    *out = (conv_reader){.store = s};
    int r = st_conv_get(s, id, &out->sc);
    if (r == 0 && (r = st_conv_log_now(out->sc, &out->log)) < 0) {
        st_conv_release(out->sc);
        out->sc = NULL;
    }
    if (r == 0)
        return 0;
    if (r == -EWOULDBLOCK)
        return 1;
    fail(s, r, id, "open", NULL, why, detail, cap);
    return -1;
}

void conv_read_close(conv_reader *r)
{
    st_conv_release(r->sc);
    *r = (conv_reader){0};
}

uint64_t conv_read_count(const conv_reader *r)
{
    return st_log_count(r->log);
}

int conv_read_page(const conv_reader *r, uint64_t first, uint32_t max, st_page **out,
                   pl_outcome *why, char *detail, size_t cap)
{
    int e = st_log_read(r->log, first, max, out);
    if (e == 0)
        return 0;
    fail(r->store, e, st_conv_id(r->sc), "read",
         e == -EBADMSG ? "a record fails its checksum" : NULL, why, detail, cap);
    return -1;
}

int conv_read_find(const conv_reader *r, const char *id, size_t len, uint64_t *index)
{
    return st_log_find(r->log, id, len, index);
}

/* ---- from a loop ----------------------------------------------------------- */

typedef struct later {
    uv_work_t req;
    rt_actor *self; /* held until the answer is posted */
    uint32_t kind;
    st_store *store;
    rt_uuid id;
    bool find;
    uint64_t first; /* a page */
    uint32_t max;
    char *key; /* a find's id */
    size_t len;
    conv_read_answer a;
} later;

static void answer_free(void *data, void *ctx)
{
    (void)ctx;
    conv_read_answer *a = data;
    if (a->page != NULL)
        st_page_free(a->page);
    free(a);
}

static void later_work(uv_work_t *req)
{
    later *j = req->data;
    conv_reader rd; /* a reference of its own: the asker may let go meanwhile */
    if (conv_read_open(j->store, &j->id, &rd, NULL, &j->a.why, j->a.detail, sizeof(j->a.detail)) <
        0) {
        j->a.err = j->find && j->a.why == PL_NOT_FOUND ? -ENOENT : -1;
        return;
    }
    int r;
    if (j->find) {
        r = conv_read_find(&rd, j->key, j->len, &j->a.index);
        j->a.err = r == 0 || r == -ENOENT ? r : -1;
        if (j->a.err < 0 && r != -ENOENT)
            fail(j->store, r, &j->id, "read", NULL, &j->a.why, j->a.detail, sizeof(j->a.detail));
    } else
        j->a.err = conv_read_page(&rd, j->first, j->max, &j->a.page, &j->a.why, j->a.detail,
                                  sizeof(j->a.detail));
    conv_read_close(&rd);
}

static void later_done(uv_work_t *req, int status)
{
    later *j = req->data;
    conv_read_answer *a = malloc(sizeof(*a));
    rt_buf *b = NULL;
    if (a != NULL) {
        *a = j->a;
        if (status < 0 && a->page == NULL) { /* cancelled: the loop is closing */
            a->err = -1;
            a->why = PL_BUSY;
            snprintf(a->detail, sizeof(a->detail), "the server is stopping");
        }
        b = rt_buf_wrap(a, sizeof(*a), answer_free, NULL);
        if (b == NULL)
            answer_free(a, NULL);
    } else if (j->a.page != NULL) {
        st_page_free(j->a.page);
    }
    /* owed: the asker waits for it (a NULL buf says out of memory) */
    if (rt_notify(j->self, j->kind, 0, b) != 0)
        rt_buf_unref(b);
    rt_actor_unref(j->self);
    free(j->key);
    free(j);
}

static int queue(st_store *s, const rt_uuid *id, rt_actor *self, later *j)
{
    j->req.data = j;
    j->self = rt_actor_ref(self);
    j->store = s;
    j->id = *id;
    uv_loop_t *loop = rt_runtime_uv(rt_actor_runtime(self), rt_actor_loop(self));
    if (uv_queue_work(loop, &j->req, later_work, later_done) == 0)
        return 1;
    rt_actor_unref(self);
    return -ESHUTDOWN;
}

int conv_read_page_soon(const conv_reader *r, rt_actor *self, uint32_t kind, uint64_t first,
                        uint32_t max, st_page **out, pl_outcome *why, char *detail, size_t cap)
{
    int e = st_log_read_now(r->log, first, max, out);
    if (e == 0)
        return 0;
    later *j = e == -EWOULDBLOCK ? calloc(1, sizeof(*j)) : NULL;
    if (j != NULL) {
        j->kind = kind;
        j->first = first;
        j->max = max;
        if ((e = queue(r->store, st_conv_id(r->sc), self, j)) == 1)
            return 1;
        free(j);
    } else if (e == -EWOULDBLOCK) {
        e = -ENOMEM;
    }
    fail(r->store, e, st_conv_id(r->sc), "read",
         e == -EBADMSG ? "a record fails its checksum" : NULL, why, detail, cap);
    return -1;
}

int conv_read_find_soon(const conv_reader *r, rt_actor *self, uint32_t kind, const char *id,
                        size_t len, uint64_t *index)
{
    int e = st_log_find_now(r->log, id, len, index);
    if (e != -EWOULDBLOCK)
        return e == 0 ? 0 : -ENOENT;
    return conv_read_find_pool(r->store, st_conv_id(r->sc), self, kind, id, len);
}

int conv_read_find_pool(st_store *s, const rt_uuid *conv, rt_actor *self, uint32_t kind,
                        const char *id, size_t len)
{
    int e;
    later *j = calloc(1, sizeof(*j));
    e = -ENOMEM;
    if (j != NULL && (j->key = malloc(len > 0 ? len : 1)) != NULL) {
        memcpy(j->key, id, len);
        j->len = len;
        j->find = true;
        j->kind = kind;
        if ((e = queue(s, conv, self, j)) == 1)
            return 1;
    }
    if (j != NULL)
        free(j->key);
    free(j);
    return e;
}

const conv_read_answer *conv_read_answer_of(const rt_msg *m)
{
    return m->buf != NULL ? (const conv_read_answer *)rt_buf_data(m->buf) : NULL;
}
