/* query.c - query strings: split, decode, look up. */
#include "query.h"

#include <errno.h>

#include "route.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int net_query_parse(const char *q, size_t len, net_query *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof(*out));
    if (q == NULL || len == 0)
        return 0;
    /* decoding never grows a string: len bytes plus two NULs per pair */
    out->arena = malloc(len + 2 * NET_QUERY_MAX + 2);
    if (out->arena == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    char *w = out->arena;
    size_t i = 0;
    while (i <= len) {
        size_t j = i;
        while (j < len && q[j] != '&')
            j++;
        if (j > i) {
            const char *eq = memchr(q + i, '=', j - i);
            size_t nlen = eq != NULL ? (size_t)(eq - (q + i)) : j - i;
            if (out->n == NET_QUERY_MAX) {
                snprintf(err, errlen, "more than %d query parameters", NET_QUERY_MAX);
                return -1;
            }
            long a = net_pct_decode(q + i, nlen, w, true);
            if (a < 0)
                goto bad;
            out->name[out->n] = w;
            w += a + 1;
            const char *v = eq != NULL ? eq + 1 : q + j;
            long b = net_pct_decode(v, (size_t)(q + j - v), w, true);
            if (b < 0)
                goto bad;
            out->value[out->n++] = w;
            w += b + 1;
        }
        i = j + 1;
    }
    return 0;
bad:
    snprintf(err, errlen, "bad percent-encoding in the query string");
    return -1;
}

void net_query_free(net_query *q)
{
    free(q->arena);
    q->arena = NULL;
    q->n = 0;
}

const char *net_query_nth(const net_query *q, const char *name, size_t i)
{
    for (size_t k = 0; k < q->n; k++)
        if (strcmp(q->name[k], name) == 0 && i-- == 0)
            return q->value[k];
    return NULL;
}

const char *net_query_get(const net_query *q, const char *name)
{
    return net_query_nth(q, name, 0);
}

int net_query_uint(const net_query *q, const char *name, uint64_t max, uint64_t *out)
{
    const char *s = net_query_get(q, name);
    if (s == NULL)
        return 0;
    char *end;
    errno = 0;
    unsigned long long n = strtoull(s, &end, 10);
    if (s[0] < '0' || s[0] > '9' || *end != '\0' || errno != 0 || n > max)
        return -1;
    *out = n;
    return 1;
}

int net_query_limit(const net_query *q, long *limit, char *err, size_t errlen)
{
    const char *v = net_query_get(q, "limit");
    *limit = NET_PAGE_MAX;
    if (v == NULL)
        return 0;
    char *end;
    *limit = strtol(v, &end, 10);
    if (end == v || *end != '\0' || *limit < 1 || *limit > NET_PAGE_MAX) {
        snprintf(err, errlen, "limit must be an integer from 1 to %d, not '%.40s'", NET_PAGE_MAX,
                 v);
        return -1;
    }
    return 0;
}
