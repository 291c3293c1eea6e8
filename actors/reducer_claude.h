/*
 * reducer_claude.h - Claude Code / Agent SDK messages as session events
 * for the reducer (vectors/reducer/README.md "Claude", spec §B.4). One
 * converter reads a whole session: transcript lines on disk and live SDK
 * messages (stream_event) alike, so a transcript and the live stream of
 * the same session reduce to the same blocks. Pure: no I/O.
 *
 * It keeps what a line alone cannot say: how many content blocks earlier
 * lines of the same API message had (block ids are "<message.id>-<n>",
 * n counted over the whole message, F1), each Task's prompt (to drop the
 * SDK's echo of it in a subagent, F6, and to find which tool_result a
 * Task result belongs to, F5), and the open stream's index -> block id.
 * Memory: O(lines with a uuid + Tasks), not the lines' content.
 */
#ifndef REDUCER_CLAUDE_H
#define REDUCER_CLAUDE_H

#include "actors/reducer.h"

#include <jansson.h>

typedef struct claude_conv claude_conv;

claude_conv *claude_conv_new(void); /* NULL if out of memory */
void claude_conv_free(claude_conv *c);

/*
 * One parsed line: its session events are appended to out, in the order
 * they are to be reduced. conv: the conversation to put them in (a
 * subagent transcript's agent id), or NULL for the line's own
 * (parent_tool_use_id, else "main"). 0, also for lines that make nothing
 * (system, summary, result...); -EINVAL for a line that cannot be
 * converted (why says what), which appends nothing and changes nothing
 * else (F2: the other lines still count); -ENOMEM.
 */
int claude_conv_line(claude_conv *c, const json_t *line, const char *conv, json_t *out, char *why,
                     size_t whylen);

/*
 * Before a subagent transcript (agent id `id`, its parsed lines) is fed:
 * if r knows no subagent by that id (its Task never completed, so the id
 * was never seen), the first entry without agentId whose prompt is the
 * transcript's first user text gets it, through a subagent:spawned
 * appended to out (F4). Nothing otherwise.
 */
int claude_subagent_begin(reducer *r, const char *id, const json_t *lines, json_t *out);

/*
 * A whole session, {"main": [LINE...], "subagents": [{"id", "transcript":
 * [LINE...]}]}, reduced into r as the vectors' README runs it: main lines,
 * then each subagent transcript of more than one line under its id.
 * Lines that cannot be converted are skipped; *skipped counts them
 * (may be NULL). 0 or -ENOMEM.
 */
int claude_reduce(reducer *r, const json_t *session, size_t *skipped);

#endif
