/*
 * acp_agent.h - the protocol core of `parley acp`: an Agent Client
 * Protocol agent whose sessions are parley conversations. No I/O of its
 * own: it reads the editor's lines and the conversations' events, writes
 * lines through a callback and reaches the conversations through a
 * backend (a server over REST, acp_remote.c; an in-process instance,
 * acp_local.c), so tests drive it with a fake backend and no loop.
 *
 * Methods (spec/acp-reducer.md A.3-A.6):
 *   initialize       protocol version 1, loadSession, prompt capabilities
 *                    (text, images, embedded resources), agentInfo
 *   session/new      backend create + attach; sessionId = conversation id
 *   session/load     attach; every event replayed as session/update (user
 *                    messages as user_message_chunk too), then the answer
 *                    once the backend says the history is delivered
 *                    (acpa_synced); an unknown id is -32002 saying so
 *   session/prompt   the prompt posted as a user message with run (text
 *                    as text; an image, or a resource's image blob, as an
 *                    image (a data: URL); a resource's text inlined as
 *                    <context ref="URI">; a resource_link, or another
 *                    blob, as "@URI"; audio refused); the
 *                    conversation's events stream as updates; the answer
 *                    is {stopReason} when an event ends the turn
 *                    (acp_out_event), counted only after the prompt's own
 *                    message came back (or, if it came back changed, a run
 *                    after a user message), so a stale stop of the last
 *                    turn cannot end this one
 *   session/cancel   pause; the paused status answers cancelled
 * When the conversation waits for confirmation, session/request_permission
 * goes to the editor; "allow" confirms, anything else rejects.
 *
 * The editor's own prompt is not echoed back as user_message_chunk while
 * it runs (the editor shows it already); messages other clients post are.
 * A line that is not JSON is -32700, not JSON-RPC -32600, an unknown
 * method -32601, bad params -32602; a notification is never answered.
 * At the editor's end the turns still running are paused (acpa_eof).
 */
#ifndef PARLEY_ACP_AGENT_H
#define PARLEY_ACP_AGENT_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

/* A line longer than this (bytes, without its newline) is refused. */
#define ACPA_LINE_MAX (16u << 20)

/* How the core reaches conversations. Every function may block (the
 * caller's thread is the core's) and answers 0, or a negative errno with
 * one line in why: -ENOENT for no such conversation. */
typedef struct acpa_backend {
    void *ud;
    /* A new conversation for a session in directory cwd (NULL: none):
     * its id into id. */
    int (*create)(void *ud, const char *cwd, char id[64], char *why, size_t n);
    /* Start the conversation's events to acpa_event, from its first, then
     * acpa_synced once its history is all delivered, then live ones. */
    int (*attach)(void *ud, const char *cid, char *why, size_t n);
    /* A user message (OpenHands content blocks, lent) and a run. */
    int (*post)(void *ud, const char *cid, json_t *content, char *why, size_t n);
    int (*pause)(void *ud, const char *cid, char *why, size_t n);
    /* Answer a waiting confirmation: run on, or reject the pending calls
     * (saying reason). */
    int (*confirm)(void *ud, const char *cid, bool accept, const char *reason, char *why, size_t n);
} acpa_backend;

/* One whole line (compact JSON and '\n') for stdout. */
typedef void (*acpa_write_fn)(void *ctx, const char *line, size_t len);

typedef struct acpa acpa;

/* NULL if out of memory. b is copied. */
acpa *acpa_new(const acpa_backend *b, acpa_write_fn write, void *ctx);
void acpa_free(acpa *a);

/* One line from the editor (without its newline). */
void acpa_line(acpa *a, const char *line, size_t len);
/* A line longer than ACPA_LINE_MAX came (and was dropped). */
void acpa_line_too_long(acpa *a);
/* An event of an attached conversation (its JSON bytes), in log order. */
void acpa_event(acpa *a, const char *cid, const char *json, size_t len);
/* The attached conversation's history is all delivered. */
void acpa_synced(acpa *a, const char *cid);
/* The conversation's events stopped coming (why: one line). */
void acpa_ended(acpa *a, const char *cid, const char *why);
/* The editor's end (stdin's): each turn still running is paused, as a
 * session/cancel would, and answered cancelled, so that a conversation
 * does not run on with nobody to ask or answer, nor (in process) stay
 * "running" in its log after the process is gone. The conversations only
 * watched go on. Each pause waits as long as the backend bounds a call. */
void acpa_eof(acpa *a);

/* Sessions open (tests). */
size_t acpa_sessions(const acpa *a);

#endif
