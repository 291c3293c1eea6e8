/*
 * load_trace.c - `parley load --trace FILE`: every append's answer, one
 * line each, for looking at latency over time rather than as percentiles
 * (which of them were slow together, and when, on a clock `perf record -k
 * CLOCK_MONOTONIC` shares).
 *
 * Each shard keeps its own answers in an array that only grows (24 bytes
 * an answer, no lock); after the run they are merged in send order and
 * written as CSV:
 *
 *   sent_s,ack_ms,status,conversation
 *
 * sent_s: the request's send time (its intended time at a fixed --rate),
 * CLOCK_MONOTONIC seconds; ack_ms: the latency the report counts; status:
 * the answer's HTTP status (a request never answered has no line);
 * conversation: its number in the run, 0 to C-1. The first LOAD_TRACE_MAX
 * answers of a run are kept (a shard keeps its share of them); a line on
 * stderr says how many more were left out.
 */
#include "load.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void load_trace_add(load_trace *t, uint64_t sent, uint64_t lat, int status, int conv)
{
    if (t->n == t->cap) {
        size_t cap = t->cap == 0 ? 4096 : t->cap * 2;
        if (cap > t->limit)
            cap = t->limit;
        load_trace_rec *r = cap > t->cap ? realloc(t->r, cap * sizeof(*r)) : NULL;
        if (r == NULL) {
            t->dropped++;
            return;
        }
        t->r = r;
        t->cap = cap;
    }
    uint64_t us = lat / 1000;
    t->r[t->n++] = (load_trace_rec){.sent = sent,
                                    .lat_us = us > UINT32_MAX ? UINT32_MAX : (uint32_t)us,
                                    .conv = (uint32_t)conv,
                                    .status = (uint16_t)status};
}

void load_trace_free(load_trace *t)
{
    free(t->r);
    *t = (load_trace){0};
}

static int by_sent(const void *a, const void *b)
{
    const load_trace_rec *x = a, *y = b;
    return x->sent < y->sent ? -1 : x->sent > y->sent;
}

int load_trace_write(const load_run *run, const char *path)
{
    size_t n = 0;
    uint64_t dropped = 0;
    for (int i = 0; i < run->cfg.threads; i++) {
        n += run->shards[i].trace.n;
        dropped += run->shards[i].trace.dropped;
    }
    load_trace_rec *all = n > 0 ? malloc(n * sizeof(*all)) : NULL;
    if (n > 0 && all == NULL) {
        fprintf(stderr, "parley load: --trace: out of memory for %zu answers\n", n);
        return -1;
    }
    size_t at = 0;
    for (int i = 0; n > 0 && i < run->cfg.threads; i++) {
        const load_trace *t = &run->shards[i].trace;
        for (size_t k = 0; k < t->n; k++)
            all[at++] = t->r[k];
    }
    if (n > 0)
        qsort(all, n, sizeof(*all), by_sent);
    FILE *f = fopen(path, "w");
    if (f == NULL) {
        fprintf(stderr, "parley load: --trace %s: %s\n", path, strerror(errno));
        free(all);
        return -1;
    }
    fputs("sent_s,ack_ms,status,conversation\n", f);
    for (size_t i = 0; i < n; i++)
        fprintf(f, "%llu.%09llu,%.3f,%u,%u\n", (unsigned long long)(all[i].sent / 1000000000),
                (unsigned long long)(all[i].sent % 1000000000), all[i].lat_us / 1000.0,
                all[i].status, all[i].conv);
    int r = ferror(f) ? -1 : 0;
    if (fclose(f) != 0)
        r = -1;
    if (r != 0)
        fprintf(stderr, "parley load: --trace %s: cannot write it whole\n", path);
    else if (dropped > 0)
        fprintf(stderr, "parley load: --trace %s: the first %zu answers (%llu more left out)\n",
                path, n, (unsigned long long)dropped);
    free(all);
    return r;
}
