/*
 * api_info.c - the open routes: liveness, readiness, what the server is.
 */
#include "api.h"

#include "http_metrics.h"
#include "server.h"
#include "runtime/metrics.h"

#include <stdlib.h>
#include <string.h>

void net_api_info(net_req *r)
{
    net_api *a = r->api;
    switch (r->route.id) {
    case NET_R_ALIVE:
    case NET_R_HEALTH:
        net_reply(r, 200, rt_buf_wrap((void *)"{\"status\":\"ok\"}", 15, NULL, NULL), NULL, NULL);
        return;
    case NET_R_READY:
        net_reply(r, 200, rt_buf_wrap((void *)"{\"status\":\"ready\"}", 18, NULL, NULL), NULL,
                  NULL);
        return;
    case NET_R_SERVER_INFO: {
        double up = (double)(uv_hrtime() / 1000000 - a->started_ms) / 1000.0;
        net_reply_json(r, 200,
                       json_pack("{s:s, s:s, s:f, s:f, s:I, s:i, s:[], s:[sss]}", "name", "parley",
                                 "version", PARLEY_VERSION, "uptime", up, "idle_time", 0.0,
                                 "conversations", (json_int_t)st_store_count(a->store), "workers",
                                 a->opts->loops > 0 ? a->opts->loops : rt_runtime_loops(a->rt),
                                 "usable_tools", "capabilities", "events_append", "event_search",
                                 a->tls ? "tls" : "http"));
        return;
    }
    case NET_R_OPENAPI:
        net_reply_json(r, 200, net_openapi());
        return;
    case NET_R_METRICS: {
        rt_text t = {0};
        net_metrics_render(&t);
        rt_metric_gauge(&t, "parley_http_forwards",
                        "Requests forwarded to the node that owns their conversation, waiting "
                        "for its answer.",
                        net_forwards_out());
        conv_metrics_render(&t);
        st_metrics_render(&t);
        ws_metrics_render(&t);
        if (t.failed) {
            free(t.p);
            net_reply_error(r, 503, "out of memory");
            return;
        }
        net_reply(r, 200, rt_buf_take(t.p, t.len), "text/plain; version=0.0.4; charset=utf-8",
                  NULL);
        return;
    }
    default:
        net_reply_error(r, 404, "no such route");
        return;
    }
}
