/*
 * parley_http.c - the HTTP server of the public API (parley.h): the
 * OpenHands agent-server routes and WebSocket streams over an instance's
 * conversations, on its worker loops. The instance frees it when it
 * closes (after its loops stopped, as the server's connections live on
 * them).
 */
#include "actors/parley_impl.h"
#include "net/server.h"

#include <stdio.h>
#include <stdlib.h>

struct pl_http {
    net_server *srv;
    bool stopped;
};

/* Closing the instance: stop serving (if nobody did: requests in flight
 * get a second), then, once the loops are down, free. */
static void http_close(void *ctx, bool stopped)
{
    pl_http *h = ctx;
    if (!stopped) {
        pl_http_stop(h, 1000);
        return;
    }
    net_server_free(h->srv);
    free(h);
}

int pl_http_start(pl_instance *p, const pl_http_options *o, pl_http **out, char *err, size_t errlen)
{
    char scratch[256];
    if (err == NULL) {
        err = scratch;
        errlen = sizeof(scratch);
    }
    if (p == NULL || o == NULL || out == NULL) {
        snprintf(err, errlen, "invalid arguments");
        return RT_EINVAL;
    }
    net_server_opts so = {.host = o->host,
                          .port = o->port,
                          .api_key = o->api_key,
                          .api_keys = o->api_keys,
                          .napi_keys = o->napi_keys,
                          .tls_cert = o->tls_cert,
                          .tls_key = o->tls_key,
                          .header_bytes = o->max_header,
                          .body_bytes = o->max_body,
                          .max_conns = o->max_connections,
                          .header_timeout_ms = o->header_timeout_ms,
                          .idle_timeout_ms = o->idle_timeout_ms,
                          .ws_ping_ms = o->ws_ping_ms,
                          .ws_ping_off = o->ws_ping_off != 0,
                          .ws_auth_timeout_ms = o->ws_auth_timeout_ms,
                          .ws_stall_ms = o->ws_stall_ms,
                          .ws_queue_bytes = o->ws_queue_bytes,
                          .ws_message_bytes = o->ws_message_bytes,
                          .loops = p->workers};
    pl_http *h = calloc(1, sizeof(*h));
    if (h == NULL) {
        snprintf(err, errlen, "out of memory");
        return RT_ENOMEM;
    }
    int r = net_server_start(p->rt, p->store, p->convs, &so, &h->srv, err, errlen);
    if (r == 0 && (r = pl__at_close(p, http_close, h)) < 0) {
        snprintf(err, errlen, "out of memory");
        net_server_stop(h->srv, 0);
        net_server_free(h->srv);
    }
    if (r < 0) {
        free(h);
        return r;
    }
    *out = h;
    return 0;
}

const char *pl_http_url(const pl_http *h)
{
    return h != NULL ? net_server_url(h->srv) : NULL;
}

void pl_http_stop(pl_http *h, unsigned long long grace_ms)
{
    if (h == NULL || h->stopped)
        return;
    h->stopped = true;
    net_server_stop(h->srv, grace_ms);
}
