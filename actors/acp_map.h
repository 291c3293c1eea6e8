/*
 * acp_map.h - a hosted agent's ACP session updates as OpenHands events,
 * and the conversation's user messages as ACP prompts. Pure: no I/O, no
 * loop; the adapter (acp_agent.c) feeds it and appends what it makes
 * through the conversation, where the compliance gate judges every event
 * as it judges any producer's.
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

#endif
