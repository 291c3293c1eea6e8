/*
 * remote.h - what the client commands (tail, send, append, conversations)
 * share: the server options (--api-key, --insecure, --ca-file) and a
 * blocking call over one kept-alive net_client on a private loop.
 */
#ifndef PARLEY_REMOTE_H
#define PARLEY_REMOTE_H

#include "net/client.h"
#include "net/tls.h"
#include "net/url.h"

#include <stdbool.h>
#include <stddef.h>

typedef struct remote_opts {
    const char *api_key; /* --api-key, else $SESSION_API_KEY */
    const char *ca_file; /* --ca-file */
    bool insecure;       /* --insecure */
} remote_opts;

/* getopt_long codes of the shared options, and their help lines. */
enum { REMOTE_KEY = 0x300, REMOTE_CA, REMOTE_INSECURE };
#define REMOTE_OPTIONS                                                                             \
    {"api-key", required_argument, NULL, REMOTE_KEY},                                              \
        {"ca-file", required_argument, NULL, REMOTE_CA},                                           \
    {                                                                                              \
        "insecure", no_argument, NULL, REMOTE_INSECURE                                             \
    }
#define REMOTE_HELP                                                                                \
    "  --api-key KEY       the server's session API key (default: $SESSION_API_KEY)\n"             \
    "  --ca-file FILE      PEM certificates to verify an https server with (default:\n"            \
    "                      the system's, " NET_TLS_SYSTEM_CA ")\n"                                 \
    "  --insecure          do not verify the https server's certificate\n"
/* Take a shared option (getopt's code and optarg): true if it was one. */
bool remote_option(remote_opts *o, int code, const char *arg);

/* The URL parsed and, for https, the TLS config: 0, or -1 after a message
 * on stderr. *tls is NULL for http. */
int remote_setup(const char *cmd, const char *url, remote_opts *o, net_url *u,
                 net_tls_config **tls);

typedef struct remote remote;
remote *remote_new(const net_url *u, net_tls_config *tls, const char *api_key);
void remote_free(remote *r);
/* One request, waited for: the status (body in *body, NUL-terminated,
 * valid until the next call), or -1 with the reason in *body. */
int remote_call(remote *r, const char *method, const char *path, const char *json,
                const char **body);

#endif
