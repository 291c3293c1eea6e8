/*
 * url.h - a server's URL, as the clients take it (`parley tail`, `load`,
 * the follower): http[s]://HOST[:PORT][/PREFIX]. HOST is a name, an IPv4
 * address or [an IPv6 one]. Pure; tested in test_load.c.
 */
#ifndef NET_URL_H
#define NET_URL_H

#include <stdbool.h>
#include <stddef.h>

typedef struct net_url {
    bool tls;
    char host[256];      /* without brackets: what getaddrinfo takes */
    int port;            /* 80 or 443 when not given */
    char authority[272]; /* the Host header: "127.0.0.1:8000", "[::1]:8000" */
    char prefix[256];    /* the path before /api and /sockets, without a final '/' */
} net_url;

/* 0, or -1 with the reason in err. */
int net_url_parse(const char *s, net_url *u, char *err, size_t errlen);
/* Is the host this machine (localhost, 127.0.0.0/8, ::1)? */
bool net_url_local(const net_url *u);

#endif
