/*
 * acp_map.h - the one mapping between OpenHands events and the Agent
 * Client Protocol, both ways. Pure: no I/O, no loop.
 * - In (acp_map.c): a hosted agent's ACP session updates as events, and
 *   the conversation's user messages as ACP prompts. The adapter
 *   (acp_host.c) feeds it and appends what it makes through the
 *   conversation, where the compliance gate judges every event as it
 *   judges any producer's.
 * - Out (acp_map_out.c): a conversation's events as the session updates
 *   `parley acp` sends an editor, and the stop reason a status gives a
 *   prompt turn (below, at acp_out).
 *
 * One prompt turn (spec/acp-reducer.md A.6, A.7):
 * - agent_message_chunk: consecutive chunks (one messageId) become one
 *   agent MessageEvent, made when something else happens or the turn ends;
 * - agent_thought_chunk: gathered, and given to what comes next: the next
 *   ActionEvent's `thought`, or the next message's `reasoning_content`
 *   (a message of no text of its own at the end of the turn if nothing
 *   came);
 * - tool_call: an ActionEvent (tool_name = the ACP kind, the toolCallId as
 *   tool_call_id unchanged, rawInput as the call's arguments); ACP has no
 *   response id, so every call of one turn has the turn's llm_response_id,
 *   as parallel calls of one LLM response have;
 * - tool_call_update: merged into the call; its one transition into
 *   completed gives an ObservationEvent, into failed an AgentErrorEvent,
 *   each with the call's content rendered as text (and kept as ACP sent
 *   it). Progress frames make nothing (they carry the whole output so far;
 *   one event each would store it quadratically). A terminal update for a
 *   call never announced is passed on as a result all the same, for the
 *   gate to refuse (unmatched_tool_result);
 * - plan: an action and its observation, the plan's entries in both;
 * - the rest (commands, modes, usage, session info) make no event.
 * When the turn ends, calls still open get an AgentErrorEvent saying why.
 *
 * Bounds: a message or thought longer than text_max, or more than
 * updates_max updates in one turn, is a flood (acp_turn_update fails with
 * -E2BIG and says so); a JSON value of the agent's (rawInput, rawOutput,
 * content) larger than value_max is replaced by a note of its size.
 */
#ifndef ACP_MAP_H
#define ACP_MAP_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

typedef struct acp_limits {
    size_t text_max;    /* bytes of one message or thought; 0: 1 MiB */
    size_t value_max;   /* bytes of one rawInput/rawOutput/content; 0: 1 MiB */
    size_t updates_max; /* session/update notifications a turn; 0: 100,000 */
} acp_limits;

/* Makes a fresh event id into out (36 characters and NUL). */
typedef void (*acp_id_fn)(void *ctx, char out[37]);

typedef struct acp_turn acp_turn;

/* A turn whose events carry llm_response_id `response_id`. ids: NULL for
 * random UUIDs. NULL if out of memory. */
acp_turn *acp_turn_new(const char *response_id, const acp_limits *l, acp_id_fn ids, void *ctx);
void acp_turn_free(acp_turn *t);

/* One session/update's `update` object: the events it completes are
 * appended to `out` (an array), in order. 0; -E2BIG on a flood, -EINVAL
 * for an update without what the protocol requires; why (if given) says
 * what. Nothing is appended when it fails. */
int acp_turn_update(acp_turn *t, json_t *update, json_t *out, char *why, size_t whylen);

/* The turn is over: what is gathered becomes events, and each call still
 * open an AgentErrorEvent whose error is `why`. */
void acp_turn_end(acp_turn *t, const char *why, json_t *out);

/* The call was answered by someone else (a user rejected it): whatever
 * the agent says of it from now on makes no event. */
void acp_turn_close_call(acp_turn *t, const char *call_id);

/* Tool calls announced and not closed yet. */
size_t acp_turn_open_calls(const acp_turn *t);
/* Whether the turn produced anything yet (an event made or pending). */
bool acp_turn_started(const acp_turn *t);

/* What a prompt's stop reason means for the conversation: the
 * execution_status to set ("finished", "error"; NULL: leave it, as after a
 * cancel, which a pause asked for) and, for an error, why. */
const char *acp_stop_status(const char *stop_reason, const char **why);

/* The ACP prompt (an array of ContentBlocks) for a user MessageEvent, or
 * NULL if the event is not a message to the agent (not a MessageEvent, or
 * not from the user or the environment). */
json_t *acp_prompt_of(json_t *event);

/* Replace each of the n secret values, wherever it occurs in a string of
 * v, by "<secret-hidden>" (a plain substring replace, as upstream's;
 * empty values are skipped). */
#define ACP_SECRET_MASK "<secret-hidden>"
void acp_mask(json_t *v, const char *const *secrets, size_t n);

/* ---- out: a conversation's events as session/update, for an editor ----
 *
 * Each event gives zero or more `update` objects (spec/acp-reducer.md
 * A.7), in order; every chunk's messageId is the event's id:
 *
 *   MessageEvent, role user         user_message_chunk per content block
 *                                   (text; image URL: data: as an image
 *                                   block, else a resource_link)
 *   MessageEvent, role assistant    agent_thought_chunk (reasoning_content),
 *                                   then agent_message_chunk per block
 *   ActionEvent                     agent_thought_chunk (reasoning_content,
 *                                   then each `thought` text), then by the
 *                                   action's kind:
 *     ThinkAction                   agent_thought_chunk (its thought)
 *     FinishAction                  agent_message_chunk (its message)
 *     ACPPlanAction                 plan (its entries)
 *     ACPToolCallAction             tool_call as the hosted agent sent it:
 *                                   title, kind, content, locations, rawInput
 *     any other, or none            tool_call: title and kind as upstream's
 *                                   get_tool_title/get_tool_kind (A'), a
 *                                   location for a FileEditorAction's path,
 *                                   a diff for its create/str_replace,
 *                                   rawInput = the action
 *   ObservationEvent of
 *     Think/Finish/ACPPlanObservation  nothing (their action said it all)
 *     ACPToolCallObservation        tool_call_update completed as the agent
 *                                   sent it: content, rawOutput (and title)
 *     TaskTrackerObservation        tool_call_update completed, then plan
 *                                   (title; todo/in_progress/done; medium)
 *     any other                     tool_call_update completed (failed if
 *                                   is_error): its text, rawOutput = it
 *   AgentErrorEvent                 tool_call_update failed, the error as
 *                                   content (nothing without a tool_call_id)
 *   UserRejectObservation           tool_call_update failed, the reason
 *   ACPToolCallEvent (upstream's)   tool_call, then tool_call_update: its
 *                                   status, content, rawInput, rawOutput
 *   ConversationErrorEvent          agent_message_chunk "Error: detail",
 *                                   unless the detail is a hosted agent's
 *                                   stop reason (acp_stop_status): the stop
 *                                   reason says that one
 *   anything else (status changes, system prompt, pause, condensation,
 *   hooks, unknown kinds)           nothing
 *
 * A result (completed, failed) for a call the editor was never told of
 * comes as a whole tool_call instead of an update, so that it has a title.
 * Upstream differs: it sends no user messages on session/load (a bug),
 * prefixes thoughts "**Reasoning**:", titles untitled calls "", renders
 * actions as content, and leaves a task tracker's call in_progress.
 *
 * Bounds: a text (message, thought, error, result) is cut at text_max
 * bytes; a JSON value copied (rawInput, rawOutput, content, locations,
 * entries, a diff's texts) larger than value_max is left out or, for
 * rawInput/rawOutput, replaced by a note of its size; a title is cut at
 * ACP_TITLE_MAX; the calls remembered are at most ACP_OUT_CALLS_MAX. */
#define ACP_TITLE_MAX     1024
#define ACP_OUT_CALLS_MAX 4096

typedef struct acp_out acp_out;

/* What one editor was told of a conversation so far. NULL if out of
 * memory. Only text_max and value_max of l are used. */
acp_out *acp_out_new(const acp_limits *l);
void acp_out_free(acp_out *o);

/* The updates for `event` (not changed) appended to `out` (an array); an
 * event that maps to nothing appends nothing. The updates may hold
 * references to the event's values (rawInput, content, ...), not copies:
 * change neither while the other is in use. If the event ends a prompt
 * turn, *stop (if given) is its stop reason, else NULL:
 *   execution_status finished       end_turn
 *   idle, after running             end_turn (a rejected confirmation)
 *   paused                          cancelled (session/cancel pauses)
 *   error                           the hosted agent's own stop reason if
 *                                   the error before it was one (refusal,
 *                                   max_tokens, max_turn_requests), else
 *                                   refusal (ACP has no error stop reason)
 *   stuck                           refusal (parley stopped the agent)
 * running, waiting_for_confirmation and the rest end nothing. 0; -EINVAL
 * if event is not an object or out not an array. */
int acp_out_event(acp_out *o, json_t *event, json_t *out, const char **stop);

#endif
