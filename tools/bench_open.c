/*
 * bench_open.c - `parley bench open`: how long opening an existing store
 * takes and the memory it then holds, before any conversation is used:
 * the catalog, and for the pool whatever it keeps of its segments. The
 * store is the one at --dir (a data directory, or pool:DIR), kept as it
 * is; make one with `parley bench conversations --dir ...` or by serving.
 */
#include "cli.h"

#include "runtime/log.h"
#include "store/store.h"

#include <stdio.h>
#include <stdlib.h>

static const char usage[] =
    "usage: parley bench open --dir LOCATION [--runs N] [--json]\n\n"
    "Open the store at LOCATION (a data directory, or pool:DIR) N times (default 5),\n"
    "closing it each time: the median open time, the RSS it adds, its conversations.\n"
    "The store is used as it is (each open of the pool begins a new segment).\n\n"
    "  --dir LOCATION   the store (required)\n"
    "  --runs N         opens (default 5)\n"
    "  --json           print one JSON object: open_ms, open_rss_bytes, conversations\n"
    "  -h, --help       show this help\n";

int bench_open(int argc, char **argv)
{
    int runs = 5;
    bool json = false;
    const char *where = NULL;
    int st = cli_bench_args("bench open", usage, argc, argv, &runs, &json, &where, NULL, 0);
    if (st >= 0)
        return st;
    if (where == NULL) {
        fprintf(stderr, "parley bench open: --dir is required\n%s", usage);
        return CLI_USAGE;
    }
    rt_log_set_level(RT_LOG_WARN);
    double *ms = calloc((size_t)runs, sizeof(double)), *rss = calloc((size_t)runs, sizeof(double));
    size_t convs = 0;
    for (int i = 0; i < runs; i++) {
        cli_heap_trim();
        long before = cli_rss_bytes();
        double t = cli_now_s();
        st_opts o = {.dir = where, .durability = ST_FULL};
        st_store *s;
        char err[512];
        if (st_store_open(&o, &s, err, sizeof(err)) != 0) {
            fprintf(stderr, "parley bench open: %s\n", err);
            return CLI_FAIL;
        }
        ms[i] = (cli_now_s() - t) * 1000;
        rss[i] = (double)(cli_rss_bytes() - before);
        convs = st_store_count(s);
        st_store_close(s);
    }
    double m = cli_median(ms, runs), r = cli_median(rss, runs);
    if (json)
        printf("{\"open_ms\": %.1f, \"open_rss_bytes\": %.0f, \"conversations\": %zu, "
               "\"runs\": %d}\n",
               m, r, convs, runs);
    else
        printf("parley bench open (median of %d opens)\n"
               "  open the store      %9.1f ms\n"
               "  memory when open    %9.1f MiB RSS  (%zu conversations, %.0f B each)\n",
               runs, m, r / 1048576, convs, convs > 0 ? r / (double)convs : 0.0);
    free(ms);
    free(rss);
    return CLI_OK;
}
