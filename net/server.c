/*
 * server.c - listening on every worker loop, and stopping gracefully.
 *
 * Each loop runs a listener actor (the root supervisor's child there) that
 * owns the loop's listening socket and its connections. Stopping sends
 * each one NET_DRAIN: it closes its socket, lets the requests in flight be
 * answered, closes its connections as they fall idle, and reports when it
 * has none left. If the runtime stops first, the actor's stop closes
 * everything at once.
 */
#include "server_impl.h"

#include "tls.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

enum { BACKLOG = 1024 };

static void report_drained(net_loop *nl)
{
    if (!nl->draining || nl->reported || nl->nconns > 0 || nl->nfwds > 0 || nl->listener != NULL)
        return;
    nl->reported = true;
    net_server *s = nl->srv;
    uv_mutex_lock(&s->lock);
    s->drained++;
    uv_cond_signal(&s->cond);
    uv_mutex_unlock(&s->lock);
}

void net_loop_conn_gone(net_loop *nl)
{
    nl->nconns--;
    atomic_fetch_sub(&nl->srv->conns, 1);
    report_drained(nl);
}

void net_loop_fwd_gone(net_loop *nl)
{
    nl->nfwds--;
    report_drained(nl);
}

static void on_listener_closed(uv_handle_t *h)
{
    net_loop *nl = h->data;
    free(h);
    if (nl != NULL) {
        nl->listener = NULL;
        report_drained(nl);
    }
}

static void close_listener(net_loop *nl, bool detach)
{
    if (nl->listener == NULL || uv_is_closing((uv_handle_t *)nl->listener))
        return;
    if (detach) /* the state goes before the close callback runs */
        nl->listener->data = NULL;
    uv_close((uv_handle_t *)nl->listener, on_listener_closed);
}

static void on_connection(uv_stream_t *h, int status)
{
    net_loop *nl = h->data;
    if (status < 0) {
        rt_log(RT_LOG_WARN, "http", "accept failed: %s", uv_strerror(status));
        return;
    }
    if (nl != NULL && !nl->draining)
        net_conn_accept(nl);
}

static int listener_init(rt_actor *self, void *arg, void **state)
{
    net_server *s = arg;
    int i = rt_actor_loop(self);
    net_loop *nl = calloc(1, sizeof(*nl));
    uv_tcp_t *t = calloc(1, sizeof(*t));
    if (nl == NULL || t == NULL) {
        free(nl);
        free(t);
        return RT_ENOMEM;
    }
    nl->srv = s;
    nl->index = i;
    nl->uv = rt_runtime_uv(s->rt, i);
    uv_tcp_init(nl->uv, t);
    t->data = nl;
    int fd = dup(s->fds[i]);
    int r = fd < 0 ? -errno : uv_tcp_open(t, fd);
    if (r < 0 && fd >= 0)
        close(fd); /* not the handle's yet */
    if (r == 0)
        r = uv_listen((uv_stream_t *)t, BACKLOG, on_connection);
    nl->listener = t;
    if (r < 0) {
        rt_log(RT_LOG_ERROR, "http", "loop %d cannot listen: %s", i, uv_strerror(r));
        close_listener(nl, true);
        free(nl);
        return r;
    }
    *state = nl;
    return 0;
}

static int listener_handle(rt_actor *self, void *state, rt_msg *m)
{
    (void)self;
    net_loop *nl = state;
    if (m->kind == NET_FWD_SERVE && m->buf != NULL)
        net_forward_start(nl, m->buf);
    if (m->kind == NET_CONN_MOVE && m->buf != NULL)
        net_conn_adopt(nl, m->buf);
    if (m->kind == NET_DRAIN || m->kind == NET_FORCE) {
        nl->draining = true;
        close_listener(nl, false);
        net_conns_close(nl, m->kind == NET_FORCE);
        report_drained(nl);
    }
    return 0;
}

static void listener_stop(rt_actor *self, void *state)
{
    (void)self;
    net_loop *nl = state;
    nl->draining = true;
    close_listener(nl, true);
    net_conns_close(nl, true);
    net_forward_detach(nl);
    /* connections closing now, and forwarded requests, no longer point here */
    free(nl);
}

static const rt_behaviour listener_behaviour = {
    .name = "http_listener",
    .init = listener_init,
    .handle = listener_handle,
    .stop = listener_stop,
};

/* One socket bound to host:port with SO_REUSEPORT; port 0 is resolved by
 * the first, and the others bind to what it got. */
static int bind_one(const struct addrinfo *ai, int port, int *fdout, int *bound, char *err,
                    size_t errlen)
{
    struct sockaddr_storage sa;
    memcpy(&sa, ai->ai_addr, ai->ai_addrlen);
    if (sa.ss_family == AF_INET)
        ((struct sockaddr_in *)&sa)->sin_port = htons((uint16_t)port);
    else
        ((struct sockaddr_in6 *)&sa)->sin6_port = htons((uint16_t)port);
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        snprintf(err, errlen, "socket: %s", strerror(errno));
        return -errno;
    }
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one));
    if (sa.ss_family == AF_INET6)
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
    if (bind(fd, (struct sockaddr *)&sa, ai->ai_addrlen) < 0 || listen(fd, BACKLOG) < 0) {
        int e = errno;
        snprintf(err, errlen, "cannot listen on port %d: %s", port, strerror(e));
        close(fd);
        return -e;
    }
    socklen_t len = sizeof(sa);
    getsockname(fd, (struct sockaddr *)&sa, &len);
    *bound = ntohs(sa.ss_family == AF_INET ? ((struct sockaddr_in *)&sa)->sin_port
                                           : ((struct sockaddr_in6 *)&sa)->sin6_port);
    *fdout = fd;
    return 0;
}

static int bind_all(net_server *s, char *err, size_t errlen)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC,
                             .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_NUMERICSERV | AI_PASSIVE};
    struct addrinfo *ai = NULL;
    int g = getaddrinfo(s->o.host, "0", &hints, &ai);
    if (g != 0) {
        snprintf(err, errlen, "cannot resolve '%s': %s", s->o.host, gai_strerror(g));
        return RT_EINVAL;
    }
    int port = s->o.port, r = 0;
    for (int i = 0; i < s->nloops && r == 0; i++)
        r = bind_one(ai, port, &s->fds[i], &port, err, errlen);
    char host[64];
    getnameinfo(ai->ai_addr, ai->ai_addrlen, host, sizeof(host), NULL, 0, NI_NUMERICHOST);
    snprintf(s->url, sizeof(s->url), ai->ai_family == AF_INET6 ? "%s://[%s]:%d" : "%s://%s:%d",
             s->tls != NULL ? "https" : "http", host, port);
    freeaddrinfo(ai);
    return r;
}

static void defaults(net_server_opts *o)
{
    if (o->host == NULL || o->host[0] == '\0')
        o->host = "127.0.0.1";
    if (o->header_bytes == 0)
        o->header_bytes = 16 * 1024;
    if (o->body_bytes == 0)
        o->body_bytes = 16 * 1024 * 1024;
    if (o->max_conns == 0)
        o->max_conns = NET_MAX_CONNS;
    if (o->header_timeout_ms == 0)
        o->header_timeout_ms = 10000;
    if (o->idle_timeout_ms == 0)
        o->idle_timeout_ms = 60000;
    if (o->call_timeout_ms == 0)
        o->call_timeout_ms = 60000;
    if (o->ws_ping_ms == 0)
        o->ws_ping_ms = 30000;
    if (o->ws_ping_off)
        o->ws_ping_ms = 0;
    if (o->ws_auth_timeout_ms == 0)
        o->ws_auth_timeout_ms = 10000;
    if (o->ws_stall_ms == 0)
        o->ws_stall_ms = 30000;
    if (o->ws_queue_bytes == 0)
        o->ws_queue_bytes = 1 << 20;
    if (o->ws_message_bytes == 0)
        o->ws_message_bytes = 1 << 20;
}

int net_server_start(rt_runtime *rt, st_store *store, convs *cv, const net_server_opts *o,
                     net_server **out, char *err, size_t errlen)
{
    net_server *s = calloc(1, sizeof(*s));
    int n = o->loops > 0 && o->loops < rt_runtime_loops(rt) ? o->loops : rt_runtime_loops(rt);
    if (s == NULL || (s->fds = malloc(sizeof(int) * (size_t)n)) == NULL ||
        (s->actors = calloc((size_t)n, sizeof(rt_actor *))) == NULL) {
        if (s != NULL)
            free(s->fds);
        free(s);
        snprintf(err, errlen, "out of memory");
        return RT_ENOMEM;
    }
    s->rt = rt;
    s->o = *o;
    defaults(&s->o);
    s->nloops = n;
    for (int i = 0; i < n; i++)
        s->fds[i] = -1;
    uv_mutex_init(&s->lock);
    uv_cond_init(&s->cond);
    s->api = (net_api){.rt = rt,
                       .store = store,
                       .convs = cv,
                       .call_timeout_ms = s->o.call_timeout_ms,
                       .opts = &s->o,
                       .started_ms = uv_hrtime() / 1000000};
    s->keys = calloc(s->o.napi_keys + 1, sizeof(char *));
    if (s->keys == NULL) {
        net_server_free(s);
        snprintf(err, errlen, "out of memory");
        return RT_ENOMEM;
    }
    if (s->o.api_key != NULL && s->o.api_key[0] != '\0')
        s->keys[s->api.napi_keys++] = s->o.api_key;
    for (size_t i = 0; i < s->o.napi_keys; i++)
        if (s->o.api_keys[i] != NULL && s->o.api_keys[i][0] != '\0')
            s->keys[s->api.napi_keys++] = s->o.api_keys[i];
    s->api.api_keys = s->keys;
    s->api.loops = s->actors;
    s->api.nloops = n;
    int r = 0;
    if (s->o.tls_cert != NULL || s->o.tls_key != NULL) {
        if (s->o.tls_cert == NULL || s->o.tls_key == NULL) {
            snprintf(err, errlen, "TLS needs both a certificate and a key");
            r = RT_EINVAL;
        } else {
            r = net_tls_config_new(s->o.tls_cert, s->o.tls_key, &s->tls, err, errlen);
            s->api.tls = r == 0;
        }
    }
    if (r == 0)
        r = bind_all(s, err, errlen);
    for (int i = 0; i < n && r == 0; i++) {
        rt_spawn_opts so = {.beh = &listener_behaviour, .arg = s, .loop = i};
        r = rt_spawn(rt, &so, &s->actors[i]);
        if (r < 0)
            snprintf(err, errlen, "cannot start the listeners: %s", rt_strerror(r));
    }
    if (r == 0 && (r = net_forward_serve(&s->api)) < 0)
        snprintf(err, errlen, "cannot serve requests forwarded by other nodes: %s", rt_strerror(r));
    if (r < 0) {
        net_server_stop(s, 0);
        net_server_free(s);
        return r;
    }
    *out = s;
    return 0;
}

const char *net_server_url(const net_server *s)
{
    return s->url;
}

void net_server_stop(net_server *s, uint64_t grace_ms)
{
    net_forward_unserve(&s->api);
    int live = 0;
    for (int i = 0; i < s->nloops; i++)
        if (s->actors[i] != NULL && rt_send(s->actors[i], NET_DRAIN, 0, NULL) == 0)
            live++;
    /* a producer waiting for its event's parent would wait out the grace */
    convs_stopping(s->api.convs);
    uint64_t deadline = uv_hrtime() + grace_ms * 1000000;
    uv_mutex_lock(&s->lock);
    while (s->drained < live) {
        uint64_t now = uv_hrtime();
        if (now >= deadline || uv_cond_timedwait(&s->cond, &s->lock, deadline - now) != 0)
            break;
    }
    bool late = s->drained < live;
    uv_mutex_unlock(&s->lock);
    if (late) {
        rt_log(RT_LOG_WARN, "http", "requests still in flight after %llums: closing them",
               (unsigned long long)grace_ms);
        for (int i = 0; i < s->nloops; i++)
            if (s->actors[i] != NULL)
                rt_send(s->actors[i], NET_FORCE, 0, NULL);
    }
    for (int i = 0; i < s->nloops; i++) {
        if (s->fds[i] >= 0)
            close(s->fds[i]);
        s->fds[i] = -1;
    }
}

void net_server_free(net_server *s)
{
    if (s == NULL)
        return;
    for (int i = 0; i < s->nloops; i++)
        rt_actor_unref(s->actors[i]);
    net_tls_config_free(s->tls);
    free(s->keys);
    uv_mutex_destroy(&s->lock);
    uv_cond_destroy(&s->cond);
    free(s->fds);
    free(s->actors);
    free(s);
}
