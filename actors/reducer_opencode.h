/*
 * reducer_opencode.h - OpenCode sessions as session events for the
 * reducer (vectors/reducer/README.md "OpenCode", spec §B.5). Two inputs
 * end in the same blocks: the JSON `opencode export` prints (a whole
 * session after the fact) and the server's event stream (live). Pure:
 * no I/O.
 *
 * Ids come from the source (F8): a user message's block is its message
 * id, a part's block its part id, a tool's result "result-<part id>";
 * times are the part's own, else its message's (F7). A task tool that
 * names its child session is a subagent whose agent id is that session
 * id from the start, so the child's blocks find their entry (F11).
 */
#ifndef REDUCER_OPENCODE_H
#define REDUCER_OPENCODE_H

#include "actors/reducer.h"

#include <jansson.h>
#include <stddef.h>

/*
 * One `opencode export` object, {"info", "messages": [{"info", "parts"}]},
 * converted to session events in conversation conv ("main", or a child
 * session's id: then task tools are ordinary tools, one nesting level
 * only), appended to out in the order they are to be reduced. children:
 * an object whose keys are the child sessions whose own exports will be
 * reduced too (their task's summary is then not used), or NULL.
 * 0; -EINVAL for input that cannot be converted (not an object, a part
 * that is not an object, a message or part without its id...): why says
 * what, and nothing is appended; -ENOMEM.
 */
int opencode_export_events(const json_t *export, const char *conv, const json_t *children,
                           json_t *out, char *why, size_t whylen);

/*
 * {"main": EXPORT, "subagents": [{"id", "transcript": EXPORT}]} reduced
 * into r as the vectors' README runs it: main, then each child export
 * under its id. A message that cannot be converted is skipped alone and
 * counted in *skipped (may be NULL), as is a subagents entry without id
 * or export. 0 or -ENOMEM.
 */
int opencode_reduce(reducer *r, const json_t *session, size_t *skipped);

/*
 * The live converter of one session and its children. It remembers each
 * message's role and time (parts name only their message) and, until the
 * session's next idle, which parts already have a block. Memory: O(messages
 * + parts since the last idle), not their content.
 */
typedef struct opencode_live opencode_live;

/* NULL if out of memory. main_session_id is copied. */
opencode_live *opencode_live_new(const char *main_session_id);
void opencode_live_free(opencode_live *l);

/*
 * One server event {"type", "properties"}: its session events appended to
 * out. Parts and idles of a session other than the main one go to the
 * conversation named by that session id. 0, also for events that make
 * nothing; -EINVAL (why says what; nothing appended, nothing remembered);
 * -ENOMEM.
 */
int opencode_live_event(opencode_live *l, const json_t *event, json_t *out, char *why,
                        size_t whylen);

/* {"mainSessionId", "events": [EVENT...]} reduced into r; events that
 * cannot be converted are counted in *skipped (may be NULL). 0, -EINVAL
 * without mainSessionId, or -ENOMEM. */
int opencode_live_reduce(reducer *r, const json_t *input, size_t *skipped);

#endif
