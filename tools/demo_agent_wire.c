/*
 * demo_agent_wire.c - the demo agent's JSON-RPC over stdio: one message a
 * line (ACP's framing), read with our own buffer so that a line longer
 * than DA_MAX_LINE is refused while held only in part, and written compact
 * and flushed one message at a time.
 */
#include "demo_agent.h"

#include "runtime/log.h"
#include "runtime/text.h"

#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define READ_SIZE 65536

void da_send(da_agent *a, json_t *msg)
{
    if (msg == NULL || a->out_failed) {
        json_decref(msg);
        return;
    }
    /* compact JSON has no raw newline: strings escape theirs */
    if (json_dumpf(msg, stdout, JSON_COMPACT) != 0 || putchar('\n') == EOF || fflush(stdout) != 0) {
        rt_log(RT_LOG_WARN, "demo-agent", "cannot write to stdout: %s", strerror(errno));
        a->out_failed = true;
    }
    json_decref(msg);
}

void da_result(da_agent *a, json_t *id, json_t *result)
{
    da_send(a, json_pack("{s:s,s:O,s:o}", "jsonrpc", "2.0", "id", id, "result", result));
}

void da_error(da_agent *a, json_t *id, int code, const char *fmt, ...)
{
    char why[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof(why), fmt, ap);
    va_end(ap);
    rt_utf8_clean(why); /* whole UTF-8, whatever the parser quoted or vsnprintf cut */
    rt_log(RT_LOG_DEBUG, "demo-agent", "error %d: %s", code, why);
    da_send(a, json_pack("{s:s,s:O,s:{s:i,s:s%}}", "jsonrpc", "2.0", "id", id ? id : json_null(),
                         "error", "code", code, "message", why, strlen(why)));
}

void da_send_update(da_agent *a, const char *session_id, json_t *update)
{
    da_send(a, json_pack("{s:s,s:s,s:{s:s,s:o}}", "jsonrpc", "2.0", "method", "session/update",
                         "params", "sessionId", session_id, "update", update));
}

/* ---------------------------------------------------------------- input --- */

/* Read what stdin has within timeout_ms: 1 something, 0 nothing, -1 end. */
static int fill(da_reader *r, int timeout_ms)
{
    if (r->start > 0) {
        memmove(r->buf, r->buf + r->start, r->len - r->start);
        r->len -= r->start;
        r->scan -= r->start;
        r->start = 0;
    }
    if (r->len > DA_MAX_LINE) { /* no newline yet: drop what we hold of the line */
        r->skipping = true;
        r->len = r->scan = 0;
    }
    if (r->cap - r->len < READ_SIZE) { /* at most DA_MAX_LINE + READ_SIZE, ever */
        size_t want = r->cap > 0 ? r->cap * 2 : READ_SIZE;
        if (want < r->len + READ_SIZE)
            want = r->len + READ_SIZE;
        if (want > DA_MAX_LINE + READ_SIZE)
            want = DA_MAX_LINE + READ_SIZE;
        char *b = realloc(r->buf, want);
        if (b == NULL) {
            rt_log(RT_LOG_ERROR, "demo-agent", "out of memory for a line of input");
            return -1;
        }
        r->buf = b;
        r->cap = want;
    }
    /* poll even to wait without limit: stdin may have been left non-blocking */
    struct pollfd p = {.fd = STDIN_FILENO, .events = POLLIN};
    int n = poll(&p, 1, timeout_ms);
    if (n == 0 || (n < 0 && errno == EINTR))
        return 0;
    ssize_t got = n < 0 ? -1 : read(STDIN_FILENO, r->buf + r->len, r->cap - r->len);
    if (got < 0 && (errno == EINTR || errno == EAGAIN))
        return 0;
    if (got < 0)
        rt_log(RT_LOG_ERROR, "demo-agent", "cannot read stdin: %s", strerror(errno));
    if (got <= 0)
        return -1;
    r->len += (size_t)got;
    return 1;
}

enum { LINE = 1, NONE = 0, TOO_LONG = 2 };

/* The next whole line in the buffer (without its '\n'), if any. */
static int take_line(da_reader *r, char **line, size_t *len)
{
    char *nl = r->len > r->scan ? memchr(r->buf + r->scan, '\n', r->len - r->scan) : NULL;
    if (nl == NULL) {
        if (r->skipping) { /* the long line goes on: keep none of it */
            r->start = r->scan = r->len = 0;
            if (!r->eof)
                return NONE;
            r->skipping = false;
            return TOO_LONG;
        }
        r->scan = r->len;
        if (!r->eof || r->start == r->len)
            return NONE;
        nl = r->buf + r->len; /* at the end of input, a last line without its newline */
    }
    *line = r->buf + r->start;
    *len = (size_t)(nl - *line);
    r->start = r->scan = (size_t)(nl - r->buf) + (nl < r->buf + r->len ? 1 : 0);
    if (r->skipping || *len > DA_MAX_LINE) {
        r->skipping = false;
        return TOO_LONG;
    }
    return LINE;
}

static bool is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

/* One line as a message: the object, or NULL (blank, or answered here). */
static json_t *parse(da_agent *a, char *line, size_t len)
{
    while (len > 0 && is_space(line[0]))
        line++, len--;
    while (len > 0 && is_space(line[len - 1]))
        len--;
    if (len == 0)
        return NULL;
    json_error_t je;
    json_t *m = json_loadb(line, len, JSON_DECODE_ANY, &je);
    if (m == NULL) {
        da_error(a, NULL, DA_PARSE_ERROR, "Parse error: not JSON: %s (column %d)", je.text,
                 je.column);
        return NULL;
    }
    if (!json_is_object(m)) {
        json_decref(m);
        da_error(a, NULL, DA_INVALID_REQUEST, "Invalid request: a message must be a JSON object");
        return NULL;
    }
    return m;
}

int da_next(da_agent *a, int timeout_ms, json_t **msg)
{
    da_reader *r = &a->in;
    *msg = NULL;
    for (bool filled = false;;) {
        char *line;
        size_t len;
        int t = take_line(r, &line, &len);
        if (t == TOO_LONG) {
            da_error(a, NULL, DA_INVALID_REQUEST,
                     "Invalid request: a message of more than %u bytes is refused", DA_MAX_LINE);
            continue;
        }
        if (t == LINE) {
            if ((*msg = parse(a, line, len)) != NULL)
                return 1;
            continue;
        }
        if (r->eof)
            return -1;
        if (filled) /* something came, but no whole line yet */
            return 0;
        int f = fill(r, timeout_ms);
        if (f == 0)
            return 0;
        if (f < 0)
            r->eof = true;
        filled = true;
    }
}

/* ------------------------------------------------------------- routing --- */

/* Is a prompt for this session waiting in the queue? */
static bool queued_prompt(da_agent *a, const char *sid)
{
    size_t i;
    json_t *m;
    json_array_foreach(a->queue, i, m)
    {
        const char *method = json_string_value(json_object_get(m, "method"));
        json_t *params = json_object_get(m, "params");
        const char *s = json_string_value(json_object_get(params, "sessionId"));
        if (method != NULL && strcmp(method, "session/prompt") == 0 && s != NULL &&
            strcmp(s, sid) == 0)
            return true;
    }
    return false;
}

static void on_cancel(da_agent *a, json_t *params)
{
    const char *sid = json_string_value(json_object_get(params, "sessionId"));
    if (sid == NULL)
        return;
    if (a->turn != NULL && strcmp(a->turn->id, sid) == 0) {
        a->cancelled = true;
        return;
    }
    da_session *s = da_find(a, sid);
    if (s != NULL && queued_prompt(a, sid)) /* else there is nothing to cancel */
        s->cancel = true;
}

void da_incoming(da_agent *a, json_t *msg)
{
    json_t *id = json_object_get(msg, "id");
    json_t *method = json_object_get(msg, "method");
    if (method == NULL && id != NULL &&
        (json_object_get(msg, "result") != NULL || json_object_get(msg, "error") != NULL)) {
        if (a->awaiting && a->reply == NULL && json_is_integer(id) &&
            json_integer_value(id) == a->awaited)
            a->reply = json_incref(msg);
        else /* late, after a cancel: nobody waits for it now */
            rt_log(RT_LOG_DEBUG, "demo-agent", "a response to no request that waits");
        return;
    }
    if (!json_is_string(method)) {
        da_error(a, id, DA_INVALID_REQUEST,
                 "Invalid request: neither a request, a notification nor a response");
        return;
    }
    if (id == NULL) { /* a notification: session/cancel is the one we act on */
        if (strcmp(json_string_value(method), "session/cancel") == 0)
            on_cancel(a, json_object_get(msg, "params"));
        return;
    }
    if (a->turn != NULL)
        json_array_append(a->queue, msg);
    else
        da_dispatch(a, msg);
}

static long long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void da_pump(da_agent *a, int timeout_ms)
{
    long long deadline = now_ms() + timeout_ms;
    for (;;) {
        if (a->cancelled || a->in.eof || a->out_failed || (a->awaiting && a->reply != NULL))
            return;
        long long left = timeout_ms < 0 ? -1 : deadline - now_ms();
        if (timeout_ms >= 0 && left < 0)
            left = 0;
        json_t *m;
        int r = da_next(a, (int)left, &m);
        if (r > 0) {
            da_incoming(a, m);
            json_decref(m);
        } else if (r == 0 && left == 0) {
            return;
        }
    }
}

json_t *da_call(da_agent *a, const char *method, json_t *params, json_t **err)
{
    *err = NULL;
    if (a->in.eof || a->out_failed) {
        json_decref(params);
        return NULL;
    }
    a->awaited = a->next_id++;
    a->awaiting = true;
    da_send(a, json_pack("{s:s,s:I,s:s,s:o}", "jsonrpc", "2.0", "id", (json_int_t)a->awaited,
                         "method", method, "params", params));
    da_pump(a, -1);
    a->awaiting = false;
    json_t *reply = a->reply, *result = NULL;
    a->reply = NULL;
    if (reply == NULL)
        return NULL;
    if ((result = json_object_get(reply, "result")) != NULL)
        json_incref(result);
    else if ((*err = json_object_get(reply, "error")) != NULL)
        json_incref(*err);
    json_decref(reply);
    return result;
}
