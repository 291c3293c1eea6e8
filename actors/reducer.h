/*
 * reducer.h - the conversation-state reducer: session events in, blocks
 * out (spec/acp-reducer.md §B, vectors/reducer/README.md, which wins where
 * they differ). Pure: no I/O, no loop, no threads; the clock is a
 * callback. Every source (Claude and OpenCode transcripts, live agents,
 * parley's own events) is converted to session events and goes through
 * this one reducer, so an imported transcript and a live conversation
 * end in the same state.
 *
 * State: the main conversation's blocks, and a flat list of subagents,
 * each {toolUseId, agentId?, status, prompt?, output?, durationMs?} with
 * blocks of its own. A conversation id other than "main" names the
 * subagent whose toolUseId it is, else the first whose agentId it is.
 * Events handled: block:upsert, block:delta, session:idle,
 * subagent:spawned, subagent:completed; any other type changes nothing.
 *
 * Incremental: each event reports what it changed, so a view can be
 * streamed without diffing. Cost: O(1) amortized per event plus its size
 * (blocks and subagents are hashed by id; an idle visits only the blocks
 * touched since the conversation's last idle; deltas append to a buffer
 * instead of copying the text so far). Memory: the blocks and subagents,
 * never the events.
 */
#ifndef REDUCER_H
#define REDUCER_H

#include <jansson.h>
#include <stddef.h>

/* Writes the current time, ISO 8601 UTC with milliseconds
 * ("2025-06-03T14:00:00.700Z"), into out. */
typedef void (*reducer_now_fn)(void *ctx, char out[32]);

typedef struct reducer reducer;

/* An empty state. now: the clock for blocks whose event gives no time
 * (NULL: the system clock). NULL if out of memory. */
reducer *reducer_new(reducer_now_fn now, void *ctx);
void reducer_free(reducer *r);

/*
 * Folds one event {type, payload, context} into the state (event is only
 * read; nothing in it is kept by reference). When changed is an array,
 * what the event changed is appended to it, in order:
 *   {"conversation": C, "block": B}        B was created or changed
 *   {"conversation": C, "id": ID, "delta": TEXT}
 *                                          TEXT was appended to ID's content
 *   {"conversation": C, "removed": ID}     an idle removed the empty block
 *   {"subagent": S}                        entry S was created or changed
 * C is "main" or the subagent's toolUseId. B and S are the reducer's own
 * objects (S without its blocks), shared by reference: serialise or copy
 * them before the next call, which may change them.
 * 0 (also for event types the reducer ignores); -EINVAL for a handled
 * type without what it needs (no block id, no toolUseId...), state
 * unchanged; -ENOMEM, after which the state may be half changed and the
 * reducer should be dropped.
 */
int reducer_apply(reducer *r, const json_t *event, json_t *changed);
/* The same for an event the caller drops once this returns and no one
 * else holds: the state takes the block's members instead of copying
 * them (the text of a block is then never copied twice). */
int reducer_apply_owned(reducer *r, json_t *event, json_t *changed);

/* The whole state, {"blocks", "subagents"}, a new object the caller owns
 * (a copy: later events do not change it). NULL if out of memory. */
json_t *reducer_state(reducer *r);
/* The same, but the blocks in it are the reducer's own (and the subagent
 * entries' members): read-only, and only until the next reducer_apply.
 * For serializing at once: a long state is not copied first. */
json_t *reducer_state_shared(reducer *r);

/* Blocks [from, from + limit) of conversation conv ("main" or a subagent
 * reference), in order, appended to out (the reducer's own: read-only
 * until the next reducer_apply); *total: how many it has. 0, -ENOENT for
 * a conversation it does not know, -ENOMEM. O(from + limit). */
int reducer_range(reducer *r, const char *conv, size_t from, size_t limit, json_t *out,
                  size_t *total);

/* The position of block id among conversation conv's blocks (what
 * reducer_range counts from), or -1 if there is no such block. */
long long reducer_position(reducer *r, const char *conv, const char *id);

/* Block id of conversation conv ("main" or a subagent reference), with
 * all deltas folded in; borrowed as the records of reducer_apply. */
const json_t *reducer_block(reducer *r, const char *conv, const char *id);

/* The subagent entry ref names (toolUseId first, then agentId), without
 * its blocks; NULL if none. Borrowed. */
const json_t *reducer_subagent(reducer *r, const char *ref);
size_t reducer_subagent_count(const reducer *r);
const json_t *reducer_subagent_at(const reducer *r, size_t i);

/* s[0..n) without leading and trailing whitespace as JavaScript's
 * String.trim sees it (the reference's rules compare trimmed text): the
 * start offset and length. */
void reducer_trim(const char *s, size_t n, size_t *start, size_t *len);

/* Blocks held, all conversations together. */
size_t reducer_block_count(const reducer *r);

#endif
