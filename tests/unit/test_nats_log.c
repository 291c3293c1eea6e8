/*
 * test_nats_log.c - a conversation's log on a real 3-node JetStream
 * cluster (started by tests/integration/nats_cluster.py, which sets
 * PARLEY_NATS_URLS): round trips across page boundaries, the headers each
 * event carries, the fence (a stale writer cannot append after a take-over),
 * a lost acknowledgement sent again and stored once, page entries rebuilt,
 * bounds and errors, and writers on two servers racing for the same slot
 * (nats-server 2.9.10 lets two expected-sequence checks pass at once: the
 * per-slot message id must keep it to one record per slot, ever).
 *
 * Every test makes conversations with fresh random ids, so tests share the
 * cluster and its streams without seeing each other.
 */
#include "store/nats_impl.h"
#include "store/nats_log.h"
#include "support_sync.h"

#include <errno.h>
#include <nats/nats.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { SHARDS = 4 };

/* The i-th URL of PARLEY_NATS_URLS (i < 0: all of them). */
static void url(int i, char *out, size_t cap)
{
    const char *all = getenv("PARLEY_NATS_URLS");
    ck_assert_msg(all && *all, "PARLEY_NATS_URLS is not set: run this suite through "
                               "tests/integration/nats_cluster.py run -- test_nats_log");
    if (i < 0) {
        snprintf(out, cap, "%s", all);
        return;
    }
    const char *p = all;
    for (int k = 0; k < i; k++) {
        p = strchr(p, ',');
        ck_assert_msg(p, "PARLEY_NATS_URLS has fewer than %d servers", i + 1);
        p++;
    }
    const char *e = strchr(p, ',');
    snprintf(out, cap, "%.*s", (int)(e ? (size_t)(e - p) : strlen(p)), p);
}

static st_nats *connect_to(int server)
{
    char servers[512], err[256] = "";
    url(server, servers, sizeof servers);
    st_nats_opts o = {.servers = servers, .shards = SHARDS, .node = "test"};
    st_nats *n = NULL;
    int r = st_nats_open(&o, &n, err, sizeof err);
    ck_assert_msg(r == 0, "st_nats_open(%s): %d %s", servers, r, err);
    return n;
}

static st_nats_log *open_log(st_nats *n, const rt_uuid *id)
{
    st_nats_log *l = NULL;
    ck_assert_int_eq(st_nats_log_open(n, id, &l), 0);
    return l;
}

static void fresh_id(rt_uuid *id)
{
    ck_assert_int_eq(rt_uuid_v4(id), 0);
}

/* Event k: id "ev-<k>", a JSON body whose size varies with k. */
typedef struct tev {
    char id[32], key[32];
    char body[600];
    st_nats_item it;
} tev;

static void make_event(tev *e, const char *prefix, uint64_t k)
{
    snprintf(e->id, sizeof e->id, "%s-%llu", prefix, (unsigned long long)k);
    int pad = (int)(k * 37 % 500);
    int len = snprintf(
        e->body, sizeof e->body, "{\"k\":%llu,\"pad\":\"%.*s\"}", (unsigned long long)k, pad,
        "abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwx"
        "abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwx"
        "abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwx"
        "abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwx"
        "abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwx"
        "abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwx"
        "abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwx");
    e->it = (st_nats_item){
        .id = e->id, .idlen = (uint32_t)strlen(e->id), .data = e->body, .len = (size_t)len};
    if (k % 3 == 0) { /* a second key on every third event */
        snprintf(e->key, sizeof e->key, "key %llu", (unsigned long long)k);
        e->it.key = e->key;
        e->it.keylen = (uint32_t)strlen(e->key);
    }
}

/* Append events [from, from + n) as one call; returns the result. */
static int append_range(st_nats_log *l, const char *prefix, uint64_t from, size_t n)
{
    tev *ev = calloc(n, sizeof *ev);
    st_nats_item *items = calloc(n, sizeof *items);
    ck_assert_ptr_nonnull(ev);
    ck_assert_ptr_nonnull(items);
    for (size_t i = 0; i < n; i++) {
        make_event(&ev[i], prefix, from + i);
        items[i] = ev[i].it;
    }
    uint64_t first = 0;
    size_t stored = 0;
    int r = st_nats_log_append(l, items, n, &first, &stored);
    if (r == 0) {
        ck_assert_uint_eq(first, from);
        ck_assert_uint_eq(stored, n);
    }
    free(items);
    free(ev);
    return r;
}

/* Read [0, count) in pages of `page` and compare with what append_range
 * wrote; every event carries `epoch` unless epoch is 0. */
static void verify(st_nats_log *l, const char *prefix, uint64_t count, uint32_t page,
                   uint64_t epoch)
{
    const char *writer = NULL;
    for (uint64_t at = 0; at < count;) {
        st_nats_page *p = NULL;
        int r = st_nats_log_read(l, at, page, &p);
        ck_assert_msg(r == 0, "read %llu+%u: %s", (unsigned long long)at, page,
                      st_nats_log_error(l));
        uint64_t want = count - at < page ? count - at : page;
        ck_assert_msg(p->n == want, "read %llu+%u: %u events, expected %llu",
                      (unsigned long long)at, page, p->n, (unsigned long long)want);
        for (uint32_t i = 0; i < p->n; i++) {
            const st_nats_event *e = &p->ev[i];
            tev x;
            make_event(&x, prefix, at + i);
            ts_require(e->index == at + i && !e->take_over, "event %llu is index %llu",
                       (unsigned long long)(at + i), (unsigned long long)e->index);
            ts_require(e->idlen == strlen(x.id) && memcmp(e->id, x.id, e->idlen) == 0,
                       "event %llu: id %.*s", (unsigned long long)(at + i), (int)e->idlen, e->id);
            ts_require(e->keylen == x.it.keylen &&
                           (!e->keylen || memcmp(e->key, x.key, e->keylen) == 0),
                       "event %llu: key %.*s", (unsigned long long)(at + i), (int)e->keylen,
                       e->key ? e->key : "");
            ts_require(e->len == x.it.len && memcmp(e->data, x.body, e->len) == 0,
                       "event %llu: body differs", (unsigned long long)(at + i));
            ts_require(!epoch || e->epoch == epoch, "event %llu: epoch %llu",
                       (unsigned long long)(at + i), (unsigned long long)e->epoch);
            ts_require(e->writer && strlen(e->writer) == 32, "event without writer");
            if (epoch && writer)
                ts_require(strncmp(writer, e->writer, 32) == 0, "writer changed");
            if (!writer) {
                static char w[33];
                memcpy(w, e->writer, 32);
                writer = w;
            }
        }
        at += p->n;
        st_nats_page_free(p);
    }
}

/* A plain cnats connection (and JetStream context) to one server, for
 * looking at what the log module wrote from the outside. */
typedef struct raw {
    natsConnection *nc;
    jsCtx *js;
} raw;

static raw raw_connect(int server)
{
    char u[256];
    url(server, u, sizeof u);
    raw c = {0};
    ck_assert_int_eq(natsConnection_ConnectTo(&c.nc, u), NATS_OK);
    ck_assert_int_eq(natsConnection_JetStream(&c.js, c.nc, NULL), NATS_OK);
    return c;
}

static void raw_close(raw *c)
{
    jsCtx_Destroy(c->js);
    natsConnection_Destroy(c->nc);
}

/* A new conversation's log, l its writer (epoch 1). */
static st_nats_log *new_writer(st_nats *n, rt_uuid *id)
{
    fresh_id(id);
    st_nats_log *l = open_log(n, id);
    uint64_t epoch = 0;
    ck_assert_msg(st_nats_log_take_over(l, &epoch) == 0, "%s", st_nats_log_error(l));
    ck_assert_uint_eq(epoch, 1);
    return l;
}

/* How many messages the stream holds on the log's subject: records
 * outside the chain (a double store) would show up here. */
static uint64_t subject_count(st_nats_log *l)
{
    raw c = raw_connect(0);
    jsOptions o;
    jsOptions_Init(&o);
    o.Stream.Info.SubjectsFilter = st_nats_log_subject(l);
    jsStreamInfo *si = NULL;
    jsErrCode jerr = 0;
    ck_assert_int_eq(js_GetStreamInfo(&si, c.js, st_nats_log_stream(l), &o, &jerr), NATS_OK);
    uint64_t n = 0;
    if (si->State.Subjects)
        for (int i = 0; i < si->State.Subjects->Count; i++)
            if (strcmp(si->State.Subjects->List[i].Subject, st_nats_log_subject(l)) == 0)
                n = si->State.Subjects->List[i].Msgs;
    jsStreamInfo_Destroy(si);
    raw_close(&c);
    return n;
}

/* Look events of append_range up by id and by key, as anyone may. */
static void check_find(st_nats_log *l, uint64_t count)
{
    static const uint64_t probe[] = {0, 1, 99, 100, 137, 199, 200, 249, 250, 479};
    char v[32];
    uint64_t at = UINT64_MAX;
    for (size_t i = 0; i < sizeof probe / sizeof probe[0] && probe[i] < count; i++) {
        snprintf(v, sizeof v, "ev-%llu", (unsigned long long)probe[i]);
        int r = st_nats_log_find(l, v, strlen(v), &at);
        ck_assert_msg(r == 0 && at == probe[i], "find %s: %d at %llu (%s)", v, r,
                      (unsigned long long)at, st_nats_log_error(l));
        snprintf(v, sizeof v, "key %llu", (unsigned long long)probe[i]);
        r = st_nats_log_find_key(l, v, strlen(v), &at);
        if (probe[i] % 3)
            ck_assert_int_eq(r, -ENOENT);
        else
            ck_assert_msg(r == 0 && at == probe[i], "find key %s: %d", v, r);
    }
    snprintf(v, sizeof v, "ev-%llu", (unsigned long long)count);
    ck_assert_int_eq(st_nats_log_find(l, v, strlen(v), &at), -ENOENT);
    ck_assert_int_eq(st_nats_log_find(l, "ev-", 3, &at), -ENOENT);
    ck_assert_int_eq(st_nats_log_find(l, "", 0, &at), -ENOENT);
}

static void done(st_nats *n)
{
    st_nats_close(n);
    nats_CloseAndWait(0);
}

/* The pauses between retries (pure). */
START_TEST(test_backoff_ms)
{
    static const int64_t want[] = {20, 40, 80, 160, 320, 500, 500};
    for (int i = 0; i < 7; i++)
        ck_assert_int_eq(stn_backoff_ms(i, 20, 500), want[i]);
    ck_assert_int_eq(stn_backoff_ms(0, 250, 2000), 250);
    ck_assert_int_eq(stn_backoff_ms(3, 250, 2000), 2000);
    ck_assert_int_eq(stn_backoff_ms(1000, 250, 2000), 2000);
}
END_TEST

START_TEST(test_round_trip_across_pages)
{
    st_nats *n = connect_to(-1);
    ck_assert_int_eq(st_nats_replicas(n), 3);
    rt_uuid id;
    fresh_id(&id);
    st_nats_log *l = open_log(n, &id);
    uint64_t count = 99, epoch = 0;
    ck_assert_int_eq(st_nats_log_count(l, &count), 0);
    ck_assert_uint_eq(count, 0);
    st_nats_page *p = NULL;
    ck_assert_int_eq(st_nats_log_read(l, 0, 10, &p), 0);
    ck_assert_uint_eq(p->n, 0);
    st_nats_page_free(p);

    ck_assert_int_eq(st_nats_log_take_over(l, &epoch), 0);
    ck_assert_uint_eq(epoch, 1);
    ck_assert_uint_eq(st_nats_log_epoch(l), 1);
    /* batches of varied sizes, so pages close inside a batch and at its end */
    static const size_t batch[] = {1, 7, 42, 50, 100, 3, 47};
    uint64_t at = 0;
    for (size_t b = 0; at < 250; b = (b + 1) % (sizeof batch / sizeof batch[0])) {
        size_t k = at + batch[b] > 250 ? 250 - at : batch[b];
        int r = append_range(l, "ev", at, k);
        ck_assert_msg(r == 0, "append %llu+%zu: %s", (unsigned long long)at, k,
                      st_nats_log_error(l));
        at += k;
    }
    ck_assert_int_eq(st_nats_log_count(l, &count), 0);
    ck_assert_uint_eq(count, 250);
    /* the writer reads: its open page from memory */
    verify(l, "ev", 250, 100, 1);
    verify(l, "ev", 250, 37, 1);
    /* a reader on another server: entries for pages 0 and 1, a walk for 2 */
    st_nats *n2 = connect_to(2);
    st_nats_log *r2 = open_log(n2, &id);
    verify(r2, "ev", 250, 100, 1);
    verify(r2, "ev", 250, 250, 1);
    verify(r2, "ev", 250, 1000, 1);
    ck_assert_int_eq(st_nats_log_read(r2, 250, 10, &p), 0);
    ck_assert_uint_eq(p->n, 0);
    st_nats_page_free(p);
    ck_assert_int_eq(st_nats_log_read(r2, 245, 10, &p), 0);
    ck_assert_uint_eq(p->n, 5);
    ck_assert_uint_eq(p->ev[4].index, 249);
    ck_assert_uint_eq(p->ev[4].slot, 7); /* after a take-over and six batches */
    st_nats_page_free(p);
    ck_assert_int_eq(st_nats_log_read(r2, 99, 2, &p), 0); /* straddles a page boundary */
    ck_assert_uint_eq(p->n, 2);
    ck_assert_uint_eq(p->ev[0].index, 99);
    ck_assert_uint_eq(p->ev[1].index, 100);
    ck_assert(p->ev[0].seq < p->ev[1].seq);
    ck_assert_uint_eq(p->ev[1].prev, p->ev[0].seq);
    st_nats_page_free(p);
    /* a take-over and one record per batch (of at most 100 events) */
    ck_assert_uint_eq(subject_count(l), 8);
    /* a batch larger than a record: several records, in order */
    ck_assert_int_eq(append_range(l, "ev", 250, 230), 0);
    ck_assert_uint_eq(subject_count(l), 11);
    verify(r2, "ev", 480, 1000, 1);
    /* ids and keys found by the writer (indexed as it appended) and by a
     * reader (loaded from the page entries and the open page) */
    check_find(l, 480);
    check_find(r2, 480);
    ck_assert_uint_gt(st_nats_log_memory(r2), 480 * 16);
    /* the reader catches up with what was appended since */
    ck_assert_int_eq(append_range(l, "ev", 480, 20), 0);
    uint64_t found = 0;
    ck_assert_int_eq(st_nats_log_find(r2, "ev-499", 6, &found), 0);
    ck_assert_uint_eq(found, 499);
    st_nats_log_close(r2);
    st_nats_close(n2);
    st_nats_log_close(l);
    done(n);
}
END_TEST

START_TEST(test_take_over_fences_the_stale_writer)
{
    st_nats *na = connect_to(0), *nb = connect_to(1);
    /* one URL given: the other servers are learnt from the cluster */
    ck_assert_int_eq(st_nats_replicas(na), 3);
    rt_uuid id;
    fresh_id(&id);
    st_nats_log *a = open_log(na, &id), *b = open_log(nb, &id);
    uint64_t epoch = 0, count = 0;
    ck_assert_int_eq(append_range(a, "ev", 0, 1), -EPERM);
    ck_assert_int_eq(st_nats_log_take_over(a, &epoch), 0);
    ck_assert_uint_eq(epoch, 1);
    ck_assert_int_eq(append_range(a, "ev", 0, 5), 0);
    ck_assert_int_eq(st_nats_log_take_over(b, &epoch), 0);
    ck_assert_uint_eq(epoch, 2);
    /* a still believes it writes: its next append is refused, nothing stored */
    ck_assert_int_eq(append_range(a, "stale", 5, 3), -ESTALE);
    ck_assert_msg(strstr(st_nats_log_error(a), "fenced"), "%s", st_nats_log_error(a));
    ck_assert(st_nats_log_fenced(a));
    ck_assert_uint_eq(st_nats_log_epoch(a), 0);
    ck_assert_int_eq(append_range(a, "stale", 5, 1), -ESTALE);
    ck_assert_int_eq(append_range(b, "ev", 5, 5), 0);
    ck_assert_int_eq(st_nats_log_count(a, &count), 0);
    ck_assert_uint_eq(count, 10);
    st_nats_page *p = NULL;
    ck_assert_int_eq(st_nats_log_read(a, 0, 100, &p), 0);
    ck_assert_uint_eq(p->n, 10);
    for (uint32_t i = 0; i < 10; i++) {
        ck_assert_uint_eq(p->ev[i].epoch, i < 5 ? 1 : 2);
        ck_assert(strncmp(p->ev[i].id, "ev-", 3) == 0);
    }
    ck_assert(strncmp(p->ev[0].writer, p->ev[5].writer, 32) != 0);
    st_nats_page_free(p);
    /* a takes it back: b is fenced in turn */
    ck_assert_int_eq(st_nats_log_take_over(a, &epoch), 0);
    ck_assert_uint_eq(epoch, 3);
    ck_assert_int_eq(append_range(b, "stale", 10, 1), -ESTALE);
    ck_assert_int_eq(append_range(a, "ev", 10, 1), 0);
    ck_assert_uint_eq(subject_count(a), 6); /* 3 take-overs, 3 batches */
    st_nats_log_close(a);
    st_nats_log_close(b);
    st_nats_close(nb);
    done(na);
}
END_TEST

static int drops;
static bool drop_once(const st_nats_event *sent)
{
    if (sent->take_over || drops > 0)
        return false;
    drops++;
    return true;
}

START_TEST(test_lost_ack_sent_again_stored_once)
{
    st_nats *n = connect_to(-1);
    rt_uuid id;
    st_nats_log *l = new_writer(n, &id);
    st_nats_drop_ack = drop_once;
    ck_assert_msg(append_range(l, "ev", 0, 10) == 0, "%s", st_nats_log_error(l));
    st_nats_drop_ack = NULL;
    ck_assert_int_eq(drops, 1);
    ck_assert_uint_eq(subject_count(l), 2); /* the take-over, the batch once */
    verify(l, "ev", 10, 100, 1);

    /* the same record sent again by hand, as a client retrying later would:
     * a duplicate, not a second record */
    st_nats_page *p = NULL;
    ck_assert_int_eq(st_nats_log_read(l, 4, 1, &p), 0);
    char msgid[64];
    rt_uuid_hex(&id, msgid);
    snprintf(msgid + 32, sizeof msgid - 32, ":%llu", (unsigned long long)p->ev[0].slot);
    raw c = raw_connect(1);
    jsPubOptions po;
    jsPubOptions_Init(&po);
    po.MsgId = msgid;
    jsPubAck *pa = NULL;
    jsErrCode jerr = 0;
    ck_assert_int_eq(
        js_Publish(&pa, c.js, st_nats_log_subject(l), p->ev[0].data, (int)p->ev[0].len, &po, &jerr),
        NATS_OK);
    ck_assert(pa->Duplicate);
    ck_assert_uint_eq(pa->Sequence, p->ev[0].seq);
    jsPubAck_Destroy(pa);
    /* with the expectation the writer had: refused (10071), not stored */
    po.ExpectLastSubjectSeq = p->ev[0].prev;
    ck_assert_int_ne(
        js_Publish(&pa, c.js, st_nats_log_subject(l), p->ev[0].data, (int)p->ev[0].len, &po, &jerr),
        NATS_OK);
    ck_assert_int_eq(jerr, JSStreamWrongLastSequenceErr);
    st_nats_page_free(p);
    raw_close(&c);
    ck_assert_uint_eq(subject_count(l), 2);
    ck_assert_int_eq(append_range(l, "ev", 10, 1), 0);
    verify(l, "ev", 11, 100, 1);
    st_nats_log_close(l);
    done(n);
}
END_TEST

/* Whether the page entry `key` holds a value, asked at the bucket stream's
 * leader (kvStore_Get may be answered by a replica that lags). */
static bool entry_stored(jsCtx *js, const char *key)
{
    char subject[128];
    snprintf(subject, sizeof subject, "$KV.%s.%s", ST_NATS_PAGES, key);
    natsMsg *m = NULL;
    jsErrCode jerr = 0;
    natsStatus s = js_GetLastMsg(&m, js, "KV_" ST_NATS_PAGES, subject, NULL, &jerr);
    const char *op = NULL;
    bool stored = s == NATS_OK && natsMsgHeader_Get(m, "KV-Operation", &op) != NATS_OK &&
                  natsMsg_GetDataLength(m) == ST_NATS_PAGE * 16;
    natsMsg_Destroy(m);
    return stored;
}

/* Delete the page entry `key`, and wait until every replica of the
 * bucket's stream has the delete: the store reads entries with
 * kvStore_Get, which any replica may answer, and an entry a lagging one
 * still holds is (rightly) taken as there. */
static void delete_entry(raw *c, kvStore *kv, const char *key)
{
    ck_assert_int_eq(kvStore_Delete(kv, key), NATS_OK);
    for (int64_t until = nats_Now() + 30000;;) {
        jsStreamInfo *si = NULL;
        jsErrCode jerr = 0;
        bool behind = js_GetStreamInfo(&si, c->js, "KV_" ST_NATS_PAGES, NULL, &jerr) != NATS_OK ||
                      si->Cluster == NULL;
        for (int i = 0; !behind && i < si->Cluster->ReplicasLen; i++)
            behind = !si->Cluster->Replicas[i]->Current || si->Cluster->Replicas[i]->Lag > 0;
        jsStreamInfo_Destroy(si);
        if (!behind)
            return;
        ck_assert_msg(nats_Now() < until, "the replicas of the page entries catch up");
        nats_Sleep(20); /* polling interval, not a synchronization */
    }
}

static bool drop_all(const st_nats_event *sent)
{
    (void)sent;
    return true;
}

/* Another writer takes the log over between the parts of an append too
 * large for one record: the part stored is left behind (never read, never
 * found), and the log goes on from before the batch. */
static st_nats_log *cutter;
static int cuts;
static bool cut_after_first_part(const st_nats_event *sent)
{
    if (sent->batch_total > 0 && sent->index == sent->batch_first && cuts++ == 0)
        ck_assert_msg(st_nats_log_take_over(cutter, NULL) == 0, "%s", st_nats_log_error(cutter));
    return false;
}

START_TEST(test_batch_cut_short_left_behind)
{
    st_nats *n = connect_to(-1);
    rt_uuid id;
    st_nats_log *l = new_writer(n, &id);
    ck_assert_msg(append_range(l, "ev", 0, 150) == 0, "%s", st_nats_log_error(l));
    ck_assert_uint_eq(subject_count(l), 3); /* the take-over, two parts */
    cutter = open_log(n, &id);
    st_nats_drop_ack = cut_after_first_part;
    int r = append_range(l, "cut", 150, 250);
    st_nats_drop_ack = NULL;
    ck_assert_int_eq(cuts, 1);
    ck_assert_int_eq(r, -ESTALE);
    ck_assert_uint_eq(st_nats_log_epoch(l), 0);
    st_nats *n2 = connect_to(2);
    st_nats_log *rd = open_log(n2, &id);
    uint64_t count = 0, found = 0;
    ck_assert_int_eq(st_nats_log_count(rd, &count), 0);
    ck_assert_uint_eq(count, 150);
    ck_assert_msg(append_range(cutter, "ev", 150, 60) == 0, "%s", st_nats_log_error(cutter));
    /* the take-over, the two parts, the part left behind, a take-over, one */
    ck_assert_uint_eq(subject_count(l), 6);
    verify(rd, "ev", 210, 1000, 0);
    verify(cutter, "ev", 210, 100, 0);
    ck_assert_int_eq(st_nats_log_find(rd, "cut-150", 7, &found), -ENOENT);
    ck_assert_int_eq(st_nats_log_find(rd, "ev-150", 6, &found), 0);
    ck_assert_uint_eq(found, 150);
    /* a reader that never saw the log: page 1's entry, written by the
     * cutter, holds the events it appended, not the part left behind */
    st_nats_log *fresh = open_log(n2, &id);
    verify(fresh, "ev", 210, 37, 0);
    check_find(fresh, 210);
    st_nats_log_close(fresh);
    st_nats_log_close(rd);
    st_nats_close(n2);
    st_nats_log_close(cutter);
    st_nats_log_close(l);
    done(n);
}
END_TEST

START_TEST(test_unknown_outcome_settled_by_take_over)
{
    char servers[512], err[256];
    url(-1, servers, sizeof servers);
    /* a deadline so short that the first lost answer is the last try */
    st_nats_opts o = {.servers = servers, .shards = SHARDS, .deadline_ms = 1};
    st_nats *n = NULL;
    ck_assert_msg(st_nats_open(&o, &n, err, sizeof err) == 0, "%s", err);
    rt_uuid id;
    st_nats_log *l = new_writer(n, &id);
    ck_assert_int_eq(append_range(l, "ev", 0, 2), 0);
    st_nats_drop_ack = drop_all;
    ck_assert_int_eq(append_range(l, "ev", 2, 1), -EIO);
    st_nats_drop_ack = NULL;
    ck_assert_msg(strstr(st_nats_log_error(l), "outcome unknown"), "%s", st_nats_log_error(l));
    /* the writer does not guess: it must take over again before appending */
    ck_assert_uint_eq(st_nats_log_epoch(l), 0);
    ck_assert_int_eq(append_range(l, "ev", 3, 1), -EPERM);
    uint64_t epoch = 0, count = 0;
    ck_assert_int_eq(st_nats_log_take_over(l, &epoch), 0);
    ck_assert_uint_eq(epoch, 2);
    ck_assert_int_eq(st_nats_log_count(l, &count), 0);
    ck_assert_uint_eq(count, 3); /* it had landed */
    ck_assert_int_eq(append_range(l, "ev", 3, 2), 0);
    verify(l, "ev", 5, 100, 0);
    ck_assert_uint_eq(subject_count(l), 5); /* 2 take-overs, 3 batches */
    st_nats_log_close(l);
    done(n);
}
END_TEST

/* The bucket key of page `page`'s entry of log id (64 bytes). */
static void entry_key(const rt_uuid *id, int page, char *key)
{
    rt_uuid_hex(id, key);
    snprintf(key + 32, 64 - 32, ".%d", page);
}

/* The end of a test of page entries: the bucket's handle, the raw
 * connection, the reader, the writer, the store. */
static void entries_done(kvStore *kv, raw *c, st_nats_log *r, st_nats_log *l, st_nats *n)
{
    kvStore_Destroy(kv);
    raw_close(c);
    st_nats_log_close(r);
    st_nats_log_close(l);
    done(n);
}

START_TEST(test_missing_page_entry_rebuilt)
{
    st_nats *n = connect_to(-1);
    rt_uuid id;
    st_nats_log *l = new_writer(n, &id);
    ck_assert_int_eq(append_range(l, "ev", 0, 230), 0);
    /* as if the writer died between closing pages and writing their
     * entries: a reader walks the chain and writes them again */
    char key[64];
    raw c = raw_connect(0);
    kvStore *kv = NULL;
    ck_assert_int_eq(js_KeyValue(&kv, c.js, ST_NATS_PAGES), NATS_OK);
    for (int page = 0; page < 2; page++) {
        entry_key(&id, page, key);
        delete_entry(&c, kv, key);
    }
    st_nats_log *r = open_log(n, &id);
    verify(r, "ev", 230, 100, 1);
    ck_assert(entry_stored(c.js, key)); /* page 1 written again */
    /* a take-over writes the last closed page's entry when it is missing */
    delete_entry(&c, kv, key);
    ck_assert(!entry_stored(c.js, key));
    ck_assert_int_eq(st_nats_log_take_over(r, NULL), 0);
    ck_assert(entry_stored(c.js, key));
    /* and, having walked, it knows its open page: it closes it itself */
    ck_assert_int_eq(append_range(r, "ev", 230, 80), 0);
    entry_key(&id, 2, key);
    ck_assert(entry_stored(c.js, key));
    st_nats_log *fresh = open_log(n, &id);
    verify(fresh, "ev", 310, 100, 0);
    check_find(fresh, 310); /* from entries that walks rebuilt */
    st_nats_log_close(fresh);
    entries_done(kv, &c, r, l, n);
}
END_TEST

/* A page entry lost while later ones were stored (its writer could not
 * reach the bucket as the page closed, e.g. with its leader killed): a
 * reader walks from the next page's first record, not from the log's
 * end, which may be further back than a walk may go. */
START_TEST(test_lost_page_entry_walked_from_the_next_page)
{
    st_nats *n = connect_to(-1);
    rt_uuid id;
    st_nats_log *l = new_writer(n, &id);
    for (uint64_t i = 0; i < 350; i++) /* a record each */
        ck_assert_msg(append_range(l, "ev", i, 1) == 0, "%s", st_nats_log_error(l));
    char key[64];
    raw c = raw_connect(0);
    kvStore *kv = NULL;
    ck_assert_int_eq(js_KeyValue(&kv, c.js, ST_NATS_PAGES), NATS_OK);
    entry_key(&id, 0, key);
    delete_entry(&c, kv, key);
    stn_walk_max = 150; /* from page 1: 100 records back; from the end: 350 */
    st_nats_log *r = open_log(n, &id);
    verify(r, "ev", 350, 100, 1);
    stn_walk_max = STN_WALK_MAX;
    ck_assert(entry_stored(c.js, key)); /* written again */
    entries_done(kv, &c, r, l, n);
}
END_TEST

/* Whether page `page`'s entry of log id is stored. */
static bool page_stored(jsCtx *js, const rt_uuid *id, int page)
{
    char key[64];
    entry_key(id, page, key);
    return entry_stored(js, key);
}

/* Page entries the writer could not store as their pages closed (the
 * bucket out of reach) are stored after the next one it can: the newest
 * STN_OWED of them; readers walk for the others. */
START_TEST(test_failed_page_entries_stored_later)
{
    st_nats *n = connect_to(-1);
    rt_uuid id;
    st_nats_log *l = new_writer(n, &id);
    raw c = raw_connect(0);
    stn_fail_page_puts = 1;
    ck_assert_int_eq(append_range(l, "ev", 0, 100), 0);
    ck_assert(!page_stored(c.js, &id, 0));
    ck_assert_int_eq(append_range(l, "ev", 100, 100), 0);
    ck_assert(page_stored(c.js, &id, 1));
    ck_assert(page_stored(c.js, &id, 0)); /* owed, stored after page 1's */
    /* more fail than are kept: pages 2 .. STN_OWED + 3 */
    int last = STN_OWED + 4;
    stn_fail_page_puts = STN_OWED + 2;
    for (int p = 2; p < last; p++)
        ck_assert_int_eq(append_range(l, "ev", (uint64_t)p * 100, 100), 0);
    for (int p = 2; p < last; p++)
        ck_assert_msg(!page_stored(c.js, &id, p), "page %d not stored yet", p);
    ck_assert_int_eq(append_range(l, "ev", (uint64_t)last * 100, 100), 0);
    ck_assert_int_eq(stn_fail_page_puts, 0);
    for (int p = 2; p <= last; p++)
        ck_assert_msg(page_stored(c.js, &id, p) == (p >= 4), "page %d: stored %d", p, p >= 4);
    st_nats_log *r = open_log(n, &id);
    verify(r, "ev", (uint64_t)(last + 1) * 100, 100, 1);
    ck_assert(page_stored(c.js, &id, 2) && page_stored(c.js, &id, 3)); /* the reader's walks */
    raw_close(&c);
    st_nats_log_close(r);
    st_nats_log_close(l);
    done(n);
}
END_TEST

/* The shard count is the cluster's: recorded by the first open, taken by
 * an open that gives none, refused to an open that gives another. */
START_TEST(test_shard_count_is_the_clusters)
{
    st_nats *n = connect_to(-1);
    ck_assert_uint_eq(st_nats_shards(n), SHARDS);
    char servers[512], err[256] = "";
    url(-1, servers, sizeof servers);
    st_nats_opts o = {.servers = servers, .node = "test"};
    st_nats *m = NULL;
    ck_assert_msg(st_nats_open(&o, &m, err, sizeof err) == 0, "%s", err);
    ck_assert_uint_eq(st_nats_shards(m), SHARDS);
    st_nats_close(m);
    m = NULL;
    o.shards = SHARDS + 1;
    ck_assert_int_eq(st_nats_open(&o, &m, err, sizeof err), -EINVAL);
    ck_assert_ptr_null(m);
    ck_assert_msg(strstr(err, "on 4 shard streams, not 5"), "%s", err);
    st_nats_close(n);
}
END_TEST

START_TEST(test_bounds_and_errors)
{
    char err[256] = "";
    st_nats *bad = NULL;
    /* a port nothing listens on: the discard port of loopback */
    st_nats_opts o = {.servers = "127.0.0.1:9", .request_ms = 300};
    int r = st_nats_open(&o, &bad, err, sizeof err);
    ck_assert_int_eq(r, -ENOTCONN);
    ck_assert_msg(strncmp(err, "NATS unreachable: 127.0.0.1:9", 29) == 0, "%s", err);
    ck_assert_ptr_null(bad);
    o.servers = " , ";
    ck_assert_int_eq(st_nats_open(&o, &bad, err, sizeof err), -EINVAL);

    st_nats *n = connect_to(-1);
    rt_uuid id;
    st_nats_log *l = new_writer(n, &id);
    uint64_t first;
    size_t stored = 99;
    st_nats_item it = {.id = "bad\nid", .idlen = 6, .data = "{}", .len = 2};
    ck_assert_int_eq(st_nats_log_append(l, &it, 1, &first, &stored), -EINVAL);
    ck_assert_uint_eq(stored, 0);
    it.id = " x";
    it.idlen = 2;
    ck_assert_int_eq(st_nats_log_append(l, &it, 1, &first, &stored), -EINVAL);
    size_t big = (size_t)st_nats_max_payload(n);
    char *body = calloc(1, big);
    ck_assert_ptr_nonnull(body);
    it = (st_nats_item){.id = "e", .idlen = 1, .data = body, .len = big};
    ck_assert_int_eq(st_nats_log_append(l, &it, 1, &first, &stored), -EMSGSIZE);
    ck_assert_msg(strstr(st_nats_log_error(l), "max_payload"), "%s", st_nats_log_error(l));
    it.len = big - 4096; /* just below, with the headers: stored */
    ck_assert_int_eq(st_nats_log_append(l, &it, 1, &first, &stored), 0);
    ck_assert_uint_eq(first, 0);
    free(body);
    /* a batch whose second event is refused stores nothing */
    st_nats_item two[2] = {{.id = "a", .idlen = 1, .data = "{}", .len = 2},
                           {.id = "", .idlen = 0, .data = "{}", .len = 2}};
    ck_assert_int_eq(st_nats_log_append(l, two, 2, &first, &stored), -EINVAL);
    ck_assert_uint_eq(stored, 0);
    uint64_t count;
    ck_assert_int_eq(st_nats_log_count(l, &count), 0);
    ck_assert_uint_eq(count, 1);
    st_nats_page *p = NULL;
    ck_assert_int_eq(st_nats_log_read(l, 0, 5000, &p), 0); /* max is capped, not refused */
    ck_assert_uint_eq(p->n, 1);
    ck_assert_uint_eq(p->ev[0].len, big - 4096);
    st_nats_page_free(p);
    st_nats_log_close(l);
    done(n);
}
END_TEST

/* ---- two writers on two servers racing for the same slots ------------- */

enum { MAXTRIALS = 300 };

typedef struct racer {
    int server;
    char name;
    pthread_barrier_t *bar;
    rt_uuid id;
    int trials;
    /* per trial: the result of the take-over, and of the second step
     * (an append if it believed it was the writer, else a take-over) */
    int took[MAXTRIALS], second[MAXTRIALS];
    bool appended[MAXTRIALS];
    uint64_t at[MAXTRIALS];
    char fail[256];
} racer;

static void *race(void *arg)
{
    racer *rc = arg;
    st_nats *n = connect_to(rc->server);
    st_nats_log *l = open_log(n, &rc->id);
    for (int t = 0; t < rc->trials; t++) {
        pthread_barrier_wait(rc->bar);
        rc->took[t] = st_nats_log_take_over(l, NULL);
        pthread_barrier_wait(rc->bar);
        if (st_nats_log_epoch(l)) {
            tev e;
            size_t stored;
            make_event(&e, rc->name == 'a' ? "a" : "b", (uint64_t)t);
            rc->appended[t] = true;
            rc->second[t] = st_nats_log_append(l, &e.it, 1, &rc->at[t], &stored);
        } else {
            rc->second[t] = st_nats_log_take_over(l, NULL);
        }
        int bad = rc->took[t] && rc->took[t] != -ESTALE       ? rc->took[t]
                  : rc->second[t] && rc->second[t] != -ESTALE ? rc->second[t]
                                                              : 0;
        if (bad && !rc->fail[0])
            snprintf(rc->fail, sizeof rc->fail, "trial %d: %d %s", t, bad, st_nats_log_error(l));
    }
    st_nats_log_close(l);
    st_nats_close(n);
    return NULL;
}

typedef struct audit {
    uint64_t records, events, next_slot;
    bool first;
    char fail[256];
    /* newest first: the events seen since the last take-over walked, to
     * check against that take-over's term when it is reached */
    uint64_t pend_epoch[4 * MAXTRIALS];
    char pend_writer[4 * MAXTRIALS][33];
    size_t npend;
    uint64_t later_epoch; /* the take-over after the current one (0: none) */
} audit;

static int check_record(void *ctx, const st_nats_event *r)
{
    audit *a = ctx;
    if (a->first) {
        a->first = false;
    } else if (r->slot + 1 != a->next_slot) {
        snprintf(a->fail, sizeof a->fail, "slot %llu after slot %llu", (unsigned long long)r->slot,
                 (unsigned long long)a->next_slot);
        return 1;
    }
    a->next_slot = r->slot;
    a->records++;
    if (!r->take_over) {
        a->events += r->count;
        if (a->npend == sizeof a->pend_epoch / sizeof a->pend_epoch[0])
            return snprintf(a->fail, sizeof a->fail, "too many events"), 1;
        a->pend_epoch[a->npend] = r->epoch;
        memcpy(a->pend_writer[a->npend++], r->writer, 33);
        return 0;
    }
    /* every event after this take-over (and before the next) is its term's */
    for (size_t i = 0; i < a->npend; i++)
        if (a->pend_epoch[i] != r->epoch || strncmp(a->pend_writer[i], r->writer, 32) != 0) {
            snprintf(a->fail, sizeof a->fail,
                     "an event of epoch %llu follows the take-over of epoch %llu (slot %llu): "
                     "appended by a fenced writer",
                     (unsigned long long)a->pend_epoch[i], (unsigned long long)r->epoch,
                     (unsigned long long)r->slot);
            return 1;
        }
    if (a->later_epoch && r->epoch >= a->later_epoch) {
        snprintf(a->fail, sizeof a->fail, "epochs do not grow at slot %llu",
                 (unsigned long long)r->slot);
        return 1;
    }
    a->later_epoch = r->epoch;
    a->npend = 0;
    return 0;
}

START_TEST(test_split_writers_one_record_per_slot)
{
    rt_uuid id;
    fresh_id(&id);
    pthread_barrier_t bar;
    pthread_barrier_init(&bar, NULL, 2);
    static racer rc[2];
    int trials = MAXTRIALS;
    for (int i = 0; i < 2; i++) {
        memset(&rc[i], 0, sizeof rc[i]);
        rc[i] =
            (racer){.server = i, .name = (char)('a' + i), .bar = &bar, .id = id, .trials = trials};
    }
    pthread_t th[2];
    for (int i = 0; i < 2; i++)
        ck_assert_int_eq(pthread_create(&th[i], NULL, race, &rc[i]), 0);
    for (int i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
    pthread_barrier_destroy(&bar);
    for (int i = 0; i < 2; i++)
        ck_assert_msg(!rc[i].fail[0], "writer %c: %s", rc[i].name, rc[i].fail);

    int both_took = 0, one_took = 0, appends = 0, fenced_appends = 0;
    for (int t = 0; t < trials; t++) {
        int took = (rc[0].took[t] == 0) + (rc[1].took[t] == 0);
        both_took += took == 2;
        one_took += took == 1;
        for (int i = 0; i < 2; i++)
            if (rc[i].appended[t]) {
                appends += rc[i].second[t] == 0;
                fenced_appends += rc[i].second[t] == -ESTALE;
            }
    }
    ck_assert_msg(both_took + one_took == trials, "a trial where no take-over succeeded");

    /* every acknowledged append is in the log at its index, with its id;
     * no refused one is anywhere */
    st_nats *n = connect_to(2);
    st_nats_log *l = open_log(n, &id);
    uint64_t count = 0;
    ck_assert_int_eq(st_nats_log_count(l, &count), 0);
    ck_assert_uint_eq(count, (uint64_t)appends);
    char *seen = calloc(2 * (size_t)trials, 1);
    for (uint64_t at = 0; at < count;) {
        st_nats_page *p = NULL;
        ck_assert_msg(st_nats_log_read(l, at, 1000, &p) == 0, "%s", st_nats_log_error(l));
        ck_assert_uint_gt(p->n, 0);
        for (uint32_t i = 0; i < p->n; i++) {
            const st_nats_event *e = &p->ev[i];
            int w = e->id[0] == 'a' ? 0 : 1, t = atoi(e->id + 2);
            ts_require(t >= 0 && t < trials && !seen[w * trials + t], "event %.*s twice",
                       (int)e->idlen, e->id);
            seen[w * trials + t] = 1;
            ts_require(rc[w].appended[t] && rc[w].second[t] == 0 && rc[w].at[t] == e->index,
                       "event %.*s at %llu: its append answered %d at %llu", (int)e->idlen, e->id,
                       (unsigned long long)e->index, rc[w].second[t],
                       (unsigned long long)rc[w].at[t]);
        }
        at += p->n;
        st_nats_page_free(p);
    }
    free(seen);
    /* the chain: one record per slot, no event after a take-over but its
     * term's, and nothing stored outside the chain */
    static audit a;
    memset(&a, 0, sizeof a);
    a.first = true;
    ck_assert_msg(st_nats_log_walk(l, check_record, &a) == 0, "%s / %s", a.fail,
                  st_nats_log_error(l));
    ck_assert_uint_eq(a.next_slot, 0);
    ck_assert_uint_eq(a.events, count);
    ck_assert_uint_eq(subject_count(l), a.records);
    fprintf(stderr,
            "split writers: %d trials, both take-overs stored %d, one %d; appends stored %d, "
            "fenced %d; %llu records\n",
            trials, both_took, one_took, appends, fenced_appends, (unsigned long long)a.records);
    st_nats_log_close(l);
    done(n);
}
END_TEST

/* ---- the stream leader killed under a writer ----------------------------- */

/* Run nats_cluster.py on the test's cluster: "kill 2", "restart 2". */
static void cluster(const char *what)
{
    const char *script = getenv("PARLEY_NATS_CLUSTER"), *dir = getenv("PARLEY_NATS_DIR");
    ck_assert_msg(script && dir, "PARLEY_NATS_CLUSTER/PARLEY_NATS_DIR not set: run through "
                                 "nats_cluster.py run");
    char cmd[1024], verb[16];
    int node = 0;
    ck_assert_int_eq(sscanf(what, "%15s %d", verb, &node), 2);
    snprintf(cmd, sizeof cmd, "python3 '%s' %s '%s' %d", script, verb, dir, node);
    ck_assert_msg(system(cmd) == 0, "%s failed", cmd);
}

/* The node (1-based) that leads the log's stream now. */
static int stream_leader(st_nats_log *l)
{
    raw c = raw_connect(-1);
    jsStreamInfo *si = NULL;
    jsErrCode jerr = 0;
    ck_assert_int_eq(js_GetStreamInfo(&si, c.js, st_nats_log_stream(l), NULL, &jerr), NATS_OK);
    ck_assert_ptr_nonnull(si->Cluster);
    int node = 0;
    ck_assert_int_eq(sscanf(si->Cluster->Leader, "n%d", &node), 1);
    jsStreamInfo_Destroy(si);
    raw_close(&c);
    return node;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

typedef struct chaos {
    st_nats_log *l;
    ts_counter acked; /* appends answered 0 */
    _Atomic bool stop;
    int unknown, retried; /* outcomes resolved by a new take-over; plain retries */
    double stalled_s;     /* the longest time between two acked appends */
    double stall_at;      /* when it began */
    char fail[320];
} chaos;

/* Event k at index k, one by one. An outcome that is unknown (the answer
 * was lost) is settled as a node would: take over, then look at the log. */
static void *chaos_writer(void *arg)
{
    chaos *ch = arg;
    uint64_t k = 0;
    double last = now_s();
    while (!atomic_load(&ch->stop) && !ch->fail[0]) {
        tev e;
        make_event(&e, "ev", k);
        uint64_t first = 0;
        size_t stored = 0;
        int r = st_nats_log_append(ch->l, &e.it, 1, &first, &stored);
        if (r == 0) {
            if (first != k)
                snprintf(ch->fail, sizeof ch->fail, "ev-%llu acked at %llu", (unsigned long long)k,
                         (unsigned long long)first);
            k++;
            double now = now_s();
            if (now - last > ch->stalled_s) {
                ch->stalled_s = now - last;
                ch->stall_at = last;
            }
            last = now;
            ts_counter_add(&ch->acked, 1);
            continue;
        }
        if (r != -EIO) {
            if (r == -ESTALE || r == -EPERM)
                snprintf(ch->fail, sizeof ch->fail, "ev-%llu: %d %s", (unsigned long long)k, r,
                         st_nats_log_error(ch->l));
            ch->retried++;
            continue; /* nothing was stored: the same event again */
        }
        ch->unknown++;
        while (!ch->fail[0] && (r = st_nats_log_take_over(ch->l, NULL)) != 0)
            if (r == -ESTALE || r == -EPERM)
                snprintf(ch->fail, sizeof ch->fail, "take-over: %s", st_nats_log_error(ch->l));
        uint64_t count = 0;
        if (!ch->fail[0] && st_nats_log_count(ch->l, &count) == 0 && count == k + 1)
            k++; /* it landed (verified by id at the end) */
    }
    return NULL;
}

START_TEST(test_stream_leader_killed_under_a_writer)
{
    st_nats *n = connect_to(-1);
    rt_uuid id;
    static chaos ch;
    memset(&ch, 0, sizeof ch);
    ch.l = new_writer(n, &id);
    ts_counter_init(&ch.acked);
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, chaos_writer, &ch), 0);
    ck_assert(ts_counter_wait(&ch.acked, 150));
    int leader = stream_leader(ch.l);
    char what[32];
    snprintf(what, sizeof what, "kill %d", leader);
    cluster(what);
    long before = ts_counter_get(&ch.acked);
    double t = now_s();
    /* appends go on once another node leads the stream (t: the node is gone).
     * nats-server 2.9 elects after 4-9 s of silence, and a split vote starts
     * another round: 16 s has been seen here, so the bound is a minute. */
    bool resumed = ts_counter_wait_ms(&ch.acked, before + 100, 60000);
    double failover = now_s() - t;
    snprintf(what, sizeof what, "restart %d", leader);
    double restart = now_s();
    cluster(what);
    double restarted = now_s();
    before = ts_counter_get(&ch.acked);
    bool after_restart = ts_counter_wait(&ch.acked, before + 100);
    atomic_store(&ch.stop, true);
    pthread_join(th, NULL);
    ck_assert_msg(!ch.fail[0], "%s", ch.fail);
    ck_assert_msg(resumed && after_restart, "appends did not resume (%s, %s)",
                  resumed ? "resumed" : "stuck after the kill",
                  after_restart ? "resumed" : "stuck after the restart");

    /* every event once, at its index, in order: read from another server */
    uint64_t count = 0;
    ck_assert_int_eq(st_nats_log_count(ch.l, &count), 0);
    ck_assert_uint_ge(count, (uint64_t)ts_counter_get(&ch.acked));
    verify(ch.l, "ev", count, 100, 0);
    fprintf(stderr,
            "stream leader n%d killed under a writer: %llu events, appends resumed after "
            "<= %.1f s; longest stall %.1f s, from %+.1f s after the kill (restart at %+.1f s, "
            "healthy at %+.1f s); %d outcomes settled by a take-over, %d retries\n",
            leader, (unsigned long long)count, failover, ch.stalled_s, ch.stall_at - t, restart - t,
            restarted - t, ch.unknown, ch.retried);
    ts_counter_destroy(&ch.acked);
    st_nats_log_close(ch.l);
    done(n);
}
END_TEST

/* Reply inboxes (nats_replies.c) are kept and reused: a second take gets
 * the one given back, and an answer to its earlier use, arriving late, is
 * dropped; the current use's answer says which request it answers. */
START_TEST(test_reply_inboxes_reused_late_answers_dropped)
{
    st_nats *n = connect_to(0);
    stn_replies *a, *b;
    char first[160], late[160], now[160];
    ck_assert_int_eq(stn_replies_take(n, &a), NATS_OK);
    stn_replies_subject(a, 3, first, sizeof first);
    stn_replies_give(n, a);
    ck_assert_int_eq(stn_replies_take(n, &b), NATS_OK);
    ck_assert_ptr_eq(a, b);
    stn_replies_subject(b, 3, late, sizeof late);
    ck_assert_str_ne(first, late); /* a new generation */
    stn_replies_subject(b, 7, now, sizeof now);
    ck_assert_int_eq(natsConnection_PublishString(n->nc, first, "late"), NATS_OK);
    ck_assert_int_eq(natsConnection_PublishString(n->nc, now, "now"), NATS_OK);
    natsMsg *m = NULL;
    size_t i = 0;
    ck_assert_int_eq(stn_replies_next(b, 5000, &m, &i), NATS_OK);
    ck_assert_uint_eq(i, 7);
    ck_assert_str_eq(natsMsg_GetData(m), "now");
    natsMsg_Destroy(m);
    ck_assert_int_eq(stn_replies_next(b, 50, &m, &i), NATS_TIMEOUT);
    stn_replies_give(n, b);
    done(n);
}
END_TEST

static void count_msg(natsConnection *nc, natsSubscription *sub, natsMsg *m, void *ctx)
{
    (void)nc;
    (void)sub;
    atomic_fetch_add((atomic_int *)ctx, 1);
    natsMsg_Destroy(m);
}

/* A subscription given up is unsubscribed at once and destroyed only
 * after the connection has counted a later message (nats_subs.c). */
START_TEST(test_retired_subscription_kept_until_a_later_message)
{
    st_nats *n = connect_to(0);
    natsInbox *a_subj = NULL, *b_subj = NULL;
    ck_assert_int_eq(natsInbox_Create(&a_subj), NATS_OK);
    ck_assert_int_eq(natsInbox_Create(&b_subj), NATS_OK);
    atomic_int got = 0;
    natsSubscription *a = NULL, *b = NULL;
    ck_assert_int_eq(natsConnection_Subscribe(&a, n->nc, a_subj, count_msg, &got), NATS_OK);
    ck_assert_int_eq(natsConnection_SubscribeSync(&b, n->nc, b_subj), NATS_OK);
    ck_assert_int_eq(natsConnection_Flush(n->nc), NATS_OK);

    stn_sub_retire(n, a);
    ck_assert_ptr_nonnull(n->retired); /* no message counted since */
    stn_subs_sweep(n);
    ck_assert_ptr_nonnull(n->retired);

    /* sent after the UNSUB: not delivered to the retired one */
    ck_assert_int_eq(natsConnection_PublishString(n->nc, a_subj, "after"), NATS_OK);
    ck_assert_int_eq(natsConnection_PublishString(n->nc, b_subj, "later"), NATS_OK);
    natsMsg *m = NULL;
    ck_assert_int_eq(natsSubscription_NextMsg(&m, b, 5000), NATS_OK);
    natsMsg_Destroy(m);
    stn_subs_sweep(n);
    ck_assert_ptr_null(n->retired); /* the reading thread is past it */
    ck_assert_int_eq(atomic_load(&got), 0);

    /* a KV watcher's (synchronous) subscription: the same */
    kvWatcher *w = NULL;
    char key[160];
    snprintf(key, sizeof key, "retire%s", b_subj + strlen("_INBOX"));
    ck_assert_int_eq(kvStore_Watch(&w, n->pages, key, NULL), NATS_OK);
    stn_watch_retire(n, w);
    ck_assert_int_eq(natsConnection_PublishString(n->nc, b_subj, "later"), NATS_OK);
    ck_assert_int_eq(natsSubscription_NextMsg(&m, b, 5000), NATS_OK);
    natsMsg_Destroy(m);
    stn_subs_sweep(n);
    ck_assert_ptr_null(n->retired);

    /* one left when the store closes: destroyed after the connection */
    ck_assert_int_eq(natsConnection_Subscribe(&a, n->nc, a_subj, count_msg, &got), NATS_OK);
    stn_sub_retire(n, a);
    ck_assert_ptr_nonnull(n->retired);
    natsSubscription_Unsubscribe(b);
    natsSubscription_Destroy(b);
    natsInbox_Destroy(a_subj);
    natsInbox_Destroy(b_subj);
    done(n);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("nats_log");
    TCase *tc = tcase_create("cluster");
    tcase_set_timeout(tc, TS_SCALE(120, 600));
    tcase_add_test(tc, test_backoff_ms);
    tcase_add_test(tc, test_round_trip_across_pages);
    tcase_add_test(tc, test_take_over_fences_the_stale_writer);
    tcase_add_test(tc, test_lost_ack_sent_again_stored_once);
    tcase_add_test(tc, test_batch_cut_short_left_behind);
    tcase_add_test(tc, test_unknown_outcome_settled_by_take_over);
    tcase_add_test(tc, test_missing_page_entry_rebuilt);
    tcase_add_test(tc, test_lost_page_entry_walked_from_the_next_page);
    tcase_add_test(tc, test_failed_page_entries_stored_later);
    tcase_add_test(tc, test_shard_count_is_the_clusters);
    tcase_add_test(tc, test_bounds_and_errors);
    tcase_add_test(tc, test_split_writers_one_record_per_slot);
    tcase_add_test(tc, test_stream_leader_killed_under_a_writer);
    tcase_add_test(tc, test_reply_inboxes_reused_late_answers_dropped);
    tcase_add_test(tc, test_retired_subscription_kept_until_a_later_message);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return ts_run_suite(suite());
}
