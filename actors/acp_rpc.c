/*
 * acp_rpc.c - JSON-RPC 2.0 lines (acp_rpc.h).
 */
#include "acp_rpc.h"

#include "runtime/json.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void invalid(rpc_msg *m, const char *why)
{
    m->type = RPC_INVALID;
    snprintf(m->why, sizeof(m->why), "%s", why);
}

static bool valid_id(const json_t *id)
{
    return json_is_integer(id) || json_is_string(id) || json_is_null(id);
}

void rpc_parse(const char *line, size_t len, rpc_msg *m)
{
    memset(m, 0, sizeof(*m));
    json_error_t e;
    m->root = rt_json_read(line, len, JSON_REJECT_DUPLICATES, &e);
    if (m->root == NULL) {
        snprintf(m->why, sizeof(m->why), "not JSON: %.120s", e.text);
        return;
    }
    json_t *r = m->root, *v = json_object_get(r, "jsonrpc");
    if (!json_is_object(r))
        return invalid(m, "a message must be a JSON object (batches are not used by ACP)");
    if (!json_is_string(v) || strcmp(json_string_value(v), "2.0") != 0)
        return invalid(m, "\"jsonrpc\" must be \"2.0\"");
    json_t *id = json_object_get(r, "id"), *method = json_object_get(r, "method");
    json_t *params = json_object_get(r, "params");
    if (method != NULL) {
        if (!json_is_string(method))
            return invalid(m, "\"method\" must be a string");
        if (params != NULL && !json_is_object(params) && !json_is_array(params))
            return invalid(m, "\"params\" must be an object or an array");
        if (id != NULL && !valid_id(id))
            return invalid(m, "\"id\" must be an integer, a string or null");
        m->type = id != NULL ? RPC_REQUEST : RPC_NOTIFY;
        m->id = id;
        m->method = json_string_value(method);
        m->params = params;
        return;
    }
    json_t *result = json_object_get(r, "result"), *error = json_object_get(r, "error");
    if (id == NULL || !valid_id(id))
        return invalid(m, "a response needs an integer, string or null \"id\"");
    if ((result == NULL) == (error == NULL))
        return invalid(m, "a response has exactly one of \"result\" and \"error\"");
    m->id = id;
    if (result != NULL) {
        m->type = RPC_RESULT;
        m->result = result;
        return;
    }
    json_t *code = json_object_get(error, "code"), *msg = json_object_get(error, "message");
    if (!json_is_object(error) || !json_is_integer(code) || !json_is_string(msg))
        return invalid(m, "\"error\" needs an integer \"code\" and a string \"message\"");
    m->type = RPC_ERROR;
    m->code = json_integer_value(code);
    m->message = json_string_value(msg);
}

void rpc_clear(rpc_msg *m)
{
    json_decref(m->root);
    memset(m, 0, sizeof(*m));
}

static void free_data(void *data, void *ctx)
{
    (void)ctx;
    free(data);
}

/* Compact, and every control character escaped: no raw newline inside. */
static rt_buf *line_of(json_t *msg)
{
    char *s = msg != NULL ? rt_json_dumps(msg, NULL) : NULL;
    json_decref(msg);
    if (s == NULL)
        return NULL;
    size_t n = strlen(s);
    char *t = realloc(s, n + 2);
    if (t == NULL) {
        free(s);
        return NULL;
    }
    t[n] = '\n';
    t[n + 1] = '\0';
    rt_buf *b = rt_buf_wrap(t, n + 1, free_data, NULL);
    if (b == NULL)
        free(t);
    return b;
}

rt_buf *rpc_request(int64_t id, const char *method, json_t *params)
{
    return line_of(json_pack("{s:s, s:I, s:s, s:o}", "jsonrpc", "2.0", "id", (json_int_t)id,
                             "method", method, "params", params != NULL ? params : json_object()));
}

rt_buf *rpc_notification(const char *method, json_t *params)
{
    return line_of(json_pack("{s:s, s:s, s:o}", "jsonrpc", "2.0", "method", method, "params",
                             params != NULL ? params : json_object()));
}

rt_buf *rpc_result(json_t *id, json_t *result)
{
    return line_of(json_pack("{s:s, s:O, s:o}", "jsonrpc", "2.0", "id",
                             id != NULL ? id : json_null(), "result",
                             result != NULL ? result : json_null()));
}

rt_buf *rpc_error(json_t *id, int code, const char *message)
{
    return line_of(json_pack("{s:s, s:O, s:{s:i, s:s}}", "jsonrpc", "2.0", "id",
                             id != NULL ? id : json_null(), "error", "code", code, "message",
                             message));
}
