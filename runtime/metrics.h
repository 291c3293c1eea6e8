/*
 * metrics.h - the pieces of a Prometheus text page: a latency histogram,
 * a relaxed counter bump, and the lines of a counter, a gauge, a family
 * of counters by one label, and a histogram.
 *
 * The runtime owns no figures: each module keeps its own (relaxed
 * atomics bumped where the thing happens: one instruction, no lock) and
 * renders them; whoever serves /metrics calls each module's render. A
 * scrape reads them without stopping anyone, so it is a consistent-enough
 * picture, not a snapshot. Figures are process-wide: a program that embeds
 * several instances sees their sum.
 */
#ifndef RT_METRICS_H
#define RT_METRICS_H

#include "text.h"

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

enum { RT_HIST_BUCKETS = 12 };

/* Latencies: counts per upper bound (100 us .. 1 s, then +Inf), their sum. */
typedef struct rt_hist {
    _Atomic uint64_t le[RT_HIST_BUCKETS];
    _Atomic uint64_t count, sum_ns;
} rt_hist;

void rt_hist_observe(rt_hist *h, uint64_t ns);

static inline void rt_count(_Atomic uint64_t *c, uint64_t n)
{
    atomic_fetch_add_explicit(c, n, memory_order_relaxed);
}

static inline uint64_t rt_metric_get(_Atomic uint64_t *c)
{
    return atomic_load_explicit(c, memory_order_relaxed);
}

void rt_metric_counter(rt_text *t, const char *name, const char *help, uint64_t v);
void rt_metric_gauge(rt_text *t, const char *name, const char *help, int64_t v);
/* Counters name{label="values[i]"} v[i], for every i whose value name is
 * not NULL. */
void rt_metric_family(rt_text *t, const char *name, const char *help, const char *label,
                      const char *const *values, _Atomic uint64_t *v, size_t n);
/* A histogram in seconds: name_bucket{le=...}, name_sum, name_count. */
void rt_metric_hist(rt_text *t, const char *name, const char *help, rt_hist *h);

#endif
