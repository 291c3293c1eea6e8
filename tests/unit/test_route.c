/*
 * test_route.c - the pure pieces of the REST layer: routing (literals over
 * parameters, 404/405/422), query strings, and the event search filters.
 */
#include "net/event_filter.h"
#include "net/query.h"
#include "net/route.h"
#include "net/web.h"

#include "support_sync.h"

#include <check.h>
#include <stdlib.h>
#include <string.h>

static const char cid[] = "0d7f3b2e-9c11-4c53-9a51-0d7f3b2e9c11";

/* The route id, or minus the status answered instead. */
static int route(const char *method, const char *target)
{
    net_route r;
    return net_route_match(method, target, &r) == 0 ? (int)r.id : -r.status;
}

START_TEST(test_routes)
{
    char t[256];
    ck_assert_int_eq(route("GET", "/alive"), NET_R_ALIVE);
    ck_assert_int_eq(route("GET", "/api/conversations/search?limit=5"), NET_R_CONV_SEARCH);
    ck_assert_int_eq(route("GET", "/api/conversations/count"), NET_R_CONV_COUNT);
    ck_assert_int_eq(route("GET", "/api/conversations"), NET_R_CONV_BATCH);
    ck_assert_int_eq(route("POST", "/api/conversations/"), NET_R_CONV_CREATE);
    snprintf(t, sizeof(t), "/api/conversations/%s", cid);
    ck_assert_int_eq(route("GET", t), NET_R_CONV_GET);
    ck_assert_int_eq(route("DELETE", t), NET_R_CONV_DELETE);
    ck_assert_int_eq(route("PATCH", t), NET_R_CONV_PATCH);
    ck_assert_int_eq(route("PUT", t), -405);
    snprintf(t, sizeof(t), "/api/conversations/%s/events/search", cid);
    ck_assert_int_eq(route("GET", t), NET_R_EV_SEARCH);
    ck_assert_int_eq(route("POST", t), -405); /* not an event id */
    snprintf(t, sizeof(t), "/api/conversations/%s/events/append", cid);
    ck_assert_int_eq(route("POST", t), NET_R_EV_APPEND);
    snprintf(t, sizeof(t), "/api/conversations/%s/events/some%%20id", cid);
    net_route r;
    ck_assert_int_eq(net_route_match("GET", t, &r), 0);
    ck_assert_int_eq(r.id, NET_R_EV_GET);
    ck_assert_str_eq(r.event_id, "some id");
    /* 32 hex digits are the same conversation */
    ck_assert_int_eq(
        net_route_match("GET", "/api/conversations/0d7f3b2e9c114c539a510d7f3b2e9c11", &r), 0);
    char back[37];
    rt_uuid_dashed(&r.conv, back);
    ck_assert_str_eq(back, cid);
    ck_assert_int_eq(route("GET", "/api/conversations/not-a-uuid"), -422);
    ck_assert_int_eq(route("GET", "/api/conversations/..%2F..%2Fetc"), -422);
    ck_assert_int_eq(route("GET", "/nope"), -404);
    ck_assert_int_eq(route("GET", "nope"), -404);
    ck_assert_int_eq(route("GET", "/a/b/c/d/e/f/g/h/i/j"), -404);
    snprintf(t, sizeof(t), "/api/conversations/%s/events/%%00", cid);
    ck_assert_int_eq(route("GET", t), -400);
    ck_assert_int_eq(route("GET", "http://h/alive"), NET_R_ALIVE);
    ck_assert_int_eq(route("GET", "HTTPS://h:8000/api/conversations/count?status=idle"),
                     NET_R_CONV_COUNT);
    ck_assert_int_eq(net_route_match("GET", "http://h?ids=x", &r), 0); /* the path is "/" */
    ck_assert_int_eq(r.id, NET_R_WEB_LIST);
    ck_assert_str_eq(r.query, "ids=x");
    ck_assert_int_eq(net_route_match("POST", "/alive", &r), 405);
    ck_assert_str_eq(r.allow, "GET");
    ck_assert(strchr(r.detail, '\n') == NULL);
}
END_TEST

/* The web pages: open routes, literal before parameter, files compiled in. */
START_TEST(test_web_routes)
{
    char t[256];
    net_route r;
    ck_assert_int_eq(net_route_match("GET", "/", &r), 0);
    ck_assert_int_eq(r.id, NET_R_WEB_LIST);
    ck_assert(r.open);
    snprintf(t, sizeof(t), "/conversations/%s", cid);
    ck_assert_int_eq(net_route_match("GET", t, &r), 0);
    ck_assert_int_eq(r.id, NET_R_WEB_CONV);
    ck_assert(r.open && r.has_conv);
    ck_assert_int_eq(route("GET", "/conversations/nope"), -422); /* api.c answers 404 */
    ck_assert_int_eq(net_route_match("GET", "/assets/app.css", &r), 0);
    ck_assert_int_eq(r.id, NET_R_WEB_ASSET);
    ck_assert_str_eq(r.event_id, "app.css");
    ck_assert_int_eq(route("POST", "/"), -405);
    ck_assert_int_eq(route("GET", "/assets"), -404);
    const char *want[] = {"index.html", "conversation.html", "app.css",
                          "api.js",     "list.js",           "conversation.js"};
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        const net_web_asset *a = net_web_asset_find(want[i]);
        ck_assert_msg(a != NULL && a->len > 0, "%s is compiled in", want[i]);
        ck_assert_int_eq(a->data[a->len], 0);
        ck_assert_int_eq(strlen(a->etag), 18);
    }
    ck_assert_str_eq(net_web_asset_find("app.css")->ctype, "text/css; charset=utf-8");
    ck_assert_str_eq(net_web_asset_find("list.js")->ctype, "text/javascript; charset=utf-8");
    ck_assert_ptr_null(net_web_asset_find("embed.cmake"));
    ck_assert_ptr_null(net_web_asset_find("../route.c"));
}
END_TEST

START_TEST(test_query)
{
    net_query q;
    char err[128];
    const char *s = "ids=a&ids=b%20c&x=1+2&flag&=v&ids=";
    ck_assert_int_eq(net_query_parse(s, strlen(s), &q, err, sizeof(err)), 0);
    ck_assert_str_eq(net_query_nth(&q, "ids", 0), "a");
    ck_assert_str_eq(net_query_nth(&q, "ids", 1), "b c");
    ck_assert_str_eq(net_query_nth(&q, "ids", 2), "");
    ck_assert_ptr_null(net_query_nth(&q, "ids", 3));
    ck_assert_str_eq(net_query_get(&q, "x"), "1 2");
    ck_assert_str_eq(net_query_get(&q, "flag"), "");
    ck_assert_ptr_null(net_query_get(&q, "none"));
    net_query_free(&q);
    ck_assert_int_eq(net_query_parse("a=%zz", 5, &q, err, sizeof(err)), -1);
    net_query_free(&q);
    ck_assert_int_eq(net_query_parse("a=%0", 4, &q, err, sizeof(err)), -1);
    net_query_free(&q);
    char many[NET_QUERY_MAX * 4 + 8] = "";
    for (int i = 0; i <= NET_QUERY_MAX; i++)
        strcat(many, "a&");
    ck_assert_int_eq(net_query_parse(many, strlen(many), &q, err, sizeof(err)), -1);
    ck_assert(strstr(err, "query parameters") != NULL);
    net_query_free(&q);
    /* a page's limit */
    long limit;
    const char *lims[] = {"", "limit=1", "limit=100", "limit=0", "limit=101", "limit=5x", "limit="};
    const long want[] = {100, 1, 100, -1, -1, -1, -1};
    for (size_t i = 0; i < sizeof(lims) / sizeof(lims[0]); i++) {
        ck_assert_int_eq(net_query_parse(lims[i], strlen(lims[i]), &q, err, sizeof(err)), 0);
        int rc = net_query_limit(&q, &limit, err, sizeof(err));
        ck_assert_int_eq(rc, want[i] < 0 ? -1 : 0);
        if (rc == 0)
            ck_assert_int_eq(limit, want[i]);
        else
            ck_assert(strstr(err, "limit must be an integer from 1 to 100") != NULL);
        net_query_free(&q);
    }
    /* the worst case of the arena: one-byte pairs */
    char tight[NET_QUERY_MAX * 2] = "";
    for (int i = 0; i < NET_QUERY_MAX; i++)
        strcat(tight, i ? "&a" : "a");
    ck_assert_int_eq(net_query_parse(tight, strlen(tight), &q, err, sizeof(err)), 0);
    ck_assert_uint_eq(q.n, NET_QUERY_MAX);
    net_query_free(&q);
}
END_TEST

static bool match(const char *query, const char *event)
{
    net_query q;
    net_event_filter f;
    char err[160];
    ck_assert_int_eq(net_query_parse(query, strlen(query), &q, err, sizeof(err)), 0);
    ck_assert_int_eq(net_event_filter_parse(&q, &f, err, sizeof(err)), 0);
    net_query_free(&q);
    return net_event_filter_match(&f, event, strlen(event));
}

START_TEST(test_filters)
{
    setenv("TZ", "UTC", 1);
    tzset();
    const char *msg =
        "{\"id\":\"e1\",\"timestamp\":\"2026-08-22T10:15:02.118734\",\"source\":\"user\","
        "\"llm_message\":{\"role\":\"user\",\"content\":[{\"type\":\"text\","
        "\"text\":\"Add a Unit test\"}],\"reasoning_content\":\"why not\"},"
        "\"kind\":\"MessageEvent\"}";
    const char *pause = "{\"id\":\"e2\",\"timestamp\":\"2026-08-22T10:15:03.000000\","
                        "\"source\":\"user\",\"kind\":\"PauseEvent\"}";
    ck_assert(match("", pause));
    ck_assert(match("kind=MessageEvent", msg));
    ck_assert(match("kind=openhands.sdk.event.llm_convertible.message.MessageEvent", msg));
    ck_assert(!match("kind=MessageEvent", pause));
    ck_assert(match("source=user", msg));
    ck_assert(!match("source=agent", msg));
    ck_assert(match("body=unit%20TEST", msg));
    ck_assert(match("body=WHY", msg));
    ck_assert(!match("body=user", pause)); /* only messages have a body */
    ck_assert(match("timestamp__gte=2026-08-22T10:15:02.118734", msg));
    ck_assert(!match("timestamp__lt=2026-08-22T10:15:02.118734", msg));
    ck_assert(match("timestamp__lt=2026-08-22T10:15:03", msg));
    ck_assert(match("timestamp__gte=2026-08-22T10:15:02Z", msg));
    ck_assert(!match("timestamp__gte=2026-08-22T12:15:03%2B02:00", msg)); /* = 10:15:03 */
    ck_assert(match("timestamp__lt=2026-08-22T12:15:03%2B02:00", msg));
    net_query q;
    net_event_filter f;
    char err[160];
    const char *bad = "timestamp__gte=yesterday";
    ck_assert_int_eq(net_query_parse(bad, strlen(bad), &q, err, sizeof(err)), 0);
    ck_assert_int_eq(net_event_filter_parse(&q, &f, err, sizeof(err)), -1);
    ck_assert(strstr(err, "timestamp__gte") != NULL);
    net_query_free(&q);
    char out[40];
    ck_assert_int_eq(net_local_timestamp("2026-08-22", out), 0);
    ck_assert_int_eq(net_local_timestamp("2026-13-22", out), -1);
    ck_assert_int_eq(net_local_timestamp("2026-08-22T10:15:02.5Z", out), 0);
    ck_assert_str_eq(out, "2026-08-22T10:15:02.500000");
    ck_assert_int_eq(net_local_timestamp("2026-08-22T10:15:02+0200", out), -1);
    ck_assert_int_eq(net_local_timestamp("2026-02-31", out), -1);
    ck_assert_int_eq(net_local_timestamp("2024-02-29T00:00:00Z", out), 0);
    ck_assert_int_eq(net_local_timestamp("2026-08-22T10:15:02+24:00", out), -1);
    ck_assert_int_eq(net_local_timestamp("2026-08-22T10:15:02+01:60", out), -1);
    ck_assert_int_eq(net_local_timestamp("9999-12-31T23:00:00-05:00", out), -1);
    ck_assert_int_eq(net_local_timestamp("0000-01-01T00:00:00+01:00", out), -1);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("route");
    TCase *tc = tcase_create("rest");
    tcase_add_test(tc, test_routes);
    tcase_add_test(tc, test_web_routes);
    tcase_add_test(tc, test_query);
    tcase_add_test(tc, test_filters);
    suite_add_tcase(s, tc);
    return ts_run_suite(s);
}
