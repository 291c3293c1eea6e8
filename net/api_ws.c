/*
 * api_ws.c - GET /sockets/events/{id}: the upgrade to a WebSocket stream
 * of the conversation's events (spec §3, and the parley extensions).
 *
 * What can be checked before the upgrade is, and answered in HTTP: the
 * handshake (400, 426) and the query (422). What needs the key or the
 * conversation is the stream's to say after the upgrade, with a close
 * code (4001, 4004, 1013), as upstream: a peer learns nothing about a
 * conversation before it has authenticated.
 *
 * Query: resend_mode=all|since, after_timestamp (with since), the
 * deprecated resend_all=true and session_api_key; parley's after_id (resume
 * strictly after that event) and envelope=index. view=blocks streams the
 * conversation as blocks instead (actors/view.h: a state frame, then the
 * changes), resumed with after_id or after_index.
 */
#include "api.h"

#include "event_filter.h"
#include "net/ws.h"
#include "runtime/json.h"
#include "runtime/text.h"
#include "server.h"

#include <stdio.h>
#include <string.h>

/* The replay asked for; -1 with the reason in err. */
static int parse_replay(const net_query *q, ws_stream_opts *o, char *err, size_t errlen)
{
    const char *mode = net_query_get(q, "resend_mode");
    const char *all = net_query_get(q, "resend_all");
    const char *ts = net_query_get(q, "after_timestamp");
    const char *after = net_query_get(q, "after_id");
    const char *env = net_query_get(q, "envelope");
    bool resend_all = false;
    if (all != NULL) {
        if (strcmp(all, "true") == 0 || strcmp(all, "1") == 0)
            resend_all = true;
        else if (strcmp(all, "false") != 0 && strcmp(all, "0") != 0)
            return snprintf(err, errlen, "resend_all must be true or false"), -1;
    }
    if (mode != NULL && strcmp(mode, "all") != 0 && strcmp(mode, "since") != 0)
        return snprintf(err, errlen, "resend_mode must be all or since"), -1;
    if (env != NULL && strcmp(env, "index") != 0)
        return snprintf(err, errlen, "envelope must be index"), -1;
    o->envelope = env != NULL;
    if (ts != NULL && net_local_timestamp(ts, o->after_ts) != 0)
        return snprintf(err, errlen, "after_timestamp must be an ISO 8601 datetime"), -1;
    if (after != NULL) {
        if (mode != NULL || resend_all)
            return snprintf(err, errlen, "after_id resumes a stream: no resend_mode with it"), -1;
        if (after[0] == '\0' || strlen(after) > NET_EVENT_ID_MAX)
            return snprintf(err, errlen, "after_id must be an event id (1 to 255 bytes)"), -1;
        o->after_id = after;
        o->replay = WS_REPLAY_AFTER_ID;
    } else if (mode != NULL) {
        o->replay = strcmp(mode, "all") == 0 ? WS_REPLAY_ALL : WS_REPLAY_SINCE;
    } else if (resend_all) {
        o->replay = WS_REPLAY_ALL;
    }
    if (o->replay != WS_REPLAY_SINCE)
        o->after_ts[0] = '\0';
    return 0;
}

/* view=blocks and its resume point; -1 with the reason in err. */
static int parse_view(const net_query *q, ws_stream_opts *o, char *err, size_t errlen)
{
    const char *view = net_query_get(q, "view");
    const char *after = net_query_get(q, "after_index");
    if (view != NULL && strcmp(view, "blocks") != 0 && strcmp(view, "events") != 0)
        return snprintf(err, errlen, "view must be events or blocks"), -1;
    o->blocks = view != NULL && strcmp(view, "blocks") == 0;
    if (!o->blocks) {
        if (after != NULL)
            return snprintf(err, errlen,
                            "after_index is for view=blocks; events resume with "
                            "after_id"),
                   -1;
        return 0;
    }
    if (net_query_get(q, "resend_mode") != NULL || net_query_get(q, "resend_all") != NULL ||
        net_query_get(q, "after_timestamp") != NULL || net_query_get(q, "envelope") != NULL)
        return snprintf(err, errlen,
                        "view=blocks starts from the whole state and resumes with "
                        "after_id or after_index: no resend_mode, after_timestamp "
                        "or envelope"),
               -1;
    uint64_t n;
    if (after != NULL) {
        if (net_query_uint(q, "after_index", (1ull << 53) - 1, &n) != 1)
            return snprintf(err, errlen,
                            "after_index must be an event index (a whole number "
                            ">= 0)"),
                   -1;
        if (o->after_id != NULL)
            return snprintf(err, errlen, "after_id or after_index, not both"), -1;
        o->blocks_from = n + 1;
    }
    return 0;
}

void net_api_ws(net_req *r)
{
    char err[200], answer[NET_WS_HANDSHAKE_MAX];
    size_t alen;
    int st = net_ws_handshake(r->http, answer, sizeof(answer), &alen, err, sizeof(err));
    if (st != 101) {
        json_t *d = json_pack("{s:s}", "detail", err);
        rt_buf *b = st > 0 ? rt_json_buf(d) : (json_decref(d), NULL);
        if (b == NULL) {
            net_reply_error(r, 500, "cannot answer the upgrade");
            return;
        }
        net_reply(r, st, b, NULL, alen > 0 ? answer : NULL);
        return;
    }
    const net_server_opts *so = r->api->opts;
    ws_stream_opts o = {.convs = r->api->convs,
                        .store = r->api->store,
                        .conv = r->route.conv,
                        .api_keys = r->api->api_keys,
                        .napi_keys = r->api->napi_keys,
                        .auth_timeout_ms = so->ws_auth_timeout_ms,
                        .stall_timeout_ms = so->ws_stall_ms,
                        .queue_bytes = so->ws_queue_bytes,
                        .call_timeout_ms = r->api->call_timeout_ms};
    if (parse_replay(&r->query, &o, err, sizeof(err)) != 0 ||
        parse_view(&r->query, &o, err, sizeof(err)) != 0) {
        net_reply_error(r, 422, "%s", err);
        return;
    }
    /* the deprecated forms: a key in the URL or in the header */
    const char *key = net_query_get(&r->query, "session_api_key");
    if (key == NULL)
        key = hp_header_get(r->http, "x-session-api-key");
    if (o.napi_keys > 0 && key != NULL) {
        o.authed = rt_keys_match(o.api_keys, o.napi_keys, key);
        if (!o.authed) { /* as upstream: refused before the upgrade */
            net_reply_error(r, 403, "Authentication failed");
            return;
        }
    }
    net_ws_upgrade(r, answer, alen, &o);
}
