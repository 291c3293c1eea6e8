/*
 * gate.h - the compliance gate: the tool-call rules that LLM APIs enforce,
 * checked before an event is appended (vectors/README.md, spec/checks.md §2).
 *
 * Pure logic over a small state: the tool calls pending (tool_call_id ->
 * the action's id), the llm_response_id of the assistant turn they belong
 * to, and the head (the last event on the conversation's branch). What was
 * completed is not kept here: the conversation's log indexes every action
 * and result by its tool call id (keys "a:<id>" and "o:<id>"), and the gate
 * asks it through gate_lookup, which also covers events accepted but not
 * yet durable. Memory is O(pending calls), and duplicate detection exact.
 *
 * For each offered event, gate_check says: accept; defer (a user,
 * environment or hook message while calls are pending: it waits, durably,
 * until no call is); hold (its parent is not in the log yet: it waits,
 * bounded, for the parent); or reject with a rule. gate_accept then moves
 * the state on; the caller decides when (at once, or after a tentative
 * batch is known to be all acceptable).
 */
#ifndef GATE_H
#define GATE_H

#include "actors/event.h"
#include "runtime/text.h"

#include <stdbool.h>
#include <stddef.h>

typedef enum gate_rule {
    GATE_OK = 0,
    GATE_INTERLEAVED_MESSAGE,
    GATE_INTERLEAVED_ACTION,
    GATE_DUPLICATE_TOOL_CALL_ID,
    GATE_UNMATCHED_TOOL_RESULT,
    GATE_DUPLICATE_TOOL_RESULT,
    GATE_UNKNOWN_PARENT,
    GATE_STALE_PARENT,
    GATE_DUPLICATE_EVENT_ID,
    GATE_INVALID_EVENT,
} gate_rule;

typedef enum gate_verdict {
    GATE_ACCEPT = 0,
    GATE_DEFER,
    GATE_HOLD,
    GATE_REJECT,
    GATE_ALREADY, /* the same event is in the log already: an idempotent retry */
} gate_verdict;

/* What the gate asks about the log (durable and accepted-in-flight). */
typedef struct gate_lookup {
    void *ctx;
    /* Is an event with e's id there? 0 no, 1 yes with the same content,
     * 2 yes with different content. */
    int (*known)(void *ctx, const ev *e);
    /* Is there an event with this id (any content)? */
    bool (*has_id)(void *ctx, const char *id);
    /* Was a record written with this key ("a:<tool_call_id>" for actions,
     * "o:<tool_call_id>" for results)? */
    bool (*has_key)(void *ctx, const char *key, size_t len);
} gate_lookup;

typedef struct gate gate;

gate *gate_new(void);
void gate_free(gate *g);
/* A copy, for a tentative batch that may have to be taken back. */
gate *gate_clone(const gate *g);

/* The verdict for e (already validated); *rule says why when GATE_REJECT
 * (and which rule would apply at expiry for DEFER and HOLD). No change. */
gate_verdict gate_check(const gate *g, const ev *e, const gate_lookup *lk, gate_rule *rule);
/* e is accepted (after gate_check said so, or in observe mode): record it. */
void gate_accept(gate *g, const ev *e);

/* The key an accepted event's record gets (see above): written to `out`
 * (cap >= 256); returns its length, 0 if the event has none. */
size_t gate_key(const ev *e, char *out, size_t cap);

size_t gate_pending_count(const gate *g);
/* The i-th pending tool call id (and its action's id and tool name, when
 * not NULL), in the order the actions came; NULL (and NULLs) past the end. */
const char *gate_pending_call(const gate *g, size_t i, const char **action_id,
                              const char **tool_name);
const char *gate_head(const gate *g);

/* "interleaved_message", ... ("" for GATE_OK). */
const char *gate_rule_name(gate_rule r);

/* The state as JSON text at the end of w, for checkpoints:
 * {"head":..,"batch":..,"pending":[[call,action,tool],...]} (null for what
 * is not there). Written directly, not through jansson: a checkpoint is
 * written each time a conversation goes to rest. */
void gate_write(rt_text *w, const gate *g);
/* Replaces g's state with the saved one (gate_write's text, read); -EINVAL
 * if the object is not what gate_write writes (or -ENOMEM), and then g is
 * unchanged. */
int gate_load(gate *g, json_t *saved);

#endif
