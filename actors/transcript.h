/*
 * transcript.h - agent transcripts as parley events: a Claude Code
 * session (JSONL, one record a line) or an OpenCode session export
 * (`opencode export`), turned into the OpenHands events their agent would
 * have posted to parley, so that `parley import` and `parley lint` put
 * them through the same gate as any producer. Pure: no I/O.
 *
 * What becomes what (both sources):
 * - a user's text and images: a user MessageEvent (TextContent parts, an
 *   image as ImageContent with a data: or http URL);
 * - an assistant's text: an agent MessageEvent; its thinking: an agent
 *   MessageEvent of no text with reasoning_content (and thinking_blocks);
 *   one content block, one event, so every event keeps its source's id
 *   and time. All events of one API message (Claude message.id, OpenCode
 *   assistant message id) carry it as llm_response_id, so parallel tool
 *   calls form one turn for the gate;
 * - a tool call: an ActionEvent, tool_call_id = the source's call id,
 *   tool_name = the tool, action = {"kind": "<Tool>Action", the input's
 *   members...} (no action when the input has a `kind` of its own; the
 *   arguments carry it), summary = the input's description or the title;
 * - its result: an ObservationEvent, observation = {"kind":
 *   "<Tool>Observation", "content": [text], "is_error"}; a Claude Task's
 *   result with an agent id is a "TaskObservation" with "task_id"; a
 *   Claude call the user refused ("The user doesn't want to ...") a
 *   UserRejectObservation. A result for a call never seen names tool
 *   "unknown" and no action: the gate refuses it (unmatched_tool_result),
 *   which is how a transcript that breaks the rules is reported;
 * - calls still open when the user speaks again (an interrupted tool,
 *   which transcripts leave without a result) are closed first by an
 *   AgentErrorEvent each, as a live conversation closes them. Text the
 *   harness adds (Claude isMeta / isSynthetic lines: a skill's
 *   instructions, command output) is not the user speaking: it closes
 *   nothing, and while calls are open it waits until they are answered,
 *   as a live conversation defers a message (so its record comes after
 *   later lines');
 * - everything else (Claude system, summary, result, stream_event lines;
 *   OpenCode step, patch, snapshot parts) makes nothing.
 *
 * Ids and times. Kept where the source has them: the Claude line's uuid
 * and timestamp, OpenCode message and part ids and their times (ms, as
 * ISO 8601 UTC with milliseconds). A line (part) that makes several
 * events gives its own id to its main one (the user's message; else the
 * first) and "<id>-<k>" to the others, k its place among them from 1; an
 * OpenCode result is "<part id>-result". So converting the same
 * transcript again gives the same ids, and importing it twice is an
 * idempotent retry event by event.
 *
 * Subagents. Claude sidechain lines (isSidechain, or a
 * parent_tool_use_id) are a subagent's own conversation: their records
 * carry "sub" (the agent id, else the parent tool use id), for the caller
 * to route or leave out; they never touch the main conversation's calls.
 *
 * Each event comes in a record {"event": E, "line": L} (Claude: the line
 * number the caller gave) or {"event": E, "message": M, "part": P}
 * (OpenCode, from 1; no part for a user message), plus "sub" when it is a
 * subagent's.
 */
#ifndef TRANSCRIPT_H
#define TRANSCRIPT_H

#include <jansson.h>
#include <stddef.h>

typedef enum tr_format {
    TR_NONE = 0, /* not a transcript (events, a vector, something else) */
    TR_CLAUDE,   /* a Claude Code JSONL record */
    TR_OPENCODE, /* an OpenCode export */
} tr_format;

/* What the first JSON value of an input says the input is. */
tr_format tr_detect(const json_t *first);

/* ---- Claude Code ----------------------------------------------------------- */

typedef struct tr_claude tr_claude;

tr_claude *tr_claude_new(void); /* NULL if out of memory */
void tr_claude_free(tr_claude *c);

/*
 * One parsed line (line: its number, for the records): its records are
 * appended to out, in order. 0, also for lines that make nothing;
 * -EINVAL for a line that cannot be converted (not an object, an unknown
 * record type, a user or assistant line without a message, a tool_use or
 * tool_result without its id): why says what, nothing is appended and
 * nothing remembered; -ENOMEM.
 */
int tr_claude_line(tr_claude *c, const json_t *line, long lineno, json_t *out, char *why,
                   size_t whylen);

/* The end of the transcript: what still waits is appended to out (a meta
 * line that came while calls were open, which never got their results).
 * 0 or -ENOMEM. */
int tr_claude_end(tr_claude *c, json_t *out);

/* ---- OpenCode -------------------------------------------------------------- */

/*
 * A whole export, {"info", "messages": [{"info", "parts"}]}: its records
 * appended to out. 0; -EINVAL (why says which message is bad; nothing
 * appended); -ENOMEM.
 */
int tr_opencode(const json_t *export_, json_t *out, char *why, size_t whylen);

/* ---- shared by both -------------------------------------------------------- */

/* Epoch milliseconds as "2025-06-03T14:00:00.700Z". */
void tr_iso_ms(long long ms, char out[32]);

#endif
