/*
 * convs.c - the conversations service: from an id to the conversation's
 * actor, starting it on first use.
 *
 * A conversation runs as a small supervision tree on the loop its id
 * hashes to: a supervisor (rest_for_one, default intensity) with the
 * conversation actor, then its stuck detector. If the conversation actor
 * fails, both restart and rebuild from the log; if the supervisor gives up,
 * the tree is gone, and the next lookup starts a new one. Other
 * conversations never notice.
 */
#include "conv_impl.h"

#include "acp_host.h"
#include "viz.h"

#include "runtime/json.h"
#include "runtime/log.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static size_t bucket(const convs *s, const rt_uuid *id)
{
    /* a UUID's version and variant bits are fixed: mix them away */
    uint64_t a, b;
    memcpy(&a, id->b, sizeof(a));
    memcpy(&b, id->b + 8, sizeof(b));
    return (size_t)(((a ^ b) * 0x9E3779B97F4A7C15ull) >> 32) % s->nbuckets;
}

static int loop_of(const convs *s, const rt_uuid *id)
{
    uint64_t h;
    memcpy(&h, id->b, sizeof(h));
    h ^= h >> 31;
    int loops = s->o.loops > 0 ? s->o.loops : rt_runtime_loops(s->rt);
    return (int)(h % (uint64_t)loops);
}

int convs_home(const convs *c, const rt_uuid *id)
{
    return loop_of(c, id);
}

int convs_new(rt_runtime *rt, st_store *store, const conv_opts *o, convs **out)
{
    convs *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return -ENOMEM;
    s->rt = rt;
    s->store = store;
    if (o != NULL)
        s->o = *o;
    if (s->o.defer_timeout_ms == 0)
        s->o.defer_timeout_ms = 10 * 60 * 1000;
    if (s->o.defer_max == 0)
        s->o.defer_max = 64;
    if (s->o.hold_timeout_ms == 0)
        s->o.hold_timeout_ms = 5000;
    if (s->o.hold_max == 0)
        s->o.hold_max = 64;
    if (s->o.checkpoint_every == 0)
        s->o.checkpoint_every = 1024;
    if (s->o.mailbox_cap == 0)
        s->o.mailbox_cap = 4096;
    if (s->o.max_subscribers == 0)
        s->o.max_subscribers = 1000;
    if (s->o.idle_close_ms == 0)
        s->o.idle_close_ms = CONV_IDLE_CLOSE_MS;
    if (s->o.viz_idle_ms == 0)
        s->o.viz_idle_ms = 60 * 1000;
    if (s->o.viz_max_blocks == 0)
        s->o.viz_max_blocks = 500000;
    s->nbuckets = 1024;
    s->buckets = calloc(s->nbuckets, sizeof(*s->buckets));
    if (s->buckets == NULL) {
        free(s);
        return -ENOMEM;
    }
    pthread_mutex_init(&s->mu, NULL);
    convs_load(s);
    *out = s;
    return 0;
}

void convs_free(convs *s)
{
    if (s == NULL)
        return;
    for (size_t i = 0; i < s->nbuckets; i++) {
        for (conv_entry *e = s->buckets[i], *next; e != NULL; e = next) {
            next = e->next;
            rt_actor_unref(e->ctx.conv);
            rt_actor_unref(e->sup);
            rt_actor_unref(e->viz);
            json_decref(e->secrets);
            conv_opened_free(atomic_load(&e->ctx.fresh)); /* an actor that never started */
            free(e);
        }
    }
    free(s->buckets);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

const struct acp_registry *convs_agents(const convs *s)
{
    return s->o.agents;
}

/* Whether the conversation's agent is one the server hosts (an ACPAgent). */
static bool hosts_agent(convs *s, const rt_uuid *id)
{
    st_conv *sc;
    if (st_conv_get(s->store, id, &sc) != 0)
        return false;
    rt_buf *mb = st_conv_meta(sc);
    st_conv_release(sc);
    json_t *m = rt_json_read((const char *)rt_buf_data(mb), rt_buf_len(mb), 0, NULL);
    rt_buf_unref(mb);
    const char *kind = json_string_value(json_object_get(json_object_get(m, "agent"), "kind"));
    bool hosted = kind != NULL && strcmp(kind, "ACPAgent") == 0;
    json_decref(m);
    return hosted;
}

/* The adapter of a hosted agent in e's tree, if its info names one (lock
 * held): last, since it follows the conversation. */
static int spawn_host(convs *s, conv_entry *e)
{
    e->hosted = hosts_agent(s, &e->ctx.id);
    if (!e->hosted)
        return 0;
    rt_spawn_opts ho = {
        .beh = &acp_host_behaviour, .arg = &e->ctx, .parent = e->sup, .restart = RT_PERMANENT};
    rt_actor *host;
    int r = rt_spawn(s->rt, &ho, &host);
    if (r == 0)
        rt_actor_unref(host);
    else
        e->hosted = false;
    return r;
}

/* Start the tree of e's conversation (lock held). */
static int start(convs *s, conv_entry *e)
{
    rt_sup_opts so = {.strategy = RT_REST_FOR_ONE,
                      .intensity = s->o.sup_intensity,
                      .period_ms = s->o.sup_period_ms};
    rt_actor *sup, *actor, *det;
    int r = rt_sup_spawn(s->rt, &so, loop_of(s, &e->ctx.id), NULL, RT_TEMPORARY, &sup);
    if (r < 0)
        return r;
    rt_spawn_opts co = {.beh = &conv_behaviour,
                        .arg = &e->ctx,
                        .parent = sup,
                        .restart = RT_PERMANENT,
                        .mailbox_cap = s->o.mailbox_cap};
    r = rt_spawn(s->rt, &co, &actor);
    if (r < 0) {
        rt_actor_stop(sup);
        rt_actor_unref(sup);
        return r;
    }
    rt_actor_unref(e->ctx.conv);
    rt_actor_unref(e->sup);
    e->ctx.conv = actor;
    e->sup = sup;
    /* spawned after the conversation, on its loop: it starts after it, and
     * restarts with it (rest_for_one) */
    rt_spawn_opts do_ = {.beh = &conv_stuck_behaviour,
                         .arg = &e->ctx,
                         .parent = sup,
                         .restart = RT_PERMANENT,
                         .mailbox_cap = s->o.mailbox_cap};
    r = rt_spawn(s->rt, &do_, &det);
    if (r == 0)
        rt_actor_unref(det);
    if (r == 0)
        r = spawn_host(s, e);
    return r;
}

conv_entry *convs_find(convs *s, const rt_uuid *id)
{
    for (conv_entry *e = s->buckets[bucket(s, id)]; e != NULL; e = e->next)
        if (memcmp(e->ctx.id.b, id->b, sizeof(id->b)) == 0)
            return e;
    return NULL;
}

int convs_attach_host(convs *s, const rt_uuid *id)
{
    pthread_mutex_lock(&s->mu);
    conv_entry *e = convs_find(s, id);
    int r = e == NULL || e->sup == NULL ? -ENOENT : e->hosted ? 0 : spawn_host(s, e);
    pthread_mutex_unlock(&s->mu);
    return r;
}

/* Later names win (lock held). */
static int merge_secrets(conv_entry *e, json_t *secrets)
{
    if (secrets == NULL || json_object_size(secrets) == 0)
        return 0;
    if (e->secrets == NULL && (e->secrets = json_object()) == NULL)
        return -ENOMEM;
    return json_object_update(e->secrets, secrets) == 0 ? 0 : -ENOMEM;
}

/* The running actor of a conversation the store has (lock held), with
 * secrets (may be NULL) merged before its tree starts. */
/* Twice the buckets once there are twice as many entries: chains stay
 * short at 100,000 conversations (lock held; out of memory: as it was). */
static void grow(convs *s)
{
    size_t nb = s->nbuckets * 2;
    conv_entry **b = calloc(nb, sizeof(*b));
    if (b == NULL)
        return;
    conv_entry **old = s->buckets;
    size_t oldn = s->nbuckets;
    s->buckets = b;
    s->nbuckets = nb;
    for (size_t i = 0; i < oldn; i++)
        for (conv_entry *e = old[i], *next; e != NULL; e = next) {
            next = e->next;
            size_t k = bucket(s, &e->ctx.id);
            e->next = b[k];
            b[k] = e;
        }
    free(old);
}

conv_entry *convs_entry(convs *s, const rt_uuid *id)
{
    conv_entry *e = convs_find(s, id);
    if (e == NULL && s->count >= 2 * s->nbuckets)
        grow(s);
    if (e == NULL && (e = calloc(1, sizeof(*e))) != NULL) {
        e->ctx.svc = s;
        e->ctx.id = *id;
        size_t k = bucket(s, id);
        e->next = s->buckets[k];
        s->buckets[k] = e;
        s->count++;
    }
    return e;
}

/* fresh (or NULL): a new conversation's open, for its actor if this starts
 * it (else freed). */
static int get_locked(convs *s, const rt_uuid *id, rt_actor **out, json_t *secrets,
                      conv_opened *fresh)
{
    conv_entry *e = convs_entry(s, id);
    int r = e == NULL || merge_secrets(e, secrets) < 0 ? -ENOMEM : 0;
    if (r == 0 && (e->ctx.conv == NULL || rt_actor_closed(e->ctx.conv))) {
        conv_opened_free(atomic_exchange(&e->ctx.fresh, fresh)); /* one never taken */
        fresh = NULL;
        r = start(s, e);
        if (r < 0) /* unless its actor took it already */
            fresh = atomic_exchange(&e->ctx.fresh, NULL);
    }
    conv_opened_free(fresh);
    if (r < 0)
        return r;
    *out = rt_actor_ref(e->ctx.conv);
    return 0;
}

/* The running tree of a conversation the store has (secrets merged, if
 * not NULL): its actor, or (sup) its supervisor. */
static int find_running(convs *s, const rt_uuid *id, bool sup, json_t *secrets, rt_actor **out)
{
    st_conv *sc;
    int r = st_conv_get(s->store, id, &sc);
    if (r < 0)
        return r;
    st_conv_release(sc);
    pthread_mutex_lock(&s->mu);
    rt_actor *a;
    r = get_locked(s, id, &a, secrets, NULL);
    if (r == 0 && sup) {
        rt_actor_unref(a);
        conv_entry *e = convs_find(s, id);
        e->attached = true;
        a = rt_actor_ref(e->sup);
    }
    pthread_mutex_unlock(&s->mu);
    if (r == 0)
        *out = a;
    return r;
}

int convs_sup(convs *s, const rt_uuid *id, rt_actor **out)
{
    return find_running(s, id, true, NULL, out);
}

int convs_get(convs *s, const rt_uuid *id, rt_actor **out)
{
    return find_running(s, id, false, NULL, out);
}

int convs_viz(convs *s, const rt_uuid *id, rt_actor **out)
{
    rt_actor *actor = NULL;
    int r = find_running(s, id, false, NULL, &actor);
    if (r < 0)
        return r;
    rt_actor_unref(actor);
    pthread_mutex_lock(&s->mu);
    conv_entry *e = convs_find(s, id);
    if (e->viz == NULL || rt_actor_closed(e->viz)) {
        rt_actor_unref(e->viz);
        e->viz = NULL;
        /* temporary: one that stopped is started again on next use */
        rt_spawn_opts vo = {.beh = &viz_behaviour,
                            .arg = &e->ctx,
                            .parent = e->sup,
                            .restart = RT_TEMPORARY,
                            .mailbox_cap = s->o.mailbox_cap};
        r = rt_spawn(s->rt, &vo, &e->viz);
    }
    if (r == 0)
        *out = rt_actor_ref(e->viz);
    pthread_mutex_unlock(&s->mu);
    return r;
}

/* meta's workspace.working_dir (a new reference), or NULL if none. */
static json_t *working_dir(rt_buf *meta)
{
    json_t *m = meta != NULL
                    ? rt_json_read((const char *)rt_buf_data(meta), rt_buf_len(meta), 0, NULL)
                    : NULL;
    json_t *w = json_incref(json_object_get(json_object_get(m, "workspace"), "working_dir"));
    json_decref(m);
    return w;
}

/* As upstream: a child works in its parent's workspace. An unknown parent
 * passes here; the store refuses it. */
static bool same_workspace(convs *s, const rt_uuid *parent, rt_buf *meta)
{
    st_conv *pc;
    if (st_conv_get(s->store, parent, &pc) != 0)
        return true;
    rt_buf *pm = st_conv_meta(pc);
    st_conv_release(pc);
    json_t *a = working_dir(pm), *b = working_dir(meta);
    bool same = (a == NULL && b == NULL) || json_equal(a, b);
    json_decref(a);
    json_decref(b);
    rt_buf_unref(pm);
    return same;
}

int convs_create(convs *s, const rt_uuid *id, const rt_uuid *parent, rt_buf *meta, json_t *secrets,
                 rt_actor **out, bool *created)
{
    st_conv *sc;
    int r;
    if (parent != NULL && st_conv_get(s->store, id, &sc) == 0)
        r = -EEXIST; /* returned as is, nothing checked */
    else if (parent != NULL && !rt_uuid_eq(parent, id) && !same_workspace(s, parent, meta))
        return -EXDEV;
    else
        r = st_conv_create(s->store, id, parent, meta, &sc);
    if (r < 0 && r != -EEXIST)
        return r;
    if (created != NULL)
        *created = r == 0;
    bool made = r == 0;
    /* opened here, where blocking is fine: its actor starts without a trip
     * through the thread pool */
    conv_opened *fresh = made ? conv_open_fresh(sc) : NULL;
    if (fresh == NULL)
        st_conv_release(sc);
    pthread_mutex_lock(&s->mu);
    conv_entry *e = convs_find(s, id);
    if (made && e != NULL) { /* an id used before: nothing of the old one */
        json_decref(e->secrets);
        e->secrets = NULL;
        e->meta_known = e->known = false;
    }
    r = get_locked(s, id, out, made ? secrets : NULL, fresh);
    pthread_mutex_unlock(&s->mu);
    return r;
}

int convs_set_secrets(convs *s, const rt_uuid *id, json_t *secrets)
{
    rt_actor *a;
    int r = find_running(s, id, false, secrets, &a);
    if (r == 0)
        rt_actor_unref(a);
    return r;
}

json_t *convs_secrets(convs *s, const rt_uuid *id)
{
    pthread_mutex_lock(&s->mu);
    conv_entry *e = convs_find(s, id);
    json_t *copy = e != NULL && e->secrets != NULL ? json_deep_copy(e->secrets) : NULL;
    pthread_mutex_unlock(&s->mu);
    return copy;
}

void convs_stopping(convs *s)
{
    pthread_mutex_lock(&s->mu);
    for (size_t i = 0; i < s->nbuckets; i++)
        for (conv_entry *e = s->buckets[i]; e != NULL; e = e->next)
            if (e->ctx.conv != NULL)
                rt_send(e->ctx.conv, CONV_STOPPING, 0, NULL); /* a closed one: nothing held */
    pthread_mutex_unlock(&s->mu);
}

void convs_stop(convs *s, const rt_uuid *id)
{
    /* The entry stays: its context is the actors' argument until they are
     * gone, and a conversation created again with this id reuses it. */
    pthread_mutex_lock(&s->mu);
    conv_entry *e = convs_find(s, id);
    if (e != NULL && e->sup != NULL)
        rt_actor_stop(e->sup);
    if (e != NULL) { /* deleted: its secrets go with it */
        json_decref(e->secrets);
        e->secrets = NULL;
    }
    pthread_mutex_unlock(&s->mu);
}

bool convs_retire(conv_ctx *ctx, rt_actor *self)
{
    convs *s = ctx->svc;
    conv_entry *e = conv_entry_of(ctx);
    pthread_mutex_lock(&s->mu);
    bool viz = e->viz != NULL && !rt_actor_closed(e->viz);
    if (e->hosted || e->attached || viz || e->ctx.conv != self || e->sup == NULL) {
        pthread_mutex_unlock(&s->mu);
        return false;
    }
    /* from here on a lookup starts a new tree */
    rt_actor *sup = e->sup;
    rt_actor_unref(e->ctx.conv);
    rt_actor_unref(e->viz);
    e->ctx.conv = e->sup = e->viz = NULL;
    pthread_mutex_unlock(&s->mu);
    rt_actor_stop(sup);
    rt_actor_unref(sup);
    return true;
}

rt_actor *convs_running(conv_ctx *ctx)
{
    convs *s = ctx->svc;
    pthread_mutex_lock(&s->mu);
    rt_actor *a = ctx->conv != NULL ? rt_actor_ref(ctx->conv) : NULL;
    pthread_mutex_unlock(&s->mu);
    return a;
}
