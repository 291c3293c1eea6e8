/*
 * metrics.h - the process's counters, as /metrics shows them (Prometheus
 * text). Each is a relaxed atomic bumped where the thing happens (one
 * instruction, no lock); a scrape reads them all without stopping anyone,
 * so a scrape is a consistent-enough picture, not a snapshot.
 *
 * Process-wide: a program that embeds several instances sees their sum.
 */
#ifndef RT_METRICS_H
#define RT_METRICS_H

#include "text.h"

#include <stdatomic.h>
#include <stdint.h>

enum { RT_METRIC_RULES = 16, RT_HIST_BUCKETS = 12, RT_WS_CLOSE_REASONS = 8 };

/* Latencies: counts per upper bound (rt_hist_bounds_us), their sum. */
typedef struct rt_hist {
    _Atomic uint64_t le[RT_HIST_BUCKETS]; /* the last one is +Inf */
    _Atomic uint64_t count, sum_ns;
} rt_hist;

typedef struct rt_metrics {
    _Atomic uint64_t events_appended;
    _Atomic uint64_t events_deferred;
    _Atomic uint64_t events_held;
    _Atomic uint64_t events_rejected[RT_METRIC_RULES]; /* by the gate's rule */
    _Atomic int64_t conversations_open;                /* conversations with their log open */
    rt_hist fsync;                                     /* every fdatasync of the store */
    _Atomic int64_t ws_open;                           /* WebSocket streams */
    _Atomic uint64_t ws_frames;                        /* frames queued to subscribers */
    _Atomic uint64_t ws_closed[RT_WS_CLOSE_REASONS];   /* by rt_ws_close_reason */
} rt_metrics;
/* Why the server closed a WebSocket stream (parley_ws_closed_total{reason}). */
typedef enum rt_ws_close_reason {
    RT_WS_CLIENT = 0, /* the client closed or left */
    RT_WS_STALLED,    /* its queue stayed full past the deadline (1013) */
    RT_WS_AUTH,       /* 4001 */
    RT_WS_NOT_FOUND,  /* 4004 */
    RT_WS_CAP,        /* the subscriber cap (1013) */
    RT_WS_PROTOCOL,   /* the client broke RFC 6455, or sent too much */
    RT_WS_PING,       /* no pong */
    RT_WS_OTHER,      /* server errors, shutdown */
} rt_ws_close_reason;

extern rt_metrics rt_metrics_g;

static inline void rt_count(_Atomic uint64_t *c, uint64_t n)
{
    atomic_fetch_add_explicit(c, n, memory_order_relaxed);
}

void rt_hist_observe(rt_hist *h, uint64_t ns);

/* Append the counters in Prometheus text format; rule_name(i) names the
 * rejection rules (NULL for unused slots). */
void rt_metrics_render(rt_text *t, const char *(*rule_name)(int i));

#endif
