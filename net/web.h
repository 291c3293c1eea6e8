/*
 * web.h - the web pages' files, compiled in: the files of net/web/ (html, css, js) as
 * they are in the repository, turned into C arrays at build time by
 * net/web/embed.cmake (the generated web_assets.c is in the build
 * directory, never in the repository). So `parley serve` needs no files
 * beside it and the pages are the ones it was built with.
 *
 * The pages hold no data: their scripts read the API (with the key when
 * the server has one), so they are served without it (api_web.c).
 */
#ifndef NET_WEB_H
#define NET_WEB_H

#include <stddef.h>

typedef struct net_web_asset {
    const char *name;          /* the file's name in net/web/ ("app.css") */
    const unsigned char *data; /* its bytes */
    size_t len;
    const char *ctype; /* Content-Type, by the name's extension */
    const char *etag;  /* "\"<16 hex digits of its SHA-256>\"" */
} net_web_asset;

/* The asset of that name, or NULL. */
const net_web_asset *net_web_asset_find(const char *name);

/* The generated table (web_assets.c). */
extern const net_web_asset net_web_assets[];
extern const size_t net_web_nassets;

#endif
