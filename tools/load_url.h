/*
 * load_url.h - the server URL of `parley load`: http://HOST[:PORT][/PREFIX]
 * (https:// is read too; the client speaks TLS in a later step). HOST is a
 * name, an IPv4 address or [an IPv6 one]. Pure; tested in test_load.c.
 */
#ifndef PARLEY_LOAD_URL_H
#define PARLEY_LOAD_URL_H

#include <stdbool.h>
#include <stddef.h>

typedef struct load_url {
    bool tls;
    char host[256];      /* without brackets: what getaddrinfo takes */
    int port;            /* 80 or 443 when not given */
    char authority[272]; /* the Host header: "127.0.0.1:8000", "[::1]:8000" */
    char prefix[256];    /* the path before /api and /sockets, without a final '/' */
} load_url;

/* 0, or -1 with the reason in err. */
int load_url_parse(const char *s, load_url *u, char *err, size_t errlen);
/* Is the host this machine (localhost, 127.0.0.0/8, ::1)? */
bool load_url_local(const load_url *u);

#endif
