/*
 * nats_owner.c - several nodes on one cluster (store.h, "several nodes"):
 * this node's lease, which node owns a conversation, and the requests that
 * nodes forward to a conversation's owner.
 *
 * Lease: the key <token> of bucket parley_nodes (its value: the node's
 * name), with the bucket's time to live STN_LEASE_MS, put again every
 * STN_BEAT_MS by a thread of its own and deleted at a clean close. The
 * token is random per process (nats_conn.c), so a node that restarts owns
 * nothing until it takes a log over again. Only liveness: the lease never
 * grants a write (kvStore_Update's compare-and-set is racy on 2.9.10);
 * the log's take-over records fence writers (nats_log.h).
 *
 * Owner: every record carries its node's token (Parley-Owner), so the
 * owner of a conversation is the token of its log's last record, read at
 * the stream leader. Forwarding: the owner listens on parley.fwd.<token>;
 * a request carries the conversation (Parley-Conv), the HTTP method and
 * target as the node received them (Parley-Method, Parley-Target) and the
 * raw body; the answer carries the owner's status (Parley-Status), its
 * Content-Type (Parley-Content-Type), each of its other header lines
 * (Parley-Header, one value a line) and its body. The store never looks
 * inside: what a request means is the API's (net/api_forward.c). A
 * request with Parley-Ping asks only whether the node still listens.
 */
#include "nats_store.h"

#include "runtime/log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define STN_NODES      "parley_nodes"
#define STN_LEASE_MS   6000
#define STN_BEAT_MS    1500
#define STN_FWD_PREFIX "parley.fwd."
#define STN_H_CONV     "Parley-Conv"
#define STN_H_METHOD   "Parley-Method"
#define STN_H_TARGET   "Parley-Target"
#define STN_H_STATUS   "Parley-Status"
#define STN_H_CTYPE    "Parley-Content-Type"
#define STN_H_HEADER   "Parley-Header"
#define STN_H_PING     "Parley-Ping"
/* Forwarded requests served here and not answered yet: past this, more
 * are answered 503 at once. */
#define STN_FWD_SERVING_MAX 1024
/* A forward waits for its answer this long at a time; between two waits
 * it asks whether the owner still listens (a ping, answered within
 * STN_PING_MS): an owner that died with the request is known within a
 * second or two, not at the end of the forward's whole wait. */
#define STN_FWD_SLICE_MS 1000
#define STN_PING_MS      1000

struct st_fwd {
    stn_store *s;
    char reply[128];
};

static stn_store *S(st_store *s)
{
    return (stn_store *)(void *)s;
}

/* Where an append goes, from what is known (pure): this node's token, the
 * token of the log's last record (NULL: no record, or one without), and
 * whether that node's lease is there. */
static bool forward_to(const char *mine, const char *owner, bool alive)
{
    return owner != NULL && strcmp(owner, mine) != 0 && alive;
}

static bool token_ok(const char *t)
{
    size_t n = 0;
    for (; t[n] != '\0'; n++)
        if (!((t[n] >= '0' && t[n] <= '9') || (t[n] >= 'a' && t[n] <= 'f')))
            return false;
    return n == 32;
}

/* ---- the lease ------------------------------------------------------------- */

static int put_lease(stn_store *s)
{
    return stn_kv_put(s->nodes, s->n->token, s->n->node, strlen(s->n->node), NULL);
}

/* Another node takes a conversation over only once its owner's lease is
 * gone from the bucket: STN_LEASE_MS at least after the put that last
 * renewed it began. Until then this node's writers are the only ones, and
 * their memory is the log; a beat before then it is no longer trusted (a
 * renewal may be stuck in the cluster), and a renewal that comes later
 * than that starts a new term: every writer taken over before it takes
 * the log over again (stn_tail_claim finds what others appended). */
#define STN_TRUST_MS (STN_LEASE_MS - STN_BEAT_MS)

bool stn_writes(stn_conv *c)
{
    stn_store *s = c->s;
    return atomic_load(&c->writing) && atomic_load(&c->term) == atomic_load(&s->lease_term) &&
           stn_now_ms() - atomic_load(&s->lease_ms) < STN_TRUST_MS;
}

bool stn_writer_stale(stn_conv *c)
{
    return c->writer != NULL && (!atomic_load(&c->writing) ||
                                 atomic_load(&c->term) != atomic_load(&c->s->lease_term));
}

/* A renewal that began at `began` succeeded: true if it starts a term. */
static bool renewed(stn_store *s, int64_t began)
{
    int64_t gap = stn_now_ms() - atomic_load(&s->lease_ms);
    bool late = gap >= STN_TRUST_MS;
    if (late) {
        atomic_fetch_add(&s->lease_term, 1); /* before lease_ms: no reader trusts it between */
        rt_log(RT_LOG_WARN, "store",
               "nats: node %s's lease was renewed %lld ms after the last renewal began: other "
               "nodes may have taken its conversations over; each is taken over again at its "
               "next write",
               s->n->node, (long long)gap);
    }
    atomic_store(&s->lease_ms, began);
    return late;
}

/* How many times the connection was made again (the lease's thread). */
static uint64_t reconnects(stn_store *s)
{
    natsStatistics *st = NULL;
    uint64_t in, inb, out, outb, n = 0;
    if (natsStatistics_Create(&st) == NATS_OK && natsConnection_GetStats(s->n->nc, st) == NATS_OK)
        natsStatistics_GetCounts(st, &in, &inb, &out, &outb, &n);
    natsStatistics_Destroy(st);
    return n;
}

static void *beat_main(void *arg)
{
    stn_store *s = arg;
    pthread_mutex_lock(&s->hmu);
    while (!s->hstop) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += STN_BEAT_MS / 1000;
        ts.tv_nsec += (long)(STN_BEAT_MS % 1000) * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&s->hcv, &s->hmu, &ts);
        if (s->hstop)
            break;
        pthread_mutex_unlock(&s->hmu);
        int64_t began = stn_now_ms();
        int r = put_lease(s);
        bool late = r == 0 && renewed(s, began);
        if (r < 0)
            rt_log(RT_LOG_WARN, "store", "nats: cannot renew node %s's lease: %s", s->n->node,
                   strerror(-r));
        /* records may have been stored that no notice told of: a new term
         * (they came while memory was trusted) or a connection made again
         * (they came while it was down) */
        uint64_t rc = reconnects(s);
        if (late || rc != s->reconnects)
            stn_follows_probe(s);
        s->reconnects = rc;
        pthread_mutex_lock(&s->hmu);
    }
    pthread_mutex_unlock(&s->hmu);
    return NULL;
}

/* The lease's first put, at open: a bucket just made may have no leader
 * yet (-EAGAIN), as for every other call of the open, tried again until
 * the connection's deadline. */
static int first_lease(stn_store *s)
{
    int64_t until = stn_now_ms() + s->n->deadline_ms;
    for (int attempt = 0;; attempt++) {
        atomic_store(&s->lease_ms, stn_now_ms());
        int r = put_lease(s);
        if (r == 0 || !stn_retryable(r) || stn_now_ms() >= until)
            return r;
        stn_backoff(attempt, until);
    }
}

/* ---- serving forwarded requests --------------------------------------------- */

static void reply_now(stn_store *s, const char *to, int status, const char *detail)
{
    natsMsg *m = NULL;
    char body[320], v[16];
    int n = snprintf(body, sizeof body, "{\"detail\":\"%s\"}", detail);
    snprintf(v, sizeof v, "%d", status);
    if (natsMsg_Create(&m, to, NULL, body, n) == NATS_OK &&
        natsMsgHeader_Set(m, STN_H_STATUS, v) == NATS_OK)
        natsConnection_PublishMsg(s->n->nc, m);
    natsMsg_Destroy(m);
}

static void on_forward(natsConnection *nc, natsSubscription *sub, natsMsg *m, void *closure)
{
    (void)nc;
    (void)sub;
    stn_store *s = closure;
    const char *to = natsMsg_GetReply(m);
    if (to == NULL || strlen(to) >= sizeof(((st_fwd *)0)->reply)) {
        natsMsg_Destroy(m);
        return;
    }
    const char *conv = NULL, *method = NULL, *target = NULL, *ping = NULL;
    if (natsMsgHeader_Get(m, STN_H_PING, &ping) == NATS_OK) {
        reply_now(s, to, 200, "listening");
        natsMsg_Destroy(m);
        return;
    }
    rt_uuid id;
    natsMsgHeader_Get(m, STN_H_CONV, &conv);
    natsMsgHeader_Get(m, STN_H_METHOD, &method);
    natsMsgHeader_Get(m, STN_H_TARGET, &target);
    int len = natsMsg_GetDataLength(m);
    pthread_mutex_lock(&s->fmu);
    st_fwd_fn fn = s->fwd_fn;
    void *ctx = s->fwd_ctx;
    if (fn != NULL)
        s->fwd_running++;
    pthread_mutex_unlock(&s->fmu);
    if (fn == NULL) {
        reply_now(s, to, 503, "the owner node is not serving: it is starting or stopping");
    } else if (conv == NULL || strlen(conv) != 32 || !rt_uuid_parse(conv, 32, &id) ||
               method == NULL || method[0] == '\0' || target == NULL || target[0] != '/') {
        reply_now(s, to, 400, "a forwarded request that this node does not understand");
    } else if (len < 0 || (size_t)len > ST_FWD_BODY_MAX) {
        reply_now(s, to, 413, "the forwarded body is too large");
    } else if (atomic_fetch_add(&s->fwd_in, 1) >= STN_FWD_SERVING_MAX) {
        atomic_fetch_sub(&s->fwd_in, 1);
        reply_now(s, to, 503, "the owner node has too many forwarded requests in flight; retry");
    } else {
        st_fwd *f = calloc(1, sizeof(*f));
        if (f == NULL) {
            atomic_fetch_sub(&s->fwd_in, 1);
            reply_now(s, to, 503, "the owner node is out of memory");
        } else {
            f->s = s;
            snprintf(f->reply, sizeof f->reply, "%s", to);
            st_fwd_req req = {.method = method,
                              .target = target,
                              .body = len > 0 ? natsMsg_GetData(m) : NULL,
                              .len = len > 0 ? (size_t)len : 0};
            fn(ctx, f, &id, &req);
        }
    }
    if (fn != NULL) {
        pthread_mutex_lock(&s->fmu);
        if (--s->fwd_running == 0)
            pthread_cond_broadcast(&s->fcv);
        pthread_mutex_unlock(&s->fmu);
    }
    natsMsg_Destroy(m);
}

/* Each "Name: value\r\n" line of lines as a value of Parley-Header. */
static natsStatus put_lines(natsMsg *m, const char *lines)
{
    natsStatus ns = NATS_OK;
    for (const char *p = lines; ns == NATS_OK && p != NULL && *p != '\0';) {
        const char *eol = strstr(p, "\r\n");
        size_t n = eol != NULL ? (size_t)(eol - p) : strlen(p);
        char line[ST_FWD_HEADERS_MAX];
        if (n > 0 && n < sizeof line) {
            memcpy(line, p, n);
            line[n] = '\0';
            ns = natsMsgHeader_Add(m, STN_H_HEADER, line);
        }
        p = eol != NULL ? eol + 2 : p + n;
    }
    return ns;
}

void st_fwd_reply(st_fwd *f, int status, const void *body, size_t len, const char *ctype,
                  const char *headers)
{
    stn_store *s = f->s;
    natsMsg *m = NULL;
    char v[16];
    snprintf(v, sizeof v, "%d", status);
    natsStatus ns = natsMsg_Create(&m, f->reply, NULL, body, (int)len);
    if (ns == NATS_OK)
        ns = natsMsgHeader_Set(m, STN_H_STATUS, v);
    if (ns == NATS_OK && ctype != NULL && ctype[0] != '\0')
        ns = natsMsgHeader_Set(m, STN_H_CTYPE, ctype);
    if (ns == NATS_OK)
        ns = put_lines(m, headers);
    if (ns == NATS_OK) /* buffered: it never waits for an answer */
        ns = natsConnection_PublishMsg(s->n->nc, m);
    if (ns != NATS_OK)
        rt_log(RT_LOG_WARN, "store", "nats: cannot answer a forwarded request: %s",
               natsStatus_GetText(ns));
    natsMsg_Destroy(m);
    atomic_fetch_sub(&s->fwd_in, 1);
    free(f);
}

int stn_serve(st_store *gs, st_fwd_fn fn, void *ctx)
{
    stn_store *s = S(gs);
    pthread_mutex_lock(&s->fmu);
    s->fwd_fn = fn;
    s->fwd_ctx = ctx;
    while (fn == NULL && s->fwd_running > 0)
        pthread_cond_wait(&s->fcv, &s->fmu);
    pthread_mutex_unlock(&s->fmu);
    return 0;
}

/* ---- starting and stopping ---------------------------------------------------- */

int stn_owner_start(stn_store *s, char *err, size_t errlen)
{
    pthread_mutex_init(&s->hmu, NULL);
    pthread_cond_init(&s->hcv, NULL);
    pthread_mutex_init(&s->fmu, NULL);
    pthread_cond_init(&s->fcv, NULL);
    s->owner_init = true;
    /* a test's hook: this node never forwards, as if no other node were
     * alive (two such nodes both take conversations over: a split) */
    const char *split = getenv("PARLEY_NATS_SPLIT");
    s->split = split != NULL && strcmp(split, "1") == 0;
    if (s->split)
        rt_log(RT_LOG_WARN, "store", "nats: PARLEY_NATS_SPLIT=1: node %s never forwards appends",
               s->n->node);
    int r = stn_bind_bucket_ttl(s->n, STN_NODES, "parley: the nodes alive (leases)", STN_LEASE_MS,
                                &s->nodes, err, errlen);
    if (r == 0 && (r = first_lease(s)) < 0)
        snprintf(err, errlen, "cannot put node %s's lease: %s", s->n->node, strerror(-r));
    if (r == 0 && (r = -pthread_create(&s->hthread, NULL, beat_main, s)) < 0)
        snprintf(err, errlen, "cannot start the lease's thread: %s", strerror(-r));
    s->hstarted = r == 0;
    if (r == 0) {
        char subject[64];
        snprintf(subject, sizeof subject, STN_FWD_PREFIX "%s", s->n->token);
        natsStatus ns = natsConnection_Subscribe(&s->fsub, s->n->nc, subject, on_forward, s);
        if (ns != NATS_OK) {
            r = stn_errno(ns, 0);
            snprintf(err, errlen, "cannot listen on %s: %s", subject, stn_last_error(ns));
        }
    }
    return r;
}

void stn_owner_stop(stn_store *s)
{
    if (!s->owner_init || s->nodes == NULL)
        return;
    stn_serve((st_store *)(void *)s, NULL, NULL);
    stn_sub_retire(s->n, s->fsub);
    s->fsub = NULL;
    if (s->hstarted) {
        pthread_mutex_lock(&s->hmu);
        s->hstop = true;
        pthread_cond_signal(&s->hcv);
        pthread_mutex_unlock(&s->hmu);
        pthread_join(s->hthread, NULL);
        s->hstarted = false;
        /* gone now: other nodes take its conversations over at once */
        stn_kv_delete(s->nodes, s->n->token);
    }
    kvStore_Destroy(s->nodes);
    s->nodes = NULL;
}

void stn_owner_free(stn_store *s)
{
    if (!s->owner_init)
        return;
    pthread_mutex_destroy(&s->hmu);
    pthread_cond_destroy(&s->hcv);
    pthread_mutex_destroy(&s->fmu);
    pthread_cond_destroy(&s->fcv);
    s->owner_init = false;
}

/* ---- routing ------------------------------------------------------------------ */

bool stn_writes_here(st_store *gs, const rt_uuid *id)
{
    stn_store *s = S(gs);
    pthread_mutex_lock(&s->mu);
    stn_entry *e = stn_catalog_find(s, id);
    bool here = e != NULL && e->open != NULL && stn_writes(e->open);
    pthread_mutex_unlock(&s->mu);
    return here;
}

int stn_route(st_store *gs, const rt_uuid *id, st_route *out, char *err, size_t errlen)
{
    stn_store *s = S(gs);
    st_conv *gc = NULL;
    int r = st_conv_get(gs, id, &gc);
    if (r < 0) {
        snprintf(err, errlen, "no such conversation");
        return r;
    }
    stn_conv *c = (stn_conv *)(void *)gc;
    if (stn_writes(c)) {
        st_conv_release(gc);
        return 0;
    }
    st_nats_log *l = NULL;
    natsMsg *m = NULL;
    st_nats_event last;
    r = st_nats_log_open(s->n, &c->lid, &l);
    st_conv_release(gc);
    if (r == 0)
        r = stn_ensure_stream(s->n, l->shard, err, errlen);
    if (r == 0 && (r = stn_get_last(l, &m, &last)) < 0 && r != -ENOENT)
        snprintf(err, errlen, "%s", st_nats_log_error(l));
    const char *owner = NULL;
    if (r == 0 && natsMsgHeader_Get(m, STN_H_OWNER, &owner) == NATS_OK && !token_ok(owner))
        owner = NULL; /* not a node's token: no owner to ask */
    if (r == -ENOMEM)
        snprintf(err, errlen, "out of memory");
    bool alive = false;
    if (r >= 0 || r == -ENOENT)
        r = 0;
    if (r == 0 && owner != NULL && strcmp(owner, s->n->token) != 0) {
        char *name = NULL;
        size_t len = 0;
        r = stn_kv_get(s, STN_NODES, owner, &name, &len);
        if (r == 0) {
            alive = true;
            snprintf(out->node, sizeof out->node, "%.*s", (int)len, name);
        } else if (r == -ENOENT) {
            r = 0;
        } else {
            snprintf(err, errlen, "%s: the lease of the owner of conversation %s", stn_what(r),
                     l->hex);
        }
        free(name);
    }
    if (r == 0 && !s->split && forward_to(s->n->token, owner, alive)) {
        out->forward = true;
        snprintf(out->owner, sizeof out->owner, "%s", owner);
    }
    natsMsg_Destroy(m);
    st_nats_log_close(l);
    return r;
}

/* Does the node of this forward subject still listen? False only when
 * nobody does (its connection is gone); a slow answer is a yes. */
static bool owner_listens(stn_store *s, const char *subject)
{
    natsMsg *m = NULL, *reply = NULL;
    natsStatus ns = natsMsg_Create(&m, subject, NULL, NULL, 0);
    if (ns == NATS_OK)
        ns = natsMsgHeader_Set(m, STN_H_PING, "1");
    if (ns == NATS_OK)
        ns = natsConnection_RequestMsg(&reply, s->n->nc, m, STN_PING_MS);
    natsMsg_Destroy(m);
    natsMsg_Destroy(reply);
    return ns != NATS_NO_RESPONDERS;
}

int stn_forward(st_store *gs, const st_route *to, const rt_uuid *id, const st_fwd_req *req,
                uint64_t timeout_ms, st_fwd_answer *out, char *err, size_t errlen)
{
    stn_store *s = S(gs);
    size_t len = req->body != NULL ? req->len : 0;
    if (len > ST_FWD_BODY_MAX || (int64_t)len > st_nats_max_payload(s->n) - 1024) {
        snprintf(err, errlen, "a body of %zu bytes is too large to forward to the owner node %s",
                 len, to->node);
        return -EMSGSIZE;
    }
    char subject[64], hex[33];
    snprintf(subject, sizeof subject, STN_FWD_PREFIX "%s", to->owner);
    rt_uuid_hex(id, hex);
    natsMsg *m = NULL, *reply = NULL;
    stn_replies *rep = NULL;
    char inbox[160];
    bool gone = false;
    natsStatus ns = stn_replies_take(s->n, &rep);
    if (ns == NATS_OK) {
        stn_replies_subject(rep, 0, inbox, sizeof inbox);
        ns = natsMsg_Create(&m, subject, inbox, req->body, (int)len);
    }
    if (ns == NATS_OK)
        ns = natsMsgHeader_Set(m, STN_H_CONV, hex);
    if (ns == NATS_OK)
        ns = natsMsgHeader_Set(m, STN_H_METHOD, req->method);
    if (ns == NATS_OK)
        ns = natsMsgHeader_Set(m, STN_H_TARGET, req->target);
    if (ns == NATS_OK) {
        stn_waits("forwarding to the owner");
        ns = natsConnection_PublishMsg(s->n->nc, m);
    }
    for (int64_t waited = 0; ns == NATS_OK && reply == NULL;) {
        int64_t slice = (int64_t)timeout_ms - waited;
        if (slice <= 0) {
            ns = NATS_TIMEOUT;
            break;
        }
        if (slice > STN_FWD_SLICE_MS)
            slice = STN_FWD_SLICE_MS;
        int64_t t0 = nats_Now();
        size_t unused;
        ns = stn_replies_next(rep, slice, &reply, &unused);
        waited += nats_Now() - t0;
        if (ns == NATS_OK && natsMsg_IsNoResponders(reply)) {
            natsMsg_Destroy(reply);
            reply = NULL;
            ns = NATS_NO_RESPONDERS;
        } else if (ns == NATS_TIMEOUT && (int64_t)timeout_ms > waited) {
            gone = !owner_listens(s, subject); /* no answer yet: is it still there? */
            ns = gone ? NATS_NO_RESPONDERS : NATS_OK;
        }
    }
    natsMsg_Destroy(m);
    stn_replies_give(s->n, rep);
    if (gone) {
        snprintf(err, errlen,
                 "the owner node %s went away before it answered (it may have served the "
                 "request: retry it, with the same event ids)",
                 to->node);
        return -EHOSTUNREACH;
    }
    if (ns == NATS_TIMEOUT) {
        snprintf(err, errlen, "the owner node %s did not answer within %llu ms", to->node,
                 (unsigned long long)timeout_ms);
        return -ETIMEDOUT;
    }
    if (ns == NATS_NO_RESPONDERS) {
        snprintf(err, errlen, "the owner node %s does not listen (its lease is not over yet)",
                 to->node);
        return -EHOSTUNREACH;
    }
    if (ns != NATS_OK) {
        int r = stn_errno(ns, 0);
        snprintf(err, errlen, "%s: forwarding to the owner node %s: %s", stn_what(r), to->node,
                 stn_last_error(ns));
        return r;
    }
    const char *st = NULL, *ct = NULL;
    natsMsgHeader_Get(reply, STN_H_STATUS, &st);
    natsMsgHeader_Get(reply, STN_H_CTYPE, &ct);
    int status = st != NULL ? atoi(st) : 0;
    if (status < 100 || status > 599) {
        natsMsg_Destroy(reply);
        snprintf(err, errlen, "the owner node %s answered without a status", to->node);
        return -EIO;
    }
    out->status = status;
    snprintf(out->ctype, sizeof out->ctype, "%s", ct != NULL ? ct : "");
    const char **lines = NULL;
    int nlines = 0;
    if (natsMsgHeader_Values(reply, STN_H_HEADER, &lines, &nlines) == NATS_OK) {
        size_t at = 0;
        for (int i = 0; i < nlines; i++) {
            size_t n = strlen(lines[i]);
            if (strpbrk(lines[i], "\r\n") == NULL && at + n + 3 <= sizeof out->headers) {
                memcpy(out->headers + at, lines[i], n);
                memcpy(out->headers + at + n, "\r\n", 3);
                at += n + 2;
            }
        }
        free((void *)lines);
    }
    int n = natsMsg_GetDataLength(reply);
    out->body = n > 0 ? rt_buf_copy(natsMsg_GetData(reply), (size_t)n) : NULL;
    natsMsg_Destroy(reply);
    if (n > 0 && out->body == NULL) {
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    return 0;
}

/* ---- following a log ----------------------------------------------------------- */

struct st_follow {
    const st_backend *be;
    stn_store *s;
    rt_uuid id;
    st_nats_log *l; /* for parsing records (the callback's only) */
    natsSubscription *sub;
    pthread_mutex_t mu;
    bool stopped;
    int refs; /* the subscription's, and probes' (mu) */
    st_follow_fn fn;
    void *ctx;
    struct st_follow *fnext, **fprev; /* s->follows (s->mu) */
};

static void follow_free(void *closure)
{
    st_follow *f = closure;
    pthread_mutex_lock(&f->mu);
    bool last = --f->refs == 0;
    pthread_mutex_unlock(&f->mu);
    if (!last)
        return;
    st_nats_log_close(f->l);
    pthread_mutex_destroy(&f->mu);
    free(f);
}

/* Another node stored events: what this node's readers hold in memory
 * is no longer the whole log (nats_tail.c), so they read the cluster. */
static void grew(stn_store *s, const rt_uuid *id, uint64_t count)
{
    pthread_mutex_lock(&s->mu);
    stn_entry *e = stn_catalog_find(s, id);
    stn_conv *c = e != NULL ? e->open : NULL;
    if (c != NULL) {
        /* a record of another node's past what this node's writer wrote:
         * that node took the log over, and this one's memory is old */
        if (atomic_load(&c->writing) && count > atomic_load(&c->written) &&
            atomic_exchange(&c->writing, false))
            rt_log(RT_LOG_WARN, "store",
                   "nats: conversation %s was taken over by another node: this node no longer "
                   "writes it",
                   c->hex);
        pthread_mutex_lock(&c->mu);
        stn_log *l = c->log;
        for (uint64_t k = l != NULL ? atomic_load(&l->known) : count; k < count;)
            if (atomic_compare_exchange_weak(&l->known, &k, count))
                break;
        pthread_mutex_unlock(&c->mu);
    }
    pthread_mutex_unlock(&s->mu);
}

static void on_record(natsConnection *nc, natsSubscription *sub, natsMsg *m, void *closure)
{
    (void)nc;
    (void)sub;
    st_follow *f = closure;
    const char *seq = NULL, *owner = NULL;
    st_nats_event ev;
    natsMsgHeader_Get(m, "Nats-Sequence", &seq);
    natsMsgHeader_Get(m, STN_H_OWNER, &owner);
    uint64_t at = seq != NULL ? strtoull(seq, NULL, 10) : 0;
    if (at > 0 && stn_parse(f->l, m, at, &ev) == 0) {
        bool mine = owner != NULL && strcmp(owner, f->s->n->token) == 0;
        if (!mine)
            grew(f->s, &f->id, stn_visible(&ev));
        pthread_mutex_lock(&f->mu);
        if (!f->stopped)
            f->fn(f->ctx, stn_visible(&ev), mine);
        pthread_mutex_unlock(&f->mu);
    }
    natsMsg_Destroy(m);
}

/* A probe of f (a job of c's: the log's count, as a notice, unless this
 * node writes it; s->mu held). */
static void probe_locked(stn_conv *c, st_follow *f)
{
    pthread_mutex_lock(&f->mu);
    f->refs++; /* the probe's: released by stn_follow_probe */
    pthread_mutex_unlock(&f->mu);
    if (stn_submit_plain_locked(c, STN_PROBE, f) < 0)
        follow_free(f);
}

void stn_follows_probe(stn_store *s)
{
    pthread_mutex_lock(&s->mu);
    for (st_follow *f = s->follows; f != NULL; f = f->fnext) {
        stn_entry *e = stn_catalog_find(s, &f->id);
        if (e != NULL && e->open != NULL)
            probe_locked(e->open, f);
    }
    pthread_mutex_unlock(&s->mu);
}

int stn_follow(st_conv *gc, st_follow_fn fn, void *ctx, st_follow **out)
{
    stn_conv *c = (stn_conv *)(void *)gc;
    st_follow *f = calloc(1, sizeof(*f));
    if (f == NULL)
        return -ENOMEM;
    f->be = c->be;
    f->s = c->s;
    f->id = c->id;
    f->fn = fn;
    f->ctx = ctx;
    f->refs = 1;
    pthread_mutex_init(&f->mu, NULL);
    int r = st_nats_log_open(c->s->n, &c->lid, &f->l);
    char subject[80];
    if (r == 0)
        snprintf(subject, sizeof subject, ST_NATS_LIVE "%u.%s", f->l->shard, c->lhex);
    natsStatus ns = r == 0 ? natsConnection_Subscribe(&f->sub, c->s->n->nc, subject, on_record, f)
                           : NATS_NO_MEMORY;
    if (ns == NATS_OK)
        ns = natsSubscription_SetOnCompleteCB(f->sub, follow_free, f);
    if (ns != NATS_OK) {
        stn_sub_retire(c->s->n, f->sub);
        follow_free(f);
        return r < 0 ? r : stn_errno(ns, 0);
    }
    pthread_mutex_lock(&c->s->mu);
    if ((f->fnext = c->s->follows) != NULL)
        f->fnext->fprev = &f->fnext;
    f->fprev = &c->s->follows;
    c->s->follows = f;
    /* what was stored before the subscription: a first notice */
    probe_locked(c, f);
    pthread_mutex_unlock(&c->s->mu);
    *out = f;
    return 0;
}

void stn_follow_probe(stn_conv *c, void *follow)
{
    st_follow *f = follow;
    st_nats_log *l = NULL;
    uint64_t count = 0;
    bool stopped;
    pthread_mutex_lock(&f->mu);
    stopped = f->stopped;
    pthread_mutex_unlock(&f->mu);
    if (!stopped && !stn_writes(c) && st_nats_log_open(c->s->n, &c->lid, &l) == 0 &&
        st_nats_log_count(l, &count) == 0) {
        grew(c->s, &c->id, count);
        pthread_mutex_lock(&f->mu);
        if (!f->stopped)
            f->fn(f->ctx, count, false);
        pthread_mutex_unlock(&f->mu);
    }
    st_nats_log_close(l);
    follow_free(f);
}

void stn_follow_stop(st_follow *f)
{
    pthread_mutex_lock(&f->s->mu);
    if ((*f->fprev = f->fnext) != NULL)
        f->fnext->fprev = f->fprev;
    pthread_mutex_unlock(&f->s->mu);
    pthread_mutex_lock(&f->mu);
    f->stopped = true;
    pthread_mutex_unlock(&f->mu);
    /* f is freed once the subscription has delivered its last message */
    stn_sub_retire(f->s->n, f->sub);
}
