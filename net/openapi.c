/*
 * openapi.c - /openapi.json: an OpenAPI 3.1 description of the routes,
 * made from the router's own table (route.c), so that it names exactly
 * the routes, methods, path and query parameters that are served. Bodies
 * and answers are described in words (the OpenHands agent-server's
 * models; README), not as schemas.
 */
#include "api.h"

#include <stdlib.h>
#include <string.h>

/* "/api/conversations/{c}/events/{e}" as OpenAPI names it. */
static void openapi_path(const char *p, char *out, size_t cap)
{
    size_t o = 0;
    for (; *p != '\0' && o + 20 < cap; p++) {
        if (strncmp(p, "{c}", 3) == 0 || strncmp(p, "{e}", 3) == 0) {
            const char *name = p[1] == 'c' ? "{conversation_id}" : "{event_id}";
            memcpy(out + o, name, strlen(name));
            o += strlen(name);
            p += 2;
        } else {
            out[o++] = *p;
        }
    }
    out[o] = '\0';
}

static json_t *param(const char *name, const char *in, bool required)
{
    return json_pack("{s:s, s:s, s:b, s:{s:s}}", "name", name, "in", in, "required", required,
                     "schema", "type", "string");
}

static json_t *operation(const net_route_spec *s)
{
    json_t *params = json_array();
    if (strstr(s->path, "{c}") != NULL)
        json_array_append_new(params, param("conversation_id", "path", true));
    if (strstr(s->path, "{e}") != NULL)
        json_array_append_new(params, param("event_id", "path", true));
    for (const char *q = s->query; q != NULL && *q != '\0';) {
        const char *end = strchr(q, ',');
        size_t n = end != NULL ? (size_t)(end - q) : strlen(q);
        char name[64];
        snprintf(name, sizeof(name), "%.*s", (int)n, q);
        json_array_append_new(params, param(name, "query", false));
        q += n + (end != NULL);
    }
    json_t *op =
        json_pack("{s:s, s:o, s:o, s:{s:{s:s}}}", "summary", s->summary, "operationId",
                  json_sprintf("%s %s", s->method, s->path), "parameters", params, "responses",
                  "default", "description", "JSON; errors are {\"detail\": \"<one line>\"}");
    if (!s->open)
        json_object_set_new(op, "security", json_pack("[{s:[]}]", "session_api_key"));
    return op;
}

json_t *net_openapi(void)
{
    json_t *paths = json_object();
    for (size_t i = 0; i < net_route_count(); i++) {
        const net_route_spec *s = net_route_at(i);
        char path[256], method[16];
        openapi_path(s->path, path, sizeof(path));
        size_t k = 0;
        for (; s->method[k] != '\0' && k + 1 < sizeof(method); k++)
            method[k] = (char)(s->method[k] | 0x20); /* lower case */
        method[k] = '\0';
        json_t *item = json_object_get(paths, path);
        if (item == NULL) {
            item = json_object();
            json_object_set_new(paths, path, item);
        }
        json_object_set_new(item, method, operation(s));
    }
    return json_pack("{s:s, s:{s:s, s:s, s:s}, s:o, s:{s:{s:{s:s, s:s, s:s}}}}", "openapi", "3.1.0",
                     "info", "title", "parley", "version", PARLEY_VERSION, "description",
                     "The OpenHands agent-server's conversation and event API, as parley serves "
                     "it.",
                     "paths", paths, "components", "securitySchemes", "session_api_key", "type",
                     "apiKey", "in", "header", "name", "X-Session-API-Key");
}
