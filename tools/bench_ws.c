/*
 * bench_ws.c - `parley bench ws`: WebSocket fan-out against a running
 * `parley serve` on 127.0.0.1 (tools/bench_ws.py starts one and runs the
 * scenarios of README.md).
 *
 * One libuv loop in this process holds S subscribers of a new conversation
 * (/sockets/events/{id}?envelope=index) and one producer posting E small
 * events in arrays of B over HTTP keep-alive, one request at a time. Each
 * event's text carries its send time (CLOCK_MONOTONIC, the same clock
 * here), so each frame gives a delivery latency; each subscriber checks
 * that its indexes are dense. A run ends when every reading subscriber has
 * the last event. Reported: frames delivered per second (all frames over
 * the time from the first post to the last frame), delivery latency p50
 * and p99, and the producer's events per second.
 *
 * --stalled N adds N subscribers that stop reading after their upgrade
 * (small receive buffers): the others' latency is what counts. --idle
 * connects the subscribers, reads the server's VmRSS (--pid) before and
 * after, and reports bytes per idle connection; no events.
 */
#include "cli.h"

#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

static const char ws_usage[] =
    "usage: parley bench ws --port PORT [--subscribers N] [--events N] [--batch N]\n"
    "                       [--size BYTES] [--stalled N] [--idle 1] [--pid PID]\n"
    "                       [--runs N] [--json]\n\n"
    "WebSocket fan-out against `parley serve` on 127.0.0.1:PORT (tools/bench_ws.py\n"
    "starts one): a new conversation per run, N subscribers with envelope=index, one\n"
    "producer posting small events in arrays over HTTP keep-alive. Prints frames\n"
    "delivered per second and delivery latency p50/p99 (medians over the runs).\n\n"
    "  --port PORT       the server's port on 127.0.0.1\n"
    "  --subscribers N   WebSocket subscribers (default 1000)\n"
    "  --events N        events per run (default 20000)\n"
    "  --batch N         events per append request (default 50)\n"
    "  --size BYTES      text bytes per event (default 100)\n"
    "  --stalled N       extra subscribers that never read (default 0)\n"
    "  --idle 1          only connect the subscribers and report the server's memory\n"
    "                    per connection (needs --pid)\n"
    "  --pid PID         the server's pid, for VmRSS\n"
    "  --runs N          runs (default 3)\n"
    "  --json            one JSON object\n";

enum { LAT_BUCKETS = 20000, LAT_STEP_NS = 10000 }; /* 10 us steps up to 200 ms */

typedef struct sub sub;
typedef struct bench bench;

struct sub {
    uv_tcp_t tcp;
    bench *b;
    bool open, stalled, done;
    int64_t next; /* the index expected next; -1 before the first event */
    char *buf;
    size_t len, cap;
};

struct bench {
    uv_loop_t *loop;
    int port, nsubs, nstalled, events, batch, size;
    bool idle;
    char conv[40];
    sub *subs;
    int opened, done, failed;
    int64_t last;    /* the index of the last event, once known */
    uint64_t frames; /* delivered to reading subscribers */
    uint64_t lat[LAT_BUCKETS + 1];
    uint64_t t0, t_end;
    /* the producer */
    uv_tcp_t http;
    int sent;
    char *in;
    size_t in_len, in_cap;
    char *body;
    bool busy, counting;
};

static uint64_t now_ns(void)
{
    return uv_hrtime();
}

static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *out)
{
    (void)hint;
    sub *s = h->data;
    if (s->cap - s->len < 65536) {
        size_t cap = s->cap ? s->cap * 2 : 131072;
        char *n = realloc(s->buf, cap);
        if (n == NULL) {
            *out = uv_buf_init(NULL, 0);
            return;
        }
        s->buf = n;
        s->cap = cap;
    }
    *out = uv_buf_init(s->buf + s->len, (unsigned)(s->cap - s->len));
}

static void fail(bench *b, const char *what)
{
    if (b->failed++ == 0)
        fprintf(stderr, "parley bench ws: %s\n", what);
    uv_stop(b->loop);
}

static void sub_done(bench *b, sub *s)
{
    if (s->done)
        return;
    s->done = true;
    if (++b->done == b->nsubs) {
        b->t_end = now_ns();
        uv_stop(b->loop);
    }
}

/* One server frame's payload: an event envelope, or the full_state. */
static void on_frame(bench *b, sub *s, const char *p, size_t n, uint64_t t)
{
    static const char ix[] = "{\"index\":";
    if (n < sizeof(ix) || memcmp(p, ix, sizeof(ix) - 1) != 0) {
        if (!s->open) {
            s->open = true;
            if (++b->opened == b->nsubs + b->nstalled)
                uv_stop(b->loop);
        }
        return;
    }
    int64_t index = strtoll(p + sizeof(ix) - 1, NULL, 10);
    if (s->next >= 0 && index != s->next) {
        fail(b, "a subscriber's indexes are not dense: an event was lost or repeated");
        return;
    }
    s->next = index + 1;
    b->frames++;
    const char *m = memmem(p, n, "t=", 2);
    if (m != NULL) {
        uint64_t sent = strtoull(m + 2, NULL, 10), d = t > sent ? t - sent : 0;
        b->lat[d / LAT_STEP_NS < LAT_BUCKETS ? d / LAT_STEP_NS : LAT_BUCKETS]++;
    }
    if (b->last >= 0 && index >= b->last)
        sub_done(b, s);
}

static void on_sub_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf)
{
    (void)buf;
    sub *s = st->data;
    bench *b = s->b;
    if (nread < 0) {
        fail(b, "a subscriber's connection closed");
        return;
    }
    s->len += (size_t)nread;
    size_t at = 0;
    if (!s->open && s->next == -2) { /* the 101 first */
        char *end = memmem(s->buf, s->len, "\r\n\r\n", 4);
        if (end == NULL)
            return;
        if (strncmp(s->buf, "HTTP/1.1 101", 12) != 0) {
            fprintf(stderr, "%.*s\n", (int)(end - s->buf), s->buf);
            fail(b, "the upgrade was refused");
            return;
        }
        at = (size_t)(end + 4 - s->buf);
        s->next = -1;
        if (s->stalled) { /* never read again */
            uv_read_stop(st);
            if (++b->opened == b->nsubs + b->nstalled)
                uv_stop(b->loop);
            return;
        }
    }
    uint64_t t = now_ns();
    for (;;) {
        size_t left = s->len - at;
        if (left < 2)
            break;
        const unsigned char *h = (const unsigned char *)s->buf + at;
        size_t hl = 2, n = h[1] & 0x7f;
        if (n == 126) {
            if (left < 4)
                break;
            n = (size_t)h[2] << 8 | h[3];
            hl = 4;
        } else if (n == 127) {
            if (left < 10)
                break;
            n = 0;
            for (int i = 2; i < 10; i++)
                n = n << 8 | h[i];
            hl = 10;
        }
        if (left < hl + n)
            break;
        if ((h[0] & 0x0f) == 0x1)
            on_frame(b, s, s->buf + at + hl, n, t);
        else if ((h[0] & 0x0f) == 0x8) {
            char why[200];
            snprintf(why, sizeof(why), "the server closed a subscriber: %d %.*s",
                     n >= 2 ? h[hl] << 8 | h[hl + 1] : 1005, n > 2 ? (int)(n - 2) : 0,
                     s->buf + at + hl + 2);
            fail(b, why);
        }
        at += hl + n;
    }
    memmove(s->buf, s->buf + at, s->len - at);
    s->len -= at;
}

static void on_written(uv_write_t *w, int status)
{
    if (status < 0)
        fprintf(stderr, "parley bench ws: a write failed: %s\n", uv_strerror(status));
    free(w->data);
    free(w);
}

static void send_text(uv_stream_t *st, const char *text, size_t len)
{
    uv_write_t *w = malloc(sizeof(*w));
    char *copy = malloc(len);
    memcpy(copy, text, len);
    w->data = copy;
    uv_buf_t b = uv_buf_init(copy, (unsigned)len);
    uv_write(w, st, &b, 1, on_written);
}

static void on_sub_connect(uv_connect_t *c, int status)
{
    sub *s = c->handle->data;
    free(c);
    if (status < 0) {
        fail(s->b, "a subscriber cannot connect");
        return;
    }
    char req[512];
    int n = snprintf(req, sizeof(req),
                     "GET /sockets/events/%s?envelope=index HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                     "Upgrade: websocket\r\nConnection: Upgrade\r\n"
                     "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                     "Sec-WebSocket-Version: 13\r\n\r\n",
                     s->b->conv);
    send_text((uv_stream_t *)&s->tcp, req, (size_t)n);
    uv_read_start((uv_stream_t *)&s->tcp, on_alloc, on_sub_read);
}

/* ---- the producer ------------------------------------------------------------------ */

static void post_next(bench *b);
static void count(bench *b);

static void on_http_alloc(uv_handle_t *h, size_t hint, uv_buf_t *out)
{
    (void)hint;
    bench *b = h->data;
    if (b->in_cap - b->in_len < 16384) {
        b->in_cap = b->in_cap ? b->in_cap * 2 : 65536;
        b->in = realloc(b->in, b->in_cap);
    }
    *out = uv_buf_init(b->in + b->in_len, (unsigned)(b->in_cap - b->in_len));
}

static void on_http_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf)
{
    (void)buf;
    bench *b = st->data;
    if (nread < 0) {
        fail(b, "the producer's connection closed");
        return;
    }
    b->in_len += (size_t)nread;
    char *end = memmem(b->in, b->in_len, "\r\n\r\n", 4);
    if (end == NULL)
        return;
    const char *cl = memmem(b->in, (size_t)(end - b->in), "Content-Length: ", 16);
    size_t body = cl != NULL ? strtoul(cl + 16, NULL, 10) : 0;
    size_t total = (size_t)(end + 4 - b->in) + body;
    if (b->in_len < total)
        return;
    if (strncmp(b->in, "HTTP/1.1 201", 12) != 0 && strncmp(b->in, "HTTP/1.1 200", 12) != 0) {
        fprintf(stderr, "parley bench ws: %.*s\n", (int)(total > 300 ? 300 : total), b->in);
        fail(b, "an append was refused");
        return;
    }
    if (b->conv[0] == '\0') { /* the conversation's creation */
        const char *id = memmem(b->in + total - body, body, "\"id\":\"", 6);
        if (id == NULL)
            return fail(b, "no conversation id");
        memcpy(b->conv, id + 6, 36);
        b->conv[36] = '\0';
    }
    if (b->counting) { /* the log's length: every subscriber reads up to its end */
        b->last = strtoll(b->in + total - body, NULL, 10) - 1;
        for (int i = 0; i < b->nsubs; i++)
            if (b->subs[i].next - 1 >= b->last)
                sub_done(b, &b->subs[i]);
    }
    memmove(b->in, b->in + total, b->in_len - total);
    b->in_len -= total;
    b->busy = false;
    if (b->opened < b->nsubs + b->nstalled || b->sent == 0)
        uv_stop(b->loop); /* the setup steps wait for this */
    else if (b->sent < b->events)
        post_next(b);
    else if (!b->counting) /* the conversation's own events (status) count too */
        count(b);
}

static void post(bench *b, const char *path, const char *body, size_t len)
{
    char head[256];
    int n = snprintf(head, sizeof(head),
                     "POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                     "Content-Length: %zu\r\n\r\n",
                     path, len);
    char *all = malloc((size_t)n + len);
    memcpy(all, head, (size_t)n);
    memcpy(all + n, body, len);
    b->busy = true;
    send_text((uv_stream_t *)&b->http, all, (size_t)n + len);
    free(all);
}

static void count(bench *b)
{
    char req[256];
    int n = snprintf(req, sizeof(req),
                     "GET /api/conversations/%s/events/count HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
                     b->conv);
    b->counting = true;
    send_text((uv_stream_t *)&b->http, req, (size_t)n);
}

static void post_next(bench *b)
{
    if (b->sent >= b->events)
        return;
    int k = b->events - b->sent < b->batch ? b->events - b->sent : b->batch;
    size_t cap = (size_t)k * ((size_t)b->size + 256) + 16, len = 0;
    char *body = b->body = realloc(b->body, cap), path[128];
    uint64_t t = now_ns();
    body[len++] = '[';
    for (int i = 0; i < k; i++) {
        len += (size_t)snprintf(body + len, cap - len,
                                "%s{\"source\":\"agent\",\"kind\":\"MessageEvent\",\"llm_message\":"
                                "{\"role\":\"assistant\",\"content\":[{\"type\":\"text\",\"text\":"
                                "\"t=%" PRIu64 " ",
                                i ? "," : "", t);
        for (int j = 0; j < b->size; j++)
            body[len++] = 'x';
        len += (size_t)snprintf(body + len, cap - len, "\"}]}}");
    }
    body[len++] = ']';
    b->sent += k;
    snprintf(path, sizeof(path), "/api/conversations/%s/events/append", b->conv);
    post(b, path, body, len);
}

static void on_http_connect(uv_connect_t *c, int status)
{
    bench *b = c->handle->data;
    free(c);
    if (status < 0)
        return fail(b, "cannot connect to the server");
    uv_read_start((uv_stream_t *)&b->http, on_http_alloc, on_http_read);
    post(b, "/api/conversations", "{}", 2);
}

static void connect_tcp(bench *b, uv_tcp_t *t, void *data, uv_connect_cb cb, int rcvbuf)
{
    struct sockaddr_in a;
    uv_ip4_addr("127.0.0.1", b->port, &a);
    uv_tcp_init(b->loop, t);
    t->data = data;
    uv_tcp_nodelay(t, 1);
    uv_connect_t *c = malloc(sizeof(*c));
    if (rcvbuf > 0) { /* before connecting: the window is set at the handshake */
        uv_os_sock_t fd = socket(AF_INET, SOCK_STREAM, 0);
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
        uv_tcp_open(t, fd);
    }
    uv_tcp_connect(c, t, (const struct sockaddr *)&a, cb);
}

/* ---- one run --------------------------------------------------------------------------- */

static long rss_kib(int pid)
{
    char path[64], line[256];
    snprintf(path, sizeof(path), "/proc/%d/status", pid);
    FILE *f = fopen(path, "r");
    long v = -1;
    while (f != NULL && fgets(line, sizeof(line), f) != NULL)
        if (sscanf(line, "VmRSS: %ld", &v) == 1)
            break;
    if (f != NULL)
        fclose(f);
    return v;
}

static double pct(const bench *b, double p)
{
    uint64_t total = 0, seen = 0;
    for (int i = 0; i <= LAT_BUCKETS; i++)
        total += b->lat[i];
    for (int i = 0; i <= LAT_BUCKETS; i++)
        if ((seen += b->lat[i]) >= (uint64_t)(p * (double)total) && total > 0)
            return (i + 0.5) * LAT_STEP_NS / 1e6;
    return 0;
}

static void on_closed(uv_handle_t *h)
{
    (void)h;
}

typedef struct result {
    double frames_s, p50, p99, events_s, bytes_per_conn;
} result;

static int run(bench *b, int pid, result *r)
{
    memset(r, 0, sizeof(*r));
    b->conv[0] = '\0';
    b->opened = b->done = b->failed = 0;
    b->last = -1;
    b->counting = false;
    b->frames = b->sent = 0;
    memset(b->lat, 0, sizeof(b->lat));
    connect_tcp(b, &b->http, b, on_http_connect, 0);
    uv_run(b->loop, UV_RUN_DEFAULT); /* the conversation */
    long before = pid > 0 ? rss_kib(pid) : -1;
    int n = b->nsubs + b->nstalled;
    b->subs = calloc((size_t)n, sizeof(sub));
    for (int i = 0; i < n && !b->failed; i++) {
        sub *s = &b->subs[i];
        s->b = b;
        s->next = -2;
        s->stalled = i >= b->nsubs;
        connect_tcp(b, &s->tcp, s, on_sub_connect, s->stalled ? 4096 : 0);
    }
    if (!b->failed)
        uv_run(b->loop, UV_RUN_DEFAULT); /* every subscriber has its full_state */
    if (b->idle && !b->failed) {
        long after = rss_kib(pid);
        r->bytes_per_conn = (double)(after - before) * 1024.0 / n;
    } else if (!b->failed) {
        b->t0 = now_ns();
        post_next(b);
        uv_run(b->loop, UV_RUN_DEFAULT);
        double s = (double)(b->t_end - b->t0) / 1e9;
        r->frames_s = (double)b->frames / s;
        r->events_s = b->events / s;
        r->p50 = pct(b, 0.50);
        r->p99 = pct(b, 0.99);
    }
    for (int i = 0; i < n; i++)
        if (!uv_is_closing((uv_handle_t *)&b->subs[i].tcp))
            uv_close((uv_handle_t *)&b->subs[i].tcp, on_closed);
    uv_close((uv_handle_t *)&b->http, on_closed);
    uv_run(b->loop, UV_RUN_DEFAULT);
    for (int i = 0; i < n; i++)
        free(b->subs[i].buf);
    free(b->subs);
    b->subs = NULL;
    b->in_len = 0;
    return b->failed ? -1 : 0;
}

int bench_ws(int argc, char **argv)
{
    int runs = 3, port = 0, subs = 1000, events = 20000, batch = 50, size = 100, stalled = 0,
        idle = 0, pid = 0;
    bool json = false;
    const cli_int_opt ints[] = {{"--port", &port, 1, 65535},
                                {"--subscribers", &subs, 1, 100000},
                                {"--events", &events, 1, 10000000},
                                {"--batch", &batch, 1, 1000},
                                {"--size", &size, 0, 65536},
                                {"--stalled", &stalled, 0, 1000},
                                {"--idle", &idle, 0, 1},
                                {"--pid", &pid, 1, 1 << 30}};
    int rc = cli_bench_args("bench ws", ws_usage, argc, argv, &runs, &json, NULL, ints,
                            sizeof(ints) / sizeof(ints[0]));
    if (rc >= 0)
        return rc;
    if (port == 0)
        return cli_usage_error("bench ws", "--port is needed");
    if (idle && pid == 0)
        return cli_usage_error("bench ws", "--idle needs --pid");
    bench *b = calloc(1, sizeof(*b));
    uv_loop_t loop;
    uv_loop_init(&loop);
    *b = (bench){.loop = &loop,
                 .port = port,
                 .nsubs = subs,
                 .nstalled = stalled,
                 .events = events,
                 .batch = batch,
                 .size = size,
                 .idle = idle != 0};
    double fs[101], p50[101], p99[101], es[101], bpc[101];
    for (int i = 0; i < runs; i++) {
        result r;
        if (run(b, pid, &r) < 0) {
            free(b->in);
            free(b->body);
            free(b);
            uv_loop_close(&loop);
            return CLI_FAIL;
        }
        fs[i] = r.frames_s;
        p50[i] = r.p50;
        p99[i] = r.p99;
        es[i] = r.events_s;
        bpc[i] = r.bytes_per_conn;
        if (!json && idle)
            fprintf(stderr, "  run %d/%d: %.0f bytes per idle connection\n", i + 1, runs,
                    r.bytes_per_conn);
        else if (!json)
            fprintf(stderr, "  run %d/%d: %.0f frames/s, p50 %.2f ms, p99 %.2f ms\n", i + 1, runs,
                    r.frames_s, r.p50, r.p99);
    }
    if (json && idle)
        printf("{\"bytes_per_idle_connection\": %.0f, \"connections\": %d}\n",
               cli_median(bpc, runs), subs + stalled);
    else if (json)
        printf("{\"frames_per_s\": %.0f, \"events_per_s\": %.0f, \"delivery_ms\": {\"p50\": %.3f, "
               "\"p99\": %.3f}, \"subscribers\": %d, \"stalled\": %d}\n",
               cli_median(fs, runs), cli_median(es, runs), cli_median(p50, runs),
               cli_median(p99, runs), subs, stalled);
    else if (idle)
        printf("%d idle connections: %.0f bytes each (median of %d)\n", subs + stalled,
               cli_median(bpc, runs), runs);
    else
        printf("%d subscribers (+%d stalled): %.0f frames/s, delivery p50 %.2f ms, p99 %.2f ms "
               "(medians of %d)\n",
               subs, stalled, cli_median(fs, runs), cli_median(p50, runs), cli_median(p99, runs),
               runs);
    free(b->in);
    free(b->body);
    free(b);
    uv_loop_close(&loop);
    return CLI_OK;
}
