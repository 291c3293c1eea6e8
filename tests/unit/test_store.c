/*
 * test_store.c - the store: the catalog (create, get, meta, list, lazy
 * logs, idle close), appends through the committer under each durability
 * policy, journal replay, deletion that never resurrects, and the lock on
 * the data directory. Those not about the local files run on both
 * directory backends: the local store (a plain directory) and the pool
 * (pool:DIR), as loop tests (0: local, 1: pool).
 */
#include "store/io.h"
#include "store/pool_impl.h"
#include "store/store.h"
#include "store/store_impl.h"
#include "support_store.h"
#include "support_sync.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

enum { BODY = 400 };

/* The backend of the running test: 0 local, 1 pool (its loop index). */
static int pool;

/* The location of dir for the running test's backend. */
static const char *loc(const char *dir)
{
    static char buf[4][4200];
    static int k;
    char *b = buf[k++ % 4];
    snprintf(b, sizeof(buf[0]), "%s%s", pool ? "pool:" : "local:", dir);
    return b;
}

static st_store *open_store(const char *dir, st_durability d, uint64_t interval_ms)
{
    st_opts o = {.dir = loc(dir), .durability = d, .interval_ms = interval_ms};
    st_store *s = NULL;
    char err[256];
    int r = st_store_open(&o, &s, err, sizeof(err));
    ck_assert_msg(r == 0, "open %s: %s", dir, err);
    return s;
}

static rt_uuid conv_id(int k)
{
    rt_uuid u;
    char hex[33];
    snprintf(hex, sizeof(hex), "%08x00000000000000000000%04x", 0xc0ffee00u + (unsigned)k,
             (unsigned)k);
    ck_assert(rt_uuid_parse(hex, 32, &u));
    return u;
}

/* Completion of appends, counted; the first failure kept. */
typedef struct acks {
    ts_counter done;
    _Atomic int status;
    _Atomic uint64_t first;
} acks;

static void on_done(void *ctx, int status, uint64_t first)
{
    acks *a = ctx;
    if (status != 0)
        atomic_store(&a->status, status);
    atomic_store(&a->first, first);
    ts_counter_add(&a->done, 1);
}

/* Append events [from, from + n) to c, one request each, and wait. */
static int append_wait(st_conv *c, uint64_t from, size_t n)
{
    acks a = {.status = 0};
    ts_counter_init(&a.done);
    for (size_t i = 0; i < n; i++) {
        char id[32];
        tst_event_id(from + i, id, sizeof(id));
        rt_buf *b = tst_event_body(from + i, BODY);
        st_item it = {.id = id, .idlen = (uint32_t)strlen(id), .payload = b};
        ck_assert_int_eq(st_append(c, &it, 1, on_done, &a), 0);
        rt_buf_unref(b);
    }
    ck_assert(ts_counter_wait(&a.done, (long)n));
    ts_counter_destroy(&a.done);
    return atomic_load(&a.status);
}

/* How many files of the journal end with `ext`. */
static int journal_files(const char *dir, const char *ext)
{
    char jdir[4200];
    snprintf(jdir, sizeof(jdir), "%s/journal", dir);
    DIR *d = opendir(jdir);
    ck_assert_ptr_nonnull(d);
    int n = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        size_t len = strlen(e->d_name);
        n += len > strlen(ext) && strcmp(e->d_name + len - strlen(ext), ext) == 0;
    }
    closedir(d);
    return n;
}

static st_log *log_of(st_conv *c)
{
    st_log *l = NULL;
    ck_assert_int_eq(st_conv_log(c, &l, NULL), 0);
    return l;
}

/* Create conversation id, meta "{}": held. */
static st_conv *create(st_store *s, const rt_uuid *id)
{
    rt_buf *meta = rt_buf_copy("{}", 2);
    st_conv *c;
    ck_assert_int_eq(st_conv_create(s, id, NULL, meta, &c), 0);
    rt_buf_unref(meta);
    return c;
}

START_TEST(test_parse_durability)
{
    pool = _i;
    st_durability d;
    uint64_t ms = 0;
    ck_assert_int_eq(st_parse_durability("full", &d, &ms), 0);
    ck_assert_int_eq(d, ST_FULL);
    ck_assert_int_eq(st_parse_durability("none", &d, &ms), 0);
    ck_assert_int_eq(d, ST_NONE);
    ck_assert_int_eq(st_parse_durability("interval=250", &d, &ms), 0);
    ck_assert_int_eq(d, ST_INTERVAL);
    ck_assert_uint_eq(ms, 250);
    ck_assert_int_eq(st_parse_durability("interval=2s", &d, &ms), 0);
    ck_assert_uint_eq(ms, 2000);
    const char *bad[] = {"",           "Full",        "interval",    "interval=",
                         "interval=0", "interval=-5", "interval=2y", "sometimes",
                         "interval=2h"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        ck_assert_msg(st_parse_durability(bad[i], &d, &ms) == -EINVAL, "accepted %s", bad[i]);
}
END_TEST

/* Two creates of one id at once: one makes it, the other waits for that
 * and gets -EEXIST with the made conversation, whose log opens (before,
 * it could get the half-made one and open its log under the creation). */
typedef struct racer {
    st_store *s;
    rt_uuid id;
    pthread_barrier_t *go;
    int r;
    st_conv *c;
} racer;

static void *race_create(void *arg)
{
    racer *x = arg;
    rt_buf *meta = rt_buf_copy("{}", 2);
    pthread_barrier_wait(x->go);
    x->r = st_conv_create(x->s, &x->id, NULL, meta, &x->c);
    rt_buf_unref(meta);
    return NULL;
}

START_TEST(test_catalog_create_race)
{
    pool = _i;
    char *dir = tst_mkdtemp();
    st_store *s = open_store(dir, ST_FULL, 0);
    for (int k = 0; k < 200; k++) {
        pthread_barrier_t go;
        pthread_barrier_init(&go, NULL, 2);
        racer x[2] = {{s, conv_id(1000 + k), &go, 0, NULL}, {s, conv_id(1000 + k), &go, 0, NULL}};
        pthread_t t[2];
        for (int i = 0; i < 2; i++)
            pthread_create(&t[i], NULL, race_create, &x[i]);
        for (int i = 0; i < 2; i++)
            pthread_join(t[i], NULL);
        pthread_barrier_destroy(&go);
        ck_assert_msg((x[0].r == 0 && x[1].r == -EEXIST) || (x[0].r == -EEXIST && x[1].r == 0),
                      "round %d: %d and %d", k, x[0].r, x[1].r);
        ck_assert_ptr_eq(x[0].c, x[1].c);
        st_log *l;
        ck_assert_int_eq(st_conv_log(x[0].c, &l, NULL), 0);
        st_conv_release(x[0].c);
        st_conv_release(x[1].c);
    }
    ck_assert_uint_eq(st_store_count(s), 200);
    st_store_close(s);
    tst_rmdir(dir);
    free(dir);
}
END_TEST

START_TEST(test_catalog_create_get_meta_list)
{
    pool = _i;
    char *dir = tst_mkdtemp();
    st_store *s = open_store(dir, ST_FULL, 0);
    ck_assert_uint_eq(st_store_count(s), 0);
    rt_uuid a = conv_id(1), b = conv_id(2);
    rt_buf *meta = rt_buf_copy("{\"title\":\"one\"}", 15);
    st_conv *ca, *again, *cb;
    ck_assert_int_eq(st_conv_create(s, &a, NULL, meta, &ca), 0);
    ck_assert_int_eq(st_conv_create(s, &a, NULL, meta, &again), -EEXIST);
    ck_assert_ptr_eq(again, ca);
    st_conv_release(again);
    ck_assert_int_eq(st_conv_create(s, &b, NULL, meta, &cb), 0);
    rt_buf_unref(meta);
    ck_assert_uint_eq(st_store_count(s), 2);
    rt_uuid c = conv_id(3);
    st_conv *none;
    ck_assert_int_eq(st_conv_get(s, &c, &none), -ENOENT);
    rt_buf *m2 = rt_buf_copy("{\"title\":\"two\"}", 15);
    ck_assert_int_eq(st_conv_set_meta(ca, m2), 0);
    rt_buf_unref(m2);
    rt_uuid *ids;
    size_t n;
    ck_assert_int_eq(st_store_list(s, &ids, &n), 0);
    ck_assert_uint_eq(n, 2);
    ck_assert(rt_uuid_eq(&ids[0], &a) || rt_uuid_eq(&ids[1], &a));
    free(ids);
    st_conv_release(ca);
    st_conv_release(cb);
    st_store_close(s);

    s = open_store(dir, ST_FULL, 0);
    ck_assert_uint_eq(st_store_count(s), 2);
    ck_assert_int_eq(st_conv_get(s, &a, &ca), 0);
    rt_buf *m = st_conv_meta(ca);
    ck_assert_uint_eq(rt_buf_len(m), 15);
    ck_assert(memcmp(rt_buf_data(m), "{\"title\":\"two\"}", 15) == 0);
    rt_buf_unref(m);
    /* the catalog opens no log until one is asked for */
    ck_assert_uint_eq(st_store_open_logs(s), 0);
    st_conv_release(ca);
    st_store_close(s);
    tst_rmdir(dir);
    free(dir);
}
END_TEST

static void round_trip(st_durability d, uint64_t interval)
{
    char *dir = tst_mkdtemp();
    st_store *s = open_store(dir, d, interval);
    rt_uuid ids[4];
    st_conv *c[4];
    rt_buf *meta = rt_buf_copy("{}", 2);
    for (int k = 0; k < 4; k++) {
        ids[k] = conv_id(k);
        ck_assert_int_eq(st_conv_create(s, &ids[k], NULL, meta, &c[k]), 0);
    }
    rt_buf_unref(meta);
    for (int round = 0; round < 5; round++)
        for (int k = 0; k < 4; k++)
            ck_assert_int_eq(append_wait(c[k], (uint64_t)round * 40, 40), 0);
    for (int k = 0; k < 4; k++) {
        ck_assert_int_eq(tst_verify(log_of(c[k]), 200, 30, BODY), 0);
        st_conv_release(c[k]);
    }
    st_store_close(s);
    s = open_store(dir, d, interval);
    for (int k = 0; k < 4; k++) {
        ck_assert_int_eq(st_conv_get(s, &ids[k], &c[k]), 0);
        ck_assert_int_eq(tst_verify(log_of(c[k]), 200, 64, BODY), 0);
        st_conv_release(c[k]);
    }
    st_store_close(s);
    tst_rmdir(dir);
    free(dir);
}

START_TEST(test_round_trip_full)
{
    pool = _i;
    round_trip(ST_FULL, 0);
}
END_TEST

START_TEST(test_round_trip_interval)
{
    pool = _i;
    round_trip(ST_INTERVAL, 20);
}
END_TEST

START_TEST(test_round_trip_none)
{
    pool = _i;
    round_trip(ST_NONE, 0);
}
END_TEST

/* A batch is all or nothing, in order, and reports its first index. */
START_TEST(test_batch_append)
{
    pool = _i;
    char *dir = tst_mkdtemp();
    st_store *s = open_store(dir, ST_FULL, 0);
    rt_uuid id = conv_id(9);
    st_conv *c = create(s, &id);
    ck_assert_int_eq(append_wait(c, 0, 3), 0);
    st_item it[50];
    char idb[50][32];
    for (int i = 0; i < 50; i++) {
        tst_event_id(3 + (uint64_t)i, idb[i], 32);
        it[i] = (st_item){.id = idb[i],
                          .idlen = (uint32_t)strlen(idb[i]),
                          .payload = tst_event_body(3 + (uint64_t)i, BODY)};
    }
    acks a = {.status = 0};
    ts_counter_init(&a.done);
    ck_assert_int_eq(st_append(c, it, 50, on_done, &a), 0);
    ck_assert(ts_counter_wait(&a.done, 1));
    ck_assert_int_eq(atomic_load(&a.status), 0);
    ck_assert_uint_eq(atomic_load(&a.first), 3);
    for (int i = 0; i < 50; i++)
        rt_buf_unref(it[i].payload);
    ck_assert_int_eq(tst_verify(log_of(c), 53, 10, BODY), 0);
    /* refused up front: nothing queued, nothing called */
    ck_assert_int_eq(st_append(c, it, 0, on_done, &a), -EINVAL);
    st_item bad = {.id = "", .idlen = 0, .payload = NULL};
    ck_assert_int_eq(st_append(c, &bad, 1, on_done, &a), -EINVAL);
    ts_counter_destroy(&a.done);
    st_conv_release(c);
    st_store_close(s);
    tst_rmdir(dir);
    free(dir);
}
END_TEST

/* The journal holds what the segments may have lost: cut the segment back
 * (as a power cut would have left it) and reopen; replay restores it. */
/* A child process opens dir (`full`, segments of seg_bytes, 0: the
 * default), creates conversation id and appends n events to it, and exits
 * without a close: the journal stays, as after a crash. Then the
 * conversation's segments lose their index files: seg gets the first
 * one's path. */
static void crash_after(const char *dir, const rt_uuid *id, size_t n, uint64_t seg_bytes, char *seg,
                        size_t cap)
{
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        st_opts o = {.dir = loc(dir), .durability = ST_FULL, .segment_bytes = seg_bytes};
        st_store *s;
        st_conv *c;
        rt_buf *meta = rt_buf_copy("{}", 2);
        if (st_store_open(&o, &s, NULL, 0) != 0 || st_conv_create(s, id, NULL, meta, &c) != 0)
            _exit(1);
        for (size_t i = 0; i < n; i += 20) /* a log rolls between these, when due */
            if (append_wait(c, i, n - i < 20 ? n - i : 20) != 0)
                _exit(1);
        _exit(0); /* no close: the journal stays */
    }
    int st;
    waitpid(pid, &st, 0);
    ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    char hex[33], cdir[4200];
    rt_uuid_hex(id, hex);
    snprintf(cdir, sizeof(cdir), "%s/conversations/%s", dir, hex);
    snprintf(seg, cap, "%.4200s/%020d.seg", cdir, 0);
    /* the checkpoints lost too, so that the open reads the records */
    uint64_t *firsts;
    size_t nidx;
    ck_assert_int_eq(st_list_numbered(cdir, "idx", &firsts, &nidx), 0);
    for (size_t i = 0; i < nidx; i++) {
        char idx[4500];
        snprintf(idx, sizeof(idx), "%s/%020" PRIu64 ".idx", cdir, firsts[i]);
        ck_assert_int_eq(unlink(idx), 0);
    }
    free(firsts);
}

/* Zeros over 64 bytes a third into a file. */
static void hole_in(const char *path)
{
    FILE *f = fopen(path, "r+");
    ck_assert_ptr_nonnull(f);
    static const char zeros[64];
    ck_assert_int_eq(fseek(f, (long)(tst_file_size(path) / 3), SEEK_SET), 0);
    ck_assert_uint_eq(fwrite(zeros, 1, sizeof(zeros), f), sizeof(zeros));
    fclose(f);
}

/* After crash_after(dir, id, 100) and damage: the open's replay gave the
 * conversation its 100 events back, writable; then 10 more, and after a
 * clean close nothing is left to replay. dir is removed and freed. */
static void expect_replayed(char *dir, const rt_uuid *id)
{
    st_store *s = open_store(dir, ST_FULL, 0);
    st_conv *c;
    ck_assert_int_eq(st_conv_get(s, id, &c), 0);
    ck_assert(!st_log_read_only(log_of(c)));
    ck_assert_int_eq(tst_verify(log_of(c), 100, 25, BODY), 0);
    ck_assert_int_eq(append_wait(c, 100, 10), 0);
    st_conv_release(c);
    st_store_close(s);
    /* after a clean close nothing is left to replay; at most two spares */
    ck_assert_int_eq(journal_files(dir, ".wal"), 0);
    ck_assert_int_le(journal_files(dir, ".free"), 2);
    s = open_store(dir, ST_FULL, 0);
    ck_assert_int_eq(st_conv_get(s, id, &c), 0);
    ck_assert_int_eq(tst_verify(log_of(c), 110, 100, BODY), 0);
    st_conv_release(c);
    st_store_close(s);
    tst_rmdir(dir);
    free(dir);
}

START_TEST(test_journal_replay_restores_lost_tail)
{
    pool = _i;
    char *dir = tst_mkdtemp();
    char seg[4400];
    rt_uuid id = conv_id(5);
    crash_after(dir, &id, 100, 0, seg, sizeof(seg));
    tst_truncate(seg, tst_file_size(seg) / 3);
    expect_replayed(dir, &id);
}
END_TEST

/* The segments are synced only when the journal rotates: a crash can leave
 * a hole in the last one's unsynced part with valid records after it. Its
 * log opens read-only (corrupt); the journal holds the events from the
 * hole on, so the replay cuts the segment there and writes them again. */
START_TEST(test_journal_replay_restores_a_hole)
{
    pool = _i;
    char *dir = tst_mkdtemp();
    char seg[4400];
    rt_uuid id = conv_id(6);
    crash_after(dir, &id, 100, 0, seg, sizeof(seg));
    hole_in(seg);
    expect_replayed(dir, &id);
}
END_TEST

/* The same in a segment with others after it (rolled since the journal
 * last rotated, so not synced either): the replay removes the later ones
 * and cuts the damaged one, and writes the rest again. */
START_TEST(test_journal_replay_restores_a_hole_before_later_segments)
{
    char *dir = tst_mkdtemp();
    char seg[4400];
    rt_uuid id = conv_id(7);
    crash_after(dir, &id, 100, 4096, seg, sizeof(seg));
    char hex[33], cdir[4400];
    rt_uuid_hex(&id, hex);
    snprintf(cdir, sizeof(cdir), "%s/conversations/%s", dir, hex);
    uint64_t *firsts;
    size_t n;
    ck_assert_int_eq(st_list_numbered(cdir, "seg", &firsts, &n), 0);
    free(firsts);
    ck_assert_uint_ge(n, 3);
    hole_in(seg);
    expect_replayed(dir, &id);
}
END_TEST

static char *meta_of(st_conv *c)
{
    rt_buf *m = st_conv_meta(c);
    char *s = strndup((const char *)rt_buf_data(m), rt_buf_len(m));
    rt_buf_unref(m);
    return s;
}

/* A creation under `full` is a journal record; its files are written but
 * not synced. What a power cut can leave of them (a directory missing, a
 * meta.json cut short, a parent file gone) the journal makes again; a
 * directory left by a creation that was never acknowledged goes. */
START_TEST(test_journal_replay_restores_creations)
{
    pool = _i;
    char *dir = tst_mkdtemp();
    rt_uuid a = conv_id(11), b = conv_id(12), kid = conv_id(13), ghost = conv_id(14);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        st_opts o = {.dir = loc(dir), .durability = ST_FULL};
        st_store *s;
        st_conv *c;
        rt_buf *ma = rt_buf_copy("{\"title\":\"a\"}", 13),
               *mb = rt_buf_copy("{\"title\":\"b\"}", 13),
               *mk = rt_buf_copy("{\"title\":\"kid\"}", 15);
        if (st_store_open(&o, &s, NULL, 0) != 0 || st_conv_create(s, &a, NULL, ma, &c) != 0 ||
            append_wait(c, 0, 10) != 0 || st_conv_create(s, &b, NULL, mb, &c) != 0 ||
            st_conv_create(s, &kid, &a, mk, &c) != 0)
            _exit(1);
        _exit(0); /* no close: the journal stays */
    }
    int st;
    waitpid(pid, &st, 0);
    ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    char path[4300], hex[33];
    /* what a power cut may leave: a's directory gone but for its log, b's
     * meta.json empty, kid's parent file gone, and a directory of a
     * creation never acknowledged (no record), with an empty meta.json */
    rt_uuid_hex(&a, hex);
    snprintf(path, sizeof(path), "%s/conversations/%s/meta.json", dir, hex);
    ck_assert_int_eq(unlink(path), 0);
    rt_uuid_hex(&b, hex);
    snprintf(path, sizeof(path), "%s/conversations/%s/meta.json", dir, hex);
    tst_truncate(path, 0);
    rt_uuid_hex(&kid, hex);
    snprintf(path, sizeof(path), "%s/conversations/%s/parent", dir, hex);
    ck_assert_int_eq(unlink(path), 0);
    snprintf(path, sizeof(path), "%s/conversations/%s/meta.json", dir, hex);
    tst_truncate(path, 5);
    rt_uuid_hex(&ghost, hex);
    snprintf(path, sizeof(path), "%s/conversations/%s", dir, hex);
    ck_assert_int_eq(mkdir(path, 0755), 0);
    snprintf(path, sizeof(path), "%s/conversations/%s/meta.json", dir, hex);
    FILE *f = fopen(path, "w");
    fclose(f);

    st_store *s = open_store(dir, ST_FULL, 0);
    st_conv *c;
    ck_assert_int_eq(st_store_count(s), 3);
    ck_assert_int_eq(st_conv_get(s, &a, &c), 0);
    char *m = meta_of(c);
    ck_assert_str_eq(m, "{\"title\":\"a\"}");
    free(m);
    ck_assert_int_eq(tst_verify(log_of(c), 10, 5, BODY), 0); /* its log was kept */
    st_conv_release(c);
    ck_assert_int_eq(st_conv_get(s, &b, &c), 0);
    m = meta_of(c);
    ck_assert_str_eq(m, "{\"title\":\"b\"}");
    free(m);
    st_conv_release(c);
    ck_assert_int_eq(st_conv_get(s, &kid, &c), 0);
    rt_uuid p;
    ck_assert(st_conv_parent(c, &p) && rt_uuid_eq(&p, &a));
    m = meta_of(c);
    ck_assert_str_eq(m, "{\"title\":\"kid\"}");
    free(m);
    st_conv_release(c);
    ck_assert_int_eq(st_conv_get(s, &ghost, &c), -ENOENT);
    ck_assert_int_ne(access(path, F_OK), 0); /* the ghost's directory went */
    st_store_close(s);
    /* and all of it durable now: a second open finds the same */
    s = open_store(dir, ST_FULL, 0);
    ck_assert_int_eq(st_store_count(s), 3);
    ck_assert_int_eq(st_conv_get(s, &kid, &c), 0);
    ck_assert(st_conv_parent(c, &p) && rt_uuid_eq(&p, &a));
    st_conv_release(c);
    st_store_close(s);
    /* a meta.json lost with no record to make it again, in a directory
     * that holds events: that is no creation cut short, and it is kept */
    rt_uuid_hex(&a, hex);
    snprintf(path, sizeof(path), "%s/conversations/%s/meta.json", dir, hex);
    ck_assert_int_eq(unlink(path), 0);
    s = open_store(dir, ST_FULL, 0);
    ck_assert_int_eq(st_store_count(s), 2);
    ck_assert_int_eq(st_conv_get(s, &a, &c), -ENOENT);
    st_store_close(s);
    f = fopen(path, "w");
    fputs("{\"title\":\"a\"}", f);
    fclose(f);
    s = open_store(dir, ST_FULL, 0);
    ck_assert_int_eq(st_conv_get(s, &a, &c), 0);
    ck_assert_int_eq(tst_verify(log_of(c), 10, 5, BODY), 0);
    st_conv_release(c);
    st_store_close(s);
    tst_rmdir(dir);
    free(dir);
}
END_TEST

static void on_deleted(void *ctx, int status, uint64_t first)
{
    (void)first;
    acks *a = ctx;
    atomic_store(&a->status, status);
    ts_counter_add(&a->done, 1);
}

/* Delete removes the files, and a conversation re-created with the same id
 * starts empty, also after a crash (no journal replays old events into it). */
START_TEST(test_delete_never_resurrects)
{
    pool = _i;
    char *dir = tst_mkdtemp();
    rt_uuid id = conv_id(7);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        st_opts o = {.dir = loc(dir), .durability = ST_FULL};
        st_store *s;
        st_conv *c, *other;
        rt_buf *meta = rt_buf_copy("{}", 2);
        acks a = {.status = 0};
        ts_counter_init(&a.done);
        if (st_store_open(&o, &s, NULL, 0) != 0 || st_conv_create(s, &id, NULL, meta, &c) != 0 ||
            append_wait(c, 0, 30) != 0 || st_conv_delete(c, on_deleted, &a) != 0 ||
            !ts_counter_wait(&a.done, 1) || atomic_load(&a.status) != 0 ||
            st_conv_get(s, &id, &other) != -ENOENT || st_conv_create(s, &id, NULL, meta, &c) != 0 ||
            append_wait(c, 0, 2) != 0)
            _exit(1);
        /* its log, opened now, holds the new incarnation's events only
         * (the pool: the old one's records are in the same segment) */
        st_log *l = NULL;
        if (st_conv_log(c, &l, NULL) != 0 || tst_verify(l, 2, 10, BODY) != 0)
            _exit(2);
        _exit(0); /* crash: the journal of the new one stays */
    }
    int st;
    waitpid(pid, &st, 0);
    ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    st_store *s = open_store(dir, ST_FULL, 0);
    st_conv *c;
    ck_assert_int_eq(st_conv_get(s, &id, &c), 0);
    ck_assert_int_eq(tst_verify(log_of(c), 2, 10, BODY), 0);
    /* and a delete in this process, with the log open */
    acks a = {.status = 0};
    ts_counter_init(&a.done);
    ck_assert_int_eq(st_conv_delete(c, on_deleted, &a), 0);
    ck_assert(ts_counter_wait(&a.done, 1));
    ck_assert_int_eq(atomic_load(&a.status), 0);
    ck_assert_uint_eq(st_store_count(s), 0);
    st_store_close(s);
    s = open_store(dir, ST_FULL, 0);
    ck_assert_uint_eq(st_store_count(s), 0);
    st_store_close(s);
    ts_counter_destroy(&a.done);
    tst_rmdir(dir);
    free(dir);
}
END_TEST

static size_t children(st_store *s, const rt_uuid *id, rt_uuid *first)
{
    rt_uuid *ids;
    size_t n;
    ck_assert_int_eq(st_store_children(s, id, &ids, &n), 0);
    for (size_t i = 1; i < n; i++) /* in id order */
        ck_assert_int_lt(memcmp(ids[i - 1].b, ids[i].b, 16), 0);
    if (n > 0 && first != NULL)
        *first = ids[0];
    free(ids);
    return n;
}

static void delete_wait(st_conv *c)
{
    acks a = {.status = 0};
    ts_counter_init(&a.done);
    ck_assert_int_eq(st_conv_delete(c, on_deleted, &a), 0);
    ck_assert(ts_counter_wait(&a.done, 1));
    ck_assert_int_eq(atomic_load(&a.status), 0);
    ts_counter_destroy(&a.done);
}

/* A parent is fixed at creation, survives a reopen, lists its children
 * (through table growth); deleting a child shrinks the list, deleting the
 * parent leaves the children naming it. */
START_TEST(test_parent_and_children)
{
    pool = _i;
    char *dir = tst_mkdtemp();
    st_store *s = open_store(dir, ST_FULL, 0);
    rt_uuid p = conv_id(100), self = conv_id(101), missing = conv_id(102), got;
    rt_buf *meta = rt_buf_copy("{}", 2);
    st_conv *pc, *c;
    ck_assert_int_eq(st_conv_create(s, &p, NULL, meta, &pc), 0);
    ck_assert(!st_conv_parent(pc, &got));
    ck_assert_int_eq(st_conv_create(s, &self, &self, meta, &c), -ELOOP);
    ck_assert_ptr_null(c);
    ck_assert_int_eq(st_conv_create(s, &self, &missing, meta, &c), -ENOENT);
    ck_assert_ptr_null(c);
    ck_assert_uint_eq(st_store_count(s), 1);
    /* enough children that the tables grow (1024 buckets at first) */
    enum { KIDS = 1500 };
    for (int k = 0; k < KIDS; k++) {
        rt_uuid id = conv_id(1000 + k);
        ck_assert_int_eq(st_conv_create(s, &id, &p, meta, &c), 0);
        ck_assert(st_conv_parent(c, &got) && rt_uuid_eq(&got, &p));
        st_conv_release(c);
    }
    /* taken: returned as is, whatever parent is named */
    rt_uuid k0 = conv_id(1000);
    ck_assert_int_eq(st_conv_create(s, &k0, &missing, meta, &c), -EEXIST);
    st_conv_release(c);
    ck_assert_uint_eq(children(s, &p, NULL), KIDS);
    ck_assert_uint_eq(children(s, &k0, NULL), 0);
    ck_assert_int_eq(st_conv_get(s, &k0, &c), 0);
    delete_wait(c);
    ck_assert_uint_eq(children(s, &p, NULL), KIDS - 1);
    st_conv_release(pc);
    st_store_close(s);

    s = open_store(dir, ST_FULL, 0);
    ck_assert_uint_eq(st_store_count(s), KIDS);
    ck_assert_uint_eq(children(s, &p, &got), KIDS - 1);
    rt_uuid k1 = conv_id(1001);
    ck_assert(rt_uuid_eq(&got, &k1));
    ck_assert_int_eq(st_conv_get(s, &p, &pc), 0);
    delete_wait(pc);
    ck_assert_int_eq(st_conv_get(s, &k1, &c), 0);
    ck_assert(st_conv_parent(c, &got) && rt_uuid_eq(&got, &p)); /* an orphan names it still */
    st_conv_release(c);
    ck_assert_uint_eq(children(s, &p, NULL), KIDS - 1);
    rt_uuid late = conv_id(103);
    ck_assert_int_eq(st_conv_create(s, &late, &p, meta, &c), -ENOENT);
    rt_buf_unref(meta);
    st_conv_release(c);
    st_store_close(s);
    tst_rmdir(dir);
    free(dir);
}
END_TEST

/* Small journal files rotate often and are reused as spares: whatever a
 * reused file still holds from before must never be replayed, also for a
 * conversation deleted and made again, and across crashes. */
START_TEST(test_recycled_journals_replay_nothing_stale)
{
    pool = _i;
    char *dir = tst_mkdtemp();
    rt_uuid a = conv_id(11), b = conv_id(12);
    for (int round = 0; round < 4; round++) {
        pid_t pid = fork();
        ck_assert_int_ge(pid, 0);
        if (pid == 0) {
            st_opts o = {.dir = loc(dir), .durability = ST_FULL, .journal_bytes = 16 << 10};
            st_store *s;
            st_conv *ca, *cb;
            rt_buf *meta = rt_buf_copy("{}", 2);
            if (st_store_open(&o, &s, NULL, 0) != 0)
                _exit(1);
            int ra = st_conv_create(s, &a, NULL, meta, &ca),
                rb = st_conv_create(s, &b, NULL, meta, &cb);
            if ((ra != 0 && ra != -EEXIST) || (rb != 0 && rb != -EEXIST))
                _exit(2);
            uint64_t na = st_log_count(log_of(ca)), nb = st_log_count(log_of(cb));
            if (append_wait(ca, na, 40) != 0 || append_wait(cb, nb, 40) != 0)
                _exit(3);
            if (round == 1) { /* b goes, and comes back empty */
                acks d = {.status = 0};
                ts_counter_init(&d.done);
                if (st_conv_delete(cb, on_deleted, &d) != 0 || !ts_counter_wait(&d.done, 1) ||
                    st_conv_create(s, &b, NULL, meta, &cb) != 0 || append_wait(cb, 0, 7) != 0)
                    _exit(4);
            }
            _exit(0); /* a crash: journals stay, some of them reused */
        }
        int st;
        waitpid(pid, &st, 0);
        ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "round %d: child %d", round,
                      WEXITSTATUS(st));
    }
    st_store *s = open_store(dir, ST_FULL, 0);
    st_conv *c;
    ck_assert_int_eq(st_conv_get(s, &a, &c), 0);
    ck_assert_int_eq(tst_verify(log_of(c), 160, 50, BODY), 0);
    st_conv_release(c);
    ck_assert_int_eq(st_conv_get(s, &b, &c), 0);
    ck_assert_int_eq(tst_verify(log_of(c), 7 + 40 + 40, 50, BODY), 0);
    st_conv_release(c);
    st_store_close(s);
    if (!pool)
        ck_assert_int_le(journal_files(dir, ".free"), 2);
    tst_rmdir(dir);
    free(dir);
}
END_TEST

START_TEST(test_second_store_is_refused)
{
    pool = _i;
    char *dir = tst_mkdtemp();
    st_store *s = open_store(dir, ST_FULL, 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        st_opts o = {.dir = loc(dir)};
        st_store *t;
        char err[256];
        int r = st_store_open(&o, &t, err, sizeof(err));
        char want[64];
        snprintf(want, sizeof(want), "pid %ld", (long)getppid());
        _exit(r == -EBUSY && strstr(err, "in use by another process") && strstr(err, want) ? 0 : 1);
    }
    int st;
    waitpid(pid, &st, 0);
    ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    st_store_close(s);
    tst_rmdir(dir);
    free(dir);
}
END_TEST

/* A nats:// location goes to the JetStream backend, never to a directory
 * of that name; built without libnats, it says so in one line. */
START_TEST(test_nats_location_is_not_a_directory)
{
    pool = _i;
    char *dir = tst_mkdtemp();
    char cwd[4096];
    ck_assert_ptr_nonnull(getcwd(cwd, sizeof(cwd)));
    ck_assert_int_eq(chdir(dir), 0);
    st_opts o = {.dir = "nats://127.0.0.1:1", .durability = ST_FULL};
    st_store *s = NULL;
    char err[256];
    int r = st_store_open(&o, &s, err, sizeof(err));
    ck_assert_int_lt(r, 0);
    ck_assert_ptr_null(s);
    ck_assert(err[0] != '\0' && strchr(err, '\n') == NULL);
#ifndef PARLEY_HAVE_NATS
    ck_assert_int_eq(r, -ENOTSUP);
    ck_assert_msg(strstr(err, "the NATS store is not built") != NULL, "%s", err);
#endif
    struct stat st;
    ck_assert_int_ne(stat("nats:", &st), 0);
    ck_assert_int_eq(chdir(cwd), 0);
    tst_rmdir(dir);
    free(dir);
}
END_TEST

/* Logs left unused past the TTL are closed (their lock file is free again)
 * and reopen transparently on the next use. */
START_TEST(test_idle_logs_close)
{
    pool = _i;
    char *dir = tst_mkdtemp();
    st_opts o = {.dir = loc(dir), .idle_ttl_ms = 50};
    st_store *s;
    ck_assert_int_eq(st_store_open(&o, &s, NULL, 0), 0);
    rt_uuid id = conv_id(3);
    st_conv *c = create(s, &id);
    ck_assert_int_eq(append_wait(c, 0, 5), 0);
    st_conv_release(c);
    /* the flusher checks once a second; wait for the effect, with a deadline */
    bool closed = false;
    for (int i = 0; i < 1000 && !closed; i++) {
        closed = st_store_open_logs(s) == 0;
        if (!closed)
            nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
    }
    ck_assert(closed);
    ck_assert_int_eq(st_conv_get(s, &id, &c), 0);
    ck_assert_int_eq(tst_verify(log_of(c), 5, 5, BODY), 0);
    ck_assert_int_eq(append_wait(c, 5, 5), 0);
    st_conv_release(c);
    st_store_close(s);
    tst_rmdir(dir);
    free(dir);
}
END_TEST

/* Opening reads meta.json files only: with many conversations, no log is
 * open afterwards, and a half-made conversation directory is cleaned up. */
START_TEST(test_catalog_opens_no_logs)
{
    pool = _i;
    char *dir = tst_mkdtemp();
    st_store *s = open_store(dir, ST_NONE, 0);
    rt_buf *meta = rt_buf_copy("{}", 2);
    for (int k = 0; k < 200; k++) {
        rt_uuid id = conv_id(k);
        st_conv *c;
        ck_assert_int_eq(st_conv_create(s, &id, NULL, meta, &c), 0);
        ck_assert_int_eq(append_wait(c, 0, 3), 0);
        st_conv_release(c);
    }
    rt_buf_unref(meta);
    st_store_close(s);
    char junk[4300];
    snprintf(junk, sizeof(junk), "%s/conversations/.00000000000000000000000000000000.tmp", dir);
    if (!pool)
        ck_assert_int_eq(mkdir(junk, 0755), 0);
    s = open_store(dir, ST_NONE, 0);
    ck_assert_uint_eq(st_store_count(s), 200);
    ck_assert_uint_eq(st_store_open_logs(s), 0);
    if (!pool) /* a half-made conversation directory is cleaned up */
        ck_assert_int_ne(access(junk, F_OK), 0);
    st_store_close(s);
    tst_rmdir(dir);
    free(dir);
}
END_TEST

/* Many more conversations than max_open_logs, appended in turn, each with
 * its log open while held: the store closes logs nobody holds to stay
 * under the bound, every append is acknowledged, and every conversation
 * reads back all its events afterwards, before and after a reopen. */
START_TEST(test_crowded_logs)
{
    pool = _i;
    enum { N = 120, ROUNDS = 3 };
    char *dir = tst_mkdtemp();
    st_opts o = {.dir = loc(dir), .durability = ST_FULL, .max_open_logs = 8};
    st_store *s;
    ck_assert_int_eq(st_store_open(&o, &s, NULL, 0), 0);
    for (int k = 0; k < N; k++) {
        rt_uuid id = conv_id(k);
        st_conv_release(create(s, &id));
    }
    for (int round = 0; round < ROUNDS; round++)
        for (int k = 0; k < N; k++) {
            rt_uuid id = conv_id(k);
            st_conv *c;
            ck_assert_int_eq(st_conv_get(s, &id, &c), 0);
            st_log *l = log_of(c);
            ck_assert_uint_eq(st_log_count(l), (uint64_t)round * 2);
            ck_assert_int_eq(append_wait(c, (uint64_t)round * 2, 2), 0);
            ck_assert_uint_eq(st_log_count(l), (uint64_t)round * 2 + 2);
            st_conv_release(c);
        }
    for (int pass = 0; pass < 2; pass++) {
        for (int k = 0; k < N; k++) {
            rt_uuid id = conv_id(k);
            st_conv *c;
            ck_assert_int_eq(st_conv_get(s, &id, &c), 0);
            ck_assert_int_eq(tst_verify(log_of(c), 2 * ROUNDS, 4, BODY), 0);
            st_conv_release(c);
        }
        st_store_close(s);
        if (pass == 0)
            ck_assert_int_eq(st_store_open(&o, &s, NULL, 0), 0);
    }
    tst_rmdir(dir);
    free(dir);
}
END_TEST

/* The spare's pacing (pool_spare.c): its first chunk is due once the
 * active segment is a quarter full, the later ones in step with the fill,
 * and its last before the active segment is 7/8 full: room for its sync
 * and rename before the roll. */
START_TEST(test_pool_spare_due)
{
    const uint64_t chunk = 256 << 10;
    for (uint64_t seg = 1 << 20; seg <= (uint64_t)1 << 30; seg <<= 2) {
        ck_assert_uint_eq(stp_spare_due(seg, 0), seg / 4);
        uint64_t last = 0;
        for (uint64_t at = 0; at < seg; at += chunk) {
            uint64_t due = stp_spare_due(seg, at);
            ck_assert_uint_gt(due, last);
            last = due;
        }
        ck_assert_uint_le(last, seg / 8 * 7);
    }
}
END_TEST

/* The pool's spare segment (pool_spare.c): one left by an earlier run is
 * taken by the first group as the active segment, zeros after its header; appends
 * overwrite them, the close (which seals the segment) cuts them off, and
 * a reopen finds every event. */
START_TEST(test_pool_spare_segment)
{
    pool = 1;
    enum { SEG = 1 << 20 };
    char *dir = tst_mkdtemp();
    char path[4300], seg1[4300];
    snprintf(path, sizeof(path), "%s/pool", dir);
    ck_assert_int_eq(mkdir(path, 0755), 0);
    snprintf(path, sizeof(path), "%s/pool/spare", dir);
    snprintf(seg1, sizeof(seg1), "%s/pool/%020u.seg", dir, 1u);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(ftruncate(fileno(f), SEG), 0);
    fclose(f);
    st_opts o = {.dir = loc(dir), .durability = ST_FULL, .segment_bytes = SEG};
    st_store *s;
    ck_assert_int_eq(st_store_open(&o, &s, NULL, 0), 0);
    rt_uuid id = conv_id(1);
    st_conv *c = create(s, &id);             /* the first group makes the segment */
    ck_assert_int_ne(access(path, F_OK), 0); /* taken */
    ck_assert_uint_eq(tst_file_size(seg1), SEG);
    ck_assert_int_eq(append_wait(c, 0, 20), 0);
    ck_assert_uint_eq(tst_file_size(seg1), SEG); /* written over the zeros */
    st_conv_release(c);
    st_store_close(s);
    for (int round = 1; round <= 2; round++) {
        ck_assert_int_eq(st_store_open(&o, &s, NULL, 0), 0);
        ck_assert_uint_lt(tst_file_size(seg1), SEG / 4); /* the zeros cut off at close */
        ck_assert_int_eq(st_conv_get(s, &id, &c), 0);
        ck_assert_int_eq(tst_verify(log_of(c), 20 * (uint64_t)round, 7, BODY), 0);
        ck_assert_int_eq(append_wait(c, 20 * (uint64_t)round, 20), 0);
        st_conv_release(c);
        st_store_close(s);
    }
    tst_rmdir(dir);
    free(dir);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("store");
    TCase *tc = tcase_create("store");
    tcase_add_test(tc, test_parse_durability);
    tcase_add_test(tc, test_nats_location_is_not_a_directory);
    tcase_add_loop_test(tc, test_catalog_create_get_meta_list, 0, 2);
    tcase_add_loop_test(tc, test_catalog_create_race, 0, 2);
    tcase_add_loop_test(tc, test_parent_and_children, 0, 2);
    tcase_add_loop_test(tc, test_round_trip_full, 0, 2);
    tcase_add_loop_test(tc, test_round_trip_interval, 0, 2);
    tcase_add_loop_test(tc, test_round_trip_none, 0, 2);
    tcase_add_loop_test(tc, test_batch_append, 0, 2);
    tcase_add_test(tc, test_journal_replay_restores_lost_tail);
    tcase_add_test(tc, test_journal_replay_restores_a_hole);
    tcase_add_test(tc, test_journal_replay_restores_a_hole_before_later_segments);
    tcase_add_test(tc, test_journal_replay_restores_creations);
    tcase_add_loop_test(tc, test_delete_never_resurrects, 0, 2);
    tcase_add_loop_test(tc, test_recycled_journals_replay_nothing_stale, 0, 2);
    tcase_add_loop_test(tc, test_second_store_is_refused, 0, 2);
    tcase_add_loop_test(tc, test_idle_logs_close, 0, 2);
    tcase_add_loop_test(tc, test_catalog_opens_no_logs, 0, 2);
    tcase_add_loop_test(tc, test_crowded_logs, 0, 2);
    tcase_add_test(tc, test_pool_spare_due);
    tcase_add_test(tc, test_pool_spare_segment);
    suite_add_tcase(s, tc);
    return ts_run_suite(s);
}
