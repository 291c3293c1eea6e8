/*
 * query.h - a request's query string, decoded. Pure.
 *
 * name=value pairs split on '&', percent-decoded ('+' is a space), kept in
 * order so that repeated names (?ids=a&ids=b) can be walked. At most
 * NET_QUERY_MAX pairs: a peer cannot make the server allocate per pair.
 */
#ifndef NET_QUERY_H
#define NET_QUERY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum { NET_QUERY_MAX = 128, NET_PAGE_MAX = 100 };

typedef struct net_query {
    size_t n;
    const char *name[NET_QUERY_MAX];
    const char *value[NET_QUERY_MAX];
    char *arena;
} net_query;

/* Decode q (len bytes, may be NULL). 0, or -1 with one line in err (bad
 * escape, too many parameters). Free with net_query_free either way. */
int net_query_parse(const char *q, size_t len, net_query *out, char *err, size_t errlen);
void net_query_free(net_query *q);
/* The first value of name, or NULL. */
const char *net_query_get(const net_query *q, const char *name);
/* The i-th value of name (from 0), or NULL past the last. */
const char *net_query_nth(const net_query *q, const char *name, size_t i);

/* name as a whole number from 0 to max (digits only): 1 with *out set,
 * 0 when absent, -1 when it is something else. */
int net_query_uint(const net_query *q, const char *name, uint64_t max, uint64_t *out);

/* The `limit` of a page: 1 to NET_PAGE_MAX, NET_PAGE_MAX when absent. 0,
 * or -1 with one line in err (for a 422). */
int net_query_limit(const net_query *q, long *limit, char *err, size_t errlen);

#endif
