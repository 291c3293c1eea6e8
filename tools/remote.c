/*
 * remote.c - the client commands' server options and blocking calls. See
 * remote.h.
 */
#include "remote.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct remote {
    uv_loop_t loop;
    net_client *c;
    bool done;
    int status;
    char *body;
};

bool remote_option(remote_opts *o, int code, const char *arg)
{
    switch (code) {
    case REMOTE_KEY:
        o->api_key = arg;
        return true;
    case REMOTE_CA:
        o->ca_file = arg;
        return true;
    case REMOTE_INSECURE:
        o->insecure = true;
        return true;
    default:
        return false;
    }
}

int remote_setup(const char *cmd, const char *url, remote_opts *o, net_url *u, net_tls_config **tls)
{
    char err[300];
    *tls = NULL;
    if (o->api_key == NULL)
        o->api_key = getenv("SESSION_API_KEY");
    if (o->api_key != NULL && (o->api_key[0] == '\0' || strpbrk(o->api_key, "\r\n") != NULL)) {
        fprintf(stderr, "parley %s: the API key must be one non-empty line\n", cmd);
        return -1;
    }
    if (net_url_parse(url, u, err, sizeof(err)) != 0) {
        fprintf(stderr, "parley %s: bad URL %s: %s\n", cmd, url, err);
        return -1;
    }
    if (!u->tls)
        return 0;
    if (net_tls_client_config_new(o->ca_file, !o->insecure, tls, err, sizeof(err)) != 0) {
        fprintf(stderr, "parley %s: %s\n", cmd, err);
        return -1;
    }
    return 0;
}

static void answered(void *ud, const hr_resp *r, const char *err)
{
    remote *rm = ud;
    free(rm->body);
    rm->done = true;
    rm->status = r != NULL ? r->status : -1;
    size_t n = r != NULL ? r->body_len : strlen(err);
    rm->body = malloc(n + 1);
    if (rm->body != NULL) {
        memcpy(rm->body, r != NULL ? (const char *)r->body : err, n);
        rm->body[n] = '\0';
    }
}

remote *remote_new(const net_url *u, net_tls_config *tls, const char *api_key)
{
    remote *r = calloc(1, sizeof(*r));
    if (r == NULL || uv_loop_init(&r->loop) != 0) {
        free(r);
        return NULL;
    }
    net_client_opts o = {
        .url = u, .tls = tls, .api_key = api_key, .cb = {.response = answered}, .ud = r};
    if ((r->c = net_client_new(&r->loop, &o)) == NULL) {
        uv_loop_close(&r->loop);
        free(r);
        return NULL;
    }
    return r;
}

void remote_free(remote *r)
{
    if (r == NULL)
        return;
    net_client_free(r->c);
    uv_run(&r->loop, UV_RUN_DEFAULT); /* the handles' closes */
    uv_loop_close(&r->loop);
    free(r->body);
    free(r);
}

int remote_call(remote *r, const char *method, const char *path, const char *json,
                const char **body)
{
    r->done = false;
    if (net_client_request(r->c, method, path, json, json != NULL ? strlen(json) : 0) != 0) {
        *body = "cannot send the request";
        return -1;
    }
    while (!r->done && uv_run(&r->loop, UV_RUN_ONCE) != 0)
        ;
    *body = r->body != NULL ? r->body : (r->done ? "out of memory" : "no answer");
    return r->done && r->body != NULL ? r->status : -1;
}
