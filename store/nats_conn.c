/*
 * nats_conn.c - the connection to the cluster (nats_conn.h): connect to every
 * server given, make or check the shard streams and the page bucket, and
 * turn cnats' answers into errno values and one-line reasons.
 */
#include "nats_impl.h"

#include "runtime/log.h"
#include "runtime/runtime.h"
#include "store.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int stn_failv(char *err, size_t errlen, int code, const char *fmt, va_list ap)
{
    if (err && errlen)
        vsnprintf(err, errlen, fmt, ap);
    return code;
}

int stn_fail(st_nats_log *l, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    stn_failv(l->err, sizeof l->err, code, fmt, ap);
    va_end(ap);
    return code;
}

static int fail(char *err, size_t errlen, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int fail(char *err, size_t errlen, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    stn_failv(err, errlen, code, fmt, ap);
    va_end(ap);
    return code;
}

int stn_errno(natsStatus s, jsErrCode jerr)
{
    switch (s) {
    case NATS_OK:
        return 0;
    case NATS_TIMEOUT:
        return -ETIMEDOUT;
    case NATS_NO_RESPONDERS:
        return -EAGAIN; /* no stream leader (yet): an election */
    case NATS_NO_SERVER:
    case NATS_CONNECTION_CLOSED:
    case NATS_CONNECTION_DISCONNECTED:
    case NATS_CONNECTION_AUTH_FAILED:
    case NATS_STALE_CONNECTION:
    case NATS_IO_ERROR:
        return -ENOTCONN;
    case NATS_NOT_FOUND:
        return -ENOENT;
    case NATS_NO_MEMORY:
        return -ENOMEM;
    case NATS_MAX_PAYLOAD:
        return -EMSGSIZE;
    case NATS_INVALID_ARG:
        return -EINVAL;
    default:
        break;
    }
    if (jerr == JSClusterNotAvailErr || jerr == JSClusterNotLeaderErr ||
        jerr == JSStreamOfflineErr || jerr == JSClusterNoPeersErr)
        return -EAGAIN;
    if (jerr == JSStreamNotFoundErr || jerr == JSNoMessageFoundErr)
        return -ENOENT;
    return -EIO;
}

const char *stn_what(int code)
{
    switch (code) {
    case -ENOTCONN:
        return "NATS unreachable";
    case -ETIMEDOUT:
        return "NATS timed out";
    case -EAGAIN:
        return "JetStream not available (no leader)";
    default:
        return "JetStream error";
    }
}

const char *stn_last_error(natsStatus s)
{
    natsStatus ls = NATS_OK;
    const char *t = nats_GetLastError(&ls);
    return t && *t ? t : natsStatus_GetText(s);
}

bool stn_retryable(int code)
{
    return code == -ETIMEDOUT || code == -EAGAIN || code == -ENOTCONN;
}

int64_t stn_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void stn_timedwait(pthread_cond_t *cv, pthread_mutex_t *mu, int64_t ms)
{
    if (ms <= 0)
        return;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (ms % 1000) * 1000000;
    if (ts.tv_nsec >= 1000000000) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000;
    }
    pthread_cond_timedwait(cv, mu, &ts);
}

_Atomic uint64_t st_nats_loop_requests;

void stn_waits(const char *what)
{
    int loop = rt_current_loop();
    if (loop < 0)
        return;
    if (atomic_fetch_add(&st_nats_loop_requests, 1) == 0) /* the first says where */
        rt_log(RT_LOG_WARN, "store", "nats: %s on loop thread %d: it waits for the cluster", what,
               loop);
}

int64_t stn_backoff_ms(int attempt, int64_t first, int64_t cap)
{
    int64_t ms = first;
    for (int i = 0; i < attempt && ms < cap; i++)
        ms *= 2;
    return ms < cap ? ms : cap;
}

/* cnats' reconnect thread, after a pass over every server failed: 250 ms
 * doubling up to 2 s (a node's lease outlives three of those), plus up to
 * a fifth more that differs per node and pass, so that the nodes that lost
 * one server do not all come back to the next at once. */
static int64_t reconnect_delay(natsConnection *nc, int attempts, void *closure)
{
    (void)nc;
    const st_nats *n = closure;
    int64_t ms = stn_backoff_ms(attempts > 0 ? attempts - 1 : 0, 250, 2000);
    uint64_t h = 1469598103934665603ull ^ (uint64_t)attempts;
    for (const char *p = n->token; *p; p++)
        h = (h ^ (unsigned char)*p) * 1099511628211ull;
    return ms + (int64_t)(h % (uint64_t)(ms / 5 + 1));
}

void stn_backoff(int attempt, int64_t until)
{
    int64_t ms = stn_backoff_ms(attempt, 20, 500);
    int64_t left = until - stn_now_ms();
    if (left <= 0)
        return;
    if (ms > left)
        ms = left;
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
}

unsigned st_nats_shard(const st_nats *n, const rt_uuid *id)
{
    /* FNV-1a over the 16 bytes: stable across builds and machines */
    uint64_t h = 1469598103934665603ull;
    const unsigned char *b = (const unsigned char *)id;
    for (size_t i = 0; i < sizeof *id; i++)
        h = (h ^ b[i]) * 1099511628211ull;
    return (unsigned)(h % n->shards);
}

unsigned st_nats_shards(const st_nats *n)
{
    return n->shards;
}

int64_t st_nats_max_payload(const st_nats *n)
{
    return n->max_payload;
}

int st_nats_replicas(const st_nats *n)
{
    return n->replicas;
}

/* The settings the fence and the log's promises rest on. */
static int check_stream(const jsStreamConfig *c, const char *subject, char *err, size_t errlen)
{
    const char *bad = NULL;
    if (c->SubjectsLen != 1 || strcmp(c->Subjects[0], subject) != 0)
        bad = "subjects";
    else if (c->Duplicates < (int64_t)ST_NATS_DUPLICATES * 1000000)
        bad = "duplicate window below 10 minutes";
    else if (!c->AllowDirect)
        bad = "no allow_direct";
    else if (!c->DenyDelete || !c->DenyPurge)
        bad = "deletes or purges allowed";
    else if (c->Retention != js_LimitsPolicy || c->MaxMsgs > 0 || c->MaxBytes > 0 ||
             c->MaxAge > 0 || c->MaxMsgsPerSubject > 0)
        bad = "limits that drop events";
    if (bad)
        return fail(err, errlen, -EINVAL,
                    "stream %s exists with other settings (%s): not parley's, or changed by hand",
                    c->Name, bad);
    return 0;
}

/* Live fan-out across nodes: every record the stream stores is published
 * again, with its stream sequence, on parley.live.<shard>.<32 hex> (a plain
 * subscription on parley.ev.* would also see appends the stream refused). */
static void republish_of(jsRePublish *rp, const char *subject, char *live, size_t cap,
                         unsigned shard)
{
    jsRePublish_Init(rp);
    snprintf(live, cap, ST_NATS_LIVE "%u.{{wildcard(1)}}", shard);
    rp->Source = subject;
    rp->Destination = live;
}

/* A stream made by an older parley: add the republishing (best effort:
 * without it, subscribers on other nodes than the writer see nothing live). */
static void add_republish(st_nats *n, jsStreamConfig *cfg, unsigned shard)
{
    jsRePublish rp;
    char live[48];
    republish_of(&rp, cfg->Subjects[0], live, sizeof live, shard);
    cfg->RePublish = &rp;
    jsStreamInfo *si = NULL;
    jsErrCode jerr = 0;
    stn_waits("updating a stream");
    natsStatus s = js_UpdateStream(&si, n->js, cfg, NULL, &jerr);
    cfg->RePublish = NULL;
    jsStreamInfo_Destroy(si);
    if (s != NATS_OK)
        rt_log(RT_LOG_WARN, "store",
               "nats: cannot make stream %s republish its records (%s): subscribers on other "
               "nodes than a conversation's writer see nothing live",
               cfg->Name, stn_last_error(s));
}

/* Stream `name`'s info, asked again after a failure that may pass until
 * `until` (ms): 0 with *si (the caller destroys it), -ENOENT if there is
 * no such stream, or the error, *s the last status. *attempt counts the
 * retries, so that a caller that retries more goes on from there. */
static int stream_info(st_nats *n, const char *name, int64_t until, int *attempt, jsStreamInfo **si,
                       natsStatus *s)
{
    for (;; (*attempt)++) {
        jsErrCode jerr = 0;
        *si = NULL;
        stn_waits("checking a stream");
        *s = js_GetStreamInfo(si, n->js, name, NULL, &jerr);
        if (*s == NATS_OK)
            return 0;
        jsStreamInfo_Destroy(*si);
        *si = NULL;
        int r = stn_errno(*s, jerr);
        if (r == -ENOENT || !stn_retryable(r) || stn_now_ms() >= until)
            return r;
        stn_backoff(*attempt, until);
    }
}

static int make_stream(st_nats *n, unsigned shard, char *err, size_t errlen)
{
    char name[32], subject[48];
    snprintf(name, sizeof name, ST_NATS_STREAM "%u", shard);
    snprintf(subject, sizeof subject, "parley.ev.%u.*", shard);
    int64_t until = stn_now_ms() + n->deadline_ms;
    for (int attempt = 0;; attempt++) {
        jsStreamInfo *si = NULL;
        natsStatus s;
        int r = stream_info(n, name, until, &attempt, &si, &s);
        if (r == 0) {
            r = check_stream(si->Config, subject, err, errlen);
            if (r == 0 && si->Config->RePublish == NULL)
                add_republish(n, si->Config, shard);
            jsStreamInfo_Destroy(si);
            return r;
        }
        if (r == -ENOENT) {
            jsStreamConfig c;
            jsStreamConfig_Init(&c);
            const char *subjects[] = {subject};
            c.Name = name;
            c.Description = "parley: conversations' event logs (one subject each)";
            c.Subjects = subjects;
            c.SubjectsLen = 1;
            c.Storage = js_FileStorage;
            c.Replicas = n->replicas;
            c.Duplicates = (int64_t)ST_NATS_DUPLICATES * 1000000;
            c.AllowDirect = true;
            c.DenyDelete = true;
            c.DenyPurge = true;
            jsRePublish rp;
            char live[48];
            republish_of(&rp, subject, live, sizeof live, shard);
            c.RePublish = &rp;
            jsErrCode jerr = 0;
            s = js_AddStream(&si, n->js, &c, NULL, &jerr);
            jsStreamInfo_Destroy(si);
            if (s == NATS_OK)
                return 0;
            /* made by another node meanwhile: check it on the next round */
            r = jerr == JSStreamNameExistErr ? -EAGAIN : stn_errno(s, jerr);
        }
        if (!stn_retryable(r) || stn_now_ms() >= until)
            return fail(err, errlen, r, "%s: stream %s: %s", stn_what(r), name, stn_last_error(s));
        stn_backoff(attempt, until);
    }
}

int stn_ensure_stream(st_nats *n, unsigned shard, char *err, size_t errlen)
{
    pthread_mutex_lock(&n->mu);
    bool ready = n->ready[shard];
    pthread_mutex_unlock(&n->mu);
    if (ready)
        return 0;
    int r = make_stream(n, shard, err, errlen);
    if (r == 0) {
        pthread_mutex_lock(&n->mu);
        n->ready[shard] = 1;
        pthread_mutex_unlock(&n->mu);
    }
    return r;
}

int stn_bind_bucket(st_nats *n, const char *bucket, const char *about, kvStore **kv, char *err,
                    size_t errlen)
{
    return stn_bind_bucket_ttl(n, bucket, about, 0, kv, err, errlen);
}

int stn_bind_bucket_ttl(st_nats *n, const char *bucket, const char *about, int64_t ttl_ms,
                        kvStore **kv, char *err, size_t errlen)
{
    int64_t until = stn_now_ms() + n->deadline_ms;
    for (int attempt = 0;; attempt++) {
        stn_waits("binding a bucket");
        natsStatus s = js_KeyValue(kv, n->js, bucket);
        if (s == NATS_NOT_FOUND) {
            kvConfig c;
            kvConfig_Init(&c);
            c.Bucket = bucket;
            c.Description = about;
            c.History = 1;
            c.StorageType = js_FileStorage;
            c.Replicas = n->replicas;
            c.TTL = ttl_ms * 1000000; /* nanoseconds */
            s = js_CreateKeyValue(kv, n->js, &c);
        }
        if (s == NATS_OK)
            return 0;
        int r = stn_errno(s, 0);
        if (r == -EIO)
            r = -EAGAIN; /* created by another node meanwhile, or no leader yet */
        if (!stn_retryable(r) || stn_now_ms() >= until)
            return fail(err, errlen, r, "%s: bucket %s: %s", stn_what(r), bucket,
                        stn_last_error(s));
        stn_backoff(attempt, until);
    }
}

/* The value of key in the page bucket, read at the stream's leader (a
 * replica may not have applied a write just made): 0, -ENOENT or an error. */
static int pages_get(st_nats *n, const char *key, char *out, size_t cap)
{
    char stream[64], subject[96];
    snprintf(stream, sizeof stream, "KV_%s", ST_NATS_PAGES);
    snprintf(subject, sizeof subject, "$KV.%s.%s", ST_NATS_PAGES, key);
    int64_t until = stn_now_ms() + n->deadline_ms;
    for (int attempt = 0;; attempt++) {
        natsMsg *m = NULL;
        jsErrCode jerr = 0;
        stn_waits("reading the shard count");
        natsStatus s = js_GetLastMsg(&m, n->js, stream, subject, NULL, &jerr);
        int r = s == NATS_OK ? 0 : stn_errno(s, jerr);
        if (r == 0) {
            const char *op = NULL;
            if (natsMsgHeader_Get(m, "KV-Operation", &op) == NATS_OK && op != NULL)
                r = -ENOENT; /* DEL or PURGE */
            int len = natsMsg_GetDataLength(m);
            if (r == 0 && (len <= 0 || (size_t)len >= cap))
                r = -EBADMSG;
            if (r == 0) {
                memcpy(out, natsMsg_GetData(m), (size_t)len);
                out[len] = '\0';
            }
            natsMsg_Destroy(m);
            return r;
        }
        if (r == -ENOENT || !stn_retryable(r) || stn_now_ms() >= until)
            return r;
        stn_backoff(attempt, until);
    }
}

/* Whether stream `name` exists: 1, 0, or an error. */
static int stream_exists(st_nats *n, const char *name)
{
    int attempt = 0;
    jsStreamInfo *si = NULL;
    natsStatus s;
    int r = stream_info(n, name, stn_now_ms() + n->deadline_ms, &attempt, &si, &s);
    jsStreamInfo_Destroy(si);
    return r == 0 ? 1 : r == -ENOENT ? 0 : r;
}

/* How many shard streams the cluster's conversations are on is fixed for
 * a deployment (a conversation's stream is a hash of its id modulo that
 * count): the first node records it in the page bucket (key "shards"),
 * later ones take it from there (want 0) or are refused if they want
 * another count, instead of looking for conversations in other streams
 * than those they are on. A cluster a parley made before the count was
 * recorded has 16. */
static int agree_shards(st_nats *n, unsigned want, char *err, size_t errlen)
{
    char v[16], why[200] = "";
    int r = pages_get(n, "shards", v, sizeof v);
    if (r == -ENOENT) {
        char name[32];
        snprintf(name, sizeof name, ST_NATS_STREAM "0");
        int old = stream_exists(n, name);
        if (old < 0)
            return fail(err, errlen, old, "%s: stream %s", stn_what(old), name);
        unsigned count = old ? 16 : want ? want : 16;
        snprintf(v, sizeof v, "%u", count);
        /* a bucket just made may not answer yet (its leader being
         * elected): tried again as every startup request is */
        int64_t until = stn_now_ms() + n->deadline_ms;
        natsStatus s;
        for (int attempt = 0;; attempt++) {
            uint64_t rev = 0;
            stn_waits("recording the shard count");
            s = kvStore_Create(&rev, n->pages, "shards", v, (int)strlen(v));
            if (s == NATS_OK || !stn_retryable(stn_errno(s, 0)) || stn_now_ms() >= until)
                break;
            stn_backoff(attempt, until);
        }
        /* on another failure, another node recorded it meanwhile: read what
         * it wrote (if it is not there, the create's error says why) */
        snprintf(why, sizeof why, "%s", s == NATS_OK ? "" : stn_last_error(s));
        r = s == NATS_OK ? 0 : pages_get(n, "shards", v, sizeof v);
    }
    if (r < 0)
        return fail(err, errlen, r, "%s: the shard count (bucket %s, key shards)%s%s", stn_what(r),
                    ST_NATS_PAGES, why[0] ? ": " : "", why);
    char *end = NULL;
    unsigned long have = strtoul(v, &end, 10);
    if (end == v || *end != '\0' || have < 1 || have > ST_NATS_SHARDS_MAX)
        return fail(err, errlen, -EBADMSG,
                    "the shard count in bucket %s (key shards) is '%s', not 1 to %d", ST_NATS_PAGES,
                    v, ST_NATS_SHARDS_MAX);
    if (want != 0 && want != have)
        return fail(err, errlen, -EINVAL,
                    "this cluster's conversations are on %lu shard streams, not %u (the count "
                    "is fixed for a deployment: bucket %s, key shards)",
                    have, want, ST_NATS_PAGES);
    n->shards = (unsigned)have;
    return 0;
}

/* "a,b,c" into nats:// URLs; *count of them. */
static char **split_servers(const char *list, int *count)
{
    size_t cap = 1;
    for (const char *p = list; *p; p++)
        cap += *p == ',';
    char **v = calloc(cap, sizeof *v);
    if (!v)
        return NULL;
    int c = 0;
    const char *p = list;
    while (*p) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        while (len && (*p == ' ' || *p == '\t'))
            p++, len--;
        while (len && (p[len - 1] == ' ' || p[len - 1] == '\t'))
            len--;
        if (len) {
            bool scheme = memmem(p, len, "://", 3) != NULL;
            size_t sz = len + (scheme ? 1 : 8);
            v[c] = malloc(sz);
            if (!v[c])
                break;
            snprintf(v[c], sz, "%s%.*s", scheme ? "" : "nats://", (int)len, p);
            c++;
        }
        if (!e)
            break;
        p = e + 1;
    }
    *count = c;
    return v;
}

static void free_servers(char **v, int count)
{
    for (int i = 0; v && i < count; i++)
        free(v[i]);
    free(v);
}

/* Why a node id is refused, or NULL: it goes into headers, JSON and the
 * connection's name as it is. */
static const char *node_bad(const char *id)
{
    size_t len = strlen(id);
    if (len == 0 || len > 63)
        return "1 to 63 characters";
    for (size_t i = 0; i < len; i++)
        if (!isalnum((unsigned char)id[i]) && !strchr("._-", id[i]))
            return "letters, digits, '.', '_' and '-' only";
    return NULL;
}

int st_nats_open(const st_nats_opts *o, st_nats **out, char *err, size_t errlen)
{
    *out = NULL;
    if (!o || !o->servers || !*o->servers)
        return fail(err, errlen, -EINVAL, "no NATS servers given (nats://HOST:PORT,...)");
    if (o->shards > ST_NATS_SHARDS_MAX)
        return fail(err, errlen, -EINVAL, "too many shard streams: %u (at most %d)", o->shards,
                    ST_NATS_SHARDS_MAX);
    const char *bad = o->node ? node_bad(o->node) : NULL;
    if (bad)
        return fail(err, errlen, -EINVAL, "node id '%s': %s", o->node, bad);
    const char *files[] = {o->creds, o->tls_ca, o->tls_cert, o->tls_key};
    const char *about[] = {"credentials", "TLS CA", "TLS certificate", "TLS key"};
    for (int i = 0; i < 4; i++)
        if (files[i] && access(files[i], R_OK) != 0)
            return fail(err, errlen, -EINVAL, "NATS %s file %s: %s", about[i], files[i],
                        strerror(errno));
    if (!o->tls_cert != !o->tls_key)
        return fail(err, errlen, -EINVAL,
                    "a NATS TLS client certificate needs its key, and a "
                    "key its certificate");
    st_nats *n = calloc(1, sizeof *n);
    int count = 0;
    char **servers = split_servers(o->servers, &count);
    if (!n || !servers) {
        free(n);
        free_servers(servers, count);
        return fail(err, errlen, -ENOMEM, "out of memory");
    }
    if (count == 0) {
        free(n);
        free_servers(servers, count);
        return fail(err, errlen, -EINVAL, "no NATS servers in \"%s\"", o->servers);
    }
    n->shards = 16; /* until the cluster says (agree_shards) */
    n->request_ms = o->request_ms ? (int64_t)o->request_ms : 2000;
    n->deadline_ms = o->deadline_ms ? (int64_t)o->deadline_ms : 15000;
    snprintf(n->node, sizeof n->node, "%s", o->node ? o->node : "parley");
    rt_uuid token;
    if (rt_uuid_v4(&token) != 0) {
        free(n);
        free_servers(servers, count);
        return fail(err, errlen, -EIO, "no random bytes for the node's token");
    }
    rt_uuid_hex(&token, n->token);
    snprintf(n->servers, sizeof n->servers, "%s", o->servers);
    pthread_mutex_init(&n->mu, NULL);
    n->ready = calloc(ST_NATS_SHARDS_MAX, 1);

    natsOptions *no = NULL;
    char name[96];
    snprintf(name, sizeof name, "parley %s", n->node);
    /* cnats spins on a contended lock up to 2,000 times before it waits
     * (its default): with STN_WORKERS threads on a few cores that burns the
     * CPU the loops and the nats-servers need. Only a process's first
     * nats_Open sets it (natsOptions_Create makes one with the default). */
    natsStatus s = n->ready ? nats_Open(0) : NATS_NO_MEMORY;
    if (s == NATS_OK)
        s = natsOptions_Create(&no);
    if (s == NATS_OK)
        s = natsOptions_SetServers(no, (const char **)servers, count);
    if (s == NATS_OK)
        s = natsOptions_SetName(no, name);
    if (s == NATS_OK)
        s = natsOptions_SetTimeout(no, n->request_ms);
    if (s == NATS_OK)
        s = natsOptions_SetMaxReconnect(no, -1);
    if (s == NATS_OK)
        s = natsOptions_SetCustomReconnectDelay(no, reconnect_delay, n);
    /* requests fail at once while disconnected, and are retried with a
     * backoff within their deadline, instead of each waiting its timeout */
    if (s == NATS_OK)
        s = natsOptions_SetFailRequestsOnDisconnect(no, true);
    if (s == NATS_OK && o->creds)
        s = natsOptions_SetUserCredentialsFromFiles(no, o->creds, NULL);
    if (s == NATS_OK && (o->tls_ca || o->tls_cert))
        s = natsOptions_SetSecure(no, true);
    if (s == NATS_OK && o->tls_ca)
        s = natsOptions_LoadCATrustedCertificates(no, o->tls_ca);
    if (s == NATS_OK && o->tls_cert)
        s = natsOptions_LoadCertificatesChain(no, o->tls_cert, o->tls_key);
    if (s == NATS_OK)
        s = natsConnection_Connect(&n->nc, no);
    natsOptions_Destroy(no);
    free_servers(servers, count);
    int r = 0;
    if (s != NATS_OK) {
        r = stn_errno(s, 0);
        if (r == -EIO || r == -ETIMEDOUT)
            r = -ENOTCONN;
        fail(err, errlen, r, "NATS unreachable: %s: %s", n->servers, stn_last_error(s));
    }
    if (r == 0) {
        jsOptions jo;
        jsOptions_Init(&jo);
        jo.Wait = n->request_ms;
        s = natsConnection_JetStream(&n->js, n->nc, &jo);
        if (s != NATS_OK)
            r = fail(err, errlen, stn_errno(s, 0), "JetStream context: %s", stn_last_error(s));
    }
    if (r == 0) {
        n->max_payload = natsConnection_GetMaxPayload(n->nc);
        n->replicas = o->replicas;
        if (n->replicas <= 0) {
            char **known = NULL;
            int nknown = 0;
            n->replicas = 1;
            if (natsConnection_GetServers(n->nc, &known, &nknown) == NATS_OK) {
                n->replicas = nknown >= 3 ? 3 : 1;
                free_servers(known, nknown);
            }
        }
        r = stn_bind_bucket(n, ST_NATS_PAGES,
                            "parley: stream sequences of each closed page of 100 events", &n->pages,
                            err, errlen);
    }
    if (r == 0)
        r = agree_shards(n, o->shards, err, errlen);
    if (r != 0) {
        st_nats_close(n);
        return r;
    }
    *out = n;
    return 0;
}

void st_nats_disconnect(st_nats *n)
{
    if (n != NULL && n->nc != NULL)
        natsConnection_Close(n->nc); /* a second call does nothing */
}

void st_nats_close(st_nats *n)
{
    if (!n)
        return;
    kvStore_Destroy(n->pages);
    jsCtx_Destroy(n->js);
    if (n->nc) {
        natsConnection_Close(n->nc); /* its reading thread joined: */
        stn_replies_free(n);         /* now their subscriptions can go */
        stn_subs_free(n);
        natsConnection_Destroy(n->nc);
    }
    pthread_mutex_destroy(&n->mu);
    free(n->ready);
    free(n);
}
