/*
 * test_faults.c - disk full and I/O errors, injected through the store's
 * I/O table (store/io.h) at chosen calls: ENOSPC and EIO on the writes and
 * the syncs of segments and of the journal, short writes that stop inside a
 * record, faults while a segment rolls, while the journal rotates, during
 * the journal replay of an open, and in the middle of a group commit across
 * conversations; at the log level and through the store's committer.
 *
 * Every case checks the same promises. The failed append reports the error.
 * Nothing of it is visible (count, read, find). The files are as they were:
 * a copy of the directory taken right then and opened, which is what a crash
 * at that moment would leave, holds exactly the acknowledged events and
 * needs no repair; and no journal record of the failed append validates.
 * Once "space returns" (the fault is lifted), the next append gets the same
 * index, and the store reopens consistent.
 *
 * The store-level cases that are not about the local files run on the pool
 * backend too (pool:DIR; the second half of their loop range), where the
 * segments are the journal: a fault aimed at the journal hits them.
 *
 * The shim tells the files apart by what /proc/self/fd says they are:
 * segments (.seg), journal files (.wal), and the rest (checkpoints, meta
 * files, directories). A fault fails the matching calls after the first
 * `skip`, deterministically; a gate can hold one call, to stop the committer
 * in the middle of a group while the test queues the next one.
 */
#include "runtime/log.h"
#include "store/io.h"
#include "store/pool_impl.h"
#include "store/record.h"
#include "store/store.h"
#include "support_store.h"
#include "support_sync.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum { BODY = 300, CBODY = 3000, NCONV = 4 };

/* ------------------------------------------------------------- the shim --- */

enum { K_SEG = 1, K_WAL = 2, K_OTHER = 4, K_ANY = 7 };
enum { OP_WRITE, OP_DATASYNC, OP_FSYNC, OP_SYNCFS, NOPS };

typedef struct fault {
    int kinds; /* the files it hits: K_* bits */
    int op;
    long skip;      /* matching calls let through first */
    long times;     /* then this many fail; -1: every one, until the disk has room again */
    int err;        /* ENOSPC, EIO */
    size_t partial; /* writes: the first failing call writes this many bytes and returns
                       short, as a filling disk does; the store's retry then fails */
    bool header;    /* writes: only those into a file's first 16 bytes (a new file's
                       header, and the retry of a short write of it) */
} fault;

enum { PASS, FAIL, SHORT };

/* The running case is on the pool backend. */
static bool pool;
/* A loop test over n cases on both backends: the second half on the pool. */
#define BOTH(n)                                                                                    \
    do {                                                                                           \
        pool = _i >= (n);                                                                          \
        _i %= (n);                                                                                 \
    } while (0)

static struct {
    pthread_mutex_t mu;
    bool armed;
    fault f;
    long seen, failed;
    bool partial_done;
    long calls[K_ANY + 1][NOPS];
    bool gate_armed;
    int gate_kinds, gate_op;
} sh = {.mu = PTHREAD_MUTEX_INITIALIZER};
static ts_counter failures, gate_held, gate_open;
static ts_counter seg_writes; /* calls, to wait on */

static int fd_kind(int fd)
{
    char link[64], path[4096];
    snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, path, sizeof(path) - 1);
    if (n < 4)
        return K_OTHER;
    path[n] = '\0';
    if (strcmp(path + n - 4, ".wal") == 0)
        return K_WAL;
    if (strcmp(path + n - 4, ".seg") == 0)
        return K_SEG;
    return K_OTHER;
}

static int decide(int fd, int op, off_t off, int *err, size_t *partial)
{
    int kind = fd_kind(fd), d = PASS;
    bool hold = false;
    pthread_mutex_lock(&sh.mu);
    sh.calls[kind][op]++;
    const fault *f = &sh.f;
    if (sh.armed && (f->kinds & kind) && f->op == op &&
        (!f->header || (off >= 0 && off < ST_FILE_HDR)) && ++sh.seen > f->skip &&
        (f->times < 0 || sh.failed < f->times)) {
        if (op == OP_WRITE && f->partial > 0 && !sh.partial_done) {
            sh.partial_done = true;
            d = SHORT;
            *partial = f->partial;
        } else {
            sh.failed++;
            d = FAIL;
            *err = f->err;
        }
    }
    /* a gate holds record writes and syncs, never a new file's header */
    if (d == PASS && sh.gate_armed && (sh.gate_kinds & kind) && sh.gate_op == op &&
        (op != OP_WRITE || off >= ST_FILE_HDR)) {
        sh.gate_armed = false;
        hold = true;
    }
    pthread_mutex_unlock(&sh.mu);
    if (kind == K_SEG && op == OP_WRITE)
        ts_counter_add(&seg_writes, 1);
    if (d == FAIL)
        ts_counter_add(&failures, 1);
    if (hold) { /* the call goes through once the test opens the gate */
        ts_counter_add(&gate_held, 1);
        TS_CHECK(ts_counter_wait(&gate_open, 1));
    }
    return d;
}

static ssize_t shim_pwritev(int fd, const struct iovec *iov, int n, off_t off)
{
    int err = 0;
    size_t part = 0;
    int d = decide(fd, OP_WRITE, off, &err, &part);
    if (d == FAIL) {
        errno = err;
        return -1;
    }
    if (d == PASS)
        return pwritev(fd, iov, n, off);
    /* a short write: the first `part` bytes (never all of them) */
    size_t total = 0;
    for (int i = 0; i < n; i++)
        total += iov[i].iov_len;
    if (part >= total)
        part = total - 1;
    struct iovec *v = malloc((size_t)n * sizeof(*v));
    int k = 0;
    for (size_t left = part; v != NULL && left > 0; k++) {
        v[k] = iov[k];
        if (v[k].iov_len > left)
            v[k].iov_len = left;
        left -= v[k].iov_len;
    }
    ssize_t w = v != NULL && k > 0 ? pwritev(fd, v, k, off) : (errno = ENOSPC, -1);
    free(v);
    return w;
}

static int shim_fdatasync(int fd)
{
    int err = 0;
    size_t part;
    if (decide(fd, OP_DATASYNC, -1, &err, &part) == FAIL) {
        errno = err;
        return -1;
    }
    return fdatasync(fd);
}

static int shim_fsync(int fd)
{
    int err = 0;
    size_t part;
    if (decide(fd, OP_FSYNC, -1, &err, &part) == FAIL) {
        errno = err;
        return -1;
    }
    return fsync(fd);
}

static int shim_syncfs(int fd)
{
    int err = 0;
    size_t part;
    if (decide(fd, OP_SYNCFS, -1, &err, &part) == FAIL) {
        errno = err;
        return -1;
    }
    return syncfs(fd);
}

static const st_io shim_io = {shim_pwritev, shim_fdatasync, shim_fsync, shim_syncfs};

/* Each Check test is a process of its own: this runs once per test. */
static void shim_setup(void)
{
    ts_counter_init(&failures);
    ts_counter_init(&gate_held);
    ts_counter_init(&seg_writes);
    ts_counter_init(&gate_open);
    rt_log_set_level(RT_LOG_OFF); /* the store reports every injected fault */
    st_io_set(&shim_io);
}

static void shim_teardown(void)
{
    st_io_set(NULL);
    ts_assert_clean();
}

static void shim_arm(fault f)
{
    if (pool && f.kinds == K_WAL) /* its segments are its journal */
        f.kinds = K_SEG;
    pthread_mutex_lock(&sh.mu);
    sh.f = f;
    sh.seen = sh.failed = 0;
    sh.partial_done = false;
    sh.armed = true;
    pthread_mutex_unlock(&sh.mu);
}

/* Space returns. */
static void shim_clear(void)
{
    pthread_mutex_lock(&sh.mu);
    sh.armed = false;
    pthread_mutex_unlock(&sh.mu);
}

static long shim_failed(void)
{
    pthread_mutex_lock(&sh.mu);
    long n = sh.failed;
    pthread_mutex_unlock(&sh.mu);
    return n;
}

static long shim_calls(int kinds, int op)
{
    long n = 0;
    pthread_mutex_lock(&sh.mu);
    for (int k = 1; k <= K_ANY; k++)
        if (kinds & k)
            n += sh.calls[k][op];
    pthread_mutex_unlock(&sh.mu);
    return n;
}

/* Hold the next call of (kinds, op) (not a header's write) until the test
 * adds 1 to gate_open. */
static void gate_arm(int kinds, int op)
{
    pthread_mutex_lock(&sh.mu);
    sh.gate_armed = true;
    sh.gate_kinds = kinds;
    sh.gate_op = op;
    pthread_mutex_unlock(&sh.mu);
}

static const char *fault_name(const fault *f)
{
    static char s[128];
    snprintf(s, sizeof(s), "%s on %s%s of %s (skip %ld, partial %zu)", strerror(f->err),
             f->op == OP_WRITE      ? "write"
             : f->op == OP_DATASYNC ? "fdatasync"
             : f->op == OP_SYNCFS   ? "syncfs"
                                    : "fsync",
             f->header ? " of a header" : "",
             f->kinds == K_SEG   ? "segments"
             : f->kinds == K_WAL ? "journal files"
             : f->kinds == K_ANY ? "any file"
                                 : "other files",
             f->skip, f->partial);
    return s;
}

/* ------------------------------------------------------------ file help --- */

/* Files in dir whose names end with `suffix` (and, if dot, start with '.'). */
static int count_files(const char *dir, const char *suffix, bool dot)
{
    DIR *d = opendir(dir);
    ck_assert_ptr_nonnull(d);
    int n = 0;
    struct dirent *e;
    size_t sl = strlen(suffix);
    while ((e = readdir(d)) != NULL) {
        size_t l = strlen(e->d_name);
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        if (l >= sl && strcmp(e->d_name + l - sl, suffix) == 0 && (!dot || e->d_name[0] == '.'))
            n++;
    }
    closedir(d);
    return n;
}

/* ------------------------------------------------------ the log's faults --- */

static st_log *log_open(const char *dir, uint64_t seg_bytes, st_open_report *rep)
{
    st_log_opts o = {.segment_bytes = seg_bytes};
    st_log *l = NULL;
    st_open_report scratch;
    if (rep == NULL)
        rep = &scratch;
    int r = st_log_open(dir, &o, &l, rep);
    ck_assert_msg(r == 0, "open %s: %s (%s)", dir, strerror(-r), rep->detail);
    return l;
}

/* What a crash right now would leave: exactly `count` events, with nothing
 * to repair. (Run with the fault lifted: the open writes too.) */
static void log_crash_image(const char *dir, uint64_t seg_bytes, uint64_t count)
{
    char copy[4200];
    snprintf(copy, sizeof(copy), "%s.crash", dir);
    tst_copydir(dir, copy);
    st_open_report rep;
    st_log *l = log_open(copy, seg_bytes, &rep);
    ck_assert_msg(rep.count == count && rep.truncated_bytes == 0 && !rep.corrupt,
                  "crash image: %llu events (expected %llu), %llu bytes cut: %s",
                  (unsigned long long)rep.count, (unsigned long long)count,
                  (unsigned long long)rep.truncated_bytes, rep.detail);
    ck_assert_int_eq(tst_verify(l, count, 16, BODY), 0);
    st_log_close(l);
    tst_rmdir(copy);
}

/* The failed append left no trace the readers or the files could show. */
static void log_unchanged(st_log *l, const char *seg, uint64_t size, uint64_t count)
{
    ck_assert_uint_eq(st_log_count(l), count);
    ck_assert_uint_eq(tst_file_size(seg), size);
    char id[32];
    tst_event_id(count, id, sizeof(id));
    uint64_t i;
    ck_assert_int_eq(st_log_find(l, id, strlen(id), &i), -ENOENT);
    st_page *p;
    ck_assert_int_eq(st_log_read(l, count, 8, &p), 0);
    ck_assert_uint_eq(p->n, 0);
    st_page_free(p);
    ck_assert_int_eq(tst_verify(l, count, 7, BODY), 0);
}

/* Reopen after a clean close: everything there, nothing repaired. */
static void log_reopen_clean(const char *dir, uint64_t seg_bytes, uint64_t count)
{
    st_open_report rep;
    st_log *l = log_open(dir, seg_bytes, &rep);
    ck_assert_msg(rep.count == count && rep.truncated_bytes == 0 && !rep.corrupt &&
                      rep.detail[0] == '\0',
                  "reopen: %llu events (expected %llu): %s", (unsigned long long)rep.count,
                  (unsigned long long)count, rep.detail);
    ck_assert_int_eq(tst_verify(l, count, 9, BODY), 0);
    st_log_close(l);
}

static const fault write_faults[] = {
    {K_SEG, OP_WRITE, 0, 1, ENOSPC, 0, false},
    {K_SEG, OP_WRITE, 0, 1, ENOSPC, 1, false},   /* a byte of the first header */
    {K_SEG, OP_WRITE, 0, 1, ENOSPC, 9, false},   /* inside the first header */
    {K_SEG, OP_WRITE, 0, 1, ENOSPC, 40, false},  /* inside the first body */
    {K_SEG, OP_WRITE, 0, 1, ENOSPC, 700, false}, /* a few records in */
    {K_SEG, OP_WRITE, 0, 1, EIO, 0, false},
    {K_SEG, OP_WRITE, 0, 1, EIO, 333, false},
    {K_SEG, OP_DATASYNC, 0, 1, EIO, 0, false}, /* tst_append then rolls back */
};

/* st_log_write (or its sync) fails: the error comes back, the segment is
 * cut back to its size before, and the next append takes the same index. */
START_TEST(test_log_append_fault)
{
    const fault *f = &write_faults[_i];
    shim_setup();
    char *dir = tst_mkdtemp();
    st_log *l = log_open(dir, 0, NULL);
    ck_assert_int_eq(tst_append(l, 0, 10, BODY), 0);
    char seg[4096];
    tst_last_segment(dir, seg, sizeof(seg));
    uint64_t size = tst_file_size(seg);
    shim_arm(*f);
    int r = tst_append(l, 10, 5, BODY);
    ck_assert_msg(r == -f->err, "%s: append gave %d", fault_name(f), r);
    ck_assert_int_eq(shim_failed(), 1);
    log_unchanged(l, seg, size, 10);
    shim_clear();
    log_crash_image(dir, 0, 10);
    ck_assert_int_eq(tst_append(l, 10, 5, BODY), 0);
    ck_assert_int_eq(tst_verify(l, 15, 4, BODY), 0);
    ck_assert_int_eq(st_log_close(l), 0);
    log_reopen_clean(dir, 0, 15);
    shim_teardown();
    tst_rmdir(dir);
    free(dir);
}
END_TEST

/* The disk stays full for a while: every append fails the same way and
 * changes nothing; readers carry on; then space returns. */
START_TEST(test_log_disk_stays_full)
{
    shim_setup();
    char *dir = tst_mkdtemp();
    st_log *l = log_open(dir, 0, NULL);
    ck_assert_int_eq(tst_append(l, 0, 10, BODY), 0);
    char seg[4096];
    tst_last_segment(dir, seg, sizeof(seg));
    uint64_t size = tst_file_size(seg);
    shim_arm((fault){K_ANY, OP_WRITE, 0, -1, ENOSPC, 100, false});
    for (size_t n = 1; n <= 20; n += 4) {
        ck_assert_int_eq(tst_append(l, 10, n, BODY), -ENOSPC);
        log_unchanged(l, seg, size, 10);
    }
    ck_assert_int_ge(shim_failed(), 5);
    shim_clear();
    log_crash_image(dir, 0, 10);
    ck_assert_int_eq(tst_append(l, 10, 20, BODY), 0);
    ck_assert_int_eq(st_log_close(l), 0);
    log_reopen_clean(dir, 0, 30);
    shim_teardown();
    tst_rmdir(dir);
    free(dir);
}
END_TEST

/* st_log_close flushes: if that fails, it says so (what was written since
 * the last sync may not be on disk), and a reopen still reads what is. */
START_TEST(test_log_close_reports_flush_fault)
{
    shim_setup();
    char *dir = tst_mkdtemp();
    st_log *l = log_open(dir, 0, NULL);
    ck_assert_int_eq(tst_append(l, 0, 10, BODY), 0);
    /* written and published, never synced */
    rt_buf *b = tst_event_body(10, BODY);
    st_item it = {.id = "ev-10", .idlen = 5, .payload = b};
    uint64_t first;
    ck_assert_int_eq(st_log_write(l, &it, 1, &first), 0);
    st_log_publish(l);
    rt_buf_unref(b);
    shim_arm((fault){K_SEG, OP_DATASYNC, 0, -1, EIO, 0, false});
    ck_assert_int_eq(st_log_close(l), -EIO);
    shim_clear();
    st_open_report rep;
    l = log_open(dir, 0, &rep);
    ck_assert_msg(rep.count == 11 && !rep.corrupt && rep.truncated_bytes == 0, "%s", rep.detail);
    ck_assert_int_eq(tst_verify(l, 11, 4, BODY), 0);
    ck_assert_int_eq(st_log_close(l), 0);
    shim_teardown();
    tst_rmdir(dir);
    free(dir);
}
END_TEST

/* Faults in each step of a segment roll: sealing the full segment (its
 * fdatasync, its final checkpoint), creating the next (header, fsync, the
 * directory's fsync), and the first records written into it. */
static const fault roll_faults[] = {
    {K_SEG, OP_DATASYNC, 0, 1, EIO, 0, false},   /* seal the full segment */
    {K_OTHER, OP_WRITE, 0, 1, ENOSPC, 0, false}, /* its checkpoint */
    {K_OTHER, OP_WRITE, 0, 1, ENOSPC, 20, false},
    {K_OTHER, OP_FSYNC, 0, 1, EIO, 0, false}, /* the checkpoint's fsync */
    {K_SEG, OP_WRITE, 0, 1, ENOSPC, 0, true}, /* the new segment's header */
    {K_SEG, OP_WRITE, 0, 1, ENOSPC, 5, true},
    {K_SEG, OP_FSYNC, 0, 1, EIO, 0, false},     /* the new segment's fsync */
    {K_OTHER, OP_FSYNC, 2, 1, EIO, 0, false},   /* the directory, after creating it */
    {K_SEG, OP_WRITE, 1, 1, ENOSPC, 50, false}, /* the records, in the new segment */
};

START_TEST(test_log_roll_fault)
{
    const fault *f = &roll_faults[_i];
    enum { SEG = 4096 };
    shim_setup();
    char *dir = tst_mkdtemp();
    st_log *l = log_open(dir, SEG, NULL);
    /* fill the active segment up to the bound: the next write rolls */
    uint64_t n = 0;
    char seg[4096];
    do {
        ck_assert_int_eq(tst_append(l, n, 1, BODY), 0);
        n++;
        tst_last_segment(dir, seg, sizeof(seg));
    } while (n < 8 || tst_file_size(seg) < SEG);
    int segs = count_files(dir, ".seg", false);
    uint64_t size = tst_file_size(seg);
    shim_arm(*f);
    int r = tst_append(l, n, 3, BODY);
    ck_assert_msg(r == -f->err, "%s: append gave %d", fault_name(f), r);
    ck_assert_int_eq(shim_failed(), 1);
    ck_assert_uint_eq(st_log_count(l), n);
    ck_assert_int_eq(tst_verify(l, n, 5, BODY), 0);
    if (f->skip == 0) { /* the roll failed: the full segment is still the last */
        char last[4096];
        tst_last_segment(dir, last, sizeof(last));
        ck_assert_str_eq(last, seg);
        ck_assert_uint_eq(tst_file_size(seg), size);
        ck_assert_int_eq(count_files(dir, ".seg", false), segs);
    }
    ck_assert_msg(count_files(dir, ".tmp", true) == 0, "a temporary file was left behind");
    shim_clear();
    log_crash_image(dir, SEG, n);
    ck_assert_int_eq(tst_append(l, n, 3, BODY), 0);
    ck_assert_int_eq(count_files(dir, ".seg", false), segs + 1);
    ck_assert_int_eq(tst_append(l, n + 3, 20, BODY), 0);
    ck_assert_int_eq(tst_verify(l, n + 23, 6, BODY), 0);
    ck_assert_int_eq(st_log_close(l), 0);
    log_reopen_clean(dir, SEG, n + 23);
    shim_teardown();
    tst_rmdir(dir);
    free(dir);
}
END_TEST

/* ---------------------------------------------------- the store's faults --- */

typedef struct fx {
    char *dir;
    st_opts o;
    st_store *s;
    st_conv *c[NCONV];
    st_log *l[NCONV];
    st_open_report rep[NCONV];
    uint64_t n[NCONV]; /* acknowledged events */
    char where[4300];  /* the location of dir */
} fx;

static rt_buf *meta_for(unsigned k)
{
    char s[64];
    int n = snprintf(s, sizeof(s), "{\"name\":\"faults-%u\"}", k);
    return rt_buf_copy(s, (size_t)n);
}

static void fx_open(fx *f)
{
    char err[512] = "";
    int r = st_store_open(&f->o, &f->s, err, sizeof(err));
    ck_assert_msg(r == 0, "open %s: %s", f->o.dir, err);
    for (unsigned k = 0; k < NCONV; k++) {
        rt_uuid id;
        tst_conv_id(k, &id);
        if ((r = st_conv_get(f->s, &id, &f->c[k])) == -ENOENT) {
            rt_buf *meta = meta_for(k);
            r = st_conv_create(f->s, &id, NULL, meta, &f->c[k]);
            rt_buf_unref(meta);
        }
        ck_assert_int_eq(r, 0);
        /* opened now, so that the faults meet appends and not a log's creation */
        r = st_conv_log(f->c[k], &f->l[k], &f->rep[k]);
        ck_assert_msg(r == 0, "conv %u: %s", k, f->rep[k].detail);
    }
}

static void fx_close(fx *f)
{
    for (unsigned k = 0; k < NCONV; k++)
        st_conv_release(f->c[k]);
    st_store_close(f->s);
    f->s = NULL;
}

static void fx_start(fx *f, st_durability d, uint64_t journal_bytes)
{
    f->dir = tst_mkdtemp();
    snprintf(f->where, sizeof(f->where), "%s%s", pool ? "pool:" : "local:", f->dir);
    f->o = (st_opts){
        .dir = f->where, .durability = d, .interval_ms = 20, .journal_bytes = journal_bytes};
    fx_open(f);
}

/* Every conversation holds exactly its acknowledged events. */
static void fx_check(fx *f, const char *when)
{
    for (unsigned k = 0; k < NCONV; k++) {
        char why[512];
        uint64_t n = st_log_count(f->l[k]);
        ck_assert_msg(n == f->n[k], "%s: conv %u has %llu events, %llu acknowledged", when, k,
                      (unsigned long long)n, (unsigned long long)f->n[k]);
        ck_assert_msg(tst_cverify(f->l[k], k, n, CBODY, why, sizeof(why)) == 0, "%s: %s", when,
                      why);
    }
}

typedef struct aop {
    ts_counter done;
    int status;
    uint64_t first;
} aop;

static void op_done(void *ctx, int status, uint64_t first)
{
    aop *o = ctx;
    o->status = status;
    o->first = first;
    ts_counter_add(&o->done, 1);
}

static void fx_submit(fx *f, unsigned k, uint64_t from, size_t n, aop *o)
{
    ts_counter_init(&o->done);
    tst_items its;
    tst_items_make(&its, k, from, n, CBODY);
    ck_assert_ptr_nonnull(its.v);
    ck_assert_int_eq(st_append(f->c[k], its.v, n, op_done, o), 0);
    tst_items_free(&its);
}

static int op_wait(aop *o, uint64_t *first)
{
    ck_assert_msg(ts_counter_wait(&o->done, 1), "an append never completed");
    ts_counter_destroy(&o->done);
    if (first != NULL)
        *first = o->first;
    return o->status;
}

/* Append n events to conversation k and wait; on success they must land
 * right after the acknowledged ones. */
static int fx_append(fx *f, unsigned k, size_t n)
{
    aop o;
    uint64_t first;
    fx_submit(f, k, f->n[k], n, &o);
    int r = op_wait(&o, &first);
    if (r == 0) {
        ck_assert_uint_eq(first, f->n[k]);
        f->n[k] += n;
    }
    return r;
}

static void conv_dir(const fx *f, unsigned k, char *out, size_t cap)
{
    rt_uuid id;
    char hex[33];
    tst_conv_id(k, &id);
    rt_uuid_hex(&id, hex);
    snprintf(out, cap, "%s/conversations/%s", f->dir, hex);
}

static uint64_t seg_size(const fx *f, unsigned k)
{
    char d[4200], seg[4400];
    if (pool) /* one active segment for all */
        snprintf(d, sizeof(d), "%s/pool", f->dir);
    else
        conv_dir(f, k, d, sizeof(d));
    tst_last_segment(d, seg, sizeof(seg));
    return tst_file_size(seg);
}

/* The journal files' valid records, as a replay would see them: each must
 * be a creation or an acknowledged event (a record of a failed append that still
 * validates would come back at the next open). Returns how many. */
static long journal_check(const fx *f)
{
    char jdir[4200];
    const char *ext = pool ? ".seg" : ".wal";
    snprintf(jdir, sizeof(jdir), "%s/%s", f->dir, pool ? "pool" : "journal");
    DIR *d = opendir(jdir);
    ck_assert_ptr_nonnull(d);
    long total = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        size_t nl = strlen(e->d_name);
        if (nl != 24 || strcmp(e->d_name + 20, ext) != 0)
            continue;
        uint64_t seq = strtoull(e->d_name, NULL, 10);
        char path[sizeof(jdir) + 260], *data;
        size_t len;
        snprintf(path, sizeof(path), "%s/%s", jdir, e->d_name);
        ck_assert_int_eq(st_read_file(path, (size_t)1 << 30, &data, &len), 0);
        const uint8_t *p = (const uint8_t *)data;
        st_rec rec;
        for (size_t at = ST_FILE_HDR; at < len; at += rec.size) {
            if (st_rec_decode(p + at, len - at, true, st_journal_seed(seq), &rec) != ST_REC_OK)
                break;
            if (pool && rec.index >= STP_IDX_COMMIT) /* a group's COMMIT, a catalog record */
                continue;
            unsigned k = 0;
            for (rt_uuid id; k < NCONV; k++) {
                tst_conv_id(k, &id);
                if (memcmp(id.b, rec.tag, sizeof(id.b)) == 0)
                    break;
            }
            ck_assert_msg(k < NCONV, "%s: a record of an unknown conversation", path);
            if (rec.index == UINT64_MAX) { /* its creation, acknowledged before any append */
                ck_assert(rec.idlen == 6 && memcmp(rec.id, "create", 6) == 0);
                continue;
            }
            ck_assert_msg(rec.index < f->n[k],
                          "%s at %zu: a valid record of conv %u event %llu, which was never "
                          "acknowledged (%llu were): a replay would bring it back",
                          path, at, k, (unsigned long long)rec.index, (unsigned long long)f->n[k]);
            rt_buf *b = tst_cevent_body(k, rec.index, CBODY);
            ck_assert(rec.len == rt_buf_len(b) &&
                      memcmp(rec.payload, rt_buf_data(b), rec.len) == 0);
            rt_buf_unref(b);
            total++;
        }
        free(data);
    }
    closedir(d);
    return total;
}

/* Open a copy of the directory as it is now (what a crash would leave):
 * exactly the acknowledged events, no torn tail to cut. */
static void fx_crash_image(const fx *f, const char *when)
{
    fx g = *f;
    char copy[4200];
    snprintf(copy, sizeof(copy), "%s.crash", f->dir);
    tst_copydir(f->dir, copy);
    g.dir = copy;
    snprintf(g.where, sizeof(g.where), "%s%s", pool ? "pool:" : "local:", copy);
    g.o.dir = g.where;
    fx_open(&g);
    for (unsigned k = 0; k < NCONV; k++)
        ck_assert_msg(g.rep[k].truncated_bytes == 0 && !g.rep[k].corrupt,
                      "%s: crash image, conv %u: %s", when, k, g.rep[k].detail);
    fx_check(&g, when);
    fx_close(&g);
    tst_rmdir(copy);
}

static void fx_reopen(fx *f)
{
    fx_close(f);
    fx_open(f);
    for (unsigned k = 0; k < NCONV; k++)
        ck_assert_msg(f->rep[k].truncated_bytes == 0 && !f->rep[k].corrupt &&
                          !st_log_read_only(f->l[k]),
                      "reopen, conv %u: %s", k, f->rep[k].detail);
    fx_check(f, "after reopening");
}

static void fx_end(fx *f)
{
    fx_close(f);
    tst_rmdir(f->dir);
    free(f->dir);
}

/* A failed append of conversation k: the error, and nothing anywhere. */
static void fx_failed_cleanly(fx *f, int r, int err, const uint64_t *sizes, const char *what)
{
    ck_assert_msg(r == -err, "%s: the append gave %d, expected %d", what, r, -err);
    fx_check(f, what);
    for (unsigned k = 0; k < NCONV; k++)
        ck_assert_msg(seg_size(f, k) == sizes[k], "%s: conv %u's segment was not cut back", what,
                      k);
    if (f->o.durability == ST_FULL)
        journal_check(f);
}

static void fx_seed(fx *f)
{
    for (unsigned k = 0; k < NCONV; k++)
        ck_assert_int_eq(fx_append(f, k, 4), 0);
}

static void fx_sizes(const fx *f, uint64_t *sizes)
{
    for (unsigned k = 0; k < NCONV; k++)
        sizes[k] = seg_size(f, k);
}

/* Under each durability, a segment write that fails (whole or short): the
 * append fails, the store carries on. */
START_TEST(test_store_segment_write_fault)
{
    BOTH(6);
    static const st_durability ds[] = {ST_FULL, ST_INTERVAL, ST_NONE};
    const fault f = {K_SEG, OP_WRITE, 0, 1, ENOSPC, (_i & 1) ? 77 : 0, false};
    shim_setup();
    fx x = {0};
    fx_start(&x, ds[_i / 2], 0);
    fx_seed(&x);
    uint64_t sizes[NCONV];
    fx_sizes(&x, sizes);
    shim_arm(f);
    int r = fx_append(&x, 1, 3);
    ck_assert_int_eq(shim_failed(), 1);
    fx_failed_cleanly(&x, r, ENOSPC, sizes, fault_name(&f));
    shim_clear();
    fx_crash_image(&x, fault_name(&f));
    for (unsigned k = 0; k < NCONV; k++)
        ck_assert_int_eq(fx_append(&x, k, 3), 0);
    fx_reopen(&x);
    ck_assert_int_eq(fx_append(&x, 1, 2), 0);
    fx_end(&x);
    shim_teardown();
}
END_TEST

/* Under `full`, the journal's write (whole or short) or its fdatasync. */
static const fault journal_faults[] = {
    {K_WAL, OP_WRITE, 0, 1, ENOSPC, 0, false},
    {K_WAL, OP_WRITE, 0, 1, ENOSPC, 20, false},   /* inside the first record's header */
    {K_WAL, OP_WRITE, 0, 1, ENOSPC, 2000, false}, /* past the first record or two */
    {K_WAL, OP_WRITE, 0, 1, EIO, 5000, false},
    {K_WAL, OP_DATASYNC, 0, 1, EIO, 0, false},
    {K_WAL, OP_DATASYNC, 0, 1, ENOSPC, 0, false},
};

START_TEST(test_store_journal_fault)
{
    BOTH((int)(sizeof(journal_faults) / sizeof(journal_faults[0])));
    const fault *f = &journal_faults[_i];
    shim_setup();
    fx x = {0};
    fx_start(&x, ST_FULL, 0);
    fx_seed(&x);
    uint64_t sizes[NCONV];
    fx_sizes(&x, sizes);
    long before = journal_check(&x);
    shim_arm(*f);
    int r = fx_append(&x, 2, 5);
    ck_assert_int_eq(shim_failed(), 1);
    fx_failed_cleanly(&x, r, f->err, sizes, fault_name(f));
    ck_assert_int_eq(journal_check(&x), before);
    shim_clear();
    fx_crash_image(&x, fault_name(f));
    /* the next append takes the same index; then one shorter than the one
     * that failed, which a leftover of it could follow */
    ck_assert_int_eq(fx_append(&x, 2, 5), 0);
    fx_crash_image(&x, "after the retry");
    ck_assert_int_eq(fx_append(&x, 2, 1), 0);
    ck_assert_int_eq(fx_append(&x, 0, 1), 0);
    fx_crash_image(&x, "after two more");
    fx_reopen(&x);
    fx_end(&x);
    shim_teardown();
}
END_TEST

/* A short journal write that got two whole records of the append onto the
 * file before the disk filled: the append failed, so after a crash neither
 * may come back; nor after a retry of only its first event, whose record
 * lines up exactly with the failed append's first, so that its second
 * follows, complete and valid, unless the failed write was wiped. */
START_TEST(test_store_journal_short_write_leftover)
{
    BOTH(1);
    shim_setup();
    fx x = {0};
    fx_start(&x, ST_FULL, 0);
    fx_seed(&x);
    rt_buf *b0 = tst_cevent_body(3, 4, CBODY), *b1 = tst_cevent_body(3, 5, CBODY);
    char id0[32], id1[32];
    tst_cevent_id(3, 4, id0, sizeof(id0));
    tst_cevent_id(3, 5, id1, sizeof(id1));
    size_t two = 2 * ST_JREC_HDR + strlen(id0) + rt_buf_len(b0) + strlen(id1) + rt_buf_len(b1);
    rt_buf_unref(b0);
    rt_buf_unref(b1);
    shim_arm((fault){K_WAL, OP_WRITE, 0, 1, ENOSPC, two + 10, false});
    ck_assert_int_eq(fx_append(&x, 3, 3), -ENOSPC);
    fx_check(&x, "after a short journal write");
    shim_clear();
    fx_crash_image(&x, "a crash right after a short journal write");
    ck_assert_int_eq(fx_append(&x, 3, 1), 0); /* event 4 again: the same record */
    fx_crash_image(&x, "a crash after retrying the first event alone");
    journal_check(&x);
    fx_reopen(&x);
    fx_end(&x);
    shim_teardown();
}
END_TEST

/* A fault in the middle of a group commit across conversations: the
 * committer is held in the journal fdatasync of one append (a plug) while
 * six appends to four conversations queue up behind it; they become one
 * group, the fault hits it once, and all six fail with nothing visible. */
static const fault group_faults[] = {
    {K_WAL, OP_WRITE, 0, 1, ENOSPC, 0, false},
    {K_WAL, OP_WRITE, 0, 1, ENOSPC, 3000, false},
    {K_WAL, OP_DATASYNC, 0, 1, EIO, 0, false},
    {K_SEG, OP_WRITE, 0, 1, ENOSPC, 0, false},   /* the first conversation's segment */
    {K_SEG, OP_WRITE, 2, 1, ENOSPC, 100, false}, /* the third's */
    {K_SEG, OP_WRITE, 3, 1, EIO, 0, false},      /* the last one's */
};

START_TEST(test_store_group_fault)
{
    const fault *f = &group_faults[_i];
    static const struct {
        unsigned k;
        size_t n;
    } g[] = {{0, 2}, {1, 2}, {2, 1}, {1, 3}, {3, 3}, {2, 2}};
    enum { NG = sizeof(g) / sizeof(g[0]) };
    shim_setup();
    fx x = {0};
    fx_start(&x, ST_FULL, 0);
    fx_seed(&x);
    gate_arm(K_WAL, OP_DATASYNC);
    aop plug, ops[NG];
    long writes = ts_counter_get(&seg_writes);
    fx_submit(&x, 0, x.n[0], 1, &plug);
    ck_assert(ts_counter_wait(&gate_held, 1));
    /* the plug's segment is written while its journal sync is held: that
     * write is the plug's, not the group's, and must pass before the fault
     * is armed */
    ck_assert(ts_counter_wait(&seg_writes, writes + 1));
    uint64_t next[NCONV];
    memcpy(next, x.n, sizeof(next));
    next[0]++; /* after the plug */
    for (int i = 0; i < NG; i++) {
        fx_submit(&x, g[i].k, next[g[i].k], g[i].n, &ops[i]);
        next[g[i].k] += g[i].n;
    }
    shim_arm(*f);
    ts_counter_add(&gate_open, 1);
    uint64_t first;
    ck_assert_int_eq(op_wait(&plug, &first), 0);
    ck_assert_uint_eq(first, x.n[0]);
    x.n[0]++;
    for (int i = 0; i < NG; i++) {
        int r = op_wait(&ops[i], &first);
        ck_assert_msg(r == -f->err, "%s: append %d of the group gave %d (first %llu)",
                      fault_name(f), i, r, (unsigned long long)first);
    }
    ck_assert_int_eq(shim_failed(), 1); /* one fault: they were one group */
    uint64_t sizes[NCONV];
    fx_sizes(&x, sizes);
    fx_check(&x, fault_name(f));
    journal_check(&x);
    shim_clear();
    fx_crash_image(&x, fault_name(f));
    /* all later appends work, at the indexes the failed ones would have had */
    for (int i = 0; i < NG; i++)
        fx_submit(&x, g[i].k, x.n[g[i].k], g[i].n, &ops[i]), x.n[g[i].k] += g[i].n;
    for (int i = 0; i < NG; i++)
        ck_assert_int_eq(op_wait(&ops[i], NULL), 0);
    for (unsigned k = 0; k < NCONV; k++)
        ck_assert_uint_gt(seg_size(&x, k), sizes[k]);
    fx_check(&x, "after the group was retried");
    fx_crash_image(&x, "after the group was retried");
    fx_reopen(&x);
    fx_end(&x);
    shim_teardown();
}
END_TEST

/* The disk is full for everything: appends on every conversation and the
 * creation of a conversation fail and leave nothing; reads carry on. */
START_TEST(test_store_disk_full)
{
    BOTH(1);
    shim_setup();
    fx x = {0};
    fx_start(&x, ST_FULL, 0);
    fx_seed(&x);
    uint64_t sizes[NCONV];
    fx_sizes(&x, sizes);
    char cdir[4200];
    snprintf(cdir, sizeof(cdir), "%s/%s", x.dir, pool ? "pool" : "conversations");
    int dirs = count_files(cdir, "", false);
    shim_arm((fault){K_ANY, OP_WRITE, 0, -1, ENOSPC, 0, false});
    for (unsigned k = 0; k < NCONV; k++)
        fx_failed_cleanly(&x, fx_append(&x, k, 1 + k), ENOSPC, sizes, "disk full");
    rt_uuid id;
    tst_conv_id(NCONV, &id);
    st_conv *c = NULL;
    rt_buf *meta = meta_for(NCONV);
    ck_assert_int_eq(st_conv_create(x.s, &id, NULL, meta, &c), -ENOSPC);
    ck_assert_ptr_null(c);
    ck_assert_uint_eq(st_store_count(x.s), NCONV);
    ck_assert_int_eq(st_conv_get(x.s, &id, &c), -ENOENT);
    ck_assert_int_eq(count_files(cdir, "", false), dirs);
    shim_clear();
    fx_crash_image(&x, "disk full");
    for (unsigned k = 0; k < NCONV; k++)
        ck_assert_int_eq(fx_append(&x, k, 1 + k), 0);
    ck_assert_int_eq(st_conv_create(x.s, &id, NULL, meta, &c), 0);
    st_conv_release(c);
    rt_buf_unref(meta);
    fx_reopen(&x);
    ck_assert_uint_eq(st_store_count(x.s), NCONV + 1);
    fx_end(&x);
    shim_teardown();
}
END_TEST

/* A conversation's first append opens its log, which creates its first
 * segment; if that fails, the append fails, and the next one creates it.
 * (Under `full` a new segment is not synced: the journal stands for it;
 * the sync's fault is tried under `interval`.) */
START_TEST(test_store_log_creation_fault)
{
    static const fault fs[] = {
        {K_SEG, OP_WRITE, 0, 1, ENOSPC, 0, true},
        {K_SEG, OP_FSYNC, 0, 1, EIO, 0, false},
    };
    const fault *f = &fs[_i];
    shim_setup();
    fx x = {0};
    fx_start(&x, f->op == OP_FSYNC ? ST_INTERVAL : ST_FULL, 0);
    fx_seed(&x);
    rt_uuid id;
    tst_conv_id(NCONV, &id);
    rt_buf *meta = meta_for(NCONV);
    st_conv *c;
    ck_assert_int_eq(st_conv_create(x.s, &id, NULL, meta, &c), 0);
    rt_buf_unref(meta);
    shim_arm(*f);
    tst_items its;
    tst_items_make(&its, NCONV, 0, 2, CBODY);
    aop o;
    ts_counter_init(&o.done);
    ck_assert_int_eq(st_append(c, its.v, 2, op_done, &o), 0);
    ck_assert_int_eq(op_wait(&o, NULL), -f->err);
    ck_assert_int_eq(shim_failed(), 1);
    shim_clear();
    fx_check(&x, fault_name(f)); /* the others are untouched */
    ts_counter_init(&o.done);
    ck_assert_int_eq(st_append(c, its.v, 2, op_done, &o), 0);
    uint64_t first = 99;
    ck_assert_int_eq(op_wait(&o, &first), 0);
    ck_assert_uint_eq(first, 0);
    st_log *l;
    ck_assert_int_eq(st_conv_log(c, &l, NULL), 0);
    ck_assert_int_eq(tst_cverify(l, NCONV, 2, CBODY, NULL, 0), 0);
    tst_items_free(&its);
    st_conv_release(c);
    fx_reopen(&x);
    ck_assert_int_eq(st_conv_get(x.s, &id, &c), 0);
    ck_assert_int_eq(st_conv_log(c, &l, NULL), 0);
    ck_assert_int_eq(tst_cverify(l, NCONV, 2, CBODY, NULL, 0), 0);
    ck_assert_uint_eq(st_log_count(l), 2);
    st_conv_release(c);
    fx_end(&x);
    shim_teardown();
}
END_TEST

/* The journal cannot rotate (its next file's header, that file's fsync, or
 * the directory's): the append that filled it was acknowledged all the
 * same, the store keeps appending to the full file and rotates once it can.
 * The faults last until cleared, as every group retries the rotation. */
static const fault rotation_faults[] = {
    {K_WAL, OP_WRITE, 0, -1, ENOSPC, 0, true},
    {K_WAL, OP_WRITE, 0, -1, ENOSPC, 7, true},
    {K_WAL, OP_FSYNC, 0, -1, EIO, 0, false},
    {K_OTHER, OP_FSYNC, 0, -1, EIO, 0, false},
};

START_TEST(test_store_rotation_fault)
{
    const fault *f = &rotation_faults[_i];
    shim_setup();
    fx x = {0};
    fx_start(&x, ST_FULL, 8192);
    char jdir[4200];
    snprintf(jdir, sizeof(jdir), "%s/journal", x.dir);
    ck_assert_int_eq(count_files(jdir, ".wal", false), 1);
    shim_arm(*f);
    /* append until the journal passes its bound and the rotation fails */
    for (int i = 0; i < 200 && shim_failed() == 0; i++)
        ck_assert_int_eq(fx_append(&x, (unsigned)i % NCONV, 1), 0);
    ck_assert_msg(shim_failed() >= 1, "%s: no rotation was tried", fault_name(f));
    for (int i = 0; i < 3; i++) /* appends go on, to the full file */
        ck_assert_int_eq(fx_append(&x, (unsigned)i % NCONV, 1), 0);
    /* every group retries the rotation: look while the committer is held
     * at the next group's journal write, its last attempt over */
    gate_arm(K_WAL, OP_WRITE);
    aop o;
    fx_submit(&x, 0, x.n[0], 1, &o);
    ck_assert(ts_counter_wait(&gate_held, 1));
    int wals = count_files(jdir, ".wal", false);
    journal_check(&x);
    ts_counter_add(&gate_open, 1);
    ck_assert_int_eq(op_wait(&o, NULL), 0);
    x.n[0]++;
    ck_assert_msg(wals == 1, "%s: a failed rotation left a journal file", fault_name(f));
    shim_clear();
    fx_crash_image(&x, fault_name(f));
    for (int i = 0; i < 20; i++)
        ck_assert_int_eq(fx_append(&x, (unsigned)i % NCONV, 2), 0);
    fx_crash_image(&x, "after rotating");
    fx_reopen(&x);
    fx_end(&x);
    shim_teardown();
}
END_TEST

/* A store that a crash left with a journal to replay, whose segments miss
 * the last events of conversation 0 (as if their pages never reached the
 * disk). Built by a child that appends and exits without closing; then the
 * segment is cut back to `keep` records. */
static void crash_with_journal(const char *dir, uint64_t keep)
{
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) { /* no ck_assert here: report by exit status */
        fx x = {0};
        char where[4200];
        snprintf(where, sizeof(where), "local:%s", dir); /* the local store's journal */
        x.o = (st_opts){.dir = where, .durability = ST_FULL};
        if (st_store_open(&x.o, &x.s, NULL, 0) != 0)
            _exit(1);
        for (unsigned k = 0; k < 2; k++) {
            rt_uuid id;
            tst_conv_id(k, &id);
            rt_buf *meta = meta_for(k);
            if (st_conv_create(x.s, &id, NULL, meta, &x.c[k]) != 0)
                _exit(2);
            rt_buf_unref(meta);
            for (int i = 0; i < 3; i++) {
                aop o;
                ts_counter_init(&o.done);
                tst_items its;
                tst_items_make(&its, k, 4 * (uint64_t)i, 4, CBODY);
                if (its.v == NULL || st_append(x.c[k], its.v, 4, op_done, &o) != 0 ||
                    !ts_counter_wait(&o.done, 1) || o.status != 0)
                    _exit(3);
                tst_items_free(&its);
            }
        }
        _exit(0); /* a crash: nothing closed, the journal stays */
    }
    int st;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the child failed: 0x%x", st);
    fx f = {.dir = (char *)dir};
    char cdir[4200], seg[4400];
    conv_dir(&f, 0, cdir, sizeof(cdir));
    tst_last_segment(cdir, seg, sizeof(seg));
    /* walk the records to find where record `keep` starts */
    char *data;
    size_t len, at = ST_FILE_HDR;
    ck_assert_int_eq(st_read_file(seg, (size_t)1 << 30, &data, &len), 0);
    for (uint64_t i = 0; i < keep; i++) {
        size_t rs = st_rec_size((const uint8_t *)data + at, len - at, false);
        ck_assert(rs > 0 && rs != SIZE_MAX && at + rs <= len);
        at += rs;
    }
    free(data);
    tst_truncate(seg, at);
    char idx[4400];
    snprintf(idx, sizeof(idx), "%.*s.idx", (int)(strlen(seg) - 4), seg);
    unlink(idx); /* a checkpoint would vouch for records no longer there */
}

static const fault replay_faults[] = {
    {K_SEG, OP_WRITE, 0, 1, ENOSPC, 0, false},   /* the first replayed record */
    {K_SEG, OP_WRITE, 3, 1, ENOSPC, 30, false},  /* the fourth, after three landed */
    {K_SEG, OP_DATASYNC, 0, 1, EIO, 0, false},   /* syncing what was replayed */
    {K_OTHER, OP_WRITE, 0, 1, ENOSPC, 0, false}, /* checkpointing it */
};

/* The journal replay of an open meets a fault: the open fails and says
 * why, the journal stays, and the next open replays it all. */
START_TEST(test_store_replay_fault)
{
    const fault *f = &replay_faults[_i];
    shim_setup();
    char *dir = tst_mkdtemp();
    crash_with_journal(dir, 5);
    char jdir[4200];
    snprintf(jdir, sizeof(jdir), "%s/journal", dir);
    int wals = count_files(jdir, ".wal", false);
    ck_assert_int_ge(wals, 1);
    char where[4200];
    snprintf(where, sizeof(where), "local:%s", dir);
    fx x = {.dir = dir, .o = {.dir = where, .durability = ST_FULL}, .n = {12, 12}};
    shim_arm(*f);
    char err[512] = "";
    st_store *s = NULL;
    int r = st_store_open(&x.o, &s, err, sizeof(err));
    ck_assert_msg(r == -f->err, "%s: the open gave %d (%s)", fault_name(f), r, err);
    ck_assert_ptr_null(s);
    ck_assert_msg(strstr(err, "journal replay failed") && strstr(err, strerror(f->err)), "%s", err);
    ck_assert_int_eq(count_files(jdir, ".wal", false), wals);
    shim_clear();
    fx_open(&x);
    fx_check(&x, "after the replay");
    fx_reopen(&x);
    for (unsigned k = 0; k < NCONV; k++)
        ck_assert_int_eq(fx_append(&x, k, 2), 0);
    fx_end(&x);
    shim_teardown();
}
END_TEST

/* Closing a `full` store flushes every log (one syncfs: its logs are
 * journaled); if the flush fails, the journal must stay, so that the next
 * open replays what may not be in the segments. */
START_TEST(test_store_close_keeps_journal_on_flush_fault)
{
    shim_setup();
    fx x = {0};
    fx_start(&x, ST_FULL, 0);
    fx_seed(&x);
    ck_assert_int_eq(fx_append(&x, 2, 3), 0);
    shim_arm((fault){K_ANY, OP_SYNCFS, 0, -1, EIO, 0, false});
    fx_close(&x);
    ck_assert_int_ge(shim_failed(), 1);
    shim_clear();
    /* every acknowledged event is still in a journal file */
    ck_assert_int_eq(journal_check(&x), 4 * NCONV + 3);
    fx_open(&x);
    fx_check(&x, "after the replay");
    ck_assert_int_eq(fx_append(&x, 2, 1), 0);
    fx_reopen(&x);
    fx_end(&x);
    shim_teardown();
}
END_TEST

/* Waits up to ms for the shim to count more than `than` calls of (kinds, op). */
static bool wait_calls(int kinds, int op, long than, int ms)
{
    for (int waited = 0; waited < ms; waited++) {
        if (shim_calls(kinds, op) > than)
            return true;
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    return false;
}

/* Under `interval`, appends are acknowledged once written; a failed
 * periodic fdatasync cannot fail them any more, but "a crash loses at most
 * an interval" means the store must try again at the next interval, not only
 * once the conversation is written to again. */
START_TEST(test_interval_sync_fault_is_retried)
{
    shim_setup();
    fx x = {0};
    fx_start(&x, ST_INTERVAL, 0); /* every 20 ms */
    fx_seed(&x);
    /* let the seeded conversations' own syncs pass first */
    ck_assert(wait_calls(K_SEG, OP_DATASYNC, NCONV - 1, TS_DEADLINE_MS));
    shim_arm((fault){K_SEG, OP_DATASYNC, 0, 1, EIO, 0, false});
    ck_assert_int_eq(fx_append(&x, 1, 3), 0); /* acknowledged: written */
    ck_assert(ts_counter_wait(&failures, 1));
    long syncs = shim_calls(K_SEG, OP_DATASYNC);
    shim_clear();
    /* nothing is appended from here on: 100 intervals to sync it again */
    ck_assert_msg(wait_calls(K_SEG, OP_DATASYNC, syncs, 2000),
                  "the segment whose fdatasync failed was not synced again");
    ck_assert_int_eq(fx_append(&x, 1, 3), 0);
    fx_reopen(&x);
    fx_end(&x);
    shim_teardown();
}
END_TEST

/* The pool's segment files, counted. */
static size_t segments(const fx *f)
{
    char dir[4300];
    snprintf(dir, sizeof(dir), "%s/pool", f->dir);
    uint64_t *v;
    size_t n;
    ck_assert_int_eq(st_list_numbered(dir, "seg", &v, &n), 0);
    free(v);
    return n;
}

/* Under `none` the pool rolls lazily and makes the next segment without a
 * sync (stp_sync_names). A group that must be durable after that (a
 * creation) is acknowledged only once the directory is synced too, so that
 * the new segment's name survives a crash: while the directory cannot be
 * synced, the creation fails and nothing of it is there; once it can, the
 * creation succeeds and the store reopens consistent. */
START_TEST(test_pool_lazy_roll_syncs_the_name)
{
    pool = true;
    shim_setup();
    fx x = {0};
    fx_start(&x, ST_NONE, 64 << 10);
    fx_seed(&x); /* creations: durable groups, every name synced */
    size_t before = segments(&x);
    shim_arm((fault){K_OTHER, OP_FSYNC, 0, -1, EIO, 0, false});
    for (int i = 0; i < 10000 && segments(&x) == before; i++)
        ck_assert_int_eq(fx_append(&x, (unsigned)i % NCONV, 1), 0);
    ck_assert_uint_gt(segments(&x), before); /* a lazy roll made one */
    rt_uuid id;
    tst_conv_id(NCONV, &id);
    rt_buf *meta = meta_for(NCONV);
    st_conv *c;
    ck_assert_int_eq(st_conv_create(x.s, &id, NULL, meta, &c), -EIO);
    ck_assert_int_eq(st_conv_get(x.s, &id, &c), -ENOENT);
    shim_clear();
    ck_assert_int_eq(st_conv_create(x.s, &id, NULL, meta, &c), 0);
    rt_buf_unref(meta);
    st_conv_release(c);
    fx_check(&x, "after the failed creation");
    fx_reopen(&x);
    ck_assert_int_eq(st_conv_get(x.s, &id, &c), 0);
    st_conv_release(c);
    fx_check(&x, "reopened");
    fx_end(&x);
    shim_teardown();
    pool = false; /* for a later test in the same process */
}
END_TEST

int main(void)
{
    Suite *s = suite_create("faults");
    TCase *tc = tcase_create("log");
    tcase_add_loop_test(tc, test_log_append_fault, 0,
                        (int)(sizeof(write_faults) / sizeof(write_faults[0])));
    tcase_add_test(tc, test_log_disk_stays_full);
    tcase_add_test(tc, test_log_close_reports_flush_fault);
    tcase_add_loop_test(tc, test_log_roll_fault, 0,
                        (int)(sizeof(roll_faults) / sizeof(roll_faults[0])));
    suite_add_tcase(s, tc);
    tc = tcase_create("store");
    tcase_add_loop_test(tc, test_store_segment_write_fault, 0, 2 * 6);
    tcase_add_loop_test(tc, test_store_journal_fault, 0,
                        2 * (int)(sizeof(journal_faults) / sizeof(journal_faults[0])));
    tcase_add_loop_test(tc, test_store_journal_short_write_leftover, 0, 2);
    tcase_add_loop_test(tc, test_store_group_fault, 0,
                        (int)(sizeof(group_faults) / sizeof(group_faults[0])));
    tcase_add_loop_test(tc, test_store_disk_full, 0, 2);
    tcase_add_loop_test(tc, test_store_log_creation_fault, 0, 2);
    tcase_add_loop_test(tc, test_store_rotation_fault, 0,
                        (int)(sizeof(rotation_faults) / sizeof(rotation_faults[0])));
    tcase_add_loop_test(tc, test_store_replay_fault, 0,
                        (int)(sizeof(replay_faults) / sizeof(replay_faults[0])));
    tcase_add_test(tc, test_store_close_keeps_journal_on_flush_fault);
    tcase_add_test(tc, test_interval_sync_fault_is_retried);
    tcase_add_test(tc, test_pool_lazy_roll_syncs_the_name);
    suite_add_tcase(s, tc);
    return ts_run_suite(s);
}
