/*
 * http_metrics.h - the server's own counters for /metrics: requests by
 * route and status, connections accepted and open. Relaxed atomics, as in
 * runtime/metrics.h.
 */
#ifndef NET_HTTP_METRICS_H
#define NET_HTTP_METRICS_H

#include "route.h"
#include "runtime/text.h"

void net_metrics_request(net_route_id route, int status);
void net_metrics_conn(int delta); /* +1 accepted, -1 closed */
void net_metrics_conn_moved(void); /* moved to its conversations' loop (conn.c) */
void net_metrics_render(rt_text *t);

#endif
