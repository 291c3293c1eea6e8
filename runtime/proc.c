/*
 * proc.c - child processes owned by actors (proc.h).
 *
 * The handle outlives its owner's interest: after rt_proc_close it keeps
 * reading (and discarding) the process's output, so the process never
 * blocks on a full pipe while it shuts down, until the process has exited
 * and every handle is closed; then it frees itself.
 */
#include "proc.h"

#include "err.h"
#include "log.h"
#include "runtime.h"

#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <uv.h>

enum {
    READ_CHUNK = 64 << 10,
    ERR_LINE_MAX = 1024,     /* a stderr line is cut here in the log */
    ERR_LINES_PER_MIN = 100, /* stderr lines logged a minute, per process */
    EOF_WAIT_MS = 1000,      /* after the exit, how long stdout may stay open */
};

typedef struct write_req {
    uv_write_t req;
    rt_proc *p;
    rt_buf *data;
} write_req;

struct rt_proc {
    uv_process_t proc;
    uv_pipe_t in, out, err;
    uv_timer_t timer;
    rt_actor *owner; /* NULL once closed by the owner */
    uint64_t id;
    uint32_t line_kind, exit_kind, max_pending, pending;
    size_t max_line;
    uint64_t grace_ms;
    int pid;
    int refs; /* open handles, plus one while the owner holds it */
    bool in_open, out_eof, err_eof, exited, paused, overflow, exit_told;
    int stop_stage; /* 0 running, 1 stdin closed, 2 TERM sent, 3 KILL sent */
    rt_proc_exit how;
    size_t queued;
    /* the stdout line being assembled */
    char *line;
    size_t len, cap;
    /* stderr */
    char errline[ERR_LINE_MAX + 1];
    size_t errlen;
    bool errcut;
    uint64_t err_window; /* the minute (ms / 60000) being counted */
    uint32_t err_logged, err_dropped;
    char name[64];
    char rbuf[READ_CHUNK];
    char ebuf[4096];
};

static _Atomic uint64_t next_id = 1;

uint64_t rt_proc_id(const rt_proc *p)
{
    return p->id;
}

int rt_proc_pid(const rt_proc *p)
{
    return p->pid;
}

size_t rt_proc_write_queued(const rt_proc *p)
{
    return p->queued;
}

static void unref(rt_proc *p)
{
    if (--p->refs == 0) {
        free(p->line);
        free(p);
    }
}

static void on_handle_closed(uv_handle_t *h)
{
    unref(h->data);
}

static void close_handle(rt_proc *p, uv_handle_t *h)
{
    if (!uv_is_closing(h))
        uv_close(h, on_handle_closed);
    (void)p;
}

static void kill_group(rt_proc *p, int sig)
{
    if (p->pid > 0 && !p->exited)
        kill(-p->pid, sig);
}

/* Everything is over once it has exited and both its outputs are drained
 * (or it left them open too long): tell the owner, close what is open. */
static void maybe_finish(rt_proc *p)
{
    if (!p->exited || !(p->out_eof && p->err_eof))
        return;
    if (p->owner != NULL && !p->exit_told) {
        p->exit_told = true;
        rt_buf *b = rt_buf_copy(&p->how, sizeof(p->how));
        if (b != NULL && rt_notify(p->owner, p->exit_kind, p->id, b) < 0)
            rt_buf_unref(b);
    }
    p->in_open = false;
    close_handle(p, (uv_handle_t *)&p->in);
    close_handle(p, (uv_handle_t *)&p->out);
    close_handle(p, (uv_handle_t *)&p->err);
    close_handle(p, (uv_handle_t *)&p->timer);
    close_handle(p, (uv_handle_t *)&p->proc);
    if (p->owner != NULL) {
        rt_actor_unref(p->owner);
        p->owner = NULL;
    }
}

static void on_timer(uv_timer_t *t)
{
    rt_proc *p = t->data;
    if (p->exited) { /* its stdout stayed open (a child of it holds it) */
        kill(-p->pid, SIGKILL);
        uv_read_stop((uv_stream_t *)&p->out);
        uv_read_stop((uv_stream_t *)&p->err);
        p->out_eof = p->err_eof = true;
        maybe_finish(p);
        return;
    }
    if (p->stop_stage == 1) {
        p->stop_stage = 2;
        kill_group(p, SIGTERM);
        uv_timer_start(&p->timer, on_timer, p->grace_ms, 0);
    } else if (p->stop_stage == 2) {
        p->stop_stage = 3;
        kill_group(p, SIGKILL);
    }
}

static void on_proc_exit(uv_process_t *h, int64_t status, int sig)
{
    rt_proc *p = h->data;
    p->exited = true;
    p->how.status = sig != 0 ? -1 : status;
    p->how.signal = sig;
    /* its children may live on: the group goes with it */
    kill(-p->pid, SIGKILL);
    if (p->paused && !p->out_eof) { /* nobody will read: drain it now */
        p->paused = false;
        uv_read_start((uv_stream_t *)&p->out, NULL, NULL);
    }
    uv_timer_stop(&p->timer);
    uv_timer_start(&p->timer, on_timer, EOF_WAIT_MS, 0);
    maybe_finish(p);
}

static void alloc_out(uv_handle_t *h, size_t hint, uv_buf_t *b)
{
    (void)hint;
    rt_proc *p = h->data;
    *b = uv_buf_init(p->rbuf, sizeof(p->rbuf));
}

static void alloc_err(uv_handle_t *h, size_t hint, uv_buf_t *b)
{
    (void)hint;
    rt_proc *p = h->data;
    *b = uv_buf_init(p->ebuf, sizeof(p->ebuf));
}

static void deliver(rt_proc *p, rt_buf *line)
{
    if (p->owner == NULL) {
        rt_buf_unref(line);
        return;
    }
    if (rt_notify(p->owner, p->line_kind, p->id, line) < 0) {
        rt_buf_unref(line);
        return;
    }
    if (++p->pending >= p->max_pending && !p->exited) {
        p->paused = true;
        uv_read_stop((uv_stream_t *)&p->out);
    }
}

static void take_bytes(rt_proc *p, const char *s, size_t n)
{
    while (n > 0) {
        const char *nl = memchr(s, '\n', n);
        size_t k = nl != NULL ? (size_t)(nl - s) : n;
        if (!p->overflow && p->len + k > p->max_line) {
            p->overflow = true;
            free(p->line);
            p->line = NULL;
            p->len = p->cap = 0;
        }
        if (!p->overflow && k > 0) {
            if (p->len + k > p->cap) {
                size_t cap = p->cap ? p->cap : 4096;
                while (cap < p->len + k)
                    cap *= 2;
                char *nb = realloc(p->line, cap);
                if (nb == NULL) { /* as if too long: dropped, and said */
                    p->overflow = true;
                    free(p->line);
                    p->line = NULL;
                    p->len = p->cap = 0;
                } else {
                    p->line = nb;
                    p->cap = cap;
                }
            }
            if (!p->overflow) {
                memcpy(p->line + p->len, s, k);
                p->len += k;
            }
        }
        if (nl == NULL)
            return;
        if (p->overflow) {
            deliver(p, NULL);
        } else {
            size_t len = p->len;
            if (len > 0 && p->line[len - 1] == '\r')
                len--;
            if (len > 0) { /* blank lines are skipped, as the ACP SDKs do */
                rt_buf *b = rt_buf_copy(p->line, len);
                if (b != NULL)
                    deliver(p, b);
            }
        }
        p->overflow = false;
        p->len = 0;
        if (p->cap > (1u << 20)) { /* a big line is not kept around */
            free(p->line);
            p->line = NULL;
            p->cap = 0;
        }
        s = nl + 1;
        n -= k + 1;
    }
}

static void on_out(uv_stream_t *s, ssize_t n, const uv_buf_t *b)
{
    rt_proc *p = s->data;
    if (n > 0) {
        take_bytes(p, b->base, (size_t)n);
    } else if (n < 0) {
        uv_read_stop(s);
        p->out_eof = true;
        maybe_finish(p);
    }
}

static void log_err_line(rt_proc *p)
{
    uint64_t minute = uv_now(p->proc.loop) / 60000;
    if (minute != p->err_window) {
        if (p->err_dropped > 0)
            rt_log(RT_LOG_WARN, "proc", "%s: %u stderr lines not logged", p->name, p->err_dropped);
        p->err_window = minute;
        p->err_logged = p->err_dropped = 0;
    }
    p->errline[p->errlen] = '\0';
    if (p->err_logged++ < ERR_LINES_PER_MIN)
        rt_log(RT_LOG_INFO, "proc", "%s: %s%s", p->name, p->errline, p->errcut ? "..." : "");
    else
        p->err_dropped++;
    p->errlen = 0;
    p->errcut = false;
}

static void on_err(uv_stream_t *s, ssize_t n, const uv_buf_t *b)
{
    rt_proc *p = s->data;
    if (n < 0) {
        if (p->errlen > 0)
            log_err_line(p);
        uv_read_stop(s);
        p->err_eof = true;
        maybe_finish(p);
        return;
    }
    for (ssize_t i = 0; i < n; i++) {
        char c = b->base[i];
        if (c == '\n') {
            log_err_line(p);
        } else if (p->errlen < ERR_LINE_MAX) {
            p->errline[p->errlen++] = (c >= 0 && c < 0x20 && c != '\t') ? '?' : c;
        } else {
            p->errcut = true;
        }
    }
}

int rt_proc_spawn(rt_actor *owner, const rt_proc_opts *o, rt_proc **out)
{
    if (owner == NULL || o == NULL || o->argv == NULL || o->argv[0] == NULL || out == NULL)
        return RT_EINVAL;
    rt_proc *p = calloc(1, sizeof(*p));
    if (p == NULL)
        return RT_ENOMEM;
    uv_loop_t *loop = rt_runtime_uv(rt_actor_runtime(owner), rt_actor_loop(owner));
    p->id = atomic_fetch_add(&next_id, 1);
    p->line_kind = o->line_kind;
    p->exit_kind = o->exit_kind;
    p->max_line = o->max_line ? o->max_line : (16u << 20);
    p->max_pending = o->max_pending ? o->max_pending : 64;
    p->grace_ms = o->stop_grace_ms ? o->stop_grace_ms : 1000;
    snprintf(p->name, sizeof(p->name), "%s", o->log_name != NULL ? o->log_name : o->argv[0]);
    uv_pipe_init(loop, &p->in, 0);
    uv_pipe_init(loop, &p->out, 0);
    uv_pipe_init(loop, &p->err, 0);
    uv_timer_init(loop, &p->timer);
    p->in.data = p->out.data = p->err.data = p->timer.data = p->proc.data = p;
    uv_stdio_container_t stdio[3] = {
        {.flags = UV_CREATE_PIPE | UV_READABLE_PIPE, .data.stream = (uv_stream_t *)&p->in},
        {.flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE, .data.stream = (uv_stream_t *)&p->out},
        {.flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE, .data.stream = (uv_stream_t *)&p->err},
    };
    uv_process_options_t po = {
        .exit_cb = on_proc_exit,
        .file = o->argv[0],
        .args = (char **)o->argv,
        .env = (char **)o->env,
        .cwd = o->cwd,
        .flags = UV_PROCESS_DETACHED, /* setsid: a group of its own */
        .stdio_count = 3,
        .stdio = stdio,
    };
    int r = uv_spawn(loop, &p->proc, &po);
    p->refs = 5; /* in, out, err, timer, proc (initialized even if uv_spawn failed) */
    if (r < 0) {
        p->exited = p->out_eof = p->err_eof = true;
        maybe_finish(p);
        return r;
    }
    p->refs++; /* the owner's */
    p->pid = p->proc.pid;
    p->in_open = true;
    p->owner = rt_actor_ref(owner);
    uv_read_start((uv_stream_t *)&p->out, alloc_out, on_out);
    uv_read_start((uv_stream_t *)&p->err, alloc_err, on_err);
    *out = p;
    return 0;
}

static void on_written(uv_write_t *w, int status)
{
    write_req *wr = (write_req *)w;
    rt_proc *p = wr->p;
    p->queued -= rt_buf_len(wr->data);
    rt_buf_unref(wr->data);
    free(wr);
    if (status < 0 && status != UV_ECANCELED && p->in_open) {
        /* it closed its stdin (EPIPE): nothing more can be said to it */
        p->in_open = false;
        close_handle(p, (uv_handle_t *)&p->in);
    }
}

int rt_proc_write(rt_proc *p, rt_buf *data)
{
    if (p == NULL || !p->in_open) {
        rt_buf_unref(data);
        return RT_ECLOSED;
    }
    write_req *wr = malloc(sizeof(*wr));
    if (wr == NULL) {
        rt_buf_unref(data);
        return RT_ENOMEM;
    }
    wr->p = p;
    wr->data = data;
    uv_buf_t b = uv_buf_init((char *)rt_buf_data(data), (unsigned)rt_buf_len(data));
    int r = uv_write(&wr->req, (uv_stream_t *)&p->in, &b, 1, on_written);
    if (r < 0) {
        rt_buf_unref(data);
        free(wr);
        return r;
    }
    p->queued += rt_buf_len(data);
    return 0;
}

void rt_proc_ack(rt_proc *p, uint32_t n)
{
    if (p == NULL)
        return;
    p->pending = n >= p->pending ? 0 : p->pending - n;
    if (p->paused && p->pending <= p->max_pending / 2 && !p->out_eof) {
        p->paused = false;
        uv_read_start((uv_stream_t *)&p->out, alloc_out, on_out);
    }
}

void rt_proc_signal(rt_proc *p, int sig)
{
    if (p != NULL)
        kill_group(p, sig);
}

void rt_proc_close(rt_proc *p)
{
    if (p == NULL)
        return;
    if (p->owner != NULL) {
        rt_actor_unref(p->owner);
        p->owner = NULL;
    }
    if (p->in_open) {
        p->in_open = false;
        close_handle(p, (uv_handle_t *)&p->in);
    }
    if (p->paused && !p->out_eof) { /* read and drop: never block it */
        p->paused = false;
        uv_read_start((uv_stream_t *)&p->out, alloc_out, on_out);
    }
    if (!p->exited && p->stop_stage == 0) {
        p->stop_stage = 1;
        uv_timer_start(&p->timer, on_timer, p->grace_ms, 0);
    }
    maybe_finish(p);
    unref(p);
}
