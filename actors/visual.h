/*
 * visual.h - the terminal visualizer: one event as the block upstream's
 * DefaultConversationVisualizer prints (spec/checks.md §3). Pure: JSON in,
 * text out.
 *
 * A block is a rule with the event's title ("── Agent Action ───..."), a
 * blank line, the content lines, and a blank line. Titles and colours by
 * kind: Agent Action (blue), Observation (yellow), User Rejected Action
 * (red), Agent Error (red), Message from Agent (blue) / User (gold) /
 * Environment or Hook (magenta), System Prompt (magenta), User Paused
 * (bright yellow), Condensation (white), Condensation Request (magenta),
 * ACP Tool Call (blue). ConversationStateUpdateEvent and kinds upstream
 * does not register print nothing; an execution_status change is what
 * visual_status renders.
 *
 * Colour (ANSI) only when asked: callers ask visual_color_ok() for their
 * terminal. Long contents are folded to fold_lines lines.
 */
#ifndef VISUAL_H
#define VISUAL_H

#include "runtime/text.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>

typedef struct visual_opts {
    bool color;
    int fold_lines; /* content lines kept per block; 0: the default, 40; < 0: all */
    int width;      /* of the rule; 0: 80 */
} visual_opts;

/* Append the event's block to out; false (nothing appended) for an event
 * that is not shown. */
bool visual_event(rt_text *out, json_t *event, const visual_opts *o);
/* Append a block (reducer.h) framed as an event is: a tool_use with its
 * tool_result (may be NULL) under it, subagents' blocks indented by depth,
 * thinking folded to a few lines. false for a type it does not know. */
bool visual_block(rt_text *out, const json_t *block, const json_t *result, int depth,
                  const visual_opts *o);
/* A status line, "• status: stuck (rule: monologue)"; rule may be NULL. */
void visual_status(rt_text *out, const char *status, const char *rule, const visual_opts *o);
/* Colour on this stream: a terminal, and NO_COLOR unset or empty. */
bool visual_color_ok(FILE *f);

#endif
