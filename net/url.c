/*
 * url.c - a server's URL. See url.h.
 */
#include "net/url.h"

#include <arpa/inet.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static int bad(char *err, size_t errlen, const char *why)
{
    snprintf(err, errlen, "%s", why);
    return -1;
}

int net_url_parse(const char *s, net_url *u, char *err, size_t errlen)
{
    *u = (net_url){0};
    if (strncasecmp(s, "http://", 7) == 0) {
        s += 7;
    } else if (strncasecmp(s, "https://", 8) == 0) {
        u->tls = true;
        s += 8;
    } else {
        return bad(err, errlen, "the URL must start with http:// or https://");
    }
    size_t hl;
    const char *after;
    if (*s == '[') {
        const char *close = strchr(s, ']');
        if (close == NULL || close == s + 1)
            return bad(err, errlen, "an IPv6 address needs its closing ']'");
        hl = (size_t)(close - s - 1);
        after = close + 1;
        s++;
    } else {
        hl = strcspn(s, ":/?#");
        after = s + hl;
    }
    if (hl == 0 || hl >= sizeof(u->host))
        return bad(err, errlen, "the URL has no host, or too long a one");
    memcpy(u->host, s, hl);
    if (strpbrk(u->host, "@ \t") != NULL)
        return bad(err, errlen, "the host may not hold '@' or blanks");
    u->port = u->tls ? 443 : 80;
    if (*after == ':') {
        char *end;
        long port = strtol(after + 1, &end, 10);
        if (end == after + 1 || port < 1 || port > 65535 || (*end != '\0' && *end != '/'))
            return bad(err, errlen, "the port must be a number from 1 to 65535");
        u->port = (int)port;
        after = end;
    }
    if (*after != '\0' && *after != '/')
        return bad(err, errlen, "no query or fragment in the server URL");
    size_t pl = strlen(after);
    while (pl > 0 && after[pl - 1] == '/')
        pl--;
    if (pl >= sizeof(u->prefix) || strpbrk(after, "?# \t") != NULL)
        return bad(err, errlen, "the URL's path must be a plain prefix");
    memcpy(u->prefix, after, pl);
    snprintf(u->authority, sizeof(u->authority), strchr(u->host, ':') ? "[%s]:%d" : "%s:%d",
             u->host, u->port);
    return 0;
}

bool net_url_local(const net_url *u)
{
    struct in_addr a4;
    struct in6_addr a6;
    if (inet_pton(AF_INET, u->host, &a4) == 1)
        return (ntohl(a4.s_addr) >> 24) == 127;
    if (inet_pton(AF_INET6, u->host, &a6) == 1)
        return IN6_IS_ADDR_LOOPBACK(&a6);
    return strcasecmp(u->host, "localhost") == 0;
}
