/* event_filter.c - search filters over stored events. */
#include "event_filter.h"

#include "actors/event.h"

#include "runtime/json.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* 1 and the value in out, 0 if not given, -1 (err) if too long, or empty
 * where that means nothing (empty_ok false). */
static int copy(const net_query *q, const char *name, char *out, size_t cap, bool empty_ok,
                char *err, size_t errlen)
{
    const char *v = net_query_get(q, name);
    if (v == NULL)
        return 0;
    if (strlen(v) >= cap || (v[0] == '\0' && !empty_ok)) {
        snprintf(err, errlen, "%s must be %d to %zu bytes", name, empty_ok ? 0 : 1, cap - 1);
        return -1;
    }
    strcpy(out, v);
    return 1;
}

static int digits(const char *s, int n)
{
    int v = 0;
    for (int i = 0; i < n; i++) {
        if (!isdigit((unsigned char)s[i]))
            return -1;
        v = v * 10 + (s[i] - '0');
    }
    return v;
}

static int days_in(int year, int month)
{
    static const int d[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    bool leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
    return d[month - 1] + (month == 2 && leap);
}

int net_local_timestamp(const char *in, char out[40])
{
    size_t n = strlen(in);
    struct tm tm = {0};
    if (n < 10 || in[4] != '-' || in[7] != '-' || (tm.tm_year = digits(in, 4)) < 1 ||
        (tm.tm_mon = digits(in + 5, 2)) < 1 || tm.tm_mon > 12 ||
        (tm.tm_mday = digits(in + 8, 2)) < 1 || tm.tm_mday > days_in(tm.tm_year, tm.tm_mon))
        return -1;
    const char *p = in + 10;
    long usec = 0;
    int usec_digits = 0;
    if (*p == 'T' || *p == ' ') {
        if (strlen(p) < 6 || p[3] != ':' || (tm.tm_hour = digits(p + 1, 2)) < 0 ||
            tm.tm_hour > 23 || (tm.tm_min = digits(p + 4, 2)) < 0 || tm.tm_min > 59)
            return -1;
        p += 6;
        if (*p == ':') {
            if ((tm.tm_sec = digits(p + 1, 2)) < 0 || tm.tm_sec > 60)
                return -1;
            p += 3;
            if (*p == '.') {
                p++;
                while (isdigit((unsigned char)*p)) {
                    if (usec_digits < 6) {
                        usec = usec * 10 + (*p - '0');
                        usec_digits++;
                    }
                    p++;
                }
                if (usec_digits == 0)
                    return -1;
                for (int i = usec_digits; i < 6; i++)
                    usec *= 10;
            }
        }
    }
    if (*p == '\0') { /* naive: compared as given */
        if (strlen(in) >= 40)
            return -1;
        strcpy(out, in);
        if (out[10] == ' ')
            out[10] = 'T';
        return 0;
    }
    long off;
    if (strcmp(p, "Z") == 0 || strcmp(p, "z") == 0) {
        off = 0;
    } else if ((p[0] == '+' || p[0] == '-') && strlen(p) == 6 && p[3] == ':' &&
               digits(p + 1, 2) >= 0 && digits(p + 1, 2) <= 23 && digits(p + 4, 2) >= 0 &&
               digits(p + 4, 2) <= 59) {
        off = (digits(p + 1, 2) * 60L + digits(p + 4, 2)) * 60L * (p[0] == '-' ? -1 : 1);
    } else {
        return -1;
    }
    tm.tm_year -= 1900;
    tm.tm_mon -= 1;
    time_t t = timegm(&tm) - off;
    struct tm local;
    /* a zone can carry the moment out of the years a 4-digit timestamp has */
    if (localtime_r(&t, &local) == NULL || local.tm_year + 1900 < 1 || local.tm_year + 1900 > 9999)
        return -1;
    ev_format_timestamp((long long)t, usec, out);
    return 0;
}

int net_event_filter_parse(const net_query *q, net_event_filter *f, char *err, size_t errlen)
{
    memset(f, 0, sizeof(*f));
    int a, b, c;
    /* an empty body= is a filter, as upstream: messages with any text */
    if ((a = copy(q, "kind", f->kind, sizeof(f->kind), false, err, errlen)) < 0 ||
        (b = copy(q, "source", f->source, sizeof(f->source), false, err, errlen)) < 0 ||
        (c = copy(q, "body", f->body, sizeof(f->body), true, err, errlen)) < 0)
        return -1;
    f->has_body = c > 0;
    f->any = a || b || c;
    static const char *const names[] = {"timestamp__gte", "timestamp__lt"};
    char *outs[] = {f->ts_gte, f->ts_lt};
    for (int i = 0; i < 2; i++) {
        const char *v = net_query_get(q, names[i]);
        if (v == NULL)
            continue;
        if (net_local_timestamp(v, outs[i]) < 0) {
            snprintf(err, errlen,
                     "%s must be an ISO datetime (e.g. 2026-08-22T10:15:02), not '%.60s'", names[i],
                     v);
            return -1;
        }
        f->any = true;
    }
    /* a qualified kind names its class last */
    char *dot = strrchr(f->kind, '.');
    if (dot != NULL)
        memmove(f->kind, dot + 1, strlen(dot + 1) + 1);
    return 0;
}

static bool has(const char *hay, const char *needle)
{
    return hay != NULL && strcasestr(hay, needle) != NULL;
}

static bool texts_have(json_t *arr, const char *needle)
{
    size_t i;
    json_t *v;
    json_array_foreach(arr, i, v)
    {
        if (has(json_string_value(json_object_get(v, "text")), needle))
            return true;
    }
    return false;
}

static bool body_match(json_t *e, const char *needle)
{
    const char *kind = json_string_value(json_object_get(e, "kind"));
    if (kind == NULL || strcmp(kind, "MessageEvent") != 0)
        return false;
    if (needle[0] == '\0') /* every message has the empty string in it */
        return true;
    json_t *m = json_object_get(e, "llm_message");
    return texts_have(json_object_get(m, "content"), needle) ||
           texts_have(json_object_get(e, "extended_content"), needle) ||
           has(json_string_value(json_object_get(m, "reasoning_content")), needle);
}

bool net_event_filter_match(const net_event_filter *f, const char *json, size_t len)
{
    if (!f->any)
        return true;
    json_t *e = rt_json_read(json, len, 0, NULL);
    if (e == NULL)
        return false;
    const char *kind = json_string_value(json_object_get(e, "kind"));
    const char *src = json_string_value(json_object_get(e, "source"));
    const char *ts = json_string_value(json_object_get(e, "timestamp"));
    bool ok = (f->kind[0] == '\0' || (kind != NULL && strcmp(kind, f->kind) == 0)) &&
              (f->source[0] == '\0' || (src != NULL && strcmp(src, f->source) == 0)) &&
              (f->ts_gte[0] == '\0' || (ts != NULL && strcmp(ts, f->ts_gte) >= 0)) &&
              (f->ts_lt[0] == '\0' || (ts != NULL && strcmp(ts, f->ts_lt) < 0)) &&
              (!f->has_body || body_match(e, f->body));
    json_decref(e);
    return ok;
}
