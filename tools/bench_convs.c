/*
 * bench_convs.c - `parley bench conversations`: many conversations in one
 * process, through the public API (include/parley.h) on a scratch data
 * directory, durable `full`: each conversation created, then given a few
 * events (one append of a user message and the agent's answer...), by
 * --threads threads at once. Reported at 10,000 and at --count: the
 * creation rate (created and its events durable, per second), the
 * resident memory per conversation just written, the open file
 * descriptors; then, once idle conversations have closed their logs, the
 * memory per conversation at rest and the descriptors; and whether every
 * conversation reads back its events. The first failure stops the run and
 * is reported as it is (e.g. out of file descriptors).
 */
#include "cli.h"

#include "actors/parley_impl.h"
#include "store/store.h"

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

static const char usage[] =
    "usage: parley bench conversations [--count N] [--events N] [--threads N]\n"
    "                                  [--idle-close-ms MS] [--dir DIR] [--json]\n\n"
    "Create N conversations (default 100000) in one process through the public API,\n"
    "each given --events events (default 3) in one durable append, from --threads\n"
    "threads (default 16). Reported at 10,000 and at N: creations per second, RSS per\n"
    "conversation, open file descriptors; then, once the conversations closed their\n"
    "logs (--idle-close-ms, default 2000), RSS per conversation and descriptors at\n"
    "rest, and whether every conversation reads its events back. The scratch data\n"
    "directory (under $TMPDIR) is removed afterwards; one given with --dir is kept\n"
    "(its data/ is a data directory for `parley serve --data`). The store is the\n"
    "default for a new directory, the pool; --dir local:DIR runs on the local store\n"
    "(a directory per conversation) instead.\n";

enum { MARK = 10000, MAX_THREADS = 64 };

typedef struct run {
    pl_instance *p;
    int count, events, threads;
    _Atomic int next, made, failed;
    pl_id *ids;
    char *body; /* the events of one conversation: a JSON array */
    pthread_mutex_t mu;
    char err[400];
    /* the 10,000 mark */
    double t0, t_mark;
    long rss_mark;
    int fds_mark;
    bool marked;
} run;

static double cpu_s(void)
{
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return (double)u.ru_utime.tv_sec + u.ru_utime.tv_usec / 1e6 + (double)u.ru_stime.tv_sec +
           u.ru_stime.tv_usec / 1e6;
}

static int open_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    int n = 0;
    if (d == NULL)
        return -1;
    while (readdir(d) != NULL)
        n++;
    closedir(d);
    return n - 3; /* ".", ".." and the directory itself */
}

static void fail(run *r, const char *what, const char *why)
{
    pthread_mutex_lock(&r->mu);
    if (r->err[0] == '\0')
        snprintf(r->err, sizeof(r->err), "conversation %d: %s: %.300s", atomic_load(&r->made) + 1,
                 what, why);
    pthread_mutex_unlock(&r->mu);
    atomic_fetch_add(&r->failed, 1);
}

static void *creator(void *arg)
{
    run *r = arg;
    char why[300];
    for (;;) {
        if (atomic_load(&r->failed) > 0)
            return NULL;
        int i = atomic_fetch_add(&r->next, 1);
        if (i >= r->count)
            return NULL;
        pl_conv *c;
        int e = pl_conv_create(r->p, NULL, &c);
        if (e != 0) {
            fail(r, "create", pl_strerror(e));
            return NULL;
        }
        memcpy(r->ids[i].s, pl_conv_id(c), sizeof(r->ids[i].s));
        int o = cli_pl_wait(c, r->body, strlen(r->body), 0, why, sizeof(why));
        pl_conv_release(c);
        if (o != PL_COMMITTED) {
            fail(r, "append", why);
            return NULL;
        }
        if (atomic_fetch_add(&r->made, 1) + 1 == MARK) {
            pthread_mutex_lock(&r->mu);
            r->t_mark = cli_now_s();
            r->rss_mark = cli_rss_bytes() / 1024;
            r->fds_mark = open_fds();
            r->marked = true;
            pthread_mutex_unlock(&r->mu);
        }
    }
}

static char *events_of(int n)
{
    size_t cap = (size_t)n * 256 + 16, len = 0;
    char *b = malloc(cap);
    if (b == NULL)
        return NULL;
    len += (size_t)snprintf(b + len, cap - len, "[");
    for (int i = 0; i < n; i++)
        len += (size_t)snprintf(
            b + len, cap - len,
            "%s{\"source\":\"%s\",\"kind\":\"MessageEvent\",\"llm_message\":{\"role\":\"%s\","
            "\"content\":[{\"type\":\"text\",\"text\":\"message %d of this conversation\"}]}}",
            i ? "," : "", i % 2 ? "agent" : "user", i % 2 ? "assistant" : "user", i);
    snprintf(b + len, cap - len, "]");
    return b;
}

/* Every conversation has its events: the number that does not. */
static int unreadable(run *r, int n)
{
    int bad = 0;
    for (int i = 0; i < n; i++) {
        pl_conv *c;
        uint64_t k = 0;
        if (pl_conv_open(r->p, r->ids[i].s, &c) != 0) {
            bad++;
            continue;
        }
        if (pl_count(c, &k) != 0 || k != (uint64_t)r->events)
            bad++;
        pl_conv_release(c);
    }
    return bad;
}

int bench_convs(int argc, char **argv)
{
    int runs = 1, count = 100000, events = 3, threads = 16, idle_ms = 2000;
    bool json = false;
    const char *base = NULL;
    cli_int_opt ints[] = {{"--count", &count, 1, 10000000},
                          {"--events", &events, 1, 100},
                          {"--threads", &threads, 1, MAX_THREADS},
                          {"--idle-close-ms", &idle_ms, 100, 600000}};
    int a = cli_bench_args("bench conversations", usage, argc, argv, &runs, &json, &base, ints, 4);
    if (a >= 0)
        return a;
    char dir[4096];
    const char *prefix = cli_backend_prefix(&base);
    if (cli_scratch_dir("bench conversations", base, dir, sizeof(dir)) != 0)
        return CLI_FAIL;
    char data[4200];
    snprintf(data, sizeof(data), "%s%s/data", prefix, dir);
    run r = {.count = count, .events = events, .threads = threads};
    pthread_mutex_init(&r.mu, NULL);
    r.ids = calloc((size_t)count, sizeof(*r.ids));
    r.body = events_of(events);
    pl_options o = {.data_dir = data, .idle_close_ms = (unsigned long long)idle_ms};
    char err[300];
    int rc = CLI_FAIL;
    if (r.ids == NULL || r.body == NULL || pl_open(&o, &r.p, err, sizeof(err)) != 0) {
        fprintf(stderr, "parley bench conversations: %s\n",
                r.ids == NULL || r.body == NULL ? "out of memory" : err);
        goto out;
    }
    long rss0 = cli_rss_bytes() / 1024;
    int fds0 = open_fds();
    fprintf(stderr, "creating %d conversations, %d events each, %d threads...\n", count, events,
            threads);
    pthread_t t[MAX_THREADS];
    double cpu0 = cpu_s();
    r.t0 = cli_now_s();
    for (int i = 0; i < threads; i++)
        pthread_create(&t[i], NULL, creator, &r);
    for (int i = 0; i < threads; i++)
        pthread_join(t[i], NULL);
    double t1 = cli_now_s(), cpu1 = cpu_s();
    long rss1 = cli_rss_bytes() / 1024;
    int fds1 = open_fds(), made = atomic_load(&r.made);
    double per = made > 0 ? 1024.0 / made : 0;
    if (!json) { /* now: the wait for rest can be long */
        if (r.marked)
            printf("at %6d conversations: %7.0f created/s, %6.0f bytes RSS each, %6d fds\n", MARK,
                   MARK / (r.t_mark - r.t0), (r.rss_mark - rss0) * 1024.0 / MARK,
                   r.fds_mark - fds0);
        printf("at %6d conversations: %7.0f created/s, %6.0f bytes RSS each, %6d fds; "
               "%.0f us of CPU each\n",
               made, made / (t1 - r.t0), (rss1 - rss0) * per, fds1 - fds0,
               made > 0 ? (cpu1 - cpu0) * 1e6 / made : 0);
        if (r.err[0])
            printf("stopped: %s\n", r.err);
        fflush(stdout);
    }
    /* at rest: once the store has closed every log, or a while (not by
     * descriptors: a pool store holds none per log, and would be called
     * at rest at once, its logs still open) */
    double rest_deadline = cli_now_s() + idle_ms / 1e3 + 60;
    while (st_store_open_logs(r.p->store) > 0 && cli_now_s() < rest_deadline)
        usleep(100 * 1000);
    cli_heap_trim();
    long rss2 = cli_rss_bytes() / 1024;
    int fds2 = open_fds();
    int bad = unreadable(&r, made);
    if (json) {
        printf("{\"bench\":\"conversations\",\"count\":%d,\"made\":%d,\"events\":%d,"
               "\"threads\":%d,\"per_s\":%.0f,\"rss_per_conv_bytes\":%.0f,\"fds\":%d,"
               "\"rest_rss_per_conv_bytes\":%.0f,\"rest_fds\":%d,\"unreadable\":%d",
               count, made, events, threads, made / (t1 - r.t0), (rss1 - rss0) * per, fds1 - fds0,
               (rss2 - rss0) * per, fds2 - fds0, bad);
        if (r.marked)
            printf(",\"mark\":{\"count\":%d,\"per_s\":%.0f,\"rss_per_conv_bytes\":%.0f,\"fds\":%d}",
                   MARK, MARK / (r.t_mark - r.t0), (r.rss_mark - rss0) * 1024.0 / MARK,
                   r.fds_mark - fds0);
        printf(",\"error\":\"%s\"}\n", r.err);
    } else {
        printf("at rest:                  %6.0f bytes RSS each, %6d fds; %d of %d unreadable\n",
               (rss2 - rss0) * per, fds2 - fds0, bad, made);
    }
    rc = r.err[0] == '\0' && bad == 0 ? CLI_OK : CLI_FAIL;
    pl_close(r.p);
out:
    free(r.ids);
    free(r.body);
    pthread_mutex_destroy(&r.mu);
    if (base == NULL)
        cli_rm_tree(dir);
    return rc;
}
