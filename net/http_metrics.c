/* http_metrics.c - requests by route and status, connections. */
#include "http_metrics.h"

#include <inttypes.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>

/* The statuses the server answers; anything else counts as "other". */
static const int codes[] = {100, 200, 201, 202, 400, 401, 404, 405, 408, 409,
                            413, 417, 422, 431, 500, 503, 504, 505, 0};
enum { NCODES = sizeof(codes) / sizeof(codes[0]) };

static _Atomic uint64_t requests[NET_R_COUNT][NCODES];
static _Atomic uint64_t accepted;
static _Atomic int64_t open_conns;
static _Atomic uint64_t moved;

void net_metrics_request(net_route_id route, int status)
{
    int i = 0;
    while (codes[i] != 0 && codes[i] != status)
        i++;
    if ((unsigned)route < NET_R_COUNT)
        atomic_fetch_add_explicit(&requests[route][i], 1, memory_order_relaxed);
}

void net_metrics_conn(int delta)
{
    if (delta > 0)
        atomic_fetch_add_explicit(&accepted, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&open_conns, delta, memory_order_relaxed);
}

void net_metrics_conn_moved(void)
{
    atomic_fetch_add_explicit(&moved, 1, memory_order_relaxed);
}

void net_metrics_render(rt_text *t)
{
    rt_text_puts(t, "# HELP parley_http_requests_total HTTP requests answered, by route and "
                    "status (route \"none\": no route matched or the request was malformed).\n"
                    "# TYPE parley_http_requests_total counter\n");
    for (int r = 0; r < NET_R_COUNT; r++) {
        const char *name = r == NET_R_NONE ? "none" : net_route_name((net_route_id)r);
        for (int i = 0; i < NCODES; i++) {
            uint64_t v = atomic_load_explicit(&requests[r][i], memory_order_relaxed);
            if (v == 0)
                continue;
            char code[8];
            if (codes[i] != 0)
                snprintf(code, sizeof(code), "%d", codes[i]);
            else
                snprintf(code, sizeof(code), "other");
            rt_text_printf(t,
                           "parley_http_requests_total{route=\"%s\",status=\"%s\"} %" PRIu64 "\n",
                           name, code, v);
        }
    }
    rt_text_printf(t,
                   "# HELP parley_http_connections_total Connections accepted.\n"
                   "# TYPE parley_http_connections_total counter\n"
                   "parley_http_connections_total %" PRIu64 "\n"
                   "# HELP parley_http_connections Connections open.\n"
                   "# TYPE parley_http_connections gauge\nparley_http_connections %" PRId64 "\n"
                   "# HELP parley_http_connections_moved_total Connections moved to the loop of "
                   "the conversations they ask.\n"
                   "# TYPE parley_http_connections_moved_total counter\n"
                   "parley_http_connections_moved_total %" PRIu64 "\n",
                   atomic_load_explicit(&accepted, memory_order_relaxed),
                   atomic_load_explicit(&open_conns, memory_order_relaxed),
                   atomic_load_explicit(&moved, memory_order_relaxed));
}
