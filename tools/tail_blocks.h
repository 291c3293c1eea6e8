/*
 * tail_blocks.h - `parley tail --blocks`: the events a follower delivers
 * folded into blocks (actors/view.h, the reducer the server's visualizer
 * runs), each block printed once it is settled: a tool call together with
 * its result, a subagent's blocks indented, what is still pending held
 * back until it settles (or until the end, when it is printed as it is).
 */
#ifndef TAIL_BLOCKS_H
#define TAIL_BLOCKS_H

#include "actors/visual.h"
#include "runtime/buf.h"
#include "runtime/text.h"

#include <stdint.h>

typedef struct tail_blocks tail_blocks;

tail_blocks *tail_blocks_new(const visual_opts *o); /* NULL if out of memory */
void tail_blocks_free(tail_blocks *t);
/* Fold the event at index (the next one: events before it must have been
 * given) and append what it settled to out. Earlier indexes are ignored. */
void tail_blocks_event(tail_blocks *t, uint64_t index, const rt_buf *bytes, rt_text *out);
/* Append every block not printed yet, settled or not. */
void tail_blocks_flush(tail_blocks *t, rt_text *out);

#endif
