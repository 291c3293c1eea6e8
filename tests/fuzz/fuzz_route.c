/*
 * fuzz_route.c - libFuzzer target for what the server does with a request
 * once it is read: the HTTP reader (hp_*) takes any bytes, split at a point
 * the input chooses, and every complete request goes through routing
 * (net_route_match), the query string (net_query_parse, _get, _nth), the
 * event search filters (net_event_filter_parse) and the timestamp
 * normalisation (net_local_timestamp) on every query value.
 *
 * Invariants:
 *  - routing answers 0, 400, 404, 405 or 422, and r.status says the same;
 *    a refusal has a one-line detail (targets never hold CR or LF), a 405
 *    the methods it allows, a route its pattern's name;
 *  - a routed conversation id re-parses, dashed and hex, to the same id,
 *    and the routes with {conversation} have one;
 *  - an event id is NUL-terminated, at most 255 bytes, non-empty on the
 *    event route, and has no NUL inside: it is the whole decoded segment;
 *  - the query is the rest of the target after '?';
 *  - every decoded name and value is NUL-terminated inside the arena;
 *    _get is _nth(0), and _nth walks exactly the pairs with that name;
 *  - the filters are NUL-terminated strings within their fields, or a
 *    one-line error;
 *  - an accepted timestamp gives a naive ISO datetime (YYYY-MM-DDTHH:MM,
 *    fraction optional) that is accepted again unchanged. Years 0000 and
 *    9999 are left out of that last check: an offset can carry them to
 *    year -1 or 10000 (a known issue, reported separately).
 */
#include "net/event_filter.h"
#include "net/http_parse.h"
#include "net/query.h"
#include "net/route.h"
#include "runtime/text.h"
#include "runtime/uuid.h"

#include <ctype.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* An error message: terminated, and one line once cleaned as every answer's
 * detail is (it may quote a decoded query value, line breaks and all). */
static void one_line(const char *s, size_t cap)
{
    size_t n = strnlen(s, cap);
    CHECK(n < cap);
    char line[512];
    CHECK(n < sizeof(line));
    memcpy(line, s, n + 1);
    rt_utf8_clean(line);
    CHECK(strlen(line) == n && rt_utf8_valid((const uint8_t *)line, n));
    CHECK(memchr(line, '\n', n) == NULL && memchr(line, '\r', n) == NULL);
}

static bool is_conv_route(net_route_id id)
{
    switch (id) {
    case NET_R_CONV_GET:
    case NET_R_CONV_DELETE:
    case NET_R_CONV_PATCH:
    case NET_R_CONV_RUN:
    case NET_R_CONV_PAUSE:
    case NET_R_CONV_INTERRUPT:
    case NET_R_EV_SEARCH:
    case NET_R_EV_COUNT:
    case NET_R_EV_GET:
    case NET_R_EV_BATCH:
    case NET_R_EV_POST:
    case NET_R_EV_APPEND:
        return true;
    default:
        return false;
    }
}

/* YYYY-MM-DDTHH:MM[:SS[.f+]] or YYYY-MM-DD, all digits where digits go. */
static bool naive_iso(const char *s)
{
    static const char shape[] = "dddd-dd-ddTdd:dd:dd";
    size_t n = strlen(s), i;
    if (n != 10 && n < 16)
        return false;
    for (i = 0; i < n && i < sizeof(shape) - 1; i++) {
        if (shape[i] == 'd' ? !isdigit((unsigned char)s[i]) : s[i] != shape[i])
            return false;
    }
    if (i < n) {
        if (s[i] != '.' || i + 1 == n)
            return false;
        for (i++; i < n; i++)
            if (!isdigit((unsigned char)s[i]))
                return false;
    }
    return true;
}

static void timestamp(const char *v)
{
    char out[40], again[40];
    memset(out, 0x55, sizeof(out));
    if (net_local_timestamp(v, out) != 0)
        return;
    CHECK(memchr(out, '\0', sizeof(out)) != NULL);
    if (strncmp(v, "0000", 4) == 0 || strncmp(v, "9999", 4) == 0)
        return; /* may leave the 4-digit years: see above */
    CHECK(naive_iso(out));
    CHECK(net_local_timestamp(out, again) == 0);
    CHECK(strcmp(out, again) == 0);
}

static void query(const net_route *r)
{
    net_query q;
    char err[128];
    memset(err, 0x55, sizeof(err));
    int rc = net_query_parse(r->query, r->query_len, &q, err, sizeof(err));
    if (rc != 0) {
        CHECK(rc == -1);
        one_line(err, sizeof(err));
        CHECK(err[0] != '\0');
        net_query_free(&q);
        return;
    }
    CHECK(q.n <= NET_QUERY_MAX);
    CHECK(q.n == 0 || q.arena != NULL);
    const char *lo = q.arena, *hi = lo != NULL ? lo + r->query_len + 2 * NET_QUERY_MAX + 2 : NULL;
    for (size_t i = 0; i < q.n; i++) {
        const char *s[2] = {q.name[i], q.value[i]};
        for (int k = 0; k < 2; k++) {
            CHECK(s[k] != NULL && s[k] >= lo && s[k] < hi);
            CHECK(memchr(s[k], '\0', (size_t)(hi - s[k])) != NULL);
            CHECK(strlen(s[k]) <= r->query_len);
        }
        /* _get is the first with this name, _nth(k) the k-th */
        size_t before = 0;
        for (size_t j = 0; j < i; j++)
            before += strcmp(q.name[j], q.name[i]) == 0;
        CHECK(net_query_nth(&q, q.name[i], before) == q.value[i]);
        const char *first = net_query_get(&q, q.name[i]);
        CHECK(first != NULL && first == net_query_nth(&q, q.name[i], 0));
        if (before == 0)
            CHECK(first == q.value[i]);
        timestamp(q.value[i]);
    }
    if (q.n > 0) {
        size_t same = 0;
        for (size_t j = 0; j < q.n; j++)
            same += strcmp(q.name[j], q.name[0]) == 0;
        CHECK(net_query_nth(&q, q.name[0], same - 1) != NULL);
        CHECK(net_query_nth(&q, q.name[0], same) == NULL);
    }
    CHECK(net_query_get(&q, "\x01no such name") == NULL);

    net_event_filter f;
    memset(err, 0x55, sizeof(err));
    memset(&f, 0x55, sizeof(f));
    rc = net_event_filter_parse(&q, &f, err, sizeof(err));
    if (rc != 0) {
        CHECK(rc == -1);
        one_line(err, sizeof(err));
        CHECK(err[0] != '\0');
    } else {
        CHECK(strnlen(f.kind, sizeof(f.kind)) < sizeof(f.kind));
        CHECK(strnlen(f.source, sizeof(f.source)) < sizeof(f.source));
        CHECK(strnlen(f.body, sizeof(f.body)) < sizeof(f.body));
        CHECK(strnlen(f.ts_gte, sizeof(f.ts_gte)) < sizeof(f.ts_gte));
        CHECK(strnlen(f.ts_lt, sizeof(f.ts_lt)) < sizeof(f.ts_lt));
        CHECK(strchr(f.kind, '.') == NULL);
        CHECK(f.any == (net_query_get(&q, "kind") != NULL || net_query_get(&q, "source") != NULL ||
                        net_query_get(&q, "body") != NULL ||
                        net_query_get(&q, "timestamp__gte") != NULL ||
                        net_query_get(&q, "timestamp__lt") != NULL));
        static const char ev[] = "{\"kind\":\"MessageEvent\",\"source\":\"user\",\"timestamp\":"
                                 "\"2026-01-01T00:00:00\",\"llm_message\":{\"content\":[{\"text\":"
                                 "\"hello\"}]}}";
        (void)net_event_filter_match(&f, ev, sizeof(ev) - 1);
    }
    net_query_free(&q);
}

static void route(const hp_req *h)
{
    net_route r;
    memset(&r, 0x55, sizeof(r));
    int st = net_route_match(h->method, h->target, &r);
    CHECK(st == r.status);
    CHECK(st == 0 || st == 400 || st == 404 || st == 405 || st == 422);
    CHECK(r.name != NULL);
    const char *q = strchr(h->target, '?');
    if (q != NULL)
        CHECK(r.query == q + 1 && r.query_len == strlen(q + 1));
    else
        CHECK(r.query == NULL && r.query_len == 0);
    if (st != 0) {
        one_line(r.detail, sizeof(r.detail));
        CHECK(r.detail[0] != '\0');
        if (st == 405)
            CHECK(r.allow != NULL && r.allow[0] != '\0' && strstr(r.allow, h->method) == NULL);
        if (st != 422)
            return;
    } else {
        CHECK(r.id > NET_R_NONE && r.id < NET_R_COUNT);
        CHECK(strcmp(r.name, net_route_name(r.id)) == 0);
        CHECK(r.has_conv == is_conv_route(r.id));
    }
    if (r.has_conv) {
        char dashed[37], hex[33];
        rt_uuid u;
        rt_uuid_dashed(&r.conv, dashed);
        rt_uuid_hex(&r.conv, hex);
        CHECK(rt_uuid_parse(dashed, 36, &u) && rt_uuid_eq(&u, &r.conv));
        CHECK(rt_uuid_parse(hex, 32, &u) && rt_uuid_eq(&u, &r.conv));
    }
    size_t elen = strnlen(r.event_id, sizeof(r.event_id));
    CHECK(elen <= NET_EVENT_ID_MAX);
    if (st == 0 && r.id == NET_R_EV_GET) {
        CHECK(elen > 0);
        /* the last path segment, decoded, is the whole id: no NUL inside */
        size_t plen = q != NULL ? (size_t)(q - h->target) : strlen(h->target);
        if (plen > 1 && h->target[plen - 1] == '/')
            plen--;
        const char *seg = h->target + plen;
        while (seg > h->target && seg[-1] != '/')
            seg--;
        char buf[NET_EVENT_ID_MAX + 1];
        size_t slen = (size_t)(h->target + plen - seg);
        CHECK(slen <= NET_EVENT_ID_MAX);
        CHECK(net_pct_decode(seg, slen, buf, false) == (long)elen);
        CHECK(memcmp(buf, r.event_id, elen + 1) == 0);
    } else if (st == 0) {
        CHECK(elen == 0);
    }
    if (st == 0)
        query(&r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    size_t step = (size_t)(data[0] % 64) + 1; /* the first byte picks the split */
    data++;
    size--;
    hp_limits l = {.header_bytes = 4096, .headers = 32, .body_bytes = 4096};
    hp_parser *p = hp_new(&l);
    if (p == NULL)
        return 0;
    size_t at = 0;
    while (at < size) {
        size_t n = size - at < step ? size - at : step;
        bool done;
        ssize_t used = hp_feed(p, data + at, n, &done);
        if (used < 0)
            break;
        CHECK((size_t)used <= n);
        at += (size_t)used;
        if (done) {
            const hp_req *h = hp_request(p);
            CHECK(h != NULL && h->method != NULL && h->target != NULL);
            CHECK(strchr(h->target, '\n') == NULL && strchr(h->target, '\r') == NULL);
            route(h);
        } else if ((size_t)used < n) {
            abort();
        }
    }
    hp_free(p);
    return 0;
}
