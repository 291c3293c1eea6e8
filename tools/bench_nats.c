/*
 * bench_nats.c - `parley bench nats`: the JetStream store's log
 * (store/nats_log.h) against a running cluster: the latency of one
 * writer's appends, the throughput of many writers (each its own
 * conversation), reading a closed page of 100, and taking a conversation
 * over. Each figure is the median of --runs runs; every run uses new
 * conversations, so runs never see each other's events.
 *
 * A scratch cluster on this machine, for instance:
 *   d=$(mktemp -d); tests/integration/nats_cluster.py start $d
 *   parley bench nats --servers "$(tests/integration/nats_cluster.py urls $d)"
 *   tests/integration/nats_cluster.py stop $d
 */
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef PARLEY_HAVE_NATS

int bench_nats(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "parley bench nats: not built (libnats was missing when parley was built: "
                    "install libnats-dev and build again)\n");
    return CLI_FAIL;
}

#else

#include "runtime/uuid.h"
#include "store/nats_log.h"

#include <pthread.h>

enum { BODY = 512 };

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The q-quantile of v[0..n) (sorts it). */
static double quantile(double *v, size_t n, double q)
{
    if (n == 0)
        return 0;
    qsort(v, n, sizeof *v, cmp_double);
    size_t i = (size_t)(q * (double)(n - 1) + 0.5);
    return v[i];
}

typedef struct writer {
    st_nats *n;
    rt_uuid id;
    int events, batch;
    double *lat_ms; /* per append, or NULL */
    int status;
    char err[320];
} writer;

static void *write_events(void *arg)
{
    writer *w = arg;
    st_nats_log *l = NULL;
    char body[BODY];
    memset(body, 'x', sizeof body);
    memcpy(body, "{\"b\":\"", 6);
    memcpy(body + BODY - 2, "\"}", 2);
    w->status = rt_uuid_v4(&w->id);
    if (w->status == 0)
        w->status = st_nats_log_open(w->n, &w->id, &l);
    if (w->status == 0)
        w->status = st_nats_log_take_over(l, NULL);
    char ids[ST_NATS_BATCH_MAX][24];
    st_nats_item it[ST_NATS_BATCH_MAX];
    for (int i = 0, a = 0; w->status == 0 && i < w->events; a++) {
        int k = w->events - i < w->batch ? w->events - i : w->batch;
        for (int j = 0; j < k; j++) {
            snprintf(ids[j], sizeof ids[j], "ev-%d", i + j);
            it[j] = (st_nats_item){
                .id = ids[j], .idlen = (uint32_t)strlen(ids[j]), .data = body, .len = BODY};
        }
        uint64_t first;
        size_t stored;
        double t = cli_now_s();
        w->status = st_nats_log_append(l, it, (size_t)k, &first, &stored);
        if (w->lat_ms)
            w->lat_ms[a] = (cli_now_s() - t) * 1000;
        i += k;
    }
    if (w->status && l)
        snprintf(w->err, sizeof w->err, "%s", st_nats_log_error(l));
    st_nats_log_close(l);
    return NULL;
}

/* `nw` writers of `per` events each, in appends of `batch`, on threads;
 * events/s overall, or -1. */
static double run_writers(st_nats *n, writer *w, int nw, int per, int batch, double *lat_ms)
{
    pthread_t *th = calloc((size_t)nw, sizeof *th);
    double t = cli_now_s();
    for (int i = 0; i < nw; i++) {
        w[i] = (writer){.n = n, .events = per, .batch = batch, .lat_ms = i == 0 ? lat_ms : NULL};
        pthread_create(&th[i], NULL, write_events, &w[i]);
    }
    for (int i = 0; i < nw; i++)
        pthread_join(th[i], NULL);
    t = cli_now_s() - t;
    free(th);
    for (int i = 0; i < nw; i++)
        if (w[i].status) {
            fprintf(stderr, "parley bench nats: append failed: %s\n", w[i].err);
            return -1;
        }
    return (double)nw * per / t;
}

static const char usage[] =
    "usage: parley bench nats --servers URLS [--runs N] [--json] [--events N] [--writers N]\n"
    "                         [--batch N]\n\n"
    "Measure the JetStream store's log on a running cluster (URLS: nats://HOST:PORT,...;\n"
    "default $PARLEY_NATS_URLS); each figure is the median of N runs (default 3).\n"
    "Writes new conversations on every run (512-byte events); they stay in the cluster.\n\n"
    "  --events N    appends per run, spread over the writers (default 4000)\n"
    "  --writers N   concurrent writers, each its own conversation (default 8)\n"
    "  --batch N     events per append of the concurrent writers (default 10; one\n"
    "                writer's latency is measured with single events)\n"
    "  --json        print one JSON object: append_ms_p50, append_ms_p99,\n"
    "                one_writer_events_per_s, events_per_s, batched_events_per_s,\n"
    "                page_read_ms_p50,\n"
    "                take_over_ms_p50\n"
    "  -h, --help    show this help\n";

int bench_nats(int argc, char **argv)
{
    const char *servers = getenv("PARLEY_NATS_URLS");
    /* --servers is taken out before the common options are parsed */
    char **args = calloc((size_t)argc + 1, sizeof *args);
    int nargs = 0;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--servers") == 0 && i + 1 < argc)
            servers = argv[++i];
        else if (strncmp(argv[i], "--servers=", 10) == 0)
            servers = argv[i] + 10;
        else
            args[nargs++] = argv[i];
    }
    int runs = 3, events = 4000, nwriters = 8, nbatch = 10;
    bool json = false;
    const cli_int_opt ints[] = {{"--events", &events, 100, 10000000},
                                {"--writers", &nwriters, 1, 256},
                                {"--batch", &nbatch, 1, ST_NATS_BATCH_MAX}};
    int st = cli_bench_args("bench nats", usage, nargs, args, &runs, &json, NULL, ints, 3);
    free(args);
    if (st >= 0)
        return st;
    if (!servers || !*servers)
        return cli_usage_error("bench nats", "no servers: give --servers nats://HOST:PORT,...");
    st_nats_opts o = {.servers = servers, .node = "bench"};
    st_nats *n = NULL, *reader = NULL;
    char err[256];
    if (st_nats_open(&o, &n, err, sizeof err) || st_nats_open(&o, &reader, err, sizeof err)) {
        fprintf(stderr, "parley bench nats: %s\n", err);
        st_nats_close(n);
        return CLI_FAIL;
    }
    int per = events / nwriters, one = events / 4;
    double *lat = calloc((size_t)one, sizeof *lat), *p50 = calloc((size_t)runs, sizeof *p50),
           *p99 = calloc((size_t)runs, sizeof *p99), *single = calloc((size_t)runs, sizeof *single),
           *many = calloc((size_t)runs, sizeof *many),
           *batched = calloc((size_t)runs, sizeof *many),
           *page = calloc((size_t)runs, sizeof *page), *take = calloc((size_t)runs, sizeof *take);
    writer *w = calloc((size_t)nwriters, sizeof *w);
    int rc = CLI_OK;
    for (int r = 0; r < runs && rc == CLI_OK; r++) {
        if (!json)
            fprintf(stderr, "\rrun %d/%d...", r + 1, runs);
        single[r] = run_writers(n, w, 1, one, 1, lat);
        many[r] = single[r] < 0 ? -1 : run_writers(n, w, nwriters, per, 1, NULL);
        batched[r] = many[r] < 0 ? -1 : run_writers(n, w, nwriters, per, nbatch, NULL);
        if (batched[r] < 0) {
            rc = CLI_FAIL;
            break;
        }
        p50[r] = quantile(lat, (size_t)one, 0.5);
        p99[r] = quantile(lat, (size_t)one, 0.99);
        /* closed pages of the writers' conversations, and their take-over,
         * from another connection */
        double pages[256 * 8], takes[256];
        size_t np = 0;
        for (int i = 0; i < nwriters && rc == CLI_OK; i++) {
            st_nats_log *l = NULL;
            st_nats_log_open(reader, &w[i].id, &l);
            for (int pg = 0; (pg + 1) * ST_NATS_PAGE <= per && pg < 8; pg++) {
                st_nats_page *p = NULL;
                double t = cli_now_s();
                if (st_nats_log_read(l, (uint64_t)pg * ST_NATS_PAGE, ST_NATS_PAGE, &p) ||
                    p->n != ST_NATS_PAGE) {
                    fprintf(stderr, "parley bench nats: reading a page: %s\n",
                            st_nats_log_error(l));
                    rc = CLI_FAIL;
                }
                pages[np++] = (cli_now_s() - t) * 1000;
                st_nats_page_free(p);
            }
            double t = cli_now_s();
            if (rc == CLI_OK && st_nats_log_take_over(l, NULL)) {
                fprintf(stderr, "parley bench nats: take-over: %s\n", st_nats_log_error(l));
                rc = CLI_FAIL;
            }
            takes[i] = (cli_now_s() - t) * 1000;
            st_nats_log_close(l);
        }
        page[r] = quantile(pages, np, 0.5);
        take[r] = quantile(takes, (size_t)nwriters, 0.5);
    }
    if (rc == CLI_OK) {
        double a50 = cli_median(p50, runs), a99 = cli_median(p99, runs),
               s1 = cli_median(single, runs), sm = cli_median(many, runs),
               sb = cli_median(batched, runs), pr = cli_median(page, runs),
               to = cli_median(take, runs);
        if (json) {
            printf("{\"append_ms_p50\": %.3f, \"append_ms_p99\": %.3f, "
                   "\"one_writer_events_per_s\": %.0f, \"events_per_s\": %.0f, "
                   "\"batched_events_per_s\": %.0f, \"batch\": %d, "
                   "\"writers\": %d, \"page_read_ms_p50\": %.3f, \"take_over_ms_p50\": %.3f, "
                   "\"replicas\": %d, \"runs\": %d}\n",
                   a50, a99, s1, sm, sb, nbatch, nwriters, pr, to, st_nats_replicas(n), runs);
        } else {
            fprintf(stderr, "\r%30s\r", "");
            printf("parley bench nats (median of %d runs, R%d streams, 512-byte events)\n", runs,
                   st_nats_replicas(n));
            printf("  append, one writer   %7.3f ms p50  %7.3f ms p99  %7.0f events/s\n", a50, a99,
                   s1);
            printf("  append, %3d writers  %7.0f events/s\n", nwriters, sm);
            printf("  same, %3d per append %7.0f events/s (one record per append)\n", nbatch, sb);
            printf("  closed page of 100   %7.3f ms p50 (entry + direct gets, another "
                   "connection)\n",
                   pr);
            printf("  take-over            %7.3f ms p50\n", to);
        }
    }
    free(lat);
    free(p50);
    free(p99);
    free(single);
    free(many);
    free(batched);
    free(page);
    free(take);
    free(w);
    st_nats_close(reader);
    st_nats_close(n);
    return rc;
}

#endif
