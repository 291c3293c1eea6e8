/*
 * load_shard.c - one shard of `parley load`: a libuv loop holding a share
 * of the subscribers and producers, run one phase at a time (see load.h),
 * and the helpers its sockets share: connect, write, close, count errors.
 */
#include "load.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int load_shard_init(load_shard *sh, load_run *run, int id)
{
    int n = run->cfg.conversations;
    sh->id = id;
    sh->run = run;
    sh->rbuf = malloc(LOAD_RBUF);
    sh->acked = calloc((size_t)n, sizeof(*sh->acked));
    sh->ack_min = malloc((size_t)n * sizeof(*sh->ack_min));
    sh->ack_max = malloc((size_t)n * sizeof(*sh->ack_max));
    if (sh->rbuf == NULL || sh->acked == NULL || sh->ack_min == NULL || sh->ack_max == NULL ||
        uv_loop_init(&sh->loop) != 0)
        return -1;
    for (int i = 0; i < n; i++)
        sh->ack_min[i] = sh->ack_max[i] = -1;
    if (run->cfg.trace != NULL)
        sh->trace.limit = LOAD_TRACE_MAX / (size_t)run->cfg.threads;
    uv_timer_init(&sh->loop, &sh->deadline);
    uv_timer_init(&sh->loop, &sh->tick);
    sh->deadline.data = sh->tick.data = sh;
    return load_subs_init(sh) != 0 || load_prods_init(sh) != 0 || load_readers_init(sh) != 0 ? -1
                                                                                             : 0;
}

void load_shard_free(load_shard *sh)
{
    load_subs_free(sh);
    load_prods_free(sh);
    load_readers_free(sh);
    for (int i = 0; sh->acked != NULL && i < sh->run->cfg.conversations; i++)
        load_bits_free(&sh->acked[i]);
    free(sh->acked);
    load_trace_free(&sh->trace);
    free(sh->ack_min);
    free(sh->ack_max);
    free(sh->rbuf);
}

void load_done(load_shard *sh)
{
    if (sh->waiting > 0 && --sh->waiting == 0)
        uv_stop(&sh->loop);
}

static void on_deadline(uv_timer_t *t)
{
    load_shard *sh = t->data;
    sh->waiting = 0;
    uv_stop(&sh->loop);
}

static void on_tick(uv_timer_t *t)
{
    load_shard *sh = t->data;
    uint64_t now = uv_hrtime();
    atomic_store_explicit(&sh->shown_frames, sh->frames, memory_order_relaxed);
    atomic_store_explicit(&sh->shown_events, sh->events, memory_order_relaxed);
    atomic_store_explicit(&sh->shown_errors, load_errs_total(&sh->errs), memory_order_relaxed);
    load_prods_tick(sh, now);
    if (now - sh->last_check >= 250000000) {
        sh->last_check = now;
        load_subs_tick(sh, now);
    }
}

/* How long each phase may take, at most (ms). */
static uint64_t phase_limit(const load_run *run)
{
    uint64_t d = run->cfg.duration_ms, now = uv_hrtime();
    switch (run->phase) {
    case LOAD_RUN: {
        uint64_t end = run->t_run + d * 1000000;
        return now < end ? (end - now) / 1000000 : 0;
    }
    case LOAD_ACKS:
        return 30000;
    case LOAD_DRAIN:
        return d > 10000 ? d : 10000;
    case LOAD_FATE:
        return 2000;
    default: /* setting up: 10,000 connections take a few seconds */
        return 120000;
    }
}

void load_shard_phase(load_shard *sh)
{
    load_run *run = sh->run;
    sh->waiting = 1; /* until the phase's work is all started */
    load_prods_phase(sh);
    load_subs_phase(sh);
    load_readers_phase(sh);
    if (run->phase == LOAD_CLOSE) {
        load_close((uv_handle_t *)&sh->deadline);
        load_close((uv_handle_t *)&sh->tick);
        uv_run(&sh->loop, UV_RUN_DEFAULT); /* until every handle is closed */
        uv_loop_close(&sh->loop);
        return;
    }
    if (run->phase == LOAD_RUN)
        sh->waiting++; /* only the deadline ends it */
    uint64_t every = run->phase == LOAD_RUN && run->cfg.rate > 0 ? 1 : 100;
    uv_timer_start(&sh->tick, on_tick, every, every);
    uv_timer_start(&sh->deadline, on_deadline, phase_limit(run), 0);
    if (--sh->waiting > 0)
        uv_run(&sh->loop, UV_RUN_DEFAULT);
    sh->waiting = 0;
    uv_timer_stop(&sh->tick);
    uv_timer_stop(&sh->deadline);
    on_tick(&sh->tick); /* the counters as they are at the end */
}

void load_err(load_shard *sh, const char *kind, const char *fmt, ...)
{
    if (load_errs_add(&sh->errs, kind, 1) != 0 || fmt == NULL)
        return;
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    fprintf(stderr, "%sparley load: %s (%s; further ones are counted)\n",
            sh->run->cfg.progress ? "\r\033[K" : "", line, kind);
}

int load_connect(load_shard *sh, uv_tcp_t *t, int rcvbuf, uv_connect_cb cb)
{
    const struct sockaddr *a = (const struct sockaddr *)&sh->run->cfg.addr;
    if (uv_tcp_init(&sh->loop, t) != 0) {
        fprintf(stderr, "parley load: uv_tcp_init failed\n");
        abort(); /* cannot fail on Linux: it makes no socket */
    }
    int r = 0;
    if (rcvbuf > 0) { /* before connecting: the window is offered in the handshake */
        int fd = socket(a->sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
            return uv_translate_sys_error(errno);
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
        if ((r = uv_tcp_open(t, fd)) != 0) {
            close(fd);
            return r;
        }
    }
    uv_tcp_nodelay(t, 1);
    uv_connect_t *c = malloc(sizeof(*c));
    if (c == NULL)
        return UV_ENOMEM;
    if ((r = uv_tcp_connect(c, t, a, cb)) != 0)
        free(c);
    return r;
}

typedef struct written {
    uv_write_t w;
    char data[];
} written;

static void on_written(uv_write_t *w, int status)
{
    (void)status; /* a broken connection is seen by its reader */
    free(w);
}

int load_write(uv_stream_t *s, const void *p, size_t n)
{
    uv_buf_t b = uv_buf_init((char *)p, (unsigned)n);
    int r = uv_try_write(s, &b, 1);
    if (r == (int)n)
        return 0;
    if (r < 0 && r != UV_EAGAIN)
        return r;
    size_t done = r > 0 ? (size_t)r : 0;
    written *w = malloc(sizeof(*w) + n - done);
    if (w == NULL)
        return UV_ENOMEM;
    memcpy(w->data, (const char *)p + done, n - done);
    b = uv_buf_init(w->data, (unsigned)(n - done));
    if ((r = uv_write(&w->w, s, &b, 1, on_written)) != 0)
        free(w);
    return r;
}

void load_close(uv_handle_t *h)
{
    if (!uv_is_closing(h))
        uv_close(h, NULL);
}
