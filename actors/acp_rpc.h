/*
 * acp_rpc.h - JSON-RPC 2.0 as the Agent Client Protocol frames it: one
 * compact JSON message per line (spec/acp-reducer.md A.1, A.2). Pure: no
 * I/O. The reader is strict, because a hosted agent that writes anything
 * but well-formed JSON-RPC on stdout is stopped (the caller decides).
 */
#ifndef ACP_RPC_H
#define ACP_RPC_H

#include "runtime/buf.h"

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

typedef enum rpc_type {
    RPC_INVALID = 0, /* not JSON-RPC 2.0: `why` says what */
    RPC_REQUEST,     /* id, method, params */
    RPC_NOTIFY,      /* method, params */
    RPC_RESULT,      /* id, result */
    RPC_ERROR,       /* id, code, message, (data) */
} rpc_type;

/* JSON-RPC's error codes, and ACP's. */
enum {
    RPC_PARSE_ERROR = -32700,
    RPC_INVALID_REQUEST = -32600,
    RPC_METHOD_NOT_FOUND = -32601,
    RPC_INVALID_PARAMS = -32602,
    RPC_INTERNAL_ERROR = -32603,
    RPC_RESOURCE_NOT_FOUND = -32002,
};

typedef struct rpc_msg {
    rpc_type type;
    json_t *root;       /* owned; the fields below point into it */
    json_t *id;         /* a request's or a response's (integer, string or null) */
    const char *method; /* a request's or a notification's */
    json_t *params;     /* may be NULL */
    json_t *result;     /* RPC_RESULT */
    int64_t code;       /* RPC_ERROR */
    const char *message;
    char why[160]; /* RPC_INVALID */
} rpc_msg;

/* Read one line. Always fills *m (rpc_clear it). */
void rpc_parse(const char *line, size_t len, rpc_msg *m);
void rpc_clear(rpc_msg *m);

/* One message as a line (compact JSON and '\n'), or NULL if out of memory.
 * params/result are taken (stolen) and may be NULL (then {}/null). */
rt_buf *rpc_request(int64_t id, const char *method, json_t *params);
rt_buf *rpc_notification(const char *method, json_t *params);
rt_buf *rpc_result(json_t *id, json_t *result);
rt_buf *rpc_error(json_t *id, int code, const char *message);

#endif
