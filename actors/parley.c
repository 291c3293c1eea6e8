/*
 * parley.c - the public API (parley.h): the instance, conversations,
 * appends and controls, reads.
 *
 * An instance is the runtime (W worker loops for conversations and
 * actors, one more for subscription callbacks), the store and the
 * conversations service. A conversation handle is only its id: every call
 * finds the conversation's actor through the service (starting it if it
 * is not running), so a handle survives the conversation's restarts.
 * Requests are rt_calls to the conversation actor, answered with its
 * typed verdict; the blocking calls wait for that answer on a condition
 * variable, which is why they may not run on a parley thread.
 */
#include "actors/parley_impl.h"

#include "actors/conv_read.h"
#include "actors/event.h"
#include "runtime/json.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

_Static_assert((int)PL_EINVAL == (int)RT_EINVAL && (int)PL_ENOMEM == (int)RT_ENOMEM &&
                   (int)PL_ECLOSED == (int)RT_ECLOSED && (int)PL_EFULL == (int)RT_EFULL &&
                   (int)PL_ETIMEDOUT == (int)RT_ETIMEDOUT && (int)PL_ENOREPLY == (int)RT_ENOREPLY &&
                   (int)PL_EFAIL == (int)RT_EFAIL && (int)PL_EASSERT == (int)RT_EASSERT &&
                   (int)PL_ETHREAD == (int)RT_ETHREAD,
               "the public error codes are the runtime's");
_Static_assert(PL_IDLE == (int)CONV_IDLE && PL_STUCK == (int)CONV_STUCK &&
                   PL_DELETING == (int)CONV_DELETING,
               "the public statuses are the conversation's");
_Static_assert(PL_RUN == (int)CONV_RUN && PL_INTERRUPT == (int)CONV_INTERRUPT,
               "the public controls are the conversation's");

enum { READ_MAX = 1000 };

const char *pl_version(void)
{
    return PARLEY_VERSION;
}

const char *pl_strerror(int err)
{
    return rt_strerror(err);
}

const char *pl_status_name(pl_status s)
{
    return conv_status_name((conv_status)s);
}

/* --------------------------------------------------------- the instance --- */

int pl_open(const pl_options *o, pl_instance **out, char *err, size_t errlen)
{
    char scratch[256];
    if (err == NULL) {
        err = scratch;
        errlen = sizeof(scratch);
    }
    err[0] = '\0';
    if (out == NULL || (o != NULL && (o->workers < 0 || o->workers > 256))) {
        snprintf(err, errlen, "invalid options");
        return RT_EINVAL;
    }
    const char *data = o != NULL && o->data_dir != NULL ? o->data_dir : "parley-data";
    st_opts so = {.dir = o != NULL && o->store != NULL ? o->store : data};
    if (o != NULL && o->store != NULL) {
        so.workspaces = data;
        so.node = o->node_id;
        so.nats_creds = o->nats_creds;
        so.nats_tls_ca = o->nats_tls_ca;
        so.nats_tls_cert = o->nats_tls_cert;
        so.nats_tls_key = o->nats_tls_key;
        so.nats_shards = o->nats_shards;
    }
    if (o != NULL && o->durability != NULL &&
        st_parse_durability(o->durability, &so.durability, &so.interval_ms) != 0) {
        snprintf(err, errlen, "unknown durability '%s' (full, interval=DURATION or none)",
                 o->durability);
        return RT_EINVAL;
    }
    unsigned long long idle =
        o != NULL && o->idle_close_ms != 0 ? o->idle_close_ms : CONV_IDLE_CLOSE_MS;
    so.idle_ttl_ms = idle; /* a log nobody holds closes as soon as a conversation's would */
    pl_instance *p = calloc(1, sizeof(*p));
    if (p == NULL)
        return RT_ENOMEM;
    for (size_t i = 0; o != NULL && i < o->nagents; i++) {
        const pl_agent *a = &o->agents[i];
        acp_agent_spec spec = {.name = (char *)a->name,
                               .argv = (char **)a->argv,
                               .env = (char **)a->env,
                               .cwd = (char *)a->cwd};
        if (acp_registry_add(&p->agents, &spec, err, errlen) != 0) {
            acp_registry_clear(&p->agents);
            free(p);
            return RT_EINVAL;
        }
    }
    if (o != NULL && o->default_agent != NULL &&
        acp_registry_set_default(&p->agents, o->default_agent, err, errlen) != 0) {
        acp_registry_clear(&p->agents);
        free(p);
        return RT_EINVAL;
    }
    int workers = o != NULL && o->workers > 0 ? o->workers : (int)uv_available_parallelism();
    p->workers = workers;
    p->cb_loop = workers;
    pthread_mutex_init(&p->mu, NULL);
    int r = st_store_open(&so, &p->store, err, errlen);
    if (r == -EINVAL || r == -ENOTSUP) /* options this build or their values cannot serve */
        r = RT_EINVAL;
    rt_opts ro = {.loops = workers + 1};
    if (r == 0 && (r = rt_runtime_new(&ro, &p->rt)) < 0) {
        snprintf(err, errlen, "cannot start the runtime: %s", rt_strerror(r));
        st_store_close(p->store);
    }
    conv_opts co = {.idle_close_ms = idle,
                    .loops = workers,
                    .agents = &p->agents,
                    .agents_in_working_dir = o != NULL && o->agents_in_working_dir,
                    .viz_idle_ms = o != NULL ? o->viz_idle_ms : 0,
                    .viz_max_blocks = o != NULL ? o->viz_max_blocks : 0};
    if (o != NULL) {
        co.defer_timeout_ms = o->defer_timeout_ms;
        co.defer_max = o->defer_max;
        co.hold_timeout_ms = o->hold_timeout_ms;
        co.hold_max = o->hold_max;
        co.max_subscribers = o->max_subscribers;
        co.sup_intensity = o->sup_intensity;
        co.sup_period_ms = o->sup_period_ms;
    }
    if (r == 0 && (r = convs_new(p->rt, p->store, &co, &p->convs)) < 0) {
        snprintf(err, errlen, "cannot start the conversations: %s", rt_strerror(r));
        rt_runtime_wait(p->rt);
        st_store_close(p->store);
        rt_runtime_free(p->rt);
    }
    if (r < 0) {
        pthread_mutex_destroy(&p->mu);
        acp_registry_clear(&p->agents);
        free(p);
        return r;
    }
    *out = p;
    return 0;
}

int pl_workers(const pl_instance *p)
{
    return p != NULL ? p->workers : RT_EINVAL;
}

size_t pl_conversations(pl_instance *p)
{
    return p != NULL ? st_store_count(p->store) : 0;
}

const char *pl_store_kind(const pl_instance *p)
{
    return p != NULL ? st_store_kind(p->store) : "";
}

int pl__at_close(pl_instance *p, void (*fn)(void *ctx, bool stopped), void *ctx)
{
    pl_closer *c = malloc(sizeof(*c));
    if (c == NULL)
        return RT_ENOMEM;
    *c = (pl_closer){.fn = fn, .ctx = ctx};
    pthread_mutex_lock(&p->mu);
    c->next = p->closers;
    p->closers = c;
    pthread_mutex_unlock(&p->mu);
    return 0;
}

void pl_close(pl_instance *p)
{
    if (p == NULL)
        return;
    for (pl_closer *c = p->closers; c != NULL; c = c->next)
        c->fn(c->ctx, false);
    /* the store's committer may still answer actors: the runtime stays
     * (refusing those answers) until the store has closed */
    rt_runtime_wait(p->rt);
    for (pl_closer *c = p->closers, *next; c != NULL; c = next) {
        next = c->next;
        c->fn(c->ctx, true);
        free(c);
    }
    convs_save(p->convs); /* before the store closes: it is stored there */
    st_store_close(p->store);
    convs_free(p->convs);
    rt_runtime_free(p->rt);
    acp_registry_clear(&p->agents); /* after the runtime: its agents read it */
    pthread_mutex_destroy(&p->mu);
    free(p);
}

/* ------------------------------------------------------ waiting answers --- */

/* A blocking call's answer, filled on a loop thread. */
typedef struct waiter {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool done;
    int err;         /* the runtime's error, if the request was not answered */
    conv_reply info; /* the answer (its pointers dangle: copy what is needed) */
    char detail[256];
} waiter;

static void waiter_init(waiter *w)
{
    memset(w, 0, sizeof(*w));
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
}

static void on_answer(void *ctx, rt_msg *m)
{
    waiter *w = ctx;
    const conv_reply *cr = m->kind == CONV_RESULT ? conv_reply_of(m) : NULL;
    pthread_mutex_lock(&w->mu);
    if (cr != NULL) {
        w->info = *cr;
        snprintf(w->detail, sizeof(w->detail), "%s", cr->v.detail);
    } else {
        w->err = m->kind == RT_KIND_ERROR ? m->status : RT_EFAIL;
    }
    w->done = true;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

/* Ask the conversation (kind, arg, buf taken) and wait for its answer: 0
 * (w filled) or an error. */
static int ask_wait(pl_conv *c, uint32_t kind, uint64_t arg, rt_buf *buf, waiter *w)
{
    if (rt_current_loop() >= 0) {
        rt_buf_unref(buf);
        return RT_ETHREAD;
    }
    waiter_init(w);
    int r = convs_call(c->p->convs, &c->id, pl__loop(c->p), kind, arg, buf, 0, on_answer, w);
    if (r < 0) {
        rt_buf_unref(buf);
    } else {
        pthread_mutex_lock(&w->mu);
        while (!w->done)
            pthread_cond_wait(&w->cv, &w->mu);
        pthread_mutex_unlock(&w->mu);
        r = w->err;
    }
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
    return r;
}

/* An outcome other than DONE as an error code. */
static int outcome_err(pl_outcome o)
{
    switch (o) {
    case PL_DONE:
        return 0;
    case PL_NOT_FOUND:
        return -ENOENT;
    case PL_BUSY:
        return RT_EFULL;
    case PL_INVALID:
    case PL_CONFLICT:
        return RT_EINVAL;
    case PL_NO_SPACE:
        return -ENOSPC;
    case PL_TOO_LARGE:
        return -EMSGSIZE;
    default:
        return -EIO;
    }
}

/* ------------------------------------------------------- conversations --- */

int pl__loop(pl_instance *p)
{
    static _Atomic unsigned turn;
    int here = rt_current_loop();
    if (here >= 0 && here < p->workers)
        return here;
    return (int)(atomic_fetch_add(&turn, 1) % (unsigned)p->workers);
}

static pl_conv *handle(pl_instance *p, const rt_uuid *id)
{
    pl_conv *c = calloc(1, sizeof(*c));
    if (c != NULL) {
        c->p = p;
        c->id = *id;
        rt_uuid_dashed(id, c->dashed);
    }
    return c;
}

/* The stored info of a new conversation: meta_json, with its id, created_at
 * and the options that live in it; NULL and err set if meta_json is bad. */
static rt_buf *new_meta(pl_instance *p, const pl_conv_options *o, const rt_uuid *id, int *err)
{
    json_t *m = o != NULL && o->meta_json != NULL
                    ? rt_json_read(o->meta_json, strlen(o->meta_json), JSON_REJECT_DUPLICATES, NULL)
                    : json_object();
    if (!json_is_object(m)) {
        json_decref(m);
        *err = RT_EINVAL;
        return NULL;
    }
    char dashed[37], ts[32];
    rt_uuid_dashed(id, dashed);
    ev_now_timestamp(ts);
    json_object_set_new(m, "id", json_string(dashed));
    json_object_set_new(m, "created_at", json_string(ts));
    if (json_object_get(m, "tags") == NULL)
        json_object_set_new(m, "tags", json_object());
    if (acp_registry_meta(&p->agents, m, o != NULL ? o->agent : NULL, NULL, 0) != 0) {
        json_decref(m);
        *err = RT_EINVAL;
        return NULL;
    }
    conv_meta_redact(m);
    if (o != NULL && o->observe)
        json_object_set_new(m, CONV_META_POLICY, json_string("observe"));
    if (o != NULL && o->stuck_off)
        json_object_set_new(m, "stuck_detection", json_false());
    unsigned th[4] = {o != NULL ? o->stuck_action_observation : 0,
                      o != NULL ? o->stuck_action_error : 0, o != NULL ? o->stuck_monologue : 0,
                      o != NULL ? o->stuck_alternating : 0};
    static const char *const names[] = {"action_observation", "action_error", "monologue",
                                        "alternating_pattern"};
    json_t *t = json_object();
    for (int i = 0; i < 4; i++) {
        if (th[i] > 1000) {
            json_decref(t);
            json_decref(m);
            *err = RT_EINVAL;
            return NULL;
        }
        if (th[i] > 0)
            json_object_set_new(t, names[i], json_integer(th[i]));
    }
    if (json_object_size(t) > 0)
        json_object_set_new(m, "stuck_detection_thresholds", t);
    else
        json_decref(t);
    *err = RT_ENOMEM;
    return rt_json_buf(m);
}

int pl_conv_create(pl_instance *p, const pl_conv_options *o, pl_conv **out)
{
    if (p == NULL || out == NULL)
        return RT_EINVAL;
    if (rt_current_loop() >= 0)
        return RT_ETHREAD;
    rt_uuid id, parent;
    if (o != NULL && o->id != NULL) {
        if (!rt_uuid_parse(o->id, strlen(o->id), &id))
            return RT_EINVAL;
    } else if (rt_uuid_v4(&id) != 0) {
        return RT_EFAIL;
    }
    bool child = o != NULL && o->parent_id != NULL;
    if (child && !rt_uuid_parse(o->parent_id, strlen(o->parent_id), &parent))
        return RT_EINVAL;
    st_conv *sc;
    if (st_conv_get(p->store, &id, &sc) == 0) {
        st_conv_release(sc);
        return -EEXIST;
    }
    int err;
    json_t *secrets = NULL;
    if (o != NULL && o->secrets_json != NULL) {
        json_t *v =
            rt_json_read(o->secrets_json, strlen(o->secrets_json), JSON_REJECT_DUPLICATES, NULL);
        char why[200];
        secrets = v != NULL ? conv_secrets_parse(v, why, sizeof(why)) : NULL;
        json_decref(v);
        if (secrets == NULL)
            return RT_EINVAL;
    }
    rt_buf *meta = new_meta(p, o, &id, &err);
    if (meta == NULL) {
        json_decref(secrets);
        return err;
    }
    pl_conv *c = handle(p, &id);
    rt_actor *a = NULL;
    bool created = false;
    int r = c != NULL
                ? convs_create(p->convs, &id, child ? &parent : NULL, meta, secrets, &a, &created)
                : RT_ENOMEM;
    rt_buf_unref(meta);
    json_decref(secrets);
    rt_actor_unref(a);
    if (r == 0 && !created)
        r = -EEXIST; /* made by someone else meanwhile */
    else if (r == -ELOOP || r == -EXDEV)
        r = RT_EINVAL;
    if (r < 0) {
        free(c);
        return r;
    }
    *out = c;
    return 0;
}

int pl_conv_open(pl_instance *p, const char *id, pl_conv **out)
{
    rt_uuid u;
    if (p == NULL || id == NULL || out == NULL || !rt_uuid_parse(id, strlen(id), &u))
        return RT_EINVAL;
    st_conv *sc;
    int r = st_conv_get(p->store, &u, &sc);
    if (r < 0)
        return r;
    st_conv_release(sc);
    pl_conv *c = handle(p, &u);
    if (c == NULL)
        return RT_ENOMEM;
    *out = c;
    return 0;
}

void pl_conv_release(pl_conv *c)
{
    free(c);
}

const char *pl_conv_id(const pl_conv *c)
{
    return c != NULL ? c->dashed : NULL;
}

/* ids (taken) as pl_ids */
static int dashed_ids(rt_uuid *all, size_t k, pl_id **ids, size_t *n)
{
    pl_id *out = calloc(k ? k : 1, sizeof(*out));
    if (out == NULL) {
        free(all);
        return RT_ENOMEM;
    }
    for (size_t i = 0; i < k; i++)
        rt_uuid_dashed(&all[i], out[i].s);
    free(all);
    *ids = out;
    *n = k;
    return 0;
}

int pl_conv_list(pl_instance *p, pl_id **ids, size_t *n)
{
    if (p == NULL || ids == NULL || n == NULL)
        return RT_EINVAL;
    rt_uuid *all;
    size_t k;
    if (st_store_list(p->store, &all, &k) != 0)
        return RT_ENOMEM;
    return dashed_ids(all, k, ids, n);
}

int pl_conv_children(pl_conv *c, pl_id **ids, size_t *n)
{
    if (c == NULL || ids == NULL || n == NULL)
        return RT_EINVAL;
    rt_uuid *all;
    size_t k;
    if (st_store_children(c->p->store, &c->id, &all, &k) != 0)
        return RT_ENOMEM;
    return dashed_ids(all, k, ids, n);
}

int pl_conv_info(pl_conv *c, pl_info *out)
{
    if (c == NULL || out == NULL)
        return RT_EINVAL;
    memset(out, 0, sizeof(*out));
    waiter w;
    int r = ask_wait(c, CONV_STATUS, 0, NULL, &w);
    if (r == 0)
        r = outcome_err(w.info.v.outcome);
    st_conv *sc;
    if (r == 0 && (r = st_conv_get(c->p->store, &c->id, &sc)) == 0) {
        rt_buf *m = st_conv_meta(sc);
        rt_uuid parent;
        if (st_conv_parent(sc, &parent))
            rt_uuid_dashed(&parent, out->parent_id);
        st_conv_release(sc);
        out->meta_json = m != NULL ? strndup((const char *)rt_buf_data(m), rt_buf_len(m)) : NULL;
        rt_buf_unref(m);
        if (out->meta_json == NULL)
            r = RT_ENOMEM;
    }
    if (r < 0)
        return r;
    memcpy(out->id, c->dashed, sizeof(out->id));
    out->status = (pl_status)w.info.status;
    out->events = w.info.count;
    out->pending_tool_calls = w.info.pending;
    memcpy(out->updated_at, w.info.updated, sizeof(out->updated_at));
    return 0;
}

void pl_info_clear(pl_info *i)
{
    if (i != NULL) {
        free(i->meta_json);
        i->meta_json = NULL;
    }
}

int pl_conv_delete(pl_conv *c)
{
    if (c == NULL)
        return RT_EINVAL;
    waiter w;
    int r = ask_wait(c, CONV_DELETE, 0, NULL, &w);
    return r < 0 ? r : outcome_err(w.info.v.outcome);
}

int pl_conv_set_secrets(pl_conv *c, const char *secrets_json)
{
    if (c == NULL || secrets_json == NULL)
        return RT_EINVAL;
    json_t *v = rt_json_read(secrets_json, strlen(secrets_json), JSON_REJECT_DUPLICATES, NULL);
    char why[200];
    json_t *secrets = v != NULL ? conv_secrets_parse(v, why, sizeof(why)) : NULL;
    json_decref(v);
    if (secrets == NULL)
        return RT_EINVAL;
    int r = convs_set_secrets(c->p->convs, &c->id, secrets);
    json_decref(secrets);
    return r;
}

/* ------------------------------------------------------------- appends --- */

typedef struct asking {
    pl_verdict_fn cb;
    void *ctx;
} asking;

void pl__error_verdict(const rt_msg *m, pl_verdict *v, char *detail, size_t cap)
{
    int st = m->kind == RT_KIND_ERROR ? m->status : RT_EFAIL;
    if (st == RT_EFULL)
        snprintf(detail, cap, "the conversation is busy; retry");
    else
        snprintf(detail, cap, "the conversation did not answer: %s", rt_strerror(st));
    *v = (pl_verdict){.outcome = PL_BUSY, .detail = detail, .retry_after = 1};
}

static void on_verdict(void *ctx, rt_msg *m)
{
    asking *a = ctx;
    const conv_reply *cr = m->kind == CONV_RESULT ? conv_reply_of(m) : NULL;
    if (cr != NULL) {
        a->cb(a->ctx, &cr->v);
    } else {
        pl_verdict v;
        char detail[160];
        pl__error_verdict(m, &v, detail, sizeof(detail));
        a->cb(a->ctx, &v);
    }
    free(a);
}

/* Ask the conversation; cb gets the verdict. */
static int ask_verdict(pl_conv *c, uint32_t kind, uint64_t arg, rt_buf *buf, pl_verdict_fn cb,
                       void *ctx)
{
    asking *k = malloc(sizeof(*k));
    int r = RT_ENOMEM;
    if (k != NULL) {
        *k = (asking){cb, ctx};
        r = convs_call(c->p->convs, &c->id, pl__loop(c->p), kind, arg, buf, 0, on_verdict, k);
    }
    if (r < 0) {
        free(k);
        rt_buf_unref(buf);
    }
    return r;
}

int pl_append(pl_conv *c, const char *json, size_t len, pl_verdict_fn cb, void *ctx)
{
    if (c == NULL || json == NULL || len == 0 || cb == NULL)
        return RT_EINVAL;
    rt_buf *b = rt_buf_copy(json, len);
    return b != NULL ? ask_verdict(c, CONV_APPEND, 0, b, cb, ctx) : RT_ENOMEM;
}

int pl_control(pl_conv *c, pl_control_op what, pl_verdict_fn cb, void *ctx)
{
    if (c == NULL || cb == NULL || (what != PL_RUN && what != PL_PAUSE && what != PL_INTERRUPT))
        return RT_EINVAL;
    return ask_verdict(c, CONV_CONTROL, (uint64_t)what, NULL, cb, ctx);
}

int pl_reject(pl_conv *c, const char *reason, pl_verdict_fn cb, void *ctx)
{
    if (c == NULL || cb == NULL)
        return RT_EINVAL;
    rt_buf *b = NULL;
    if (reason != NULL && reason[0] != '\0' && (b = rt_buf_copy(reason, strlen(reason))) == NULL)
        return RT_ENOMEM;
    return ask_verdict(c, CONV_CONTROL, CONV_REFUSE_CALLS, b, cb, ctx);
}

/* --------------------------------------------------------------- reads --- */

struct pl_page {
    st_page *pg;
};

/* Open the conversation's log for a read: 0, or an error. */
static int reader(pl_conv *c, conv_reader *rd)
{
    pl_outcome why;
    char detail[256];
    if (c == NULL)
        return RT_EINVAL;
    if (conv_read_open(c->p->store, &c->id, rd, NULL, &why, detail, sizeof(detail)) == 0)
        return 0;
    return why == PL_NOT_FOUND ? -ENOENT : why == PL_BUSY ? -EMFILE : -EIO;
}

int pl_count(pl_conv *c, uint64_t *n)
{
    conv_reader rd;
    int r = n != NULL ? reader(c, &rd) : RT_EINVAL;
    if (r == 0) {
        *n = conv_read_count(&rd);
        conv_read_close(&rd);
    }
    return r;
}

int pl_read(pl_conv *c, uint64_t first, unsigned max, pl_page **out)
{
    if (out == NULL || max == 0 || max > READ_MAX)
        return RT_EINVAL;
    conv_reader rd;
    int r = reader(c, &rd);
    if (r < 0)
        return r;
    pl_page *p = malloc(sizeof(*p));
    pl_outcome why;
    char detail[256];
    if (p == NULL)
        r = RT_ENOMEM;
    else if (conv_read_page(&rd, first, max, &p->pg, &why, detail, sizeof(detail)) < 0)
        r = why == PL_BUSY ? -EMFILE : -EIO;
    conv_read_close(&rd); /* the page holds its own bytes */
    if (r < 0) {
        free(p);
        return r;
    }
    *out = p;
    return 0;
}

size_t pl_page_len(const pl_page *p)
{
    return p != NULL ? p->pg->n : 0;
}

pl_event pl_page_event(const pl_page *p, size_t i)
{
    if (p == NULL || i >= p->pg->n)
        return (pl_event){0};
    const st_event_ref *e = &p->pg->ev[i];
    return (pl_event){e->index, (const char *)rt_buf_data(p->pg->bytes) + e->off, e->len};
}

void pl_page_free(pl_page *p)
{
    if (p != NULL)
        st_page_free(p->pg);
    free(p);
}

int pl_find(pl_conv *c, const char *event_id, uint64_t *index)
{
    if (event_id == NULL || index == NULL || event_id[0] == '\0')
        return RT_EINVAL;
    conv_reader rd;
    int r = reader(c, &rd);
    if (r == 0) {
        r = conv_read_find(&rd, event_id, strlen(event_id), index) == 0 ? 0 : -ENOENT;
        conv_read_close(&rd);
    }
    return r;
}
