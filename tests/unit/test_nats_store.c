/*
 * test_nats_store.c - the store interface (store.h, log.h's readers) on
 * both backends: each behaviour runs once on a local directory and once on
 * the 3-node JetStream cluster that tests/integration/nats_cluster.py
 * starts (PARLEY_NATS_URLS): create, get, meta, list, children, appends in
 * order, reads, finds, counts, a conversation's files, the store's files,
 * deletion, and where they differ (a batch of more than 100 events). Then what only a cluster has:
 * a second store on another server sees the same conversations, metas, events and files,
 * and a deletion removes the conversation's keys from the buckets.
 *
 * The cluster's buckets and streams are shared by every test: each makes
 * conversations with fresh random ids, and lists are checked for what the
 * test made, not for equality.
 */
#include "store/nats_store.h"
#include "store/store.h"
#include "support_store.h"
#include "support_sync.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { LOCAL = 0, NATS = 1 };

/* The i-th URL of PARLEY_NATS_URLS (i < 0: all of them). */
static void nats_url(int i, char *out, size_t cap)
{
    const char *all = getenv("PARLEY_NATS_URLS");
    ck_assert_msg(all && *all, "PARLEY_NATS_URLS is not set: run this suite through "
                               "tests/integration/nats_cluster.py run -- test_nats_store");
    const char *p = all;
    for (int k = 0; k < i; k++) {
        p = strchr(p, ',');
        ck_assert_msg(p, "PARLEY_NATS_URLS has fewer than %d servers", i + 1);
        p++;
    }
    const char *e = i < 0 ? NULL : strchr(p, ',');
    snprintf(out, cap, "%s%.*s", strstr(p, "://") ? "" : "nats://",
             (int)(e ? (size_t)(e - p) : strlen(p)), p);
}

typedef struct fixture {
    int backend;
    char *dir; /* LOCAL */
    char where[512];
    st_store *s;
} fixture;

static st_store *open_at(const char *where)
{
    st_opts o = {.dir = where, .durability = ST_FULL};
    st_store *s = NULL;
    char err[256] = "";
    int r = st_store_open(&o, &s, err, sizeof(err));
    ck_assert_msg(r == 0, "st_store_open(%s): %d %s", where, r, err);
    return s;
}

static void setup(fixture *f, int backend)
{
    f->backend = backend;
    if (backend == LOCAL) {
        f->dir = tst_mkdtemp();
        snprintf(f->where, sizeof f->where, "%s", f->dir);
    } else {
        nats_url(0, f->where, sizeof f->where);
    }
    f->s = open_at(f->where);
}

static void teardown(fixture *f)
{
    st_store_close(f->s);
    if (f->dir != NULL) {
        tst_rmdir(f->dir);
        free(f->dir);
    }
}

static rt_uuid fresh(void)
{
    rt_uuid id;
    ck_assert_int_eq(rt_uuid_v4(&id), 0);
    return id;
}

static rt_buf *text(const char *s)
{
    return rt_buf_copy(s, strlen(s));
}

static void assert_meta(st_conv *c, const char *want)
{
    rt_buf *m = st_conv_meta(c);
    ck_assert_uint_eq(rt_buf_len(m), strlen(want));
    ck_assert(memcmp(rt_buf_data(m), want, strlen(want)) == 0);
    rt_buf_unref(m);
}

static st_conv *create(st_store *s, const rt_uuid *id, const rt_uuid *parent, const char *meta)
{
    rt_buf *m = text(meta);
    st_conv *c = NULL;
    int r = st_conv_create(s, id, parent, m, &c);
    rt_buf_unref(m);
    ck_assert_msg(r == 0, "st_conv_create: %d", r);
    return c;
}

/* ---- waiting for done ------------------------------------------------------ */

typedef struct waiter {
    ts_counter n;
    int status[64];
    uint64_t first[64];
} waiter;

static void on_done(void *ctx, int status, uint64_t first)
{
    waiter *w = ctx;
    long k = ts_counter_get(&w->n);
    w->status[k] = status;
    w->first[k] = first;
    ts_counter_add(&w->n, 1);
}

static void body_of(uint64_t k, char *out, size_t cap)
{
    snprintf(out, cap, "{\"type\":\"message\",\"k\":%llu,\"text\":\"%0*d\"}", (unsigned long long)k,
             (int)(k % 50), 7);
}

/* Append events [from, from + n) (ids "ev-<k>", keys "key-<k>" for even k)
 * as one st_append. */
static int append(st_conv *c, uint64_t from, size_t n, waiter *w)
{
    st_item it[16] = {0};
    char ids[16][32], keys[16][32], body[128];
    ck_assert_uint_le(n, 16);
    for (size_t i = 0; i < n; i++) {
        uint64_t k = from + i;
        snprintf(ids[i], sizeof ids[i], "ev-%llu", (unsigned long long)k);
        snprintf(keys[i], sizeof keys[i], "key-%llu", (unsigned long long)k);
        body_of(k, body, sizeof body);
        it[i] = (st_item){.id = ids[i], .idlen = (uint32_t)strlen(ids[i]), .payload = text(body)};
        if (k % 2 == 0) {
            it[i].key = keys[i];
            it[i].keylen = (uint32_t)strlen(keys[i]);
        }
    }
    int r = st_append(c, it, n, on_done, w);
    for (size_t i = 0; i < n; i++)
        rt_buf_unref(it[i].payload);
    return r;
}

/* Events [0, count) are in c's log as append wrote them. */
static void verify(st_conv *c, uint64_t count)
{
    st_log *l = NULL;
    st_open_report rep;
    ck_assert_int_eq(st_conv_log(c, &l, &rep), 0);
    ck_assert_uint_eq(rep.count, count);
    ck_assert_uint_eq(st_log_count(l), count);
    uint64_t at = 0;
    while (at < count) {
        st_page *p = NULL;
        ck_assert_int_eq(st_log_read(l, at, 7, &p), 0);
        ck_assert_uint_eq(p->n, count - at < 7 ? count - at : 7);
        for (uint32_t i = 0; i < p->n; i++, at++) {
            char id[32], body[128];
            snprintf(id, sizeof id, "ev-%llu", (unsigned long long)at);
            body_of(at, body, sizeof body);
            const st_event_ref *e = &p->ev[i];
            const uint8_t *d = rt_buf_data(p->bytes);
            ck_assert_uint_eq(e->index, at);
            ck_assert_uint_eq(e->len, strlen(body));
            ck_assert(memcmp(d + e->off, body, e->len) == 0);
            ck_assert_uint_eq(e->id_len, strlen(id));
            ck_assert(memcmp(d + e->id_off, id, e->id_len) == 0);
        }
        st_page_free(p);
    }
    st_page *p = NULL;
    ck_assert_int_eq(st_log_read(l, count, 10, &p), 0);
    ck_assert_uint_eq(p->n, 0);
    st_page_free(p);
    uint64_t idx;
    for (uint64_t k = 0; k < count; k += 3) {
        char id[32];
        snprintf(id, sizeof id, "ev-%llu", (unsigned long long)k);
        ck_assert_int_eq(st_log_find(l, id, strlen(id), &idx), 0);
        ck_assert_uint_eq(idx, k);
        snprintf(id, sizeof id, "key-%llu", (unsigned long long)k);
        ck_assert_int_eq(st_log_find_key(l, id, strlen(id), &idx), k % 2 == 0 ? 0 : -ENOENT);
        if (k % 2 == 0)
            ck_assert_uint_eq(idx, k);
    }
    ck_assert_int_eq(st_log_find(l, "nope", 4, &idx), -ENOENT);
    ck_assert(!st_log_read_only(l));
}

/* Until st_conv_get of id on s answers want (0 or -ENOENT): another
 * store's catalog learns of creations and deletions through its watch.
 * The handle if want is 0. */
static st_conv *seen(st_store *s, const rt_uuid *id, int want)
{
    st_conv *c = NULL;
    int r = -1;
    for (int i = 0; i < 4000 && (r = st_conv_get(s, id, &c)) != want; i++) {
        if (r == 0)
            st_conv_release(c);
        c = NULL;
        nanosleep(&(struct timespec){.tv_nsec = 5000000}, NULL); /* a poll, bounded */
    }
    ck_assert_int_eq(r, want);
    return c;
}

static bool has(const rt_uuid *ids, size_t n, const rt_uuid *id)
{
    for (size_t i = 0; i < n; i++)
        if (rt_uuid_eq(&ids[i], id))
            return true;
    return false;
}

/* ---- on both backends ------------------------------------------------------ */

START_TEST(test_create_get_meta_list)
{
    fixture f = {0};
    setup(&f, _i);
    rt_uuid a = fresh(), b = fresh(), none = fresh();
    size_t before = st_store_count(f.s);
    st_conv *ca = create(f.s, &a, NULL, "{\"title\":\"a\"}");
    ck_assert(rt_uuid_eq(st_conv_id(ca), &a));
    rt_uuid p;
    ck_assert(!st_conv_parent(ca, &p));
    assert_meta(ca, "{\"title\":\"a\"}");

    st_conv *again = NULL;
    rt_buf *m = text("{}");
    ck_assert_int_eq(st_conv_create(f.s, &a, NULL, m, &again), -EEXIST);
    ck_assert_ptr_eq(again, ca); /* the same handle, held once more */
    st_conv_release(again);
    rt_buf_unref(m);

    st_conv *got = NULL;
    ck_assert_int_eq(st_conv_get(f.s, &none, &got), -ENOENT);
    ck_assert_int_eq(st_conv_get(f.s, &a, &got), 0);
    ck_assert_ptr_eq(got, ca);
    st_conv_release(got);

    rt_buf *nm = text("{\"title\":\"renamed\"}");
    ck_assert_int_eq(st_conv_set_meta(ca, nm), 0);
    rt_buf_unref(nm);
    assert_meta(ca, "{\"title\":\"renamed\"}");
    st_conv *cb = create(f.s, &b, NULL, "{\"title\":\"b\"}");
    ck_assert_uint_ge(st_store_count(f.s), before + 2);
    rt_uuid *ids = NULL;
    size_t n = 0;
    ck_assert_int_eq(st_store_list(f.s, &ids, &n), 0);
    ck_assert(has(ids, n, &a) && has(ids, n, &b) && !has(ids, n, &none));
    free(ids);
    st_conv_release(cb);
    st_conv_release(ca);

    /* released and opened again: the meta replaced is the one read */
    ck_assert_int_eq(st_conv_get(f.s, &a, &got), 0);
    assert_meta(got, "{\"title\":\"renamed\"}");
    st_conv_release(got);
    teardown(&f);
}
END_TEST

START_TEST(test_parent_and_children)
{
    fixture f = {0};
    setup(&f, _i);
    rt_uuid top = fresh(), k1 = fresh(), k2 = fresh(), none = fresh();
    st_conv *ct = create(f.s, &top, NULL, "{}");
    st_conv *c1 = create(f.s, &k1, &top, "{}");
    st_conv *c2 = create(f.s, &k2, &top, "{}");
    rt_uuid p;
    ck_assert(st_conv_parent(c1, &p) && rt_uuid_eq(&p, &top));
    st_conv *bad = NULL;
    rt_buf *m = text("{}");
    rt_uuid self = fresh();
    ck_assert_int_eq(st_conv_create(f.s, &self, &self, m, &bad), -ELOOP);
    ck_assert_int_eq(st_conv_create(f.s, &self, &none, m, &bad), -ENOENT);
    rt_buf_unref(m);
    rt_uuid *ids = NULL;
    size_t n = 0;
    ck_assert_int_eq(st_store_children(f.s, &top, &ids, &n), 0);
    ck_assert_uint_eq(n, 2);
    ck_assert(has(ids, n, &k1) && has(ids, n, &k2));
    ck_assert(memcmp(&ids[0], &ids[1], sizeof(rt_uuid)) < 0);
    free(ids);
    ck_assert_int_eq(st_store_children(f.s, &k1, &ids, &n), 0);
    ck_assert_uint_eq(n, 0);
    free(ids);
    st_conv_release(c2);
    st_conv_release(c1);
    st_conv_release(ct);
    teardown(&f);
}
END_TEST

START_TEST(test_append_read_find)
{
    fixture f = {0};
    setup(&f, _i);
    rt_uuid a = fresh();
    st_conv *c = create(f.s, &a, NULL, "{}");
    waiter w;
    ts_counter_init(&w.n);
    /* several appends in flight at once complete in order */
    size_t sizes[] = {1, 3, 16, 2, 1, 5, 9};
    uint64_t at = 0;
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        ck_assert_int_eq(append(c, at, sizes[i], &w), 0);
        at += sizes[i];
    }
    ck_assert(ts_counter_wait(&w.n, 7));
    uint64_t want = 0;
    for (size_t i = 0; i < 7; i++) {
        ck_assert_int_eq(w.status[i], 0);
        ck_assert_uint_eq(w.first[i], want);
        want += sizes[i];
    }
    verify(c, at);
    st_item bad = {.id = "x", .idlen = 0, .payload = NULL};
    ck_assert_int_eq(st_append(c, &bad, 1, on_done, &w), -EINVAL);
    st_conv_release(c);
    ts_counter_destroy(&w.n);
    teardown(&f);
}
END_TEST

/* An append is stored whole or not at all, however large: on the cluster a
 * batch of more than 100 events (or of more than max_payload bytes) is
 * several records, visible once the last is stored (nats_log.h). */
START_TEST(test_large_batch)
{
    fixture f = {0};
    setup(&f, _i);
    rt_uuid a = fresh();
    st_conv *c = create(f.s, &a, NULL, "{}");
    enum { N = 250 };
    st_item it[N];
    char ids[N][16];
    rt_buf *body = text("{\"type\":\"message\"}");
    for (int i = 0; i < N; i++) {
        snprintf(ids[i], sizeof ids[i], "big-%d", i);
        it[i] = (st_item){.id = ids[i], .idlen = (uint32_t)strlen(ids[i]), .payload = body};
    }
    waiter w;
    ts_counter_init(&w.n);
    ck_assert_int_eq(append(c, 0, 1, &w), 0);
    ck_assert_int_eq(st_append(c, it, N, on_done, &w), 0);
    rt_buf_unref(body);
    ck_assert(ts_counter_wait(&w.n, 2));
    ck_assert_int_eq(w.status[1], 0);
    ck_assert_uint_eq(w.first[1], 1);
    st_log *l = NULL;
    ck_assert_int_eq(st_conv_log(c, &l, NULL), 0);
    ck_assert_uint_eq(st_log_count(l), N + 1);
    uint64_t at = 0;
    ck_assert_int_eq(st_log_find(l, "big-249", 7, &at), 0);
    ck_assert_uint_eq(at, N);
    st_page *p = NULL;
    ck_assert_int_eq(st_log_read(l, 100, 200, &p), 0);
    ck_assert_uint_eq(p->n, 151);
    ck_assert_uint_eq(p->ev[150].index, N);
    st_page_free(p);
    ck_assert_int_eq(append(c, N + 1, 1, &w), 0); /* and the log goes on */
    ck_assert(ts_counter_wait(&w.n, 3));
    ck_assert_int_eq(w.status[2], 0);
    ck_assert_uint_eq(w.first[2], N + 1);
    st_conv_release(c);
    ts_counter_destroy(&w.n);
    teardown(&f);
}
END_TEST

START_TEST(test_files)
{
    fixture f = {0};
    setup(&f, _i);
    rt_uuid a = fresh();
    st_conv *c = create(f.s, &a, NULL, "{}");
    waiter w;
    ts_counter_init(&w.n);
    char *d = NULL;
    size_t len = 0;
    ck_assert_int_eq(st_conv_get_file(c, "checkpoint.json", &d, &len), -ENOENT);
    rt_buf *b = text("{\"at\":3}");
    ck_assert_int_eq(append(c, 0, 3, &w), 0);
    ck_assert_int_eq(st_conv_put_file(c, "checkpoint.json", b, true, on_done, &w), 0);
    ck_assert_int_eq(st_conv_put_file(c, "meta.json", b, true, on_done, &w), -EINVAL);
    rt_buf_unref(b);
    ck_assert(ts_counter_wait(&w.n, 2));
    ck_assert_int_eq(w.status[0], 0);
    ck_assert_int_eq(w.status[1], 0);
    ck_assert_int_eq(st_conv_get_file(c, "checkpoint.json", &d, &len), 0);
    ck_assert_uint_eq(len, 8);
    ck_assert(memcmp(d, "{\"at\":3}", 8) == 0);
    free(d);
    st_conv_release(c);

    /* the store's own: taken once */
    char name[64];
    snprintf(name, sizeof name, "t-%08x.json", (unsigned)rand());
    ck_assert_int_eq(st_store_put_file(f.s, name, "[1,2]", 5), 0);
    ck_assert_int_eq(st_store_put_file(f.s, "../x.json", "[]", 2), -EINVAL);
    ck_assert_int_eq(st_store_take_file(f.s, name, &d, &len), 0);
    ck_assert_uint_eq(len, 5);
    ck_assert(memcmp(d, "[1,2]", 5) == 0);
    free(d);
    ck_assert_int_eq(st_store_take_file(f.s, name, &d, &len), -ENOENT);
    ts_counter_destroy(&w.n);
    teardown(&f);
}
END_TEST

START_TEST(test_delete)
{
    fixture f = {0};
    setup(&f, _i);
    rt_uuid a = fresh();
    st_conv *c = create(f.s, &a, NULL, "{}");
    st_conv *other = NULL;
    ck_assert_int_eq(st_conv_get(f.s, &a, &other), 0);
    waiter w;
    ts_counter_init(&w.n);
    ck_assert_int_eq(append(c, 0, 2, &w), 0);
    ck_assert_int_eq(st_conv_delete(c, on_done, &w), 0); /* after the append */
    ck_assert(ts_counter_wait(&w.n, 2));
    ck_assert_int_eq(w.status[0], 0);
    ck_assert_int_eq(w.status[1], 0);
    st_conv *got = NULL;
    ck_assert_int_eq(st_conv_get(f.s, &a, &got), -ENOENT);
    ck_assert_int_eq(append(other, 2, 1, &w), -ENOENT);
    st_conv_release(other);
    ck_assert_int_eq(st_conv_get(f.s, &a, &got), -ENOENT);
    rt_uuid *ids = NULL;
    size_t n = 0;
    ck_assert_int_eq(st_store_list(f.s, &ids, &n), 0);
    ck_assert(!has(ids, n, &a));
    free(ids);
    ts_counter_destroy(&w.n);
    teardown(&f);
}
END_TEST

/* ---- a cluster's --------------------------------------------------------- */

/* Two stores on two servers: what one writes, the other reads. */
START_TEST(test_second_store_sees_the_same)
{
    char u0[256], u1[256];
    nats_url(0, u0, sizeof u0);
    nats_url(1, u1, sizeof u1);
    st_store *s0 = open_at(u0), *s1 = open_at(u1);
    rt_uuid a = fresh(), k = fresh();
    st_conv *c = create(s0, &a, NULL, "{\"title\":\"shared\"}");
    st_conv *ck = create(s0, &k, &a, "{}");
    waiter w;
    ts_counter_init(&w.n);
    ck_assert_int_eq(append(c, 0, 16, &w), 0);
    ck_assert_int_eq(append(c, 16, 4, &w), 0);
    rt_buf *b = text("{\"n\":1}");
    ck_assert_int_eq(st_conv_put_file(c, "state.json", b, true, on_done, &w), 0);
    rt_buf_unref(b);
    ck_assert(ts_counter_wait(&w.n, 3));
    ck_assert_int_eq(w.status[0] | w.status[1] | w.status[2], 0);

    st_conv *c1 = seen(s1, &a, 0);
    st_conv_release(seen(s1, &k, 0));
    assert_meta(c1, "{\"title\":\"shared\"}");
    verify(c1, 20);
    char *d = NULL;
    size_t len = 0;
    ck_assert_int_eq(st_conv_get_file(c1, "state.json", &d, &len), 0);
    ck_assert_uint_eq(len, 7);
    free(d);
    rt_uuid *ids = NULL;
    size_t n = 0;
    ck_assert_int_eq(st_store_children(s1, &a, &ids, &n), 0);
    ck_assert(n == 1 && rt_uuid_eq(&ids[0], &k));
    free(ids);
    ck_assert_int_eq(st_store_list(s1, &ids, &n), 0);
    ck_assert(has(ids, n, &a) && has(ids, n, &k));
    free(ids);
    rt_buf *m = text("{}");
    st_conv *dup = NULL;
    ck_assert_int_eq(st_conv_create(s1, &a, NULL, m, &dup), -EEXIST);
    st_conv_release(dup);
    rt_buf_unref(m);

    /* the second store appends: it takes the log over, the first is fenced */
    ck_assert_int_eq(append(c1, 20, 1, &w), 0);
    ck_assert(ts_counter_wait(&w.n, 4));
    ck_assert_int_eq(w.status[3], 0);
    ck_assert_uint_eq(w.first[3], 20);
    ck_assert_int_eq(append(c, 21, 1, &w), 0);
    ck_assert(ts_counter_wait(&w.n, 5));
    ck_assert_int_eq(w.status[4], -ESTALE);
    verify(c, 21);

    st_conv_release(c1);
    st_conv_release(ck);
    st_conv_release(c);
    ts_counter_destroy(&w.n);
    st_store_close(s1);
    st_store_close(s0);
}
END_TEST

/* Deleted on one store: the other sees it go; the id can be created
 * again, on either, as a new conversation with an empty log (the old log
 * stays in the stream, under the old incarnation). */
START_TEST(test_deleted_then_created_again)
{
    char u0[256], u1[256];
    nats_url(0, u0, sizeof u0);
    nats_url(2, u1, sizeof u1);
    st_store *s0 = open_at(u0), *s1 = open_at(u1);
    rt_uuid a = fresh();
    st_conv *c = create(s0, &a, NULL, "{\"v\":0}");
    waiter w;
    ts_counter_init(&w.n);
    ck_assert_int_eq(append(c, 0, 3, &w), 0);
    rt_buf *b = text("{\"n\":1}");
    ck_assert_int_eq(st_conv_put_file(c, "state.json", b, true, on_done, &w), 0);
    rt_buf_unref(b);
    st_conv_release(seen(s1, &a, 0));
    ck_assert_int_eq(st_conv_delete(c, on_done, &w), 0);
    ck_assert(ts_counter_wait(&w.n, 3));
    ck_assert_int_eq(w.status[2], 0);
    seen(s1, &a, -ENOENT);
    ck_assert_uint_eq(st_store_count(s1), st_store_count(s0));
    st_conv *again = create(s1, &a, NULL, "{\"v\":1}");
    st_log *l = NULL;
    ck_assert_int_eq(st_conv_log(again, &l, NULL), 0);
    ck_assert_uint_eq(st_log_count(l), 0);
    char *d = NULL;
    size_t len = 0;
    ck_assert_int_eq(st_conv_get_file(again, "state.json", &d, &len), -ENOENT);
    ck_assert_int_eq(append(again, 0, 2, &w), 0);
    ck_assert(ts_counter_wait(&w.n, 4));
    ck_assert_int_eq(w.status[3], 0);
    ck_assert_uint_eq(w.first[3], 0);
    st_conv *c0 = seen(s0, &a, 0);
    assert_meta(c0, "{\"v\":1}");
    verify(c0, 2);
    /* and deleted again, from the first store, then made a third time */
    ck_assert_int_eq(st_conv_delete(c0, on_done, &w), 0);
    ck_assert(ts_counter_wait(&w.n, 5));
    ck_assert_int_eq(w.status[4], 0);
    st_conv_release(again);
    st_conv *third = create(s0, &a, NULL, "{\"v\":2}");
    ck_assert_int_eq(st_conv_log(third, &l, NULL), 0);
    ck_assert_uint_eq(st_log_count(l), 0);
    st_conv_release(third);
    ts_counter_destroy(&w.n);
    st_store_close(s1);
    st_store_close(s0);
}
END_TEST

/* The largest event the store keeps (st_store_max_event) is stored, with
 * an id and a key of the longest; one byte more is refused at once
 * (-EMSGSIZE), so the layer above can answer 413 before appending. */
START_TEST(test_largest_event)
{
    fixture f = {0};
    setup(&f, _i);
    size_t max = st_store_max_event(f.s);
    if (f.backend == LOCAL) {
        ck_assert_uint_eq(max, (size_t)256 << 20);
        teardown(&f);
        return;
    }
    ck_assert(max > 900000 && max < (1 << 20)); /* max_payload 1 MB, less headers */
    rt_uuid a = fresh();
    st_conv *c = create(f.s, &a, NULL, "{}");
    char id[256], key[256];
    memset(id, 'i', 255);
    memset(key, 'k', 255);
    id[255] = key[255] = '\0';
    rt_buf *big = rt_buf_new(max + 1);
    memset(rt_buf_wdata(big), 'x', max + 1);
    rt_buf *fit = rt_buf_copy(rt_buf_data(big), max);
    waiter w;
    ts_counter_init(&w.n);
    st_item it = {.id = id, .idlen = 255, .key = key, .keylen = 255, .payload = big};
    ck_assert_int_eq(st_append(c, &it, 1, on_done, &w), -EMSGSIZE);
    it.payload = fit;
    ck_assert_int_eq(st_append(c, &it, 1, on_done, &w), 0);
    ck_assert(ts_counter_wait(&w.n, 1));
    ck_assert_int_eq(w.status[0], 0);
    st_log *l = NULL;
    st_page *p = NULL;
    ck_assert_int_eq(st_conv_log(c, &l, NULL), 0);
    ck_assert_int_eq(st_log_read(l, 0, 1, &p), 0);
    ck_assert_uint_eq(p->n, 1);
    ck_assert_uint_eq(p->ev[0].len, max);
    st_page_free(p);
    rt_buf_unref(big);
    rt_buf_unref(fit);
    st_conv_release(c);
    ts_counter_destroy(&w.n);
    teardown(&f);
}
END_TEST

/* Whether the key key_fmt (with the conversation's hex) is in the catalog:
 * 0 or -ENOENT. */
static int in_catalog(stn_store *s, const char *key_fmt, const char *hex)
{
    char key[80];
    snprintf(key, sizeof key, key_fmt, hex);
    return stn_kv_get(s, STN_CONVS, key, NULL, NULL);
}

/* The keys of the files of the log lhex in the files bucket: the subjects
 * its stream holds under them (a delete marker would be one). */
static int files_of(stn_store *s, const char *lhex)
{
    char filter[96];
    snprintf(filter, sizeof filter, "$KV.%s.%s.>", STN_FILES, lhex);
    jsOptions o;
    jsOptions_Init(&o);
    o.Stream.Info.SubjectsFilter = filter;
    jsStreamInfo *si = NULL;
    ck_assert_int_eq(js_GetStreamInfo(&si, s->n->js, "KV_" STN_FILES, &o, NULL), NATS_OK);
    int n = si->State.Subjects != NULL ? si->State.Subjects->Count : 0;
    jsStreamInfo_Destroy(si);
    return n;
}

/* Deleting a conversation removes its keys from the cluster, not only from
 * the lists (run_delete in nats_conv.c): its entry c., its meta m., the
 * summary s. its writer published (nats_summary.c), and its files. */
START_TEST(test_delete_removes_its_keys)
{
    char u[256];
    nats_url(0, u, sizeof u);
    st_store *s = open_at(u);
    stn_store *ns = (stn_store *)(void *)s;
    rt_uuid a = fresh();
    st_conv *c = create(s, &a, NULL, "{}");
    const stn_conv *nc = (const stn_conv *)(void *)c;
    ck_assert_uint_eq(nc->gen, 0); /* a fresh id: its entry is c.<hex> */
    /* the delete consumes c: what the keys are named after, kept */
    char hex[33], lhex[33];
    snprintf(hex, sizeof hex, "%s", nc->hex);
    snprintf(lhex, sizeof lhex, "%s", nc->lhex);
    waiter w;
    ts_counter_init(&w.n);
    ck_assert_int_eq(append(c, 0, 2, &w), 0); /* this store becomes its writer */
    rt_buf *b = text("{\"at\":2}");
    ck_assert_int_eq(st_conv_put_file(c, "checkpoint.json", b, true, on_done, &w), 0);
    ck_assert_int_eq(st_conv_put_file(c, "notes.json", b, true, on_done, &w), 0);
    ck_assert_int_eq(st_conv_set_meta(c, b), 0);
    rt_buf_unref(b);
    ck_assert(ts_counter_wait(&w.n, 3));
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(w.status[i], 0);

    /* a first summary is published at once, in the background: this node
     * knows it once its put is done */
    st_summary sum = {.status = 1, .count = 2};
    st_conv_note_summary(c, &sum);
    st_summary got;
    int r = -1;
    for (int i = 0; i < 4000 && (r = st_conv_summary(s, &a, &got)) != 0; i++)
        nanosleep(&(struct timespec){.tv_nsec = 5000000}, NULL); /* a poll, bounded */
    ck_assert_int_eq(r, 0);
    ck_assert_uint_eq(got.count, 2);
    ck_assert_int_eq(in_catalog(ns, "c.%s", hex), 0);
    ck_assert_int_eq(in_catalog(ns, "m.%s", hex), 0);
    ck_assert_int_eq(in_catalog(ns, "s.%s", hex), 0);
    ck_assert_int_eq(files_of(ns, lhex), 2);

    ck_assert_int_eq(st_conv_delete(c, on_done, &w), 0);
    ck_assert(ts_counter_wait(&w.n, 4));
    ck_assert_int_eq(w.status[3], 0);
    ck_assert_int_eq(in_catalog(ns, "c.%s", hex), -ENOENT);
    ck_assert_int_eq(in_catalog(ns, "m.%s", hex), -ENOENT);
    ck_assert_int_eq(in_catalog(ns, "s.%s", hex), -ENOENT);
    ck_assert_int_eq(in_catalog(ns, "d.%s", hex), 0); /* the tombstone stays */
    ck_assert_int_eq(files_of(ns, lhex), 0);
    ck_assert_int_eq(st_conv_summary(s, &a, &got), -ENOENT);
    ts_counter_destroy(&w.n);
    st_store_close(s);
}
END_TEST

/* Messages this store sent to the cluster so far: every request is one. */
static uint64_t sent(st_store *s)
{
    natsStatistics *st = NULL;
    uint64_t out = 0;
    ck_assert_int_eq(natsStatistics_Create(&st), NATS_OK);
    ck_assert_int_eq(natsConnection_GetStats(((stn_store *)(void *)s)->n->nc, st), NATS_OK);
    ck_assert_int_eq(natsStatistics_GetCounts(st, NULL, NULL, &out, NULL, NULL), NATS_OK);
    natsStatistics_Destroy(st);
    return out;
}

/* The conversation actor reads its own log on its loop thread (duplicate
 * lookups, the stuck detector's tail, WebSocket catch-ups): on the node
 * that writes a conversation, counting it, reading its tail and finding
 * ids and keys in it answer from memory, with no request to the cluster
 * (nats_tail.c). Before, each was a request or several, and the loop
 * waited for them. */
START_TEST(test_writer_reads_from_memory)
{
    char u[512];
    nats_url(-1, u, sizeof u);
    st_store *s = open_at(u);
    rt_uuid a = fresh();
    st_conv *c = create(s, &a, NULL, "{}");
    st_log *l = NULL;
    ck_assert_int_eq(st_conv_log(c, &l, NULL), 0);
    waiter w;
    ts_counter_init(&w.n);
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(append(c, (uint64_t)i * 16, 16, &w), 0);
    ck_assert(ts_counter_wait(&w.n, 3));
    uint64_t before = sent(s);
    for (int round = 0; round < 10; round++) {
        ck_assert_uint_eq(st_log_count(l), 48);
        st_page *p = NULL;
        ck_assert_int_eq(st_log_read(l, 28, 20, &p), 0);
        ck_assert_uint_eq(p->n, 20);
        ck_assert_uint_eq(p->ev[19].index, 47);
        st_page_free(p);
        ck_assert_int_eq(st_log_read(l, 48, 20, &p), 0);
        ck_assert_uint_eq(p->n, 0);
        st_page_free(p);
        uint64_t idx;
        char id[32];
        snprintf(id, sizeof id, "ev-%d", round * 4);
        ck_assert_int_eq(st_log_find(l, id, strlen(id), &idx), 0);
        ck_assert_uint_eq(idx, (uint64_t)round * 4);
        snprintf(id, sizeof id, "key-%d", round * 4 + 2);
        ck_assert_int_eq(st_log_find_key(l, id, strlen(id), &idx), 0);
        ck_assert_uint_eq(idx, (uint64_t)round * 4 + 2);
        ck_assert_int_eq(st_log_find(l, "nope", 4, &idx), -ENOENT);
    }
    uint64_t after = sent(s);
    ck_assert_msg(after - before <= 2, "%llu messages to the cluster for 70 reads of memory",
                  (unsigned long long)(after - before));
    verify(c, 48); /* the same answers as the cluster's */
    st_conv_release(c);
    ts_counter_destroy(&w.n);
    st_store_close(s);
}
END_TEST

/* Two stores on two servers of the cluster, and a conversation made on
 * the first with 320 events (20 appends of 16: more than memory keeps of
 * the tail), seen by the second (c1), which has not opened its log. */
typedef struct two_nodes {
    st_store *s0, *s1;
    st_conv *c, *c1;
    waiter w;
} two_nodes;

static void two_nodes_open(two_nodes *t)
{
    char u0[256], u1[256];
    nats_url(0, u0, sizeof u0);
    nats_url(1, u1, sizeof u1);
    t->s0 = open_at(u0);
    t->s1 = open_at(u1);
    rt_uuid a = fresh();
    t->c = create(t->s0, &a, NULL, "{}");
    ts_counter_init(&t->w.n);
    for (int i = 0; i < 20; i++)
        ck_assert_int_eq(append(t->c, (uint64_t)i * 16, 16, &t->w), 0);
    ck_assert(ts_counter_wait(&t->w.n, 20));
    for (int i = 0; i < 20; i++)
        ck_assert_int_eq(t->w.status[i], 0);
    t->c1 = seen(t->s1, &a, 0);
}

static void two_nodes_close(two_nodes *t)
{
    st_conv_release(t->c1);
    st_conv_release(t->c);
    ts_counter_destroy(&t->w.n);
    st_store_close(t->s1);
    st_store_close(t->s0);
}

/* A node that does not write a conversation (yet) answers its count, its
 * finds and its tail from what it loaded, with no request: the
 * conversation actor asks them on a loop thread before its first append,
 * and WebSocket streams on nodes that never write it. What memory does
 * not hold is -EWOULDBLOCK for st_log_*_now (loop code reads it in the
 * thread pool), never a request. Its first append finds that another node
 * appended meanwhile: refused (-ESTALE: its answers were of an older
 * log), memory loaded again, and the next append goes on after those. */
START_TEST(test_reader_answers_from_memory)
{
    two_nodes t;
    two_nodes_open(&t);
    st_store *s1 = t.s1;
    st_conv *c = t.c, *c1 = t.c1;
    waiter *w = &t.w;
    st_log *l = NULL, *l2 = NULL;
    st_open_report rep;
    /* opening it reads the cluster: not now (loop code opens it in the pool) */
    ck_assert_int_eq(st_conv_log_now(c1, &l2), -EWOULDBLOCK);
    ck_assert_int_eq(st_conv_log(c1, &l, &rep), 0); /* loads: blocking, in the pool */
    ck_assert_int_eq(st_conv_log_now(c1, &l2), 0);
    ck_assert_ptr_eq(l2, l);
    ck_assert_uint_eq(rep.count, 320);
    uint64_t before = sent(s1);
    for (int round = 0; round < 5; round++) {
        ck_assert_int_eq(st_conv_log(c1, &l, &rep), 0);
        ck_assert_uint_eq(rep.count, 320);
        uint64_t idx;
        for (uint64_t k = 0; k < 320; k += 7) {
            char id[32];
            snprintf(id, sizeof id, "ev-%llu", (unsigned long long)k);
            /* an id the index has, older than the tail, is confirmed by
             * reading its event: not now */
            int r = st_log_find_now(l, id, strlen(id), &idx);
            ck_assert_msg(r == (k >= 220 ? 0 : -EWOULDBLOCK), "find_now(%s): %d", id, r);
            if (r == 0)
                ck_assert_uint_eq(idx, k);
        }
        ck_assert_int_eq(st_log_find_now(l, "nope", 4, &idx), -ENOENT);
        ck_assert_int_eq(st_log_find_key(l, "key-318", 7, &idx), 0);
        ck_assert_uint_eq(idx, 318);
        st_page *p = NULL;
        ck_assert_int_eq(st_log_read_now(l, 300, 20, &p), 0);
        ck_assert_uint_eq(p->n, 20);
        ck_assert_uint_eq(p->ev[19].index, 319);
        st_page_free(p);
        ck_assert_int_eq(st_log_read_now(l, 320, 10, &p), 0);
        ck_assert_uint_eq(p->n, 0);
        st_page_free(p);
        ck_assert_int_eq(st_log_read_now(l, 0, 100, &p), -EWOULDBLOCK);
        ck_assert_ptr_null(p);
    }
    uint64_t after = sent(s1);
    ck_assert_msg(after - before <= 2, "%llu messages to the cluster for reads of memory",
                  (unsigned long long)(after - before));
    st_page *p = NULL; /* what memory lacks, the blocking readers bring */
    ck_assert_int_eq(st_log_read(l, 0, 100, &p), 0);
    ck_assert_uint_eq(p->n, 100);
    st_page_free(p);
    uint64_t idx;
    ck_assert_int_eq(st_log_find(l, "ev-17", 5, &idx), 0);
    ck_assert_uint_eq(idx, 17);
    ck_assert_int_eq(st_log_find_key_now(l, "key-16", 6, &idx), -EWOULDBLOCK);
    ck_assert_int_eq(st_log_find(l, "ev-16", 5, &idx), 0);
    ck_assert_uint_eq(idx, 16);
    /* that find read event 16 (older than the tail) and kept it: the
     * loop's next checks of it and its one-event read answer from memory
     * (the conversation actor's checks made in the thread pool first) */
    before = sent(s1);
    ck_assert_int_eq(st_log_find_now(l, "ev-16", 5, &idx), 0);
    ck_assert_uint_eq(idx, 16);
    ck_assert_int_eq(st_log_find_key_now(l, "key-16", 6, &idx), 0);
    ck_assert_uint_eq(idx, 16);
    ck_assert_int_eq(st_log_read_now(l, 16, 1, &p), 0);
    ck_assert_uint_eq(p->n, 1);
    ck_assert_uint_eq(p->ev[0].index, 16);
    ck_assert_int_eq(memcmp((const char *)rt_buf_data(p->bytes) + p->ev[0].id_off, "ev-16", 5), 0);
    st_page_free(p);
    ck_assert_int_eq(st_log_read_now(l, 16, 2, &p), -EWOULDBLOCK); /* kept: one at a time */
    ck_assert_int_eq(st_log_find_key_now(l, "key-18", 6, &idx), -EWOULDBLOCK);
    after = sent(s1);
    ck_assert_msg(after - before <= 2, "%llu messages to the cluster for reads of memory",
                  (unsigned long long)(after - before));
    ck_assert_int_eq(st_log_find_key(l, "key-18", 6, &idx), 0);
    ck_assert_uint_eq(idx, 18);
    ck_assert_int_eq(st_log_find_now(l, "ev-18", 5, &idx), 0);

    ck_assert_int_eq(append(c, 320, 4, w), 0);
    ck_assert(ts_counter_wait(&w->n, 21));
    ck_assert_int_eq(w->status[20], 0);
    ck_assert_int_eq(append(c1, 324, 1, w), 0);
    ck_assert(ts_counter_wait(&w->n, 22));
    ck_assert_int_eq(w->status[21], -ESTALE);
    ck_assert_int_eq(st_log_find_now(l, "ev-322", 6, &idx), 0);
    ck_assert_uint_eq(idx, 322);
    ck_assert_int_eq(append(c1, 324, 1, w), 0);
    ck_assert(ts_counter_wait(&w->n, 23));
    ck_assert_int_eq(w->status[22], 0);
    ck_assert_uint_eq(w->first[22], 324);
    verify(c1, 325);
    two_nodes_close(&t);
}
END_TEST

/* What the load hook does once: another node appends, and memory is
 * forgotten, as a take-over on another thread (stn_tail_claim) does when
 * it finds that the log grew. */
static struct {
    st_conv *writer;
    stn_conv *reader;
    waiter *w;
    int calls;
} grows;

static void grow_while_loading(stn_log *l)
{
    (void)l;
    if (grows.calls++ > 0)
        return;
    ck_assert_int_eq(append(grows.writer, 320, 4, grows.w), 0);
    ck_assert(ts_counter_wait(&grows.w->n, 21));
    ck_assert_int_eq(grows.w->status[20], 0);
    stn_tail_forget(grows.reader);
}

/* A load that began before memory was forgotten read an older log than
 * the one that made memory forget: it keeps nothing, and memory is loaded
 * again. Before, it kept the older log as the whole of it, and the count
 * and finds answered from memory missed what the other node had appended
 * (a take-over's reload, waiting for that load, found memory loaded). */
START_TEST(test_load_forgotten_meanwhile_keeps_nothing)
{
    two_nodes t;
    two_nodes_open(&t);
    grows.writer = t.c;
    grows.reader = (stn_conv *)(void *)t.c1;
    grows.w = &t.w;
    grows.calls = 0;
    stn_tail_loading = grow_while_loading;
    st_log *l = NULL;
    st_open_report rep;
    ck_assert_int_eq(st_conv_log(t.c1, &l, &rep), 0);
    stn_tail_loading = NULL;
    ck_assert_int_eq(grows.calls, 2); /* the first load's reads were of 320 events */
    ck_assert_uint_eq(rep.count, 324);
    uint64_t idx;
    ck_assert_int_eq(st_log_find_now(l, "ev-322", 6, &idx), 0);
    ck_assert_uint_eq(idx, 322);
    verify(t.c1, 324);
    two_nodes_close(&t);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("nats_store");
    TCase *tc = tcase_create("both");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, test_create_get_meta_list, LOCAL, NATS + 1);
    tcase_add_loop_test(tc, test_parent_and_children, LOCAL, NATS + 1);
    tcase_add_loop_test(tc, test_append_read_find, LOCAL, NATS + 1);
    tcase_add_loop_test(tc, test_large_batch, LOCAL, NATS + 1);
    tcase_add_loop_test(tc, test_files, LOCAL, NATS + 1);
    tcase_add_loop_test(tc, test_delete, LOCAL, NATS + 1);
    tcase_add_loop_test(tc, test_largest_event, LOCAL, NATS + 1);
    suite_add_tcase(s, tc);
    TCase *cl = tcase_create("cluster");
    tcase_set_timeout(cl, 120);
    tcase_add_test(cl, test_second_store_sees_the_same);
    tcase_add_test(cl, test_deleted_then_created_again);
    tcase_add_test(cl, test_delete_removes_its_keys);
    tcase_add_test(cl, test_writer_reads_from_memory);
    tcase_add_test(cl, test_reader_answers_from_memory);
    tcase_add_test(cl, test_load_forgotten_meanwhile_keeps_nothing);
    suite_add_tcase(s, cl);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? 0 : 1;
}
