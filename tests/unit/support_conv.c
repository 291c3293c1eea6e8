/* support_conv.c - see support_conv.h. */
#include "support_conv.h"

#include "support_store.h"

#include <stdlib.h>
#include <string.h>

static pthread_mutex_t slot_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t slot_cv = PTHREAD_COND_INITIALIZER;

void tc_start(tc_env *e, const char *dir, const conv_opts *o, st_durability d)
{
    if (dir != NULL) {
        free(e->dir);
        e->dir = strdup(dir);
    } else if (e->dir == NULL) {
        e->dir = tst_mkdtemp();
    }
    e->durability = d;
    if (o != NULL)
        e->o = *o;
    st_opts so = {.dir = e->dir, .durability = d};
    char err[512];
    ck_assert_msg(st_store_open(&so, &e->store, err, sizeof(err)) == 0, "store: %s", err);
    rt_opts ro = {.loops = 2};
    ck_assert_int_eq(rt_runtime_new(&ro, &e->rt), 0);
    ck_assert_int_eq(convs_new(e->rt, e->store, &e->o, &e->svc), 0);
    static const char hex[] = "5ca1ab1e0000400080000000000000aa";
    if (!rt_uuid_parse(hex, 32, &e->id))
        ck_abort();
    const char *m = e->meta != NULL ? e->meta : "{}";
    rt_buf *meta = rt_buf_copy(m, strlen(m));
    bool created;
    ck_assert_int_eq(convs_create(e->svc, &e->id, meta, &e->conv, &created), 0);
    rt_buf_unref(meta);
}

void tc_stop(tc_env *e)
{
    rt_actor_unref(e->conv);
    e->conv = NULL;
    /* the order a server closes in: loops stopped, then the store (whose
     * late answers the stopped runtime refuses), then the rest */
    rt_runtime_wait(e->rt);
    st_store_close(e->store);
    convs_free(e->svc);
    rt_runtime_free(e->rt);
    e->rt = NULL;
    e->svc = NULL;
    e->store = NULL;
}

void tc_restart(tc_env *e)
{
    tc_stop(e);
    tc_start(e, NULL, NULL, e->durability);
}

void tc_finish(tc_env *e)
{
    tc_stop(e);
    tst_rmdir(e->dir);
    free(e->dir);
    e->dir = NULL;
}

static void on_reply(void *ctx, rt_msg *m)
{
    tc_slot *s = ctx;
    pthread_mutex_lock(&slot_mu);
    if (m->kind == RT_KIND_ERROR) {
        s->code = m->status;
    } else {
        s->code = (int)m->arg;
        if (m->buf != NULL)
            s->body = strndup((const char *)rt_buf_data(m->buf), rt_buf_len(m->buf));
    }
    s->done = true;
    pthread_cond_broadcast(&slot_cv);
    pthread_mutex_unlock(&slot_mu);
}

tc_slot *tc_request(tc_env *e, uint32_t kind, uint64_t arg, const char *body)
{
    tc_slot *s = calloc(1, sizeof(*s));
    rt_buf *b = body != NULL ? rt_buf_copy(body, strlen(body)) : NULL;
    int r = rt_call(e->rt, 0, e->conv, kind, arg, b, 0, on_reply, s);
    ck_assert_int_eq(r, 0);
    return s;
}

bool tc_wait(tc_slot *s)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += TS_DEADLINE_MS / 1000;
    pthread_mutex_lock(&slot_mu);
    int r = 0;
    while (!s->done && r == 0)
        r = pthread_cond_timedwait(&slot_cv, &slot_mu, &ts);
    bool done = s->done;
    pthread_mutex_unlock(&slot_mu);
    return done;
}

void tc_slot_free(tc_slot *s)
{
    if (s != NULL)
        free(s->body);
    free(s);
}

int tc_call(tc_env *e, uint32_t kind, uint64_t arg, const char *body, char **out)
{
    tc_slot *s = tc_request(e, kind, arg, body);
    ck_assert_msg(tc_wait(s), "no answer to a request of kind %u", kind);
    int code = s->code;
    if (out != NULL) {
        *out = s->body;
        s->body = NULL;
    }
    tc_slot_free(s);
    return code;
}

json_t *tc_log(tc_env *e)
{
    st_conv *sc;
    st_log *l;
    ck_assert_int_eq(st_conv_get(e->store, &e->id, &sc), 0);
    ck_assert_int_eq(st_conv_log(sc, &l, NULL), 0);
    json_t *all = json_array();
    uint64_t n = st_log_count(l);
    for (uint64_t at = 0; at < n; at += 100) {
        st_page *p;
        ck_assert_int_eq(st_log_read(l, at, 100, &p), 0);
        for (uint32_t i = 0; i < p->n; i++)
            json_array_append_new(all,
                                  json_loadb((const char *)rt_buf_data(p->bytes) + p->ev[i].off,
                                             p->ev[i].len, 0, NULL));
        st_page_free(p);
    }
    st_conv_release(sc);
    return all;
}
