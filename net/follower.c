/*
 * follower.c - following a conversation: the actor around
 * actors/follow.c's copy, with a REST connection and a WebSocket
 * (net/client.h). See follower.h. It is here and not in actors/ because it
 * is a network client, and actors/ never names net/.
 *
 * The connections' callbacks only post messages to the actor (the bytes
 * copied), so every decision is taken in its handler, one at a time, and
 * its timers are ordinary actor timers. REST is one request at a time,
 * chosen by rest_next: a page the copy wants, else a count that is due,
 * else nothing (and, when not following, the end).
 */
#include "net/follower.h"
#include "net/client.h"
#include "runtime/err.h"
#include "runtime/json.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
    FW_REST = RT_KIND_RANGE(4) + 1, /* arg: status (0: none, buf says why); buf: body */
    FW_WS_OPEN,                     /* arg: status (101: open); buf: why, when not */
    FW_FRAME,                       /* buf: a message */
    FW_WS_CLOSED,                   /* arg: close code (0: cut); buf: why */
    FW_TICK,                        /* every check interval */
    FW_RETRY,                       /* the backoff is over: arg 0 REST, 1 WebSocket */
};

enum {
    BACKOFF_FIRST_MS = 1000,
    BACKOFF_MAX_MS = 30000,
    CHECK_DEFAULT_MS = 5000,
    PATH_MAX_LEN = 1024,
    IDLE_PAGES_MAX = 3, /* repair pages in a row with nothing new before a backoff */
};

typedef enum { WS_NONE, WS_CONNECTING, WS_OPEN, WS_WAITING } ws_state;
typedef enum { R_IDLE, R_PAGE, R_COUNT, R_WAITING, R_TAIL } rest_state;

/* Starting from the last events: count, page newest first, count again. */
typedef enum { T_OFF, T_COUNT1, T_PAGE, T_COUNT2 } tail_step;
enum { TAIL_TRIES = 3 };

typedef struct follower {
    rt_actor *self;
    follower_opts o;
    char *cid, *key;
    fl *copy;
    uint64_t emitted;
    net_client *rest, *ws;
    rest_state rs;
    fl_fetch asked;
    bool count_due;
    bool doorbell; /* without indexes: a frame of an event not held came */
    ws_state ws_st;
    bool ws_worked; /* a frame came on this socket */
    uint64_t backoff_ms, rest_backoff_ms;
    uint64_t frames_since_tick;
    char status[32]; /* the last execution_status seen */
    char rule[64];   /* the stuck rule last reported, "" when none */
    int idle_pages;  /* repair pages in a row that brought nothing new */
    tail_step tail;  /* the start from the last events, under way */
    int tail_tries;
    uint64_t tail_count;
    json_t *tail_items; /* the page, newest first */
    bool post_count;    /* a count after a terminal status is under way */
    bool post_done;     /* and it came back with nothing missing */
    bool finished;
    bool was_synced; /* on_synced said */
    unsigned seed;
    follower_stats st;
} follower;

/* ---- callbacks of the connections: post to the actor ------------------------- */

static void post(follower *F, uint32_t kind, uint64_t arg, const void *p, size_t n)
{
    rt_buf *b = p != NULL ? rt_buf_copy(p, n) : NULL;
    if (rt_send(F->self, kind, arg, b) != 0)
        rt_buf_unref(b);
}

static void rest_answer(void *ud, const hr_resp *r, const char *err)
{
    if (r == NULL)
        post(ud, FW_REST, 0, err, strlen(err));
    else
        post(ud, FW_REST, (uint64_t)r->status, r->body != NULL ? r->body : (const uint8_t *)"",
             r->body_len);
}

static void ws_answer(void *ud, const hr_resp *r, const char *err)
{
    if (err == NULL && r != NULL && r->status == 101)
        post(ud, FW_WS_OPEN, 101, NULL, 0);
    else
        post(ud, FW_WS_OPEN, r != NULL ? (uint64_t)r->status : 0, err, err ? strlen(err) : 0);
}

static void ws_message(void *ud, const uint8_t *p, size_t n)
{
    post(ud, FW_FRAME, 0, p, n);
}

static void ws_closed(void *ud, int code, const char *why)
{
    post(ud, FW_WS_CLOSED, (uint64_t)code, why, strlen(why));
}

/* ---- the end ------------------------------------------------------------------ */

static int finish(follower *F, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int finish(follower *F, int status, const char *fmt, ...)
{
    if (F->finished)
        return RT_DONE;
    F->finished = true;
    char why[300] = "";
    if (fmt != NULL) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why, sizeof(why), fmt, ap);
        va_end(ap);
    }
    F->st.requests = net_client_requests(F->rest);
    net_client_free(F->rest);
    net_client_free(F->ws);
    F->rest = F->ws = NULL;
    if (F->o.on_done != NULL)
        F->o.on_done(F->o.ud, status, why, F->copy, &F->st);
    return RT_DONE;
}

static const char *buf_text(const rt_msg *m, char *out, size_t cap)
{
    size_t n = m->buf != NULL ? rt_buf_len(m->buf) : 0;
    if (n >= cap)
        n = cap - 1;
    if (n > 0)
        memcpy(out, rt_buf_data(m->buf), n);
    out[n] = '\0';
    return out;
}

/* ---- the copy ----------------------------------------------------------------- */

static void emit(follower *F)
{
    for (; F->emitted < fl_count(F->copy); F->emitted++)
        if (F->o.on_event != NULL)
            F->o.on_event(F->o.ud, F->emitted, fl_id(F->copy, F->emitted),
                          fl_bytes(F->copy, F->emitted));
}

static bool terminal(const char *s)
{
    return strcmp(s, "finished") == 0 || strcmp(s, "error") == 0 || strcmp(s, "stuck") == 0;
}

/* An event, from a page or a frame: is it a status change? */
static void note_status(follower *F, json_t *ev)
{
    const char *kind = json_string_value(json_object_get(ev, "kind"));
    const char *key = json_string_value(json_object_get(ev, "key"));
    const char *code = json_string_value(json_object_get(ev, "code"));
    const char *detail = json_string_value(json_object_get(ev, "detail"));
    if (kind != NULL && code != NULL && detail != NULL &&
        strcmp(kind, "ConversationErrorEvent") == 0 && strcmp(code, "StuckPatternDetected") == 0 &&
        strncmp(detail, "stuck: ", 7) == 0) {
        /* parley's stuck detector says its rule first: "stuck: RULE: ..." */
        size_t n = strcspn(detail + 7, ":");
        snprintf(F->rule, sizeof(F->rule), "%.*s", (int)(n < sizeof(F->rule) ? n : 0), detail + 7);
    }
    if (kind == NULL || key == NULL || strcmp(kind, "ConversationStateUpdateEvent") != 0)
        return;
    json_t *v = json_object_get(ev, "value");
    if (strcmp(key, "full_state") == 0)
        v = json_object_get(v, "execution_status");
    else if (strcmp(key, "execution_status") != 0)
        return;
    const char *s = json_string_value(v);
    if (s == NULL || strlen(s) >= sizeof(F->status) || strcmp(s, F->status) == 0)
        return;
    snprintf(F->status, sizeof(F->status), "%s", s);
    F->post_done = false;
    if (F->o.until_done && terminal(s))
        F->count_due = true;
    if (F->o.on_status != NULL)
        F->o.on_status(F->o.ud, s, strcmp(s, "stuck") == 0 && F->rule[0] ? F->rule : NULL);
}

/* The event's bytes as the copy keeps them: compact JSON. */
static rt_buf *event_bytes(json_t *ev)
{
    return rt_json_buf(json_incref(ev));
}

/* ---- REST ---------------------------------------------------------------------- */

static void append_escaped(char *out, size_t cap, const char *s)
{
    size_t n = strlen(out);
    for (; *s != '\0' && n + 4 < cap; s++) {
        unsigned char ch = (unsigned char)*s;
        if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
            ch == '-' || ch == '_' || ch == '.' || ch == '~')
            out[n++] = (char)ch;
        else
            n += (size_t)snprintf(out + n, cap - n, "%%%02X", ch);
    }
    out[n] = '\0';
}

static void synced(follower *F);

static void rest_next(follower *F)
{
    if (F->finished || F->rs != R_IDLE)
        return;
    char path[PATH_MAX_LEN];
    if (F->tail != T_OFF) {
        if (F->tail == T_PAGE)
            snprintf(path, sizeof(path),
                     "/api/conversations/%s/events/search?limit=%u&sort_order=TIMESTAMP_DESC",
                     F->cid, F->o.start_last);
        else
            snprintf(path, sizeof(path), "/api/conversations/%s/events/count", F->cid);
        F->rs = R_TAIL;
        if (net_client_request(F->rest, "GET", path, NULL, 0) != 0) {
            F->rs = R_IDLE;
            finish(F, -1, "cannot send a request");
        }
        return;
    }
    if (F->doorbell) { /* applied between requests: a page in flight may predate it */
        F->doorbell = false;
        fl_server_count(F->copy, fl_count(F->copy) + 1);
    }
    if (fl_want(F->copy, &F->asked)) {
        snprintf(path, sizeof(path), "/api/conversations/%s/events/search?limit=%u", F->cid,
                 F->asked.limit);
        if (F->asked.cursor[0] != '\0') {
            strcat(path, "&page_id=");
            append_escaped(path, sizeof(path), F->asked.cursor);
        }
        F->rs = R_PAGE;
    } else if (F->count_due) {
        F->count_due = false;
        F->post_count = F->o.until_done && terminal(F->status);
        snprintf(path, sizeof(path), "/api/conversations/%s/events/count", F->cid);
        F->rs = R_COUNT;
    } else {
        synced(F);
        return;
    }
    if (net_client_request(F->rest, "GET", path, NULL, 0) != 0) {
        F->rs = R_IDLE;
        finish(F, -1, "cannot send a request");
    }
}

/* A page answered F->asked. */
static int page(follower *F, const rt_buf *body)
{
    json_error_t je;
    json_t *j = json_loadb((const char *)rt_buf_data(body), rt_buf_len(body), 0, &je);
    json_t *items = json_object_get(j, "items");
    if (!json_is_array(items)) {
        json_decref(j);
        return finish(F, -1, "the server's page is not {\"items\": [...]}");
    }
    size_t n = json_array_size(items);
    const char **ids = calloc(n + 1, sizeof(*ids));
    rt_buf **bytes = calloc(n + 1, sizeof(*bytes));
    int r = ids == NULL || bytes == NULL ? -1 : 0;
    for (size_t i = 0; r == 0 && i < n; i++) {
        json_t *ev = json_array_get(items, i);
        ids[i] = json_string_value(json_object_get(ev, "id"));
        bytes[i] = event_bytes(ev);
        if (ids[i] == NULL || bytes[i] == NULL)
            r = -1;
        else if (F->asked.first + i >= fl_count(F->copy))
            note_status(F, ev);
    }
    uint64_t before = fl_count(F->copy);
    fl_result fr = FL_NOMEM;
    if (r == 0)
        fr = fl_page(F->copy, &F->asked, ids, bytes, n,
                     json_string_value(json_object_get(j, "next_page_id")));
    for (size_t i = 0; i < n && bytes != NULL; i++)
        rt_buf_unref(bytes[i]);
    free(ids);
    free(bytes);
    json_decref(j);
    if (r != 0)
        return finish(F, -1, "an event of the server's page has no id");
    if (fr == FL_DIVERGED)
        return finish(F, -1,
                      "the server's log does not hold the events of the copy where it "
                      "holds them (diverged)");
    if (fr == FL_NOMEM)
        return finish(F, -1, "out of memory");
    F->st.fetched += fl_count(F->copy) - before;
    emit(F);
    return 0;
}

static void retry_later(follower *F, uint64_t *backoff, uint64_t which)
{
    uint64_t b = *backoff ? *backoff : BACKOFF_FIRST_MS;
    uint64_t wait = b / 2 + (uint64_t)rand_r(&F->seed) % (b / 2 + 1); /* jittered: [b/2, b] */
    *backoff = b * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : b * 2;
    rt_timer_start(F->self, wait, 0, FW_RETRY, which);
}

/* One answer of the start from the last events. The page is believed
 * only if the count did not move around it (appends going on: again, and
 * after TAIL_TRIES the start is from the first event, as without it). */
static int tail_step_done(follower *F, const rt_buf *body)
{
    json_error_t je;
    json_t *j = json_loadb((const char *)rt_buf_data(body), rt_buf_len(body), JSON_DECODE_ANY, &je);
    if (F->tail == T_PAGE) {
        json_decref(F->tail_items);
        F->tail_items = json_incref(json_object_get(j, "items"));
        json_decref(j);
        F->tail = json_is_array(F->tail_items) ? T_COUNT2 : T_OFF;
        return 0;
    }
    uint64_t c = json_is_integer(j) ? (uint64_t)json_integer_value(j) : UINT64_MAX;
    json_decref(j);
    if (c == UINT64_MAX) {
        F->tail = T_OFF; /* no count: from the first event */
        return 0;
    }
    if (F->tail == T_COUNT1) {
        F->tail_count = c;
        F->tail = c > 0 ? T_PAGE : T_OFF;
        return 0;
    }
    size_t n = json_array_size(F->tail_items);
    if (c != F->tail_count || n == 0 || n > c) {
        F->tail = ++F->tail_tries < TAIL_TRIES ? T_COUNT1 : T_OFF;
        return 0;
    }
    fl *t = fl_new_at(c - n);
    for (size_t i = 0; t != NULL && i < n; i++) { /* oldest first */
        json_t *ev = json_array_get(F->tail_items, n - 1 - i);
        const char *id = json_string_value(json_object_get(ev, "id"));
        rt_buf *b = id != NULL ? event_bytes(ev) : NULL;
        fl_result r = b != NULL ? fl_live(t, c - n + i, id, b) : FL_NOMEM;
        rt_buf_unref(b);
        if (r != FL_ADDED) {
            fl_free(t);
            t = NULL;
        } else
            note_status(F, ev);
    }
    F->tail = T_OFF;
    if (t == NULL)
        return 0; /* an odd page: from the first event instead */
    fl_free(F->copy);
    F->copy = t;
    F->emitted = fl_first(t); /* on_synced shows them as asked */
    F->st.fetched += n;
    fl_probe(F->copy);
    return 0;
}

static int rest_done(follower *F, rt_msg *m)
{
    rest_state was = F->rs;
    F->rs = R_IDLE;
    char why[300];
    if (m->arg == 200 && m->buf != NULL && was == R_TAIL) {
        F->rest_backoff_ms = 0;
        int r = tail_step_done(F, m->buf);
        if (r != 0)
            return r;
        rest_next(F);
        return F->finished ? RT_DONE : 0;
    }
    if (m->arg == 200 && m->buf != NULL) {
        if (was == R_PAGE) {
            uint64_t before = fl_count(F->copy);
            int r = page(F, m->buf);
            if (r != 0)
                return r;
            F->idle_pages = fl_count(F->copy) > before ? 0 : F->idle_pages + 1;
            if (F->idle_pages == 0)
                F->rest_backoff_ms = 0; /* progress: the next trouble starts at 1 s again */
            if (F->idle_pages >= IDLE_PAGES_MAX) { /* the cycle cap: not at full speed */
                F->idle_pages = 0;
                F->rs = R_WAITING;
                rt_log(RT_LOG_INFO, "follower", "%d pages brought nothing; again in a moment",
                       IDLE_PAGES_MAX);
                retry_later(F, &F->rest_backoff_ms, 0);
                return 0;
            }
        } else {
            char n[32];
            buf_text(m, n, sizeof(n));
            char *end;
            unsigned long long c = strtoull(n, &end, 10);
            if (end == n)
                return finish(F, -1, "the server's count is not a number: %.40s", n);
            fl_server_count(F->copy, c);
            F->rest_backoff_ms = 0;
            if (F->post_count && c <= fl_count(F->copy))
                F->post_done = true;
        }
        rest_next(F);
        return F->finished ? RT_DONE : 0;
    }
    if (m->arg == 401 || m->arg == 403)
        return finish(F, -1, "the server refused the API key (%d)", (int)m->arg);
    if (m->arg == 404)
        return finish(F, -1, "no conversation %s on the server", F->cid);
    if (m->arg == 0)
        buf_text(m, why, sizeof(why));
    else
        snprintf(why, sizeof(why), "status %d", (int)m->arg);
    if (!F->o.follow) /* a one-off sync says what is wrong at once */
        return finish(F, -1, m->arg == 0 ? "%s" : "the server answered %s", why);
    if (strstr(why, "certificate verification failed") != NULL)
        return finish(F, -1, "%s", why); /* no retry makes it pass */
    if (was == R_COUNT)
        F->count_due = true;
    F->rs = R_WAITING;
    rt_log(RT_LOG_INFO, "follower", "REST: %s; again in a moment", why);
    retry_later(F, &F->rest_backoff_ms, 0);
    return 0;
}

/* ---- the WebSocket -------------------------------------------------------------- */

static void ws_connect(follower *F)
{
    char path[PATH_MAX_LEN];
    uint64_t n = fl_count(F->copy);
    snprintf(path, sizeof(path), "/sockets/events/%s", F->cid);
    if (F->o.use_index && n > 0) {
        strcat(path, "?envelope=index&after_id=");
        append_escaped(path, sizeof(path), fl_id(F->copy, n - 1));
    } else if (F->o.use_index) {
        strcat(path, "?envelope=index&resend_mode=all");
    }
    F->ws_st = WS_CONNECTING;
    F->ws_worked = false;
    if (net_client_upgrade(F->ws, path) != 0) {
        F->ws_st = WS_WAITING;
        retry_later(F, &F->backoff_ms, 1);
    }
}

/* Nothing to fetch: the end when not following; else make sure a socket is
 * (being) opened; with until_done, the end once the log is all here. */
static void synced(follower *F)
{
    if (!F->was_synced) {
        F->was_synced = true;
        if (F->o.on_synced != NULL)
            F->o.on_synced(F->o.ud, F->copy);
    }
    if (!F->o.follow) {
        finish(F, 0, NULL);
        return;
    }
    if (F->o.until_done && terminal(F->status) && F->post_done) {
        finish(F, 0, NULL);
        return;
    }
    if (F->ws_st == WS_NONE)
        ws_connect(F);
}

static void ws_opened(follower *F, rt_msg *m)
{
    if (m->arg != 101) {
        char why[300];
        buf_text(m, why, sizeof(why));
        if (m->arg == 404) {
            finish(F, -1, "no conversation %s on the server", F->cid);
            return;
        }
        if (m->arg == 401 || m->arg == 403) {
            finish(F, -1, "the server refused the API key (%d)", (int)m->arg);
            return;
        }
        if (strstr(why, "certificate verification failed") != NULL) {
            finish(F, -1, "%s", why);
            return;
        }
        rt_log(RT_LOG_INFO, "follower", "WebSocket: %s", why);
        F->ws_st = WS_WAITING;
        retry_later(F, &F->backoff_ms, 1);
        return;
    }
    F->ws_st = WS_OPEN;
    if (F->key != NULL) {
        json_t *a = json_pack("{s:s,s:s}", "type", "auth", "session_api_key", F->key);
        char *s = a != NULL ? rt_json_dumps(a, NULL) : NULL;
        if (s == NULL || net_client_ws_send(F->ws, s, strlen(s)) != 0)
            net_client_reset(F->ws, "cannot send the auth frame");
        free(s);
        json_decref(a);
    }
    if (!F->o.use_index) { /* what came between the last page and the subscription */
        F->count_due = true;
        rest_next(F);
    }
}

static int frame(follower *F, const rt_buf *b)
{
    json_error_t je;
    json_t *j = json_loadb((const char *)rt_buf_data(b), rt_buf_len(b), 0, &je);
    if (!json_is_object(j)) {
        json_decref(j);
        return 0; /* not ours to judge: REST is the truth */
    }
    F->st.frames++;
    F->frames_since_tick++;
    if (!F->ws_worked) {
        F->ws_worked = true;
        F->backoff_ms = 0; /* a socket that works resets the backoff */
    }
    json_t *index = F->o.use_index ? json_object_get(j, "index") : NULL;
    json_t *ev = F->o.use_index ? json_object_get(j, "event") : j;
    if (!json_is_object(ev)) {
        json_decref(j);
        return 0;
    }
    note_status(F, ev);
    const char *id = json_string_value(json_object_get(ev, "id"));
    const char *key = json_string_value(json_object_get(ev, "key"));
    bool logged = F->o.use_index ? json_is_integer(index) && json_integer_value(index) >= 0
                                 : !(key != NULL && strcmp(key, "full_state") == 0);
    fl_result r = FL_DUPLICATE;
    if (id != NULL && logged) {
        rt_buf *bytes = event_bytes(ev);
        if (bytes == NULL) {
            json_decref(j);
            return finish(F, -1, "out of memory");
        }
        if (F->o.use_index)
            r = fl_live(F->copy, (uint64_t)json_integer_value(index), id, bytes);
        else if (!fl_has(F->copy, id))
            F->doorbell = true; /* not placeable: fetched from the last event held */
        rt_buf_unref(bytes);
    }
    json_decref(j);
    if (r == FL_NOMEM)
        return finish(F, -1, "out of memory");
    if (r == FL_DIVERGED)
        return finish(F, -1, "a frame disagrees with the copy (diverged)");
    emit(F);
    rest_next(F); /* a hole to repair, or, with until_done, a count */
    return F->finished ? RT_DONE : 0;
}

static int ws_gone(follower *F, rt_msg *m)
{
    char why[300];
    buf_text(m, why, sizeof(why));
    F->ws_st = WS_WAITING;
    if (m->arg == 4001)
        return finish(F, -1, "the server refused the API key (4001)");
    if (m->arg == 4004)
        return finish(F, -1, "no conversation %s on the server (4004)", F->cid);
    if (m->arg == 1008 && F->o.use_index)
        return finish(F, -1, "the server does not know the copy's last event (1008): diverged");
    rt_log(RT_LOG_INFO, "follower", "WebSocket closed (%d): %s; again in a moment", (int)m->arg,
           why);
    F->st.ws_lost++;
    F->count_due = true; /* a last frame may have been lost with it */
    retry_later(F, &F->backoff_ms, 1);
    rest_next(F);
    return F->finished ? RT_DONE : 0;
}

static void tick(follower *F)
{
    if (F->ws_st != WS_OPEN)
        return;
    if (!F->o.use_index || F->frames_since_tick == 0)
        F->count_due = true;
    F->frames_since_tick = 0;
    uint64_t idle = net_client_ws_idle_ms(F->ws), interval = F->o.check_interval_ms;
    uint64_t quiet = interval > 20000 ? interval : 20000;
    if (idle > 3 * quiet)
        net_client_reset(F->ws, "the WebSocket went quiet");
    else if (idle > quiet)
        net_client_ws_ping(F->ws);
    rest_next(F);
}

/* ---- the actor ------------------------------------------------------------------ */

static int fw_init(rt_actor *self, void *arg, void **state)
{
    follower *F = arg;
    F->self = self;
    F->seed = (unsigned)rt_actor_id(self) ^ (unsigned)uv_hrtime();
    *state = F;
    uv_loop_t *loop = rt_runtime_uv(rt_actor_runtime(self), rt_actor_loop(self));
    net_client_opts ro = {.url = &F->o.url,
                          .tls = F->o.tls,
                          .api_key = F->key,
                          .timeout_ms = F->o.timeout_ms,
                          .cb = {.response = rest_answer},
                          .ud = F};
    net_client_opts wo = ro;
    wo.api_key = NULL; /* the first frame carries it */
    wo.cb = (net_client_cb){.response = ws_answer, .message = ws_message, .ws_closed = ws_closed};
    F->rest = net_client_new(loop, &ro);
    F->ws = F->o.follow ? net_client_new(loop, &wo) : NULL;
    if (F->rest == NULL || (F->o.follow && F->ws == NULL)) {
        finish(F, -1, "out of memory");
        rt_actor_stop(self); /* the handler ends it: init has no way to and keep stop's duty */
        return 0;
    }
    fl_probe(F->copy); /* what came since the copy's last event */
    if (F->o.start_last > 0 && F->o.start_last <= FL_PAGE && fl_count(F->copy) == 0)
        F->tail = T_COUNT1;
    if (F->o.follow)
        rt_timer_start(self, F->o.check_interval_ms, F->o.check_interval_ms, FW_TICK, 0);
    rest_next(F);
    return 0;
}

static int fw_handle(rt_actor *self, void *state, rt_msg *m)
{
    (void)self;
    follower *F = state;
    if (F->finished)
        return RT_DONE;
    switch (m->kind) {
    case FW_REST:
        return rest_done(F, m);
    case FW_WS_OPEN:
        ws_opened(F, m);
        break;
    case FW_FRAME:
        if (F->ws_st == WS_OPEN && m->buf != NULL)
            return frame(F, m->buf);
        break;
    case FW_WS_CLOSED:
        return ws_gone(F, m);
    case FW_TICK:
        tick(F);
        break;
    case FW_RETRY:
        if (m->arg == 0 && F->rs == R_WAITING) {
            F->rs = R_IDLE;
            rest_next(F);
        } else if (m->arg == 1 && F->ws_st == WS_WAITING) {
            F->st.reconnects++;
            ws_connect(F);
        }
        break;
    case FOLLOWER_STOP:
        return finish(F, 0, NULL);
    default:
        break;
    }
    return F->finished ? RT_DONE : 0;
}

static void fw_stop(rt_actor *self, void *state)
{
    (void)self;
    follower *F = state;
    if (!F->finished) /* failed or stopped from outside */
        finish(F, -1, "the follower stopped");
    json_decref(F->tail_items);
    fl_free(F->copy);
    free(F->cid);
    free(F->key);
    free(F);
}

static const rt_behaviour fw_behaviour = {
    .name = "follower",
    .init = fw_init,
    .handle = fw_handle,
    .stop = fw_stop,
};

int follower_start(rt_runtime *rt, const follower_opts *o, rt_actor **out)
{
    if (o == NULL || o->conversation_id == NULL)
        return RT_EINVAL;
    follower *F = calloc(1, sizeof(*F));
    if (F == NULL)
        return RT_ENOMEM;
    F->o = *o;
    F->cid = strdup(o->conversation_id);
    F->key = o->api_key != NULL ? strdup(o->api_key) : NULL;
    F->copy = o->copy != NULL ? o->copy : fl_new();
    if (F->o.check_interval_ms == 0)
        F->o.check_interval_ms = CHECK_DEFAULT_MS;
    if (F->cid == NULL || (o->api_key != NULL && F->key == NULL) || F->copy == NULL) {
        if (F->copy != o->copy)
            fl_free(F->copy);
        free(F->cid);
        free(F->key);
        free(F);
        return RT_ENOMEM;
    }
    F->emitted = fl_count(F->copy); /* the cache's events are not new */
    rt_spawn_opts so = {.beh = &fw_behaviour, .arg = F, .loop = RT_LOOP_ANY};
    int e = rt_spawn(rt, &so, out);
    if (e < 0) {
        fl_free(F->copy);
        free(F->cid);
        free(F->key);
        free(F);
    }
    return e;
}
