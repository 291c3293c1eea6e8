/*
 * view.h - a conversation's view state: its log folded into blocks
 * (reducer.h, fed by reducer_parley.h), with, for every block and
 * subagent, the index of the last event that changed it, so that "what
 * changed after event N" costs what changed, not the conversation. The
 * visualizer actor (viz.h) keeps one per watched conversation; pure: no
 * I/O, no loop.
 *
 * Two answers, one shape. view_since(v, after) is
 *   {"index": I, "blocks": [...], "subagents": [...], "removed": [...]}
 * I: the index of the last event folded in (-1: none). With after = -1 it
 * is the whole state (removed empty); otherwise only what changed after
 * event `after`: main blocks in their order, the subagent entries that
 * changed or whose blocks did (each with only those blocks), and
 * {"conversation", "id"} of blocks an idle removed. A client holding the
 * state at `after` applies it by replacing blocks it knows by id and
 * appending the others (positions never change; new blocks come last),
 * and so holds the state at I.
 *
 * view_frames(v, after) is the same as WebSocket frames, one JSON text per
 * line: {"index", "state"} for the whole state; otherwise, per change,
 * {"index", "subagent": entry}, {"index", "conversation", "at", "upsert":
 * block} or {"index", "conversation", "removed": id}, entries before the
 * blocks that live in them. "at" is the block's position in its
 * conversation now (what view_range counts from), so a client holding
 * only some pages of a long conversation knows where an upsert goes; a
 * removal shifts the blocks after it down by one. A frame's index is where a client that has it (and
 * those before it) resumes from: `after` on every frame but the last,
 * which says I. So the state is whole at I once a frame saying I is in,
 * and a client cut off in the middle resumes from `after` and gets the
 * rest again (an upsert applied twice is applied once).
 *
 * Memory: the reducer's blocks plus one mark per block and subagent.
 */
#ifndef VIEW_H
#define VIEW_H

#include "actors/reducer.h"
#include "runtime/text.h"

#include <jansson.h>
#include <stdint.h>

typedef struct view view;

view *view_new(reducer_now_fn now, void *ctx); /* NULL if out of memory */
void view_free(view *v);

/* Folds the event of the log at index, which must be view_next(v). An
 * event the converter or the reducer cannot use changes nothing but is
 * counted (view_skipped). 0, or -ENOMEM: drop the view. */
int view_apply(view *v, uint64_t index, const json_t *event);
uint64_t view_next(const view *v); /* events folded */
uint64_t view_skipped(const view *v);
size_t view_blocks(const view *v); /* blocks held */

/* Block id of conversation conv ("main" or a subagent's toolUseId), or
 * NULL; borrowed until the next view_apply. */
const json_t *view_block(view *v, const char *conv, const char *id);

/* The answers above; after: -1, or an index below view_next (a later one
 * answers as if it were the last). NULL if out of memory. The blocks in
 * it are the view's own, not copies (a long state is serialized without
 * being copied first): read them only, before the next view_apply. */
json_t *view_since(view *v, int64_t after);
/* A page of one conversation's blocks, for a client that shows a long
 * conversation a screenful at a time: {"index", "conversation", "total",
 * "from", "blocks": [blocks from..from+limit-1]} (the view's own blocks,
 * as above). NULL with *err -ENOENT for an unknown conversation, -ENOMEM. */
json_t *view_range(view *v, const char *conv, size_t from, size_t limit, int *err);

/* Appends the frames to out, each ending in '\n'; nothing when nothing
 * changed. 0 or -ENOMEM. */
int view_frames(view *v, int64_t after, rt_text *out);

#endif
