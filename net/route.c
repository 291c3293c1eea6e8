/*
 * route.c - the API's path table and its matcher.
 */
#include "route.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

enum { SEG_MAX = 8 };

typedef net_route_spec pattern;

#define CONV_QUERY "include_skills"
#define EV_FILTERS "kind,source,body,timestamp__gte,timestamp__lt"

/* Literal patterns come before the parameter patterns they overlap. The
 * router and /openapi.json both read this table: what is described is
 * what is routed. */
static const pattern table[] = {
    {NET_R_ALIVE, "GET", "/alive", true, "liveness: {\"status\": \"ok\"}", NULL},
    {NET_R_HEALTH, "GET", "/health", true, "health: {\"status\": \"ok\"}", NULL},
    {NET_R_READY, "GET", "/ready", true, "readiness: {\"status\": \"ready\"}", NULL},
    {NET_R_SERVER_INFO, "GET", "/server_info", true, "what the server is", NULL},
    {NET_R_METRICS, "GET", "/metrics", true, "figures, as Prometheus text", NULL},
    {NET_R_OPENAPI, "GET", "/openapi.json", true, "this description of the API", NULL},
    /* the web pages hold no data (their scripts ask the API, with the key) */
    {NET_R_WEB_LIST, "GET", "/", true, "the web page of conversations (HTML)", NULL},
    {NET_R_WEB_CONV, "GET", "/conversations/{c}", true, "a conversation's live web page (HTML)",
     NULL},
    {NET_R_WEB_ASSET, "GET", "/assets/{e}", true, "a script or style sheet of the web pages", NULL},
    {NET_R_CONV_CREATE, "POST", "/api/conversations", false,
     "start a conversation (a StartConversationRequest): its ConversationInfo, 201 (200 if it "
     "existed)",
     CONV_QUERY},
    {NET_R_CONV_BATCH, "GET", "/api/conversations", false,
     "ConversationInfo of each id (null for an unknown one)", "ids," CONV_QUERY},
    {NET_R_CONV_SEARCH, "GET", "/api/conversations/search", false,
     "a page of ConversationInfo: {items, next_page_id}",
     "page_id,limit,status,sort_order," CONV_QUERY},
    {NET_R_CONV_COUNT, "GET", "/api/conversations/count", false, "how many conversations",
     "status"},
    {NET_R_CONV_GET, "GET", "/api/conversations/{c}", false,
     "a conversation's ConversationInfo (with parley's event_count, violations, stuck_findings)",
     CONV_QUERY},
    {NET_R_CONV_DELETE, "DELETE", "/api/conversations/{c}", false,
     "delete a conversation and its log", NULL},
    {NET_R_CONV_PATCH, "PATCH", "/api/conversations/{c}", false,
     "change a conversation's title or tags", NULL},
    {NET_R_CONV_RUN, "POST", "/api/conversations/{c}/run", false, "run: status running", NULL},
    {NET_R_CONV_PAUSE, "POST", "/api/conversations/{c}/pause", false,
     "pause: a PauseEvent, status paused", NULL},
    {NET_R_CONV_INTERRUPT, "POST", "/api/conversations/{c}/interrupt", false,
     "interrupt: an InterruptEvent, status paused", NULL},
    {NET_R_CONV_SECRETS, "POST", "/api/conversations/{c}/secrets", false,
     "add secrets {\"secrets\": {NAME: value}}: the hosted agent's environment, masked in what "
     "it says; in memory only",
     NULL},
    {NET_R_CONV_CONFIRM_POLICY, "POST", "/api/conversations/{c}/confirmation_policy", false,
     "set the confirmation policy {\"policy\": {\"kind\"}}", NULL},
    {NET_R_CONV_SECURITY, "POST", "/api/conversations/{c}/security_analyzer", false,
     "record a security analyzer (parley rates no risk: calls are of unknown risk)", NULL},
    {NET_R_CONV_FINAL, "GET", "/api/conversations/{c}/agent_final_response", false,
     "the agent's last word: {\"response\"}", NULL},
    {NET_R_CONV_STATE, "GET", "/api/conversations/{c}/state", false,
     "the conversation as blocks (user and agent messages, tool calls with their results, "
     "subagents): {index, blocks, subagents, removed}; after_index=N: only what changed after "
     "event N; from=K&limit=N(&conversation=C): a page of blocks {index, conversation, total, "
     "from, blocks}",
     "after_index,from,limit,conversation"},
    {NET_R_CONV_TITLE, "POST", "/api/conversations/{c}/generate_title", false,
     "a title from the first user message: {\"title\"}", NULL},
    {NET_R_CONV_FORK, "POST", "/api/conversations/{c}/fork", false,
     "a new conversation from the log (up to from_event_id): its ConversationInfo, 201", NULL},
    {NET_R_CONV_NAVIGATE, "POST", "/api/conversations/{c}/navigate", false,
     "move the head: only to where it is (logs are linear; fork to branch)", NULL},
    {NET_R_CONV_ASK, "POST", "/api/conversations/{c}/ask_agent", false,
     "not for ACP agents: 422 saying why", NULL},
    {NET_R_CONV_CONDENSE, "POST", "/api/conversations/{c}/condense", false,
     "not for ACP agents: 422 saying why", NULL},
    {NET_R_CONV_GOAL_STOP, "POST", "/api/conversations/{c}/goal/stop", false,
     "no goal loops: 422 saying why", NULL},
    {NET_R_CONV_GOAL_RESUME, "POST", "/api/conversations/{c}/goal/resume", false,
     "no goal loops: 422 saying why", NULL},
    {NET_R_CONV_GOAL, "POST", "/api/conversations/{c}/goal", false, "no goal loops: 422 saying why",
     NULL},
    {NET_R_CONV_SWITCH_LLM, "POST", "/api/conversations/{c}/switch_llm", false,
     "parley runs no LLM: 422 saying why", NULL},
    {NET_R_CONV_SWITCH_PROFILE, "POST", "/api/conversations/{c}/switch_profile", false,
     "parley runs no LLM: 422 saying why", NULL},
    {NET_R_CONV_LOAD_PLUGIN, "POST", "/api/conversations/{c}/load_plugin", false,
     "parley loads no plugins: 422 saying why", NULL},
    {NET_R_CONV_SWITCH_ACP, "POST", "/api/conversations/{c}/switch_acp_model", false,
     "the agent chooses its model: 422 saying why", NULL},
    {NET_R_EV_SEARCH, "GET", "/api/conversations/{c}/events/search", false,
     "a page of events: {items, next_page_id}", "page_id,limit,sort_order," EV_FILTERS},
    {NET_R_EV_COUNT, "GET", "/api/conversations/{c}/events/count", false, "how many events",
     EV_FILTERS},
    {NET_R_EV_APPEND, "POST", "/api/conversations/{c}/events/append", false,
     "append an event or an all-or-nothing array (the producer route; the compliance gate "
     "decides)",
     NULL},
    {NET_R_EV_CONFIRM, "POST", "/api/conversations/{c}/events/respond_to_confirmation", false,
     "answer what waits for confirmation: {accept, reason}; accept runs on, a rejection answers "
     "each pending call with a UserRejectObservation",
     NULL},
    {NET_R_EV_GET, "GET", "/api/conversations/{c}/events/{e}", false, "an event", NULL},
    {NET_R_EV_BATCH, "GET", "/api/conversations/{c}/events", false,
     "events by id (null for an unknown one)", "event_ids"},
    {NET_R_EV_POST, "POST", "/api/conversations/{c}/events", false,
     "post a user message (a SendMessageRequest)", NULL},
    /* open: the stream authenticates itself (first-frame auth) */
    {NET_R_WS_EVENTS, "GET", "/sockets/events/{c}", true,
     "upgrade to a WebSocket stream of the conversation's events",
     "resend_mode,after_timestamp,resend_all,after_id,envelope,session_api_key"},
};

size_t net_route_count(void)
{
    return sizeof(table) / sizeof(table[0]);
}

const net_route_spec *net_route_at(size_t i)
{
    return i < net_route_count() ? &table[i] : NULL;
}

typedef struct seg {
    const char *p;
    size_t len;
} seg;

long net_pct_decode(const char *src, size_t len, char *dst, bool plus)
{
    if (!plus && memchr(src, '%', len) == NULL && memchr(src, '\0', len) == NULL) {
        memcpy(dst, src, len); /* nothing to decode: every id in a path */
        dst[len] = '\0';
        return (long)len;
    }
    size_t o = 0;
    for (size_t i = 0; i < len; i++) {
        char c = src[i];
        if (c == '%') {
            int h, l;
            if (i + 2 >= len || (h = rt_hex_digit(src[i + 1])) < 0 ||
                (l = rt_hex_digit(src[i + 2])) < 0)
                return -1;
            c = (char)(h * 16 + l);
            i += 2;
        } else if (c == '+' && plus) {
            c = ' ';
        }
        if (c == '\0')
            return -1;
        dst[o++] = c;
    }
    dst[o] = '\0';
    return (long)o;
}

/* Split a path into segments; -1 if there are too many. */
static int split(const char *path, size_t len, seg *s)
{
    int n = 0;
    size_t i = 0;
    if (len > 1 && path[len - 1] == '/')
        len--;
    while (i < len) {
        if (path[i] != '/')
            return -1;
        const char *slash = memchr(path + i + 1, '/', len - i - 1);
        size_t j = slash != NULL ? (size_t)(slash - path) : len;
        if (n == SEG_MAX)
            return -1;
        s[n++] = (seg){path + i + 1, j - i - 1};
        i = j;
    }
    return n;
}

enum { NPAT = sizeof(table) / sizeof(table[0]) };

/* The table's patterns split once: segments, parameters, and for each
 * the patterns that may shadow it (below). */
static seg pat_seg[NPAT][SEG_MAX];
static int pat_n[NPAT], pat_params[NPAT];
_Static_assert(NPAT <= 256, "pat_over holds table indexes in a byte");
static unsigned char pat_over[NPAT][NPAT]; /* indexes into table */
static int pat_nover[NPAT];
/* the patterns of n segments, in the table's order: a path is compared
 * with those alone */
static unsigned char pat_of_n[SEG_MAX + 1][NPAT];
static int pat_nof_n[SEG_MAX + 1];
static pthread_once_t pat_once = PTHREAD_ONCE_INIT;

static bool same_seg(const seg *a, const seg *b)
{
    return a->len == b->len && memcmp(a->p, b->p, a->len) == 0;
}

/* Can one path fit both i and k, k with fewer parameters? Same length,
 * and no segment where both are literals that differ. */
static bool overlaps(int i, int k)
{
    if (pat_n[k] != pat_n[i] || pat_params[k] >= pat_params[i])
        return false;
    for (int j = 0; j < pat_n[i]; j++) {
        const seg *a = &pat_seg[i][j], *b = &pat_seg[k][j];
        if (a->p[0] != '{' && b->p[0] != '{' && !same_seg(a, b))
            return false;
    }
    return true;
}

static void split_patterns(void)
{
    for (int i = 0; i < NPAT; i++) {
        pat_n[i] = split(table[i].path, strlen(table[i].path), pat_seg[i]);
        for (int k = 0; k < pat_n[i]; k++)
            pat_params[i] += pat_seg[i][k].p[0] == '{';
    }
    for (int i = 0; i < NPAT; i++) {
        for (int k = 0; k < NPAT; k++)
            if (overlaps(i, k))
                pat_over[i][pat_nover[i]++] = (unsigned char)k;
        if (pat_n[i] >= 0)
            pat_of_n[pat_n[i]][pat_nof_n[pat_n[i]]++] = (unsigned char)i;
    }
}

/* Does the path fit pattern i's shape (its literals)? From the last
 * segment back: most patterns share their first ones (/api/conversations/
 * {c}/...) and differ in the last. */
static bool fits(int i, const seg *s, int n)
{
    if (pat_n[i] != n)
        return false;
    for (int k = n - 1; k >= 0; k--) {
        const seg *p = &pat_seg[i][k];
        if (p->p[0] != '{' && !same_seg(p, &s[k]))
            return false;
    }
    return true;
}

/* Does a pattern with more literals fit this path too? Then this one must
 * not claim it: "/api/conversations/search" is not a conversation id. */
static bool shadowed(int i, const seg *s, int n)
{
    for (int k = 0; k < pat_nover[i]; k++)
        if (fits(pat_over[i][k], s, n))
            return true;
    return false;
}

static int fail(net_route *r, int status, const char *fmt, const char *arg, int arglen)
{
    r->status = status;
    snprintf(r->detail, sizeof(r->detail), fmt, arglen, arg);
    return status;
}

int net_route_match(const char *method, const char *target, net_route *r)
{
    memset(r, 0, sizeof(*r));
    r->name = "";
    const char *q = strchr(target, '?');
    size_t plen = q != NULL ? (size_t)(q - target) : strlen(target);
    if (q != NULL) {
        r->query = q + 1;
        r->query_len = strlen(q + 1);
    }
    /* the absolute form (RFC 9112 3.2.2): the path is after the authority */
    if (target[0] != '/' &&
        (strncasecmp(target, "http://", 7) == 0 || strncasecmp(target, "https://", 8) == 0)) {
        const char *auth = strstr(target, "//") + 2;
        const char *slash = memchr(auth, '/', (size_t)(target + plen - auth));
        plen = slash != NULL ? (size_t)(target + plen - slash) : 1;
        target = slash != NULL ? slash : "/";
    }
    seg s[SEG_MAX];
    int n = plen > 0 && target[0] == '/' ? split(target, plen, s) : -1;
    if (n < 0)
        return fail(r, 404, "no such route: %.*s", target, (int)(plen > 120 ? 120 : plen));
    pthread_once(&pat_once, split_patterns);
    const pattern *hit = NULL;
    char allow[64] = "";
    for (int j = 0; j < pat_nof_n[n]; j++) {
        int i = pat_of_n[n][j];
        const pattern *t = &table[i];
        if (!fits(i, s, n) || shadowed(i, s, n))
            continue;
        if (strcmp(t->method, method) == 0) {
            hit = t;
            break;
        }
        if (strstr(allow, t->method) == NULL &&
            strlen(allow) + strlen(t->method) + 3 < sizeof(allow)) {
            if (allow[0] != '\0')
                strcat(allow, ", ");
            strcat(allow, t->method);
        }
    }
    if (hit == NULL && allow[0] != '\0') {
        static __thread char allowed[64];
        memcpy(allowed, allow, sizeof(allowed));
        r->allow = allowed;
        return fail(r, 405, "method not allowed here; use %.*s", allow, (int)strlen(allow));
    }
    if (hit == NULL)
        return fail(r, 404, "no such route: %.*s", target, (int)(plen > 120 ? 120 : plen));
    r->id = hit->id;
    r->name = hit->path;
    r->open = hit->open;
    const seg *ps = pat_seg[hit - table];
    for (int i = 0; i < n; i++) {
        if (ps[i].p[0] != '{')
            continue;
        char buf[NET_EVENT_ID_MAX + 1];
        long len = s[i].len <= NET_EVENT_ID_MAX ? net_pct_decode(s[i].p, s[i].len, buf, false) : -2;
        if (ps[i].p[1] == 'c') {
            if (len < 0 || !rt_uuid_parse(buf, (size_t)len, &r->conv))
                return fail(r, 422,
                            "conversation id must be a UUID (dashed or 32 hex digits), not '%.*s'",
                            s[i].p, (int)(s[i].len > 80 ? 80 : s[i].len));
            r->has_conv = true;
        } else {
            if (len == -2)
                return fail(r, 404, "event id longer than 255 bytes: '%.*s...'", s[i].p, 40);
            if (len <= 0)
                return fail(r, 400, "bad percent-encoding in event id '%.*s'", s[i].p,
                            (int)(s[i].len > 80 ? 80 : s[i].len));
            memcpy(r->event_id, buf, (size_t)len + 1);
        }
    }
    return 0;
}

const char *net_route_name(net_route_id id)
{
    for (const pattern *t = table; t < table + sizeof(table) / sizeof(table[0]); t++)
        if (t->id == id)
            return t->path;
    return "";
}
