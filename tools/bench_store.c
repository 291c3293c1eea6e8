/*
 * bench_store.c - `parley bench store`: the durable log's figures, each the
 * median of --runs runs, in a scratch directory (removed afterwards).
 *
 *  durable   `full` appends of 1 KiB events, 64 appenders over 16
 *            conversations, each waiting for its ack before the next; the
 *            runs share one store, as a server's appends do (its retired
 *            journal files get reused), and a first run on a fresh store
 *            is reported on its own
 *  one       the same with a single appender (bound by fdatasync latency)
 *  none      the same as durable under the `none` policy
 *  page      a page of 100 events at random positions of a 1M-event log,
 *            and at its start, middle and end
 *  open      opening that log (fresh st_log_open, from its checkpoints) and
 *            the memory it holds
 *
 * Appenders are state machines driven by the committer's callbacks, so the
 * figures are the store's own, without a runtime in between.
 */
#include "cli.h"

#include "runtime/log.h"
#include "store/store.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

enum { EVENT = 1024, CONVS = 16, APPENDERS = 64 };

typedef struct bench {
    st_conv *conv[CONVS];
    rt_buf *body;
    uint64_t target; /* events to append */
    _Atomic uint64_t sent, acked;
    _Atomic int errors;
    double t0, t1;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool done;
} bench;

typedef struct appender {
    bench *b;
    int conv, idx;
    uint64_t seq;
} appender;

/* "a<appender, 2 hex digits>-<seq, 16 hex digits>" into id (20 bytes): made
 * on the committer's thread, by hand, so that the figure is not
 * snprintf's (7% of the `none` run's time when it was). */
static size_t event_id(char *id, int idx, uint64_t seq)
{
    static const char hex[] = "0123456789abcdef";
    id[0] = 'a';
    id[1] = hex[(idx >> 4) & 15];
    id[2] = hex[idx & 15];
    id[3] = '-';
    for (int i = 0; i < 16; i++)
        id[4 + i] = hex[(seq >> (60 - 4 * i)) & 15];
    return 20;
}

static void next_append(appender *a);

static void on_ack(void *ctx, int status, uint64_t first)
{
    (void)first;
    appender *a = ctx;
    bench *b = a->b;
    if (status != 0)
        atomic_fetch_add(&b->errors, 1);
    if (atomic_fetch_add(&b->acked, 1) + 1 == b->target) {
        b->t1 = cli_now_s();
        pthread_mutex_lock(&b->mu);
        b->done = true;
        pthread_cond_signal(&b->cv);
        pthread_mutex_unlock(&b->mu);
        return;
    }
    next_append(a);
}

static void next_append(appender *a)
{
    bench *b = a->b;
    if (atomic_fetch_add(&b->sent, 1) >= b->target)
        return;
    char id[20];
    size_t n = event_id(id, a->idx, a->seq++);
    st_item it = {.id = id, .idlen = (uint32_t)n, .payload = b->body};
    if (st_append(b->conv[a->conv], &it, 1, on_ack, a) != 0)
        atomic_fetch_add(&b->errors, 1);
}

/* Events per second of `appenders` appenders (one ack awaited each) under
 * policy d, on new conversations in the store in dir: a fresh one if
 * `fresh`, else the one left by the previous run, with its journal spares,
 * as a server that has been running has them. */
static const char *prefix = "pool:"; /* or "local:": the backend measured */

static double run_appends(const char *dir, st_durability d, int appenders, uint64_t events,
                          bool fresh)
{
    if (fresh)
        cli_rm_tree(dir);
    /* every run starts with no dirty data of earlier runs being written
     * back under it */
    sync();
    char where[4300];
    snprintf(where, sizeof(where), "%s%s", prefix, dir);
    st_opts o = {.dir = where, .durability = d};
    st_store *s;
    char err[256];
    if (st_store_open(&o, &s, err, sizeof(err)) != 0) {
        fprintf(stderr, "parley bench store: %s\n", err);
        exit(CLI_FAIL);
    }
    bench b = {.target = events};
    pthread_mutex_init(&b.mu, NULL);
    pthread_cond_init(&b.cv, NULL);
    b.body = rt_buf_new(EVENT);
    memset(rt_buf_wdata(b.body), 'x', EVENT);
    rt_buf *meta = rt_buf_copy("{}", 2);
    for (int i = 0; i < CONVS; i++) {
        rt_uuid id;
        rt_uuid_v4(&id);
        st_conv_create(s, &id, NULL, meta, &b.conv[i]);
    }
    rt_buf_unref(meta);
    appender *as = calloc((size_t)appenders, sizeof(*as));
    b.t0 = cli_now_s();
    for (int i = 0; i < appenders; i++) {
        as[i] = (appender){.b = &b, .conv = i % CONVS, .idx = i};
        next_append(&as[i]);
    }
    pthread_mutex_lock(&b.mu);
    while (!b.done)
        pthread_cond_wait(&b.cv, &b.mu);
    pthread_mutex_unlock(&b.mu);
    double rate = (double)events / (b.t1 - b.t0);
    if (atomic_load(&b.errors) > 0) {
        fprintf(stderr, "parley bench store: %d appends failed\n", atomic_load(&b.errors));
        exit(CLI_FAIL);
    }
    for (int i = 0; i < CONVS; i++)
        st_conv_release(b.conv[i]);
    st_store_close(s);
    rt_buf_unref(b.body);
    free(as);
    return rate;
}

/* ------------------------------------------------------- the 1M-event log --- */

/* The pool has no log of its own: its 1M-event log is one conversation's,
 * written and opened through the store. */
static const rt_uuid pool_conv = {{0x10, 0x6e, 0x11}};

typedef struct acked {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int pending, failed;
} acked;

static void on_built(void *ctx, int status, uint64_t first)
{
    (void)first;
    acked *a = ctx;
    pthread_mutex_lock(&a->mu);
    a->pending--;
    a->failed += status != 0;
    pthread_cond_signal(&a->cv);
    pthread_mutex_unlock(&a->mu);
}

static st_store *pool_open(const char *dir, st_durability d)
{
    char where[4300], err[256];
    snprintf(where, sizeof(where), "%s%s", prefix, dir);
    st_opts o = {.dir = where, .durability = d};
    st_store *s;
    if (st_store_open(&o, &s, err, sizeof(err)) != 0) {
        fprintf(stderr, "parley bench store: %s\n", err);
        exit(CLI_FAIL);
    }
    return s;
}

enum { BATCH = 1000 }; /* events per append while building a log */

/* Events at .. up to BATCH of n (ids from their index, payload body) into
 * items; how many. */
static size_t batch_of(st_item *items, char (*ids)[40], uint64_t at, uint64_t n, rt_buf *body)
{
    size_t k = n - at < BATCH ? (size_t)(n - at) : BATCH;
    for (size_t i = 0; i < k; i++) {
        int len = snprintf(ids[i], sizeof(ids[i]), "%08llx-0000-4000-8000-000000000000",
                           (unsigned long long)(at + i));
        items[i] = (st_item){.id = ids[i], .idlen = (uint32_t)len, .payload = body};
    }
    return k;
}

static void build_pool_log(const char *dir, uint64_t n)
{
    cli_rm_tree(dir);
    st_store *s = pool_open(dir, ST_NONE);
    rt_buf *meta = rt_buf_copy("{}", 2), *body = rt_buf_new(EVENT);
    memset(rt_buf_wdata(body), 'y', EVENT);
    st_conv *c;
    if (st_conv_create(s, &pool_conv, NULL, meta, &c) != 0) {
        fprintf(stderr, "parley bench store: cannot create the 1M-event conversation\n");
        exit(CLI_FAIL);
    }
    acked a = {.pending = 0};
    pthread_mutex_init(&a.mu, NULL);
    pthread_cond_init(&a.cv, NULL);
    static char ids[BATCH][40];
    st_item items[BATCH];
    for (uint64_t at = 0; at < n; at += BATCH) {
        size_t k = batch_of(items, ids, at, n, body);
        pthread_mutex_lock(&a.mu);
        a.pending++;
        pthread_mutex_unlock(&a.mu);
        if (st_append(c, items, k, on_built, &a) != 0)
            exit(CLI_FAIL);
    }
    pthread_mutex_lock(&a.mu);
    while (a.pending > 0)
        pthread_cond_wait(&a.cv, &a.mu);
    pthread_mutex_unlock(&a.mu);
    if (a.failed > 0) {
        fprintf(stderr, "parley bench store: writing the 1M-event log failed\n");
        exit(CLI_FAIL);
    }
    st_conv_release(c);
    rt_buf_unref(meta);
    rt_buf_unref(body);
    st_store_close(s);
}

static void build_log(const char *dir, uint64_t n)
{
    cli_rm_tree(dir);
    st_log *l;
    if (st_log_open(dir, NULL, &l, NULL) != 0) {
        fprintf(stderr, "parley bench store: cannot create %s\n", dir);
        exit(CLI_FAIL);
    }
    st_item items[BATCH];
    char ids[BATCH][40];
    rt_buf *body = rt_buf_new(EVENT);
    memset(rt_buf_wdata(body), 'y', EVENT);
    for (uint64_t at = 0; at < n; at += BATCH) {
        size_t k = batch_of(items, ids, at, n, body);
        uint64_t first;
        if (st_log_write(l, items, k, &first) != 0) {
            fprintf(stderr, "parley bench store: writing the 1M-event log failed\n");
            exit(CLI_FAIL);
        }
        st_log_publish(l);
        if ((at / BATCH) % 50 == 0)
            fprintf(stderr, "\rbuilding a %llu-event log... %3.0f%%", (unsigned long long)n,
                    100.0 * (double)at / (double)n);
    }
    fprintf(stderr, "\r%60s\r", "");
    rt_buf_unref(body);
    st_log_close(l);
}

/* Median milliseconds of `n` page reads at positions from pick(). */
static double page_ms(st_log *l, int n, uint64_t (*pick)(uint64_t count, unsigned *seed))
{
    double *v = malloc((size_t)n * sizeof(double));
    unsigned seed = 12345;
    uint64_t count = st_log_count(l);
    for (int i = 0; i < n; i++) {
        uint64_t at = pick(count, &seed);
        st_page *p;
        double t = cli_now_s();
        if (st_log_read(l, at, 100, &p) != 0 || p->n != (count - at < 100 ? count - at : 100)) {
            fprintf(stderr, "parley bench store: a page read failed\n");
            exit(CLI_FAIL);
        }
        v[i] = (cli_now_s() - t) * 1000;
        st_page_free(p);
    }
    double m = cli_median(v, n);
    free(v);
    return m;
}

static uint64_t pick_random(uint64_t count, unsigned *seed)
{
    uint64_t r = ((uint64_t)rand_r(seed) << 31) ^ (uint64_t)rand_r(seed);
    return r % (count - 100);
}
static uint64_t pick_start(uint64_t count, unsigned *seed)
{
    (void)count, (void)seed;
    return 0;
}
static uint64_t pick_middle(uint64_t count, unsigned *seed)
{
    (void)seed;
    return count / 2;
}
static uint64_t pick_end(uint64_t count, unsigned *seed)
{
    (void)seed;
    return count - 100;
}

/* ------------------------------------------------------------- driver --- */

static const char usage[] =
    "usage: parley bench store [--runs N] [--json] [--dir DIR] [--events N] [--log-events N]\n\n"
    "Measure the durable event log; each figure is the median of N runs (default 5).\n"
    "Works in a scratch directory that is removed afterwards; it needs room for\n"
    "--log-events KiB (1 GiB by default).\n\n"
    "  --runs N         runs per figure (default 5)\n"
    "  --dir DIR        where to work (default: a new directory under $TMPDIR or /tmp);\n"
    "                   local:DIR measures the local store (a directory per\n"
    "                   conversation) instead of the default pool (where the\n"
    "                   1M-event log is one conversation's, its open time the store's\n"
    "                   open and the log's)\n"
    "  --events N       appends per run for the append figures (default 200000)\n"
    "  --log-events N   events in the log for the read and open figures (default 1000000)\n"
    "  --json           print one JSON object: durable_events_per_s, none_events_per_s,\n"
    "                   page_read_ms_p50, open_1m_ms, open_1m_rss_bytes (and more)\n"
    "  -h, --help       show this help\n";

int bench_store(int argc, char **argv)
{
    int runs = 5, events = 200000, log_events = 1000000;
    bool json = false;
    const char *base = NULL;
    const cli_int_opt ints[] = {{"--events", &events, 1000, 100000000},
                                {"--log-events", &log_events, 1000, 100000000}};
    int st = cli_bench_args("bench store", usage, argc, argv, &runs, &json, &base, ints, 2);
    if (st >= 0)
        return st;
    rt_log_set_level(RT_LOG_WARN);
    char root[4096];
    prefix = cli_backend_prefix(&base);
    bool pool = strcmp(prefix, "local:") != 0; /* the pool: the default for a new directory */
    if (pool)
        prefix = "pool:";
    if (cli_scratch_dir("bench store", base, root, sizeof(root)) != 0)
        return CLI_FAIL;
    char sdir[4200], ndir[4200], ldir[4200];
    snprintf(sdir, sizeof(sdir), "%s/store", root);
    snprintf(ndir, sizeof(ndir), "%s/store-none", root);
    snprintf(ldir, sizeof(ldir), "%s/log", root);

    double *durable = calloc((size_t)runs, sizeof(double));
    double *one = calloc((size_t)runs, sizeof(double));
    double *none = calloc((size_t)runs, sizeof(double));
    double *rnd = calloc((size_t)runs, sizeof(double));
    double *beg = calloc((size_t)runs, sizeof(double));
    double *mid = calloc((size_t)runs, sizeof(double));
    double *end = calloc((size_t)runs, sizeof(double));
    double *open_ms = calloc((size_t)runs, sizeof(double));
    double *rss = calloc((size_t)runs, sizeof(double));
    double *mem = calloc((size_t)runs, sizeof(double));
    /* the first durable run starts from nothing: reported on its own */
    if (!json)
        fprintf(stderr, "\rcold run: appends...       ");
    double cold = run_appends(sdir, ST_FULL, APPENDERS, (uint64_t)events, true);
    for (int i = 0; i < runs; i++) {
        if (!json)
            fprintf(stderr, "\rrun %d/%d: appends...      ", i + 1, runs);
        none[i] = run_appends(ndir, ST_NONE, APPENDERS, (uint64_t)events, i == 0);
        durable[i] = run_appends(sdir, ST_FULL, APPENDERS, (uint64_t)events, false);
        one[i] = run_appends(sdir, ST_FULL, 1, (uint64_t)events / 50, false);
    }
    if (!json)
        fprintf(stderr, "\r%40s\r", "");
    if (pool)
        build_pool_log(ldir, (uint64_t)log_events);
    else
        build_log(ldir, (uint64_t)log_events);
    for (int i = 0; i < runs; i++) {
        if (!json)
            fprintf(stderr, "\rrun %d/%d: open and read...", i + 1, runs);
        st_log *l;
        long before = cli_rss_bytes();
        double t = cli_now_s();
        st_open_report rep;
        st_store *ps = NULL; /* the pool: the store's open, then the conversation's log */
        st_conv *pc = NULL;
        int orr =
            pool ? ((ps = pool_open(ldir, ST_NONE)) != NULL && st_conv_get(ps, &pool_conv, &pc) == 0
                        ? st_conv_log(pc, &l, &rep)
                        : -ENOENT)
                 : st_log_open(ldir, NULL, &l, &rep);
        if (orr != 0 || rep.count != (uint64_t)log_events) {
            fprintf(stderr, "parley bench store: reopening the log failed: %s\n", rep.detail);
            return CLI_FAIL;
        }
        open_ms[i] = (cli_now_s() - t) * 1000;
        rss[i] = (double)(cli_rss_bytes() - before);
        mem[i] = (double)st_log_memory(l);
        rnd[i] = page_ms(l, 2000, pick_random);
        beg[i] = page_ms(l, 200, pick_start);
        mid[i] = page_ms(l, 200, pick_middle);
        end[i] = page_ms(l, 200, pick_end);
        if (ps != NULL) {
            st_conv_release(pc);
            st_store_close(ps);
        } else {
            st_log_close(l);
        }
        cli_heap_trim(); /* so that the next open's RSS growth is its own */
    }
    if (base == NULL)
        cli_rm_tree(root);
    double dur = cli_median(durable, runs), on = cli_median(one, runs), no = cli_median(none, runs),
           pr = cli_median(rnd, runs), ps = cli_median(beg, runs), pm = cli_median(mid, runs),
           pe = cli_median(end, runs), om = cli_median(open_ms, runs), rs = cli_median(rss, runs),
           me = cli_median(mem, runs);
    if (json) {
        printf("{\"durable_events_per_s\": %.0f, \"durable_cold_events_per_s\": %.0f, "
               "\"single_appender_events_per_s\": %.0f, "
               "\"none_events_per_s\": %.0f, \"page_read_ms_p50\": %.3f, "
               "\"page_read_start_ms_p50\": %.3f, \"page_read_middle_ms_p50\": %.3f, "
               "\"page_read_end_ms_p50\": %.3f, \"open_1m_ms\": %.1f, "
               "\"open_1m_rss_bytes\": %.0f, \"open_1m_index_bytes\": %.0f, "
               "\"log_events\": %d, \"runs\": %d}\n",
               dur, cold, on, no, pr, ps, pm, pe, om, rs, me, log_events, runs);
    } else {
        fprintf(stderr, "\r%40s\r", "");
        printf("parley bench store (median of %d runs)\n", runs);
        printf("  durable append      %9.0f events/s  (full: 64 appenders, 16 conversations, "
               "1 KiB)\n",
               dur);
        printf("    on a fresh store  %9.0f events/s  (before its journal files are reused)\n",
               cold);
        printf("  one appender        %9.0f events/s  (full: each append waits for its "
               "fdatasync)\n",
               on);
        printf("  none append         %9.0f events/s  (none: 64 appenders, 16 conversations)\n",
               no);
        printf("  page of 100         %9.3f ms        (random positions in %d events)\n", pr,
               log_events);
        printf("    start/middle/end  %.3f / %.3f / %.3f ms\n", ps, pm, pe);
        printf("  open the log        %9.1f ms        (%d events, from checkpoints)\n", om,
               log_events);
        printf("  memory when open    %9.1f MiB RSS  (index %.1f MiB; payloads %.0f MiB)\n",
               rs / 1048576, me / 1048576, (double)log_events * EVENT / 1048576);
    }
    free(durable);
    free(one);
    free(none);
    free(rnd);
    free(beg);
    free(mid);
    free(end);
    free(open_ms);
    free(rss);
    free(mem);
    return CLI_OK;
}
