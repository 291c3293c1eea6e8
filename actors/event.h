/*
 * event.h - the event model: parsing, validating, stamping and serializing
 * the events of the OpenHands agent-server API (spec/openhands-api.md §1).
 *
 * An event is a JSON object with the base fields id, timestamp, source,
 * parent_id and kind (the bare class name), plus its kind's own fields.
 * Validation follows the upstream models: every required field present and
 * of the right type, enums within their values, and no unknown top-level
 * field (upstream models forbid extras). Nested payloads that carry their
 * own `kind` (actions, observations, tools...) are kept as given: custom
 * tools' payloads are opaque objects.
 *
 * Serialization is done once, when the event is accepted: compact, null
 * members omitted (recursively), base fields first in the order id,
 * timestamp, source, parent_id, the kind's fields in the order given, and
 * `kind` last in every object that has one. Those bytes are what the log
 * stores and every reader gets.
 *
 * Every event, whether it came as bytes or was made here as a jansson
 * value, is read into a document (runtime/jdoc.h) and checked and written
 * from there: one path, and an append builds no tree.
 *
 * Pure: no I/O, no global state; an ev belongs to one thread (a document's
 * reference count is not atomic).
 */
#ifndef EV_EVENT_H
#define EV_EVENT_H

#include "runtime/buf.h"
#include "runtime/jdoc.h"
#include "runtime/text.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum ev_kind {
    EV_INVALID = 0,
    EV_MESSAGE,              /* MessageEvent */
    EV_ACTION,               /* ActionEvent */
    EV_OBSERVATION,          /* ObservationEvent */
    EV_USER_REJECT,          /* UserRejectObservation */
    EV_AGENT_ERROR,          /* AgentErrorEvent */
    EV_SYSTEM_PROMPT,        /* SystemPromptEvent */
    EV_PAUSE,                /* PauseEvent */
    EV_INTERRUPT,            /* InterruptEvent */
    EV_CONDENSATION,         /* Condensation */
    EV_CONDENSATION_REQUEST, /* CondensationRequest */
    EV_CONDENSATION_SUMMARY, /* CondensationSummaryEvent (never stored) */
    EV_STATE_UPDATE,         /* ConversationStateUpdateEvent */
    EV_CONVERSATION_ERROR,   /* ConversationErrorEvent */
    EV_HOOK_EXECUTION,       /* HookExecutionEvent */
    EV_LLM_COMPLETION_LOG,   /* LLMCompletionLogEvent */
    EV_STREAMING_DELTA,      /* StreamingDeltaEvent (transient) */
    EV_TOKEN,                /* TokenEvent */
    EV_ACP_TOOL_CALL,        /* ACPToolCallEvent */
    EV_SERVER_ERROR,         /* ServerErrorEvent (transient) */
    EV_KIND_COUNT
} ev_kind;

typedef enum ev_source {
    EV_SRC_NONE = 0,
    EV_SRC_AGENT,
    EV_SRC_USER,
    EV_SRC_ENVIRONMENT,
    EV_SRC_HOOK,
} ev_source;

/* A parsed event: its object in a document (runtime/jdoc.h), read once,
 * and the fields the gate, the log and the detector ask about. The
 * strings point into the document, or into `own`: the stamps ev_stamp
 * made, a parent ev_set_parent set, and all of them once the ev is slim.
 * The base fields id, timestamp and parent_id are the event's own here
 * (ev_serialize writes these, not the document's). */
typedef struct ev {
    rt_jdoc *doc; /* the document; the ev holds one reference (NULL once slim) */
    uint32_t at;  /* the event's object in doc */
    ev_kind kind;
    ev_source source;            /* as given, else the kind's upstream default */
    const char *id;              /* NULL until stamped, if the producer left it out */
    const char *timestamp;       /* likewise */
    const char *parent_id;       /* NULL when absent or null */
    const char *tool_call_id;    /* actions, observations, rejections, agent errors */
    const char *llm_response_id; /* actions (required), messages (optional) */
    const char *tool_name;       /* actions, observations, rejections, agent errors */
    const char *state_key;       /* state updates: `key` */
    char *own;                   /* the copies above that are not in doc */
} ev;

/* Parse and validate one event from JSON text. On failure returns -EINVAL
 * and writes one line to err saying what is wrong ("ActionEvent: missing
 * required field 'tool_call_id'"). Events may come without id and
 * timestamp (ev_stamp fills them); everything else must be as upstream
 * requires. */
int ev_parse(const char *json, size_t len, ev *out, char *err, size_t errlen);
/* The same for the value `at` of a document (its elements, for a body
 * that is an array); takes a new reference to d. A key that occurs twice
 * is refused by the reader already. */
int ev_from_doc(rt_jdoc *d, uint32_t at, ev *out, char *err, size_t errlen);
/* The same for a jansson value (the events parley makes, tests): read
 * again from its text, so that every event is checked and written by the
 * one path above. The ev keeps no reference to obj. */
int ev_from_json(json_t *obj, ev *out, char *err, size_t errlen);
void ev_free(ev *e);
/* A top-level member that is a string, or NULL (absent, another type, or
 * a slim ev). */
const char *ev_string(const ev *e, const char *key);
/* The event as a jansson tree, as ev_serialize writes it (stamps
 * included); NULL on allocation failure. */
json_t *ev_json(const ev *e);
/* Keep e's fields, not its document: the strings above are copied into
 * one block of e's own and doc is released (NULL). For an event whose
 * bytes are made and whose document nobody will read again: the events of
 * a group waiting for its commit would keep theirs until it is durable. 0,
 * or -ENOMEM with e unchanged. */
int ev_slim(ev *e);

/* Kinds that are never stored (CondensationSummaryEvent, StreamingDelta-
 * Event, ServerErrorEvent): validated as events, refused by the log. */
bool ev_kind_transient(ev_kind k);
/* ObservationEvent, AgentErrorEvent, UserRejectObservation. */
bool ev_observation_like(const ev *e);
/* Events the tool-call rules look at: messages, actions, observation-like. */
bool ev_llm_convertible(const ev *e);

/* Fill what the producer left out: `id` (a random UUID4, dashed), the
 * `timestamp` (now, naive local ISO-8601 with microseconds, the fraction
 * omitted when zero, as upstream), and `parent_id` (= head when head is not
 * NULL and the event has none: head is an event's id as read, so UTF-8,
 * and taken without a second check). 0 or a negative errno. The fields are
 * added to e->obj itself, which ev_from_json's caller may share. */
int ev_stamp(ev *e, const char *head);

/* Set (or, with NULL, remove) e's parent_id: 0 or -ENOMEM. */
int ev_set_parent(ev *e, const char *parent_id);

/* The canonical bytes (see the top of this file); NULL on allocation
 * failure. */
rt_buf *ev_serialize(const ev *e);
/* The same into w, without the members timestamp and parent_id if
 * `unparented` (what a retry is compared by): 0, or -EINVAL for a value
 * with no JSON text; out of memory is w->failed. */
int ev_write(rt_text *w, const ev *e, bool unparented);
/* Canonical bytes of any JSON value, by the same rules (tests, equality):
 * the base fields go first in the top-level object only. A NUL-terminated
 * string the caller frees with free(); NULL on allocation failure. */
char *ev_canonical_json(json_t *v);
/* Any JSON value appended to w by those rules, no field moved (several
 * times jansson's json_dumps' speed on long strings): 0, or -EINVAL for
 * a value that has no JSON text (NaN); out of memory is w->failed. */
int ev_json_append(rt_text *w, json_t *v);

const char *ev_kind_name(ev_kind k);      /* "ActionEvent", ...; NULL if not a kind */
ev_kind ev_kind_from_name(const char *s); /* EV_INVALID if unknown */
/* The fully qualified upstream class path of a kind, as the REST `kind`
 * filter compares it ("openhands.sdk.event.llm_convertible.action.ActionEvent"). */
const char *ev_kind_qualified(ev_kind k);
const char *ev_source_name(ev_source s); /* "agent", ...; NULL for EV_SRC_NONE */

/* A user's Message as upstream posts it (POST .../events, a WebSocket
 * frame): {"source": "user", "llm_message": {"role", "content"}, "kind":
 * "MessageEvent"}, not stamped yet. NULL on allocation failure. */
json_t *ev_user_message(const char *role, json_t *content);

/* The naive local timestamp for a given moment (for stamping and tests). */
void ev_format_timestamp(long long sec, long usec, char out[32]);
/* Now, as ev_stamp stamps it. */
void ev_now_timestamp(char out[32]);

#endif
