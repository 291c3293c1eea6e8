/*
 * api_web.c - the web pages: GET / (the conversations), GET
 * /conversations/{id} (one conversation, live) and GET /assets/<name>
 * (their scripts and style sheet), from the files compiled in (web.h).
 *
 * Every answer carries a Content-Security-Policy that allows scripts and
 * styles from this server only, and no inline script: the pages draw what
 * agents and users wrote, and whatever slips through as markup can never
 * run. The same bytes are served until the binary changes, so each has an
 * ETag and is revalidated (If-None-Match: 304), never cached blindly.
 */
#include "api.h"
#include "web.h"

#include <stdio.h>
#include <string.h>

#define WEB_CSP                                                                                    \
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "                \
    "img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

const net_web_asset *net_web_asset_find(const char *name)
{
    for (size_t i = 0; i < net_web_nassets; i++)
        if (strcmp(net_web_assets[i].name, name) == 0)
            return &net_web_assets[i];
    return NULL;
}

/* Does If-None-Match name this ETag (or "*")? */
static int etag_matches(const char *inm, const char *etag)
{
    if (inm == NULL)
        return 0;
    if (strcmp(inm, "*") == 0)
        return 1;
    const char *hit = strstr(inm, etag); /* a list: "a", "b", W/"c" */
    return hit != NULL;
}

void net_api_web(net_req *r)
{
    const char *name = r->route.id == NET_R_WEB_LIST   ? "index.html"
                       : r->route.id == NET_R_WEB_CONV ? "conversation.html"
                                                       : r->route.event_id;
    const net_web_asset *a = net_web_asset_find(name);
    if (a == NULL) {
        net_reply_error(r, 404, "no such asset: %.80s", name);
        return;
    }
    char extra[512];
    snprintf(extra, sizeof(extra),
             "Content-Security-Policy: " WEB_CSP "\r\n"
             "X-Content-Type-Options: nosniff\r\n"
             "Referrer-Policy: no-referrer\r\n"
             "Cache-Control: no-cache\r\n"
             "ETag: %s\r\n",
             a->etag);
    if (etag_matches(hp_header_get(r->http, "if-none-match"), a->etag)) {
        net_reply(r, 304, NULL, a->ctype, extra);
        return;
    }
    net_reply(r, 200, rt_buf_wrap((void *)a->data, a->len, NULL, NULL), a->ctype, extra);
}
