/* metrics.c - Prometheus text lines (metrics.h). */
#include "metrics.h"

#include <inttypes.h>
#include <stdio.h>

/* upper bounds of the histogram buckets, in microseconds; the last is +Inf */
static const uint64_t bounds_us[RT_HIST_BUCKETS - 1] = {100,   250,   500,    1000,   2500,   5000,
                                                        10000, 25000, 100000, 250000, 1000000};

void rt_hist_observe(rt_hist *h, uint64_t ns)
{
    int i = 0;
    while (i < RT_HIST_BUCKETS - 1 && ns > bounds_us[i] * 1000)
        i++;
    atomic_fetch_add_explicit(&h->le[i], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->count, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->sum_ns, ns, memory_order_relaxed);
}

void rt_metric_counter(rt_text *t, const char *name, const char *help, uint64_t v)
{
    rt_text_printf(t, "# HELP %s %s\n# TYPE %s counter\n%s %" PRIu64 "\n", name, help, name, name,
                   v);
}

void rt_metric_gauge(rt_text *t, const char *name, const char *help, int64_t v)
{
    rt_text_printf(t, "# HELP %s %s\n# TYPE %s gauge\n%s %" PRId64 "\n", name, help, name, name, v);
}

void rt_metric_family(rt_text *t, const char *name, const char *help, const char *label,
                      const char *const *values, _Atomic uint64_t *v, size_t n)
{
    rt_text_printf(t, "# HELP %s %s\n# TYPE %s counter\n", name, help, name);
    for (size_t i = 0; i < n; i++)
        if (values[i] != NULL)
            rt_text_printf(t, "%s{%s=\"%s\"} %" PRIu64 "\n", name, label, values[i],
                           rt_metric_get(&v[i]));
}

void rt_metric_hist(rt_text *t, const char *name, const char *help, rt_hist *h)
{
    rt_text_printf(t, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    uint64_t cum = 0;
    for (int i = 0; i < RT_HIST_BUCKETS; i++) {
        cum += rt_metric_get(&h->le[i]);
        if (i < RT_HIST_BUCKETS - 1)
            rt_text_printf(t, "%s_bucket{le=\"%g\"} %" PRIu64 "\n", name,
                           (double)bounds_us[i] / 1e6, cum);
        else
            rt_text_printf(t, "%s_bucket{le=\"+Inf\"} %" PRIu64 "\n", name, cum);
    }
    rt_text_printf(t, "%s_sum %.6f\n%s_count %" PRIu64 "\n", name,
                   (double)rt_metric_get(&h->sum_ns) / 1e9, name, rt_metric_get(&h->count));
}
