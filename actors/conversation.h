/*
 * conversation.h - a conversation's actors, and the service that finds
 * them: the protocol producers and subscribers speak to a conversation.
 *
 * Each conversation is a small supervision tree on one loop (chosen by
 * hashing its id): the conversation actor, which owns the status and the
 * order of the conversation's events, and its stuck detector. Every append
 * goes through the conversation actor: validated (event.h), checked by the
 * compliance gate (gate.h), stamped, serialized once, handed to the store's
 * committer, and answered only once durable (or refused). Only then do
 * subscribers see it. Status changes, the stuck detector's findings, nudges
 * and crash recovery are events too, appended through the same path, so
 * the log alone rebuilds everything after a restart.
 *
 * Requests (rt_ask or rt_call), each answered with CONV_RESULT: arg is the
 * outcome, an HTTP status (201, 202, 409, 422, 503, 500), buf a JSON body:
 *   201 {"events": [{"id", "index"}...]}    durable (or already there:
 *                                            "duplicate": true)
 *   202 {"events": [{"id"}], "detail"}       deferred, durably
 *   409 {"detail", "rule", "event_id", "pending_tool_call_ids": [...]}
 *   422 {"detail"}                            not a valid event
 *   503 {"detail", "retry_after": s}          a bound was reached; retry
 *   500 {"detail"}                            the store failed
 */
#ifndef CONVERSATION_H
#define CONVERSATION_H

#include "runtime/rt.h"
#include "store/store.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum {
    /* requests */
    CONV_APPEND = RT_KIND_USER + 100, /* buf: one event object, or an array
                                         (all or nothing) */
    CONV_CONTROL,                     /* arg: conv_control */
    CONV_SUBSCRIBE,                   /* arg: how many past events to replay
                                         first (at most 20), | CONV_SUB_NOTES to
                                         get CONV_NOTE instead of CONV_EVENT,
                                         | CONV_SUB_TOLD (see CONV_DROPPED);
                                         reply_to is the subscriber; answered
                                         CONV_RESULT 200 {"count", "status"}:
                                         count is the index of the first event
                                         it will get live; 503 once max_subscribers
                                         CONV_SUB_TOLD subscribers are there */
    CONV_UNSUBSCRIBE,                 /* reply_to is the subscriber */
    CONV_EXPIRE,                      /* expire every hold and deferral now */
    CONV_STATUS,                      /* answered CONV_RESULT 200 {"status"} */
    CONV_SYNC,                        /* answered once every subscriber has handled
                                         what was published before, and all that
                                         was accepted (including what subscribers
                                         asked for meanwhile) is durable; also sent
                                         to subscribers, who answer CONV_SYNC_DONE */
    CONV_SYNC_DONE,
    CONV_DELETE,   /* remove the conversation and its files, once what was
                      accepted before is durable; answered 200 {"success"};
                      then the conversation's actors stop, and every later
                      request is answered 404 */
    CONV_STOPPING, /* a notice: the server is stopping, so every event held
                      for its parent is refused now (503), and so is any
                      that would be held from now on */
    /* the reply */
    CONV_RESULT,
    /* to subscribers, in log order: arg = index, buf = the event's bytes */
    CONV_EVENT,
    /* to CONV_SUB_NOTES subscribers instead: arg = index, buf = the event's
     * stuck_note (stuck.h), computed once from the parsed event, so that the
     * stuck detector never parses an event again */
    CONV_NOTE,
    /* to a CONV_SUB_TOLD subscriber, as its last message from this
     * conversation actor: it is no longer subscribed. arg 0: it was not
     * keeping up (its mailbox was full), 1: the conversation actor stopped
     * (deleted, restarted, shutting down). Nothing it was owed is lost: the
     * events are in the log; subscribe again to go on. */
    CONV_DROPPED,
};

enum { CONV_SUB_NOTES = 0x100, CONV_SUB_TOLD = 0x200 };

typedef enum conv_control {
    CONV_RUN = 1,   /* status -> running */
    CONV_PAUSE,     /* PauseEvent, status -> paused */
    CONV_INTERRUPT, /* InterruptEvent, status -> paused */
} conv_control;

typedef enum conv_policy {
    CONV_REJECT = 0, /* default: violations are refused */
    CONV_OBSERVE,    /* violations are appended and recorded */
} conv_policy;

typedef enum conv_status {
    CONV_IDLE = 0,
    CONV_RUNNING,
    CONV_PAUSED,
    CONV_WAITING_FOR_CONFIRMATION,
    CONV_FINISHED,
    CONV_ERROR,
    CONV_STUCK,
    CONV_DELETING,
} conv_status;

const char *conv_status_name(conv_status s);
int conv_status_parse(const char *s); /* -1 if unknown */
struct ev;
/* How an accepted event moves the status, if it does: -1 if not. */
int conv_status_of(const struct ev *e);
/* May the status go from `from` to `to` (spec §2.4)? */
bool conv_transition_ok(conv_status from, conv_status to);
/* What the store cannot take, though valid (ids beyond its key sizes,
 * kinds never stored): -EINVAL and one line in err, else 0. */
int conv_storable(const struct ev *e, char *err, size_t errlen);

/* How long a conversation keeps its log open without a request, by default. */
#define CONV_IDLE_CLOSE_MS (5 * 60 * 1000ull)

typedef struct conv_opts {
    conv_policy policy;
    uint64_t defer_timeout_ms; /* default 10 min */
    uint32_t defer_max;        /* default 64 */
    uint64_t hold_timeout_ms;  /* default 5 s */
    uint32_t hold_max;         /* default 64 */
    uint32_t checkpoint_every; /* state checkpoint every N events; default 1024 */
    uint32_t mailbox_cap;      /* bound of the conversation's mailbox; default 4096 */
    uint32_t max_subscribers;  /* CONV_SUB_TOLD subscribers (WebSockets); default 1000 */
    uint64_t idle_close_ms;    /* let the log go after this long without a request;
                                  default 5 min; UINT64_MAX: never */
    bool measure;              /* time the gate: CONV_STATUS reports "gate_ns"
                                  (for benchmarks) */
} conv_opts;

/* The service: one per server. */
typedef struct convs convs;

int convs_new(rt_runtime *rt, st_store *store, const conv_opts *o, convs **out);
/* Frees the service. Conversations end with the runtime; the order to
 * close a server in is rt_runtime_wait, st_store_close, convs_free,
 * rt_runtime_free. */
void convs_free(convs *c);

/* The conversation actor of an existing conversation, started on first use
 * (a held reference: rt_actor_unref it). -ENOENT if the store has no such
 * conversation. Any thread. */
int convs_get(convs *c, const rt_uuid *id, rt_actor **out);
/* Stop the actors of a conversation (after CONV_DELETE removed it). */
void convs_stop(convs *c, const rt_uuid *id);
/* The server is stopping: CONV_STOPPING to every running conversation. */
void convs_stopping(convs *c);
/* Create it (meta stored as given) and start it; *created false if it
 * existed already (then it is returned as is). */
int convs_create(convs *c, const rt_uuid *id, rt_buf *meta, rt_actor **out, bool *created);

#endif
