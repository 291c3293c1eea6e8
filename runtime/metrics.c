/* metrics.c - the process's counters and their Prometheus text. */
#include "metrics.h"

#include <inttypes.h>
#include <stdio.h>

rt_metrics rt_metrics_g;

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

static uint64_t get(_Atomic uint64_t *c)
{
    return atomic_load_explicit(c, memory_order_relaxed);
}

static void counter(rt_text *t, const char *name, const char *help, _Atomic uint64_t *c)
{
    rt_text_printf(t, "# HELP %s %s\n# TYPE %s counter\n%s %" PRIu64 "\n", name, help, name, name,
                   get(c));
}

void rt_metrics_render(rt_text *t, const char *(*rule_name)(int i))
{
    rt_metrics *m = &rt_metrics_g;
    counter(t, "parley_events_appended_total", "Events made durable.", &m->events_appended);
    counter(t, "parley_events_deferred_total", "Messages deferred while tool calls were pending.",
            &m->events_deferred);
    counter(t, "parley_events_held_total", "Events held for a parent not yet in the log.",
            &m->events_held);
    rt_text_printf(t, "# HELP parley_events_rejected_total Events refused by the compliance gate.\n"
                      "# TYPE parley_events_rejected_total counter\n");
    for (int i = 0; i < RT_METRIC_RULES; i++) {
        const char *n = rule_name != NULL ? rule_name(i) : NULL;
        if (n != NULL)
            rt_text_printf(t, "parley_events_rejected_total{rule=\"%s\"} %" PRIu64 "\n", n,
                           get(&m->events_rejected[i]));
    }
    rt_text_printf(t,
                   "# HELP parley_conversations_open Conversations with their log open (an idle "
                   "one closes it: --idle-close).\n"
                   "# TYPE parley_conversations_open gauge\nparley_conversations_open %" PRId64
                   "\n",
                   atomic_load_explicit(&m->conversations_open, memory_order_relaxed));
    rt_text_printf(t, "# HELP parley_fsync_seconds Latency of the store's fdatasync calls.\n"
                      "# TYPE parley_fsync_seconds histogram\n");
    uint64_t cum = 0;
    for (int i = 0; i < RT_HIST_BUCKETS; i++) {
        cum += get(&m->fsync.le[i]);
        if (i < RT_HIST_BUCKETS - 1)
            rt_text_printf(t, "parley_fsync_seconds_bucket{le=\"%g\"} %" PRIu64 "\n",
                           (double)bounds_us[i] / 1e6, cum);
        else
            rt_text_printf(t, "parley_fsync_seconds_bucket{le=\"+Inf\"} %" PRIu64 "\n", cum);
    }
    rt_text_printf(t, "parley_fsync_seconds_sum %.6f\nparley_fsync_seconds_count %" PRIu64 "\n",
                   (double)get(&m->fsync.sum_ns) / 1e9, get(&m->fsync.count));
    rt_text_printf(t,
                   "# HELP parley_ws_streams WebSocket event streams open.\n"
                   "# TYPE parley_ws_streams gauge\nparley_ws_streams %" PRId64 "\n",
                   atomic_load_explicit(&m->ws_open, memory_order_relaxed));
    counter(t, "parley_ws_frames_total", "Event frames queued to WebSocket subscribers.",
            &m->ws_frames);
    static const char *const why[RT_WS_CLOSE_REASONS] = {
        "client", "stalled", "auth", "not_found", "cap", "protocol", "ping", "other"};
    rt_text_printf(t, "# HELP parley_ws_closed_total WebSocket streams closed, by reason.\n"
                      "# TYPE parley_ws_closed_total counter\n");
    for (int i = 0; i < RT_WS_CLOSE_REASONS; i++)
        rt_text_printf(t, "parley_ws_closed_total{reason=\"%s\"} %" PRIu64 "\n", why[i],
                       get(&m->ws_closed[i]));
}
