/*
 * demo_agent.h - `parley demo-agent`, a scripted ACP agent on stdio, shared
 * by its three files: demo_agent.c (the command, the session methods),
 * demo_agent_wire.c (JSON-RPC lines in and out, waiting for the client's
 * answers) and demo_agent_turn.c (the scripted prompt turn).
 *
 * One thread, one synchronous loop over stdin. A request that comes while
 * a turn runs is queued and answered after it; a notification (say
 * session/cancel) is acted on at once; a response goes to the one request
 * of ours that waits for it.
 */
#ifndef PARLEY_DEMO_AGENT_H
#define PARLEY_DEMO_AGENT_H

#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>

/* An input line longer than this is refused with an error and skipped; at
 * most this much of it is ever held. */
#define DA_MAX_LINE (16u << 20)

/* JSON-RPC and ACP error codes */
enum {
    DA_PARSE_ERROR = -32700,
    DA_INVALID_REQUEST = -32600,
    DA_NO_METHOD = -32601,
    DA_INVALID_PARAMS = -32602,
    DA_INTERNAL = -32603,
    DA_NOT_FOUND = -32002,
};

typedef struct da_reader {
    char *buf;
    size_t start, scan, len, cap; /* unread: [start, len); no '\n' in [start, scan) */
    bool skipping;                /* in a line longer than DA_MAX_LINE, dropping it */
    bool eof;
} da_reader;

typedef struct da_session {
    char *id, *cwd;
    unsigned calls; /* tool calls so far: the next is call-<calls + 1> */
    bool cancel;    /* a session/cancel came while its prompt was queued */
} da_session;

typedef struct da_agent {
    /* options */
    int tool_calls, chunks, delay_ms;
    bool no_fs;
    bool stamp; /* --stamp: " [t=NS]" (CLOCK_REALTIME at send) ends each message chunk */
    /* what the client declared in initialize */
    bool can_read, can_write;

    da_reader in;
    json_t *queue; /* requests that came during a turn (an array) */

    /* our request to the client, one at a time */
    long long next_id, awaited;
    bool awaiting;
    json_t *reply; /* its response, once come */

    da_session **sessions;
    size_t nsessions, cap;

    /* the turn that runs */
    da_session *turn; /* NULL between turns */
    FILE *history;    /* its session's history, appended to (NULL if it cannot be) */
    unsigned sent;    /* updates sent in this turn */
    bool cancelled;   /* a session/cancel came for it */

    bool out_failed; /* stdout is gone: stop */
} da_agent;

/* demo_agent_wire.c */

/* Send one message (stolen; NULL is nothing) as a line on stdout, flushed. */
void da_send(da_agent *a, json_t *msg);
void da_result(da_agent *a, json_t *id, json_t *result); /* result stolen */
void da_error(da_agent *a, json_t *id, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* A session/update notification (update stolen), not recorded anywhere. */
void da_send_update(da_agent *a, const char *session_id, json_t *update);
/* The next message from stdin within timeout_ms (-1: no limit): 1 and *msg
 * (the caller's reference), 0 nothing yet, -1 end of input. Lines that are
 * not a JSON object, or are too long, are answered here and skipped. */
int da_next(da_agent *a, int timeout_ms, json_t **msg);
/* Take one incoming message: a response to our request is kept as
 * a->reply, a notification is acted on, and a request is answered (between
 * turns) or queued (in a turn). */
void da_incoming(da_agent *a, json_t *msg);
/* Take incoming messages for timeout_ms (0: those already there; -1: until
 * something stops the wait), returning early once the turn is cancelled,
 * our request is answered, input ends or stdout fails. */
void da_pump(da_agent *a, int timeout_ms);
/* Call the client (params stolen) and wait for its answer: the result (the
 * caller's reference), or NULL and *err (the caller's reference) if it
 * answered with an error, or NULL and *err NULL if there will be no answer
 * (the turn was cancelled, or input ended). */
json_t *da_call(da_agent *a, const char *method, json_t *params, json_t **err);

/* demo_agent.c */

da_session *da_find(da_agent *a, const char *id);
/* <cwd>/<name>, malloc'd (NULL if out of memory). */
char *da_path(const char *cwd, const char *name);
/* Where a session's history is kept, malloc'd. */
char *da_history_path(const da_session *s);
/* Answer one request (between turns). */
void da_dispatch(da_agent *a, json_t *msg);

/* demo_agent_turn.c */

/* session/prompt: run the script, then answer with the stop reason. */
void da_prompt(da_agent *a, json_t *id, json_t *params);

#endif
