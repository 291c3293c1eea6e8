/*
 * transcript_impl.h - what the Claude and OpenCode converters share
 * (transcript.h): the events they make, how a source id is spread over
 * the events of one line, and the tool calls known and still open.
 */
#ifndef TRANSCRIPT_IMPL_H
#define TRANSCRIPT_IMPL_H

#include "actors/transcript.h"

#include <stdbool.h>

/* ---- events (new references; NULL if out of memory) ------------------------- */

/* content: a list of TextContent / ImageContent (taken). */
json_t *tr_user_message(json_t *content);
json_t *tr_agent_text(const char *text, const char *resp);
/* signature may be NULL; redacted: `thinking` is a redacted block's data. */
json_t *tr_agent_thinking(const char *thinking, const char *signature, bool redacted,
                          const char *resp);
/* input: the call's arguments (an object, or NULL for {}); summary may be NULL. */
json_t *tr_action(const char *call, const char *tool, const json_t *input, const char *summary,
                  const char *resp);
/* kind: the observation's kind, or NULL for "<Tool>Observation". */
json_t *tr_result(const char *call, const char *tool, const char *action, const char *kind,
                  const char *text, bool is_error);
json_t *tr_rejection(const char *call, const char *tool, const char *action, const char *reason);
json_t *tr_interrupted(const char *call, const char *tool);
json_t *tr_text_part(const char *text);
/* url: a data: URL or any other. */
json_t *tr_image_part(const char *url);

/* Ids and times for the events evs[from..] of one line or part: the one
 * at `primary` (counted from `from`) gets base, the others "<base>-<k>",
 * k their place from 1; each gets ts unless NULL. Then each is wrapped in
 * a record with `where`'s members (copied) and appended to out. */
int tr_emit(json_t *evs, size_t primary, const char *base, const char *ts, const json_t *where,
            json_t *out);

/* Says why into why (one line) and returns -EINVAL. */
int tr_bad(char *why, size_t whylen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* ---- tool calls ------------------------------------------------------------ */

/* Every call seen (id -> {"tool", "action"}), and per conversation the
 * ones without a result yet, in the order they came. */
typedef struct tr_calls {
    json_t *known; /* call id -> {"tool", "action"} */
    json_t *open;  /* conversation -> {call id: true}, insertion-ordered */
} tr_calls;

int tr_calls_init(tr_calls *c);
void tr_calls_clear(tr_calls *c);
/* The call's tool and action event id (NULL, NULL if unknown). */
void tr_calls_find(const tr_calls *c, const char *call, const char **tool, const char **action);
int tr_calls_add(tr_calls *c, const char *conv, const char *call, const char *tool,
                 const char *action);
void tr_calls_close(tr_calls *c, const char *conv, const char *call);
/* The calls of conv still open, in order (borrowed; NULL if none). */
json_t *tr_calls_open(const tr_calls *c, const char *conv);

#endif
