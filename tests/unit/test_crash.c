/*
 * test_crash.c - acknowledged appends survive SIGKILL at any moment.
 *
 * A child process opens the store with `full` durability and appends
 * without pause: four conversations, two submitting threads, up to eight
 * appends in flight, batches of 1..6 events of ~48 bytes to 40 KiB. Its done
 * callback (on the committer thread) reports every acknowledged append on a
 * pipe. The parent reads those reports, kills the child with SIGKILL at a
 * random moment, reopens the store and checks every acknowledged event: at
 * its index, with exactly the bytes appended, found by its id. Events past
 * the acknowledged ones may or may not have landed, but whatever is in a log
 * must be the child's own next events, intact: bodies are a function of
 * (conversation, index), so the parent regenerates and compares every one.
 *
 * Two variants of 25 kills each: a fresh directory every time (the default
 * sizes), and one directory kept across the kills with small segments,
 * journal files and checkpoint intervals, so that kills land in segment
 * rolls, journal rotations, checkpoints, and in the journal replay of the
 * next child's open (the parent checks a copy and leaves the crashed
 * directory as it was for the next child). One kill in six is timed from the
 * fork instead of from an acknowledgement, to land in start-up and replay.
 *
 * Both variants run on both directory backends (loop index 0: the local
 * store, 1: the pool, pool:DIR), where the pool's small segments stand in
 * for the journal's rotations. A third, the pool's alone, kills a child
 * that only makes, fills and deletes conversations while one old
 * conversation (made by the parent, never touched again) is carried
 * forward again and again (store/pool_carry.c) and the segments behind it
 * go: the old one must read the same after every kill, and must have been
 * carried.
 *
 * SIGKILL leaves the page cache alone, so this checks the store's logic
 * (framing, ordering, repair, replay), not the disk's: power loss is out of
 * its reach. The seed is printed; PARLEY_CRASH_SEED=N repeats a run's choices
 * (the child's timing still varies).
 */
#include "runtime/log.h"
#include "store/pool_impl.h"
#include "store/store.h"
#include "support_store.h"
#include "support_sync.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum {
    NCONV = 4,
    INFLIGHT = 8,
    MAX_BATCH = 6,
    MAXLEN = 40 << 10,
    KILLS = 25, /* per variant: 125 in all */
};

/* The carry variant: its old conversation (24 events of up to 600 bytes;
 * the large one, 360, more than one group may hold: carried in several,
 * store/pool_copy.c) and the ids of its churn, 100..103. */
enum { OLD_K = NCONV, OLD_N = 24, OLD_BIG_N = 360, OLD_MAX = 600, CHURN_K = 100 };

/* What the child tells the parent: one write(2) of less than PIPE_BUF each,
 * so a report is whole or absent, even when the kill lands mid-write. */
enum { MSG_OPEN = 1, MSG_ACK, MSG_FAIL, MSG_BEAT };
typedef struct msg {
    uint32_t kind;
    uint32_t conv;
    int64_t status; /* MSG_FAIL: the error */
    uint64_t first; /* MSG_ACK, MSG_FAIL: the index the store gave */
    uint64_t n;
    uint64_t expect; /* MSG_FAIL: the index the child expected */
} msg;

static uint64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
}

static rt_buf *meta_for(unsigned k)
{
    char s[64];
    int n = snprintf(s, sizeof(s), "{\"name\":\"crash-%u\"}", k);
    return rt_buf_copy(s, (size_t)n);
}

/* ------------------------------------------------------------ the child --- */

typedef struct child {
    int fd;
    unsigned seed;
    st_store *s;
    st_conv *c[NCONV];
    uint64_t next[NCONV]; /* each written by its conversation's submitter only */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int inflight;
} child;

typedef struct pending {
    child *ch;
    unsigned conv;
    uint64_t first, n;
} pending;

static void send_msg(int fd, const msg *m)
{
    while (write(fd, m, sizeof(*m)) < 0 && errno == EINTR)
        ;
}

/* On the committer thread. The report goes out before anything else, so
 * that an append the child saw acknowledged is one the parent knows of. */
static void child_done(void *ctx, int status, uint64_t first)
{
    pending *p = ctx;
    child *ch = p->ch;
    msg m = {MSG_ACK, p->conv, status, first, p->n, p->first};
    if (status != 0 || first != p->first)
        m.kind = MSG_FAIL;
    send_msg(ch->fd, &m);
    pthread_mutex_lock(&ch->mu);
    ch->inflight--;
    pthread_cond_broadcast(&ch->cv);
    pthread_mutex_unlock(&ch->mu);
    free(p);
}

typedef struct submitter {
    child *ch;
    unsigned t; /* owns conversations t and t + 2 */
} submitter;

static void *submit_loop(void *arg)
{
    submitter *me = arg;
    child *ch = me->ch;
    unsigned seed = ch->seed * 2654435761u + me->t;
    for (;;) {
        pthread_mutex_lock(&ch->mu);
        while (ch->inflight >= INFLIGHT)
            pthread_cond_wait(&ch->cv, &ch->mu);
        ch->inflight++;
        pthread_mutex_unlock(&ch->mu);
        unsigned k = me->t + 2 * ((unsigned)rand_r(&seed) % (NCONV / 2));
        size_t n = 1 + (size_t)rand_r(&seed) % MAX_BATCH;
        pending *p = malloc(sizeof(*p));
        tst_items its;
        tst_items_make(&its, k, ch->next[k], n, MAXLEN);
        int r = p != NULL && its.v != NULL ? 0 : -ENOMEM;
        if (r == 0) {
            *p = (pending){ch, k, ch->next[k], n};
            r = st_append(ch->c[k], its.v, n, child_done, p);
        }
        tst_items_free(&its);
        if (r != 0) {
            msg m = {MSG_FAIL, k, r, 0, n, ch->next[k]};
            send_msg(ch->fd, &m);
            _exit(4);
        }
        ch->next[k] += n;
    }
    return NULL;
}

static void child_fail(int fd, uint32_t conv, int r)
{
    msg m = {MSG_FAIL, conv, r, 0, 0, 0};
    send_msg(fd, &m);
    _exit(3);
}

/* Never returns: it appends until it is killed. */
static void child_main(const st_opts *o, int fd, unsigned seed, pid_t parent)
{
    /* if the test dies first, so does the child (and a parent that died
     * before prctl took effect is noticed by getppid) */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent)
        _exit(5);
    rt_log_set_level(RT_LOG_WARN);
    child ch = {.fd = fd, .seed = seed};
    pthread_mutex_init(&ch.mu, NULL);
    pthread_cond_init(&ch.cv, NULL);
    int r = st_store_open(o, &ch.s, NULL, 0);
    if (r != 0)
        child_fail(fd, UINT32_MAX, r);
    for (unsigned k = 0; k < NCONV; k++) {
        rt_uuid id;
        tst_conv_id(k, &id);
        rt_buf *meta = meta_for(k);
        r = st_conv_create(ch.s, &id, NULL, meta, &ch.c[k]);
        rt_buf_unref(meta);
        if (r != 0 && r != -EEXIST)
            child_fail(fd, k, r);
        st_log *l;
        if ((r = st_conv_log(ch.c[k], &l, NULL)) != 0)
            child_fail(fd, k, r);
        ch.next[k] = st_log_count(l); /* what an earlier child left, acked or not */
    }
    msg m = {.kind = MSG_OPEN};
    send_msg(fd, &m);
    submitter a = {&ch, 0}, b = {&ch, 1};
    pthread_t t;
    if (pthread_create(&t, NULL, submit_loop, &b) != 0)
        child_fail(fd, UINT32_MAX, -EAGAIN);
    submit_loop(&a);
    _exit(6);
}

/* The carry variant's child: never returns. Conversations made, filled
 * (8 batches of 6 events) and deleted, one after another; a beat for each
 * batch acknowledged. */
static void carry_child_main(const st_opts *o, size_t churn_max, int fd, pid_t parent)
{
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent)
        _exit(5);
    rt_log_set_level(RT_LOG_WARN);
    st_store *s;
    int r = st_store_open(o, &s, NULL, 0);
    if (r != 0)
        child_fail(fd, UINT32_MAX, r);
    msg m = {.kind = MSG_OPEN};
    send_msg(fd, &m);
    for (unsigned i = 0;; i++) {
        unsigned k = CHURN_K + i % 4;
        rt_uuid id;
        tst_conv_id(k, &id);
        rt_buf *meta = meta_for(k);
        st_conv *c;
        r = st_conv_create(s, &id, NULL, meta, &c); /* or one a kill left */
        rt_buf_unref(meta);
        if (r != 0 && r != -EEXIST)
            child_fail(fd, k, r);
        for (uint64_t b = 0; b < 8; b++) {
            tst_items its;
            tst_items_make(&its, k, 6 * b, 6, churn_max);
            st_waiter w;
            st_waiter_init(&w);
            r = its.v != NULL ? st_append(c, its.v, 6, st_waiter_done, &w) : -ENOMEM;
            if (r == 0)
                r = st_waiter_wait(&w);
            tst_items_free(&its);
            if (r != 0)
                child_fail(fd, k, r);
            m = (msg){.kind = MSG_BEAT, .conv = k};
            send_msg(fd, &m);
        }
        st_waiter w;
        st_waiter_init(&w);
        if ((r = st_conv_delete(c, st_waiter_done, &w)) != 0 || (r = st_waiter_wait(&w)) != 0)
            child_fail(fd, k, r);
    }
}

/* ----------------------------------------------------------- the parent --- */

typedef struct run {
    const char *name;
    bool keep; /* one directory for every kill */
    bool pool; /* the pool backend (pool:DIR) */
    bool carry;       /* the carry variant (pool, kept) */
    unsigned old_n;   /* carry: the old conversation's events */
    size_t churn_max; /* carry: the churn's events are at most this long */
    int most_acks;    /* a kill after at most this many acknowledgements */
    uint32_t old_seq; /* carry: the segment of the old conversation's CREATE, last seen */
    int carried;      /* carry: how many checks found it moved */
    st_opts o;
    char *dir;
    char where[4200]; /* the location of dir */
    unsigned seed, rng;
    int kill;
    bool opened;           /* the child reported its store open */
    bool killed;           /* reports read from now on may postdate the child's death */
    uint64_t acked[NCONV]; /* events below this were acknowledged */
    long acks, busy_checks, early_kills, startup_kills, events_checked, unacked;
} run;

#define CRASH_REQUIRE(R, cond, ...)                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            char m_[768];                                                                          \
            snprintf(m_, sizeof(m_), __VA_ARGS__);                                                 \
            ck_abort_msg("%s, kill %d (PARLEY_CRASH_SEED=%u): %s", (R)->name, (R)->kill,           \
                         (R)->seed, m_);                                                           \
        }                                                                                          \
    } while (0)

/* While the child holds the store, the parent cannot open it: -EBUSY, and
 * the error names the holder. */
static void check_busy(run *R, pid_t pid)
{
    st_store *other = NULL;
    char err[512] = "";
    int r = st_store_open(&R->o, &other, err, sizeof(err));
    char want[64];
    snprintf(want, sizeof(want), "(pid %ld)", (long)pid);
    CRASH_REQUIRE(R, r == -EBUSY && other == NULL, "a second open gave %d (%s)", r, err);
    CRASH_REQUIRE(R, strstr(err, "in use by another process") && strstr(err, want),
                  "the error does not name pid %ld: \"%s\"", (long)pid, err);
    R->busy_checks++;
}

static void take(run *R, pid_t pid, const msg *m)
{
    switch (m->kind) {
    case MSG_OPEN:
        R->opened = true;
        if (!R->killed)
            check_busy(R, pid);
        break;
    case MSG_BEAT:
        R->acks++;
        break;
    case MSG_ACK:
        CRASH_REQUIRE(R, m->conv < NCONV && m->n >= 1 && m->n <= MAX_BATCH, "bad report");
        /* a new child starts where the log ends, at or past every ack */
        CRASH_REQUIRE(R, m->first >= R->acked[m->conv],
                      "conv %u: append acknowledged at %llu, below acknowledged %llu", m->conv,
                      (unsigned long long)m->first, (unsigned long long)R->acked[m->conv]);
        R->acked[m->conv] = m->first + m->n;
        R->acks++;
        break;
    default:
        kill(pid, SIGKILL);
        CRASH_REQUIRE(R, false,
                      "the child failed: conv %u status %lld (%s), first %llu, expected %llu",
                      m->conv, (long long)m->status, strerror((int)-m->status),
                      (unsigned long long)m->first, (unsigned long long)m->expect);
    }
}

/* Reads what is in the pipe (waiting up to timeout_ms for something);
 * false at end of file. */
static bool pump(run *R, pid_t pid, int fd, int timeout_ms, char *buf, size_t *have)
{
    struct pollfd p = {fd, POLLIN, 0};
    int pr = poll(&p, 1, timeout_ms);
    CRASH_REQUIRE(R, pr >= 0, "poll: %s", strerror(errno));
    if (pr == 0)
        return true;
    ssize_t n = read(fd, buf + *have, 64 * sizeof(msg) - *have);
    if (n < 0 && errno == EINTR)
        return true;
    CRASH_REQUIRE(R, n >= 0, "read: %s", strerror(errno));
    if (n == 0)
        return false;
    *have += (size_t)n;
    size_t at = 0;
    for (; *have - at >= sizeof(msg); at += sizeof(msg)) {
        msg m;
        memcpy(&m, buf + at, sizeof(m));
        take(R, pid, &m);
    }
    memmove(buf, buf + at, *have - at);
    *have -= at;
    return true;
}

/* The carry variant's old conversation: all of it, exactly; and whether
 * it moved since the last check. */
static void verify_old(run *R, st_store *s)
{
    rt_uuid id;
    tst_conv_id(OLD_K, &id);
    st_conv *c;
    CRASH_REQUIRE(R, st_conv_get(s, &id, &c) == 0, "the old conversation is gone");
    rt_buf *meta = st_conv_meta(c), *want = meta_for(OLD_K);
    CRASH_REQUIRE(R,
                  rt_buf_len(meta) == rt_buf_len(want) &&
                      memcmp(rt_buf_data(meta), rt_buf_data(want), rt_buf_len(want)) == 0,
                  "the old conversation's meta changed");
    rt_buf_unref(meta);
    rt_buf_unref(want);
    pthread_mutex_lock(stp_lock((stp_conv *)c));
    uint32_t seq = ((stp_conv *)c)->create_seq;
    pthread_mutex_unlock(stp_lock((stp_conv *)c));
    R->carried += seq != R->old_seq;
    R->old_seq = seq;
    st_log *l;
    st_open_report rep;
    int r = st_conv_log(c, &l, &rep);
    CRASH_REQUIRE(R, r == 0 && !st_log_read_only(l), "the old conversation's log: %s (%s)",
                  strerror(-r), rep.detail);
    CRASH_REQUIRE(R, st_log_count(l) == R->old_n, "the old conversation has %llu events, not %u",
                  (unsigned long long)st_log_count(l), R->old_n);
    char why[512];
    int bad = tst_cverify(l, OLD_K, R->old_n, OLD_MAX, why, sizeof(why));
    CRASH_REQUIRE(R, bad == 0, "the old conversation: %d bad events: %s", bad, why);
    R->events_checked += R->old_n;
    st_conv_release(c);
}

/* The carry variant: the old conversation, made before the first child. */
static void make_old(run *R)
{
    st_store *s;
    char err[512] = "";
    CRASH_REQUIRE(R, st_store_open(&R->o, &s, err, sizeof(err)) == 0, "open: %s", err);
    rt_uuid id;
    tst_conv_id(OLD_K, &id);
    rt_buf *meta = meta_for(OLD_K);
    st_conv *c;
    ck_assert_int_eq(st_conv_create(s, &id, NULL, meta, &c), 0);
    rt_buf_unref(meta);
    for (uint64_t at = 0; at < R->old_n; at += 6) {
        tst_items its;
        tst_items_make(&its, OLD_K, at, 6, OLD_MAX);
        st_waiter w;
        st_waiter_init(&w);
        ck_assert_int_eq(st_append(c, its.v, 6, st_waiter_done, &w), 0);
        ck_assert_int_eq(st_waiter_wait(&w), 0);
        tst_items_free(&its);
    }
    st_conv_release(c);
    st_store_close(s);
    R->old_seq = 1;
}

static void verify(run *R)
{
    char copy[4200];
    st_opts o = R->o;
    char where[4300];
    if (R->keep) { /* leave the crashed directory as it is for the next child */
        snprintf(copy, sizeof(copy), "%s.check", R->dir);
        tst_copydir(R->dir, copy);
        snprintf(where, sizeof(where), "%s%s", R->pool ? "pool:" : "local:", copy);
        o.dir = where;
    }
    st_store *s;
    char err[512] = "";
    int r = st_store_open(&o, &s, err, sizeof(err));
    CRASH_REQUIRE(R, r == 0, "reopen: %s", err);
    for (unsigned k = 0; k < NCONV; k++) {
        rt_uuid id;
        tst_conv_id(k, &id);
        st_conv *c;
        r = st_conv_get(s, &id, &c);
        if (r == -ENOENT && R->acked[k] == 0)
            continue; /* killed before it was created */
        CRASH_REQUIRE(R, r == 0, "conv %u is gone", k);
        rt_buf *meta = st_conv_meta(c), *want = meta_for(k);
        CRASH_REQUIRE(R,
                      rt_buf_len(meta) == rt_buf_len(want) &&
                          memcmp(rt_buf_data(meta), rt_buf_data(want), rt_buf_len(want)) == 0,
                      "conv %u: meta.json changed", k);
        rt_buf_unref(meta);
        rt_buf_unref(want);
        st_log *l;
        st_open_report rep;
        r = st_conv_log(c, &l, &rep);
        CRASH_REQUIRE(R, r == 0, "conv %u: log: %s (%s)", k, strerror(-r), rep.detail);
        CRASH_REQUIRE(R, !st_log_read_only(l), "conv %u: log read-only: %s", k, rep.detail);
        uint64_t n = st_log_count(l);
        CRASH_REQUIRE(R, n >= R->acked[k], "conv %u: %llu events, but %llu were acknowledged", k,
                      (unsigned long long)n, (unsigned long long)R->acked[k]);
        char why[512];
        int bad = tst_cverify(l, k, n, MAXLEN, why, sizeof(why));
        CRASH_REQUIRE(R, bad == 0, "%d bad events: %s", bad, why);
        R->events_checked += (long)n;
        R->unacked += (long)(n - R->acked[k]); /* landed, never acknowledged */
        st_conv_release(c);
    }
    if (R->carry)
        verify_old(R, s);
    st_store_close(s);
    if (R->keep)
        tst_rmdir(copy);
}

static void one_kill(run *R)
{
    bool fresh = !R->keep || R->dir == NULL;
    if (fresh) {
        R->dir = tst_mkdtemp();
        memset(R->acked, 0, sizeof(R->acked));
    }
    snprintf(R->where, sizeof(R->where), "%s%s", R->pool ? "pool:" : "local:", R->dir);
    R->o.dir = R->where;
    if (fresh && R->carry)
        make_old(R);
    R->opened = R->killed = false;
    int p[2];
    ck_assert_int_eq(pipe2(p, O_CLOEXEC), 0);
    pid_t parent = getpid(), pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        close(p[0]);
        if (R->carry)
            carry_child_main(&R->o, R->churn_max, p[1], parent);
        child_main(&R->o, p[1], R->seed + (unsigned)R->kill * 7919u, parent);
    }
    close(p[1]);
    uint64_t start = now_us();
    /* the moment: after a random number of acknowledgements, plus a little;
     * or, one time in six, a random time after the fork */
    long want;
    uint64_t delay_us;
    if (rand_r(&R->rng) % 6 == 0) {
        want = 0;
        delay_us = (uint64_t)(rand_r(&R->rng) % 15000);
        R->early_kills++;
    } else {
        want = 1 + rand_r(&R->rng) % (R->most_acks ? R->most_acks : R->keep ? 40 : 100);
        delay_us = (uint64_t)(rand_r(&R->rng) % 3000);
    }
    char buf[64 * sizeof(msg)];
    size_t have = 0;
    bool eof = false;
    long acks0 = R->acks;
    while (!eof && R->acks - acks0 < want) {
        CRASH_REQUIRE(R, now_us() - start < (uint64_t)TS_DEADLINE_MS * 1000,
                      "%ld acknowledgements in %d ms, waiting for %ld", R->acks - acks0,
                      TS_DEADLINE_MS, want);
        eof = !pump(R, pid, p[0], 100, buf, &have);
    }
    if (!eof) {
        uint64_t until = (want == 0 ? start : now_us()) + delay_us;
        uint64_t t = now_us();
        if (t < until) { /* only picks the moment: nothing waits on it */
            struct timespec ts = {0, (long)(until - t) * 1000};
            nanosleep(&ts, NULL);
        }
        kill(pid, SIGKILL);
    }
    R->killed = true;
    /* every report the child wrote before it died is in the pipe */
    while (!eof)
        eof = !pump(R, pid, p[0], TS_DEADLINE_MS, buf, &have);
    close(p[0]);
    int st;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    CRASH_REQUIRE(R, WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL, "the child ended by itself: %s %d",
                  WIFEXITED(st) ? "exit" : "signal",
                  WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
    CRASH_REQUIRE(R, have == 0, "a torn report of %zu bytes", have);
    R->startup_kills += !R->opened;
    verify(R);
    if (!R->keep) {
        tst_rmdir(R->dir);
        free(R->dir);
        R->dir = NULL;
    }
}

/* The highest number among the names in dir that end with one of the
 * suffixes, and how many such files there are. */
static uint64_t files(const char *dir, const char *suf1, const char *suf2, int *count)
{
    DIR *d = opendir(dir);
    uint64_t top = 0;
    struct dirent *e;
    while (d != NULL && (e = readdir(d)) != NULL) {
        const char *dot = strrchr(e->d_name, '.');
        if (dot == NULL || dot == e->d_name || (strcmp(dot, suf1) != 0 && strcmp(dot, suf2) != 0))
            continue;
        uint64_t v = strtoull(e->d_name, NULL, 10);
        top = v > top ? v : top;
        (*count)++;
    }
    if (d != NULL)
        closedir(d);
    return top;
}

/* What the kept directory went through: segment rolls and journal
 * rotations (so that a change that stopped them from happening under the
 * kills fails here instead of quietly testing less). */
static void kept_summary(const run *R, int *segs, uint64_t *journal_seq)
{
    char path[4200], hex[33];
    if (R->pool) { /* its segments are the journal: rolls count for both */
        snprintf(path, sizeof(path), "%s/pool", R->dir);
        *journal_seq = files(path, ".seg", ".seg", segs);
        *segs += 2 * NCONV;
        return;
    }
    for (unsigned k = 0; k < NCONV; k++) {
        rt_uuid id;
        tst_conv_id(k, &id);
        rt_uuid_hex(&id, hex);
        snprintf(path, sizeof(path), "%s/conversations/%s", R->dir, hex);
        files(path, ".seg", ".seg", segs);
    }
    int n = 0;
    snprintf(path, sizeof(path), "%s/journal", R->dir);
    *journal_seq = files(path, ".wal", ".free", &n);
}

static void crash_run(run *R)
{
    const char *env = getenv("PARLEY_CRASH_SEED");
    R->seed = env != NULL ? (unsigned)strtoul(env, NULL, 10)
                          : (unsigned)(now_us() ^ ((uint64_t)getpid() << 16));
    R->rng = R->seed;
    rt_log_set_level(RT_LOG_WARN); /* repairs and replays are expected here */
    uint64_t t0 = now_us();
    for (R->kill = 0; R->kill < KILLS; R->kill++)
        one_kill(R);
    int segs = 0;
    uint64_t jseq = 0;
    if (R->keep)
        kept_summary(R, &segs, &jseq);
    fprintf(stderr,
            "crash %s: seed %u, %d kills (%ld timed from the fork, %ld before the store was "
            "open) in %.1f s; %ld appends acknowledged; %ld events checked, %ld of them never "
            "acknowledged; %ld busy checks",
            R->name, R->seed, KILLS, R->early_kills, R->startup_kills,
            (double)(now_us() - t0) / 1e6, R->acks, R->events_checked, R->unacked, R->busy_checks);
    if (R->keep)
        fprintf(stderr, "; %d segments, journal file number %llu", segs, (unsigned long long)jseq);
    if (R->carry)
        fprintf(stderr, "; the old conversation found carried %d times", R->carried);
    fprintf(stderr, "\n");
    CRASH_REQUIRE(R, R->acks > 0 && R->busy_checks > 0, "the kills all came too early");
    CRASH_REQUIRE(R, !R->carry || R->carried > 0, "the old conversation was never carried");
    CRASH_REQUIRE(R, !R->keep || (segs > 2 * NCONV && jseq > 2),
                  "too few segment rolls (%d segments) or journal rotations (file %llu)", segs,
                  (unsigned long long)jseq);
    if (R->keep) {
        tst_rmdir(R->dir);
        free(R->dir);
    }
}

START_TEST(test_kill_fresh_dir)
{
    run R = {.name = _i ? "fresh directory, pool" : "fresh directory",
             .pool = _i,
             .o = {.durability = ST_FULL}};
    crash_run(&R);
}
END_TEST

START_TEST(test_kill_kept_dir)
{
    run R = {.name = _i ? "kept directory, pool" : "kept directory",
             .keep = true,
             .pool = _i,
             .o = {.durability = ST_FULL,
                   .segment_bytes = 64 << 10,
                   .journal_bytes = 256 << 10,
                   .checkpoint_records = 16}};
    crash_run(&R);
}
END_TEST

START_TEST(test_kill_while_carrying)
{
    run R = {.name = _i ? "kept directory, pool, carries in several groups"
                        : "kept directory, pool, carries",
             .keep = true,
             .pool = true,
             .carry = true,
             .old_n = _i ? OLD_BIG_N : OLD_N,
             /* the large one (~100 KiB, at most 64 KiB in one group at 16
              * KiB segments) goes in some 30 groups, beside one of the
              * churn's each: a child lives for up to 100 of its batches,
              * of smaller events (segments roll about as often) */
             .churn_max = _i ? 4 << 10 : MAXLEN,
             .most_acks = _i ? 100 : 0,
             .o = {.durability = ST_FULL, .segment_bytes = _i ? 16 << 10 : 64 << 10}};
    crash_run(&R);
}
END_TEST

/* The lock is per open, not per process: a second open in the same process
 * is refused too, and names this process. */
START_TEST(test_second_open_in_process_is_busy)
{
    rt_log_set_level(RT_LOG_WARN);
    char *dir = tst_mkdtemp(), where[4200];
    snprintf(where, sizeof(where), "%s%s", _i ? "pool:" : "local:", dir);
    st_opts o = {.dir = where, .durability = ST_FULL};
    st_store *s, *t = NULL;
    ck_assert_int_eq(st_store_open(&o, &s, NULL, 0), 0);
    char err[512], want[64];
    ck_assert_int_eq(st_store_open(&o, &t, err, sizeof(err)), -EBUSY);
    ck_assert_ptr_null(t);
    snprintf(want, sizeof(want), "(pid %ld)", (long)getpid());
    ck_assert_msg(strstr(err, "in use by another process") && strstr(err, want), "%s", err);
    st_store_close(s);
    ck_assert_int_eq(st_store_open(&o, &t, err, sizeof(err)), 0);
    st_store_close(t);
    tst_rmdir(dir);
    free(dir);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("crash");
    TCase *tc = tcase_create("crash");
    tcase_add_loop_test(tc, test_second_open_in_process_is_busy, 0, 2);
    tcase_add_loop_test(tc, test_kill_fresh_dir, 0, 2);
    tcase_add_loop_test(tc, test_kill_kept_dir, 0, 2);
    tcase_add_loop_test(tc, test_kill_while_carrying, 0, 2);
    suite_add_tcase(s, tc);
    return ts_run_suite(s);
}
