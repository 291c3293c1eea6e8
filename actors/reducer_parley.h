/*
 * reducer_parley.h - parley's own events (OpenHands event JSON, as the
 * conversation log stores them) as session events for the reducer, so a
 * live parley conversation, a hosted ACP agent's included, reduces to the
 * same blocks as an imported transcript (spec/acp-reducer.md §B.1-B.3).
 * Pure: no I/O.
 *
 * Everything goes to conversation "main" (a sub-agent's own events live
 * in its own conversation's log, not in this one). Block ids come from
 * the event's id and the call's tool_call_id, so an event fed again
 * merges onto its own blocks; an event without an id gets "parley-<n>"
 * (not stable). Every block takes the event's "timestamp" as it is.
 * Blocks made from an event are complete, but tool_use: it is upserted
 * without a status (new: pending, the reducer's default; already there:
 * kept), so an action fed again after its result does not reopen it.
 *
 *   MessageEvent, source user   user_message <id>: the text parts joined
 *                               with "\n", or with an image the parts in
 *                               order (a data: URL as base64 with its
 *                               mediaType, any other as url); nothing if
 *                               blank without an image. extended_content
 *                               and activated_skills are not shown.
 *   MessageEvent, source agent  thinking <id>-reasoning (reasoning_content,
 *                               else thinking_blocks), then assistant_text
 *                               <id>; blank ones are left out.
 *   MessageEvent, environment   system <id> {subtype "log" (hook:
 *     or hook                   "hook_response"), message: the text,
 *                               metadata {source}}.
 *   ActionEvent                 thinking <id>-reasoning, assistant_text
 *                               <id>-thought (the thought parts; thinking
 *                               for a hosted ACP agent's action, whose
 *                               thought is its thought chunks), then
 *                               tool_use <tool_call_id> {toolName:
 *                               tool_name, input: the action minus "kind"
 *                               (an ACP call's raw_input; no action: the
 *                               call's arguments parsed, else
 *                               {"arguments": the string}), description:
 *                               summary, displayName: an ACP call's
 *                               title}. Parallel calls: one each.
 *     ThinkAction, FinishAction as upstream's ACP mapping shows them (no
 *                               tool call): thinking <id>-think (its
 *                               thought), assistant_text <id>-finish (its
 *                               message); their observations make nothing.
 *   ObservationEvent            tool_use <tool_call_id> status complete
 *                               (error if observation.is_error), then
 *                               tool_result result-<tool_call_id>
 *                               {output: the content's text parts joined,
 *                               else the observation object, isError}.
 *   UserRejectObservation       tool_use error, tool_result isError with
 *                               the rejection_reason (metadata
 *                               {rejectionSource}).
 *   AgentErrorEvent             with a tool_call_id: as a rejection, the
 *                               error as output; without: error <id>
 *                               {message: error, code: classification.kind}.
 *   ConversationErrorEvent      error <id> {message: detail, code}, with
 *                               metadata naming the rule parley's own
 *                               findings say: StuckPatternDetected
 *                               ("stuck: RULE: ...") {stuckRule},
 *                               ComplianceViolation, a gate rule broken
 *                               under the observe policy ("observed RULE:
 *                               ...") {gateRule, policy: "observe"},
 *                               DeferredMessageExpired {gateRule}.
 *   ConversationStateUpdateEvent, key execution_status: system <id>
 *                               {subtype "status", message "status: S"
 *                               (stuck: "status: stuck (rule: R)", R from
 *                               the finding just before), metadata
 *                               {executionStatus, stuckRule?}}. finished,
 *                               idle, error and stuck end the run (nothing
 *                               more comes until the user or a run starts
 *                               one), so a session:idle for main follows
 *                               and what is still pending completes.
 *                               paused and waiting_for_confirmation do
 *                               not: the calls still pending there are
 *                               yet to run or be confirmed. Other keys
 *                               (stats, full_state, ...) make nothing.
 *   SystemPromptEvent           system <id> {subtype "session_start",
 *                               message: the prompt, metadata {tools:
 *                               their titles}}.
 *   Condensation                system <id> {subtype "log", message: the
 *                               summary, else "condensed N events",
 *                               metadata {condensedEvents: N}}.
 *   HookExecutionEvent          only one that blocked or failed: system
 *                               <id> {subtype "hook_response"}.
 *   ACPToolCallEvent            (upstream's ACP agent) tool_use
 *                               <tool_call_id> {toolName: tool_kind,
 *                               input: raw_input, displayName: title};
 *                               completed or failed also a tool_result.
 *   the rest                    nothing: PauseEvent and InterruptEvent
 *                               (the status change that follows says it),
 *                               CondensationRequest, StreamingDeltaEvent,
 *                               TokenEvent, LLMCompletionLogEvent,
 *                               ServerErrorEvent, unknown kinds.
 *
 * Sub-agents (subagent:spawned before the tool_use, its result as
 * subagent:completed {status completed/failed, output} instead of a
 * tool_result; the tool_use still gets its status): OpenHands' task tool
 * (action kind TaskAction, or tool_name "task"/"Task": prompt,
 * subagent_type, description; a TaskObservation's task_id is the agentId),
 * its delegate tool's "delegate" command (DelegateAction or tool_name
 * "delegate"; one sub-agent for the call, its prompt the tasks as "ID:
 * TASK" lines), and an ACP call whose raw_input has a string prompt and
 * subagent_type (Claude Code's Task through ACP). Not recognized: the
 * delegate tool's "spawn" command (it starts no work: an ordinary
 * tool_use), and anything else that starts agents.
 *
 * State: the tool_call_ids of the delegations seen (to tell their results
 * apart) and the last stuck rule; nothing of the events' content.
 */
#ifndef REDUCER_PARLEY_H
#define REDUCER_PARLEY_H

#include <jansson.h>
#include <stddef.h>

typedef struct parley_conv parley_conv;

parley_conv *parley_conv_new(void); /* NULL if out of memory */
void parley_conv_free(parley_conv *c);

/*
 * One event of a parley log: its session events ({type, payload,
 * context}) appended to out, in the order they are to be reduced. 0
 * (also for kinds that make nothing); -EINVAL for an event that cannot be
 * converted (not an object, no kind, a message without llm_message, a
 * call or result without tool_call_id, an execution_status that is not a
 * string): why says what, nothing is appended and nothing remembered;
 * -ENOMEM.
 */
int parley_conv_event(parley_conv *c, const json_t *event, json_t *out, char *why, size_t whylen);

#endif
