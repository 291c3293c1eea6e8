/*
 * reducer_impl.h - the reducer's state, shared by reducer.c (events,
 * subagents) and reducer_conv.c (the block store of one conversation).
 */
#ifndef REDUCER_IMPL_H
#define REDUCER_IMPL_H

#include "actors/idmap.h"
#include "actors/reducer.h"
#include "runtime/grow.h"

#include <stdbool.h>

struct rd_conv;

typedef struct rd_block {
    json_t *obj; /* the block; its "content" is stale while dirty */
    struct rd_conv *conv;
    size_t pos; /* in conv->slot */
    /* Deltas append here rather than to the JSON string, which would copy
     * the whole text every time; rd_sync puts it back. */
    char *text; /* NULL: the JSON's content is current */
    size_t len, cap;
    bool watched;  /* in conv->watch */
    char *sub_key; /* the toolUseId it is indexed under in sub_blocks */
} rd_block;

typedef struct rd_conv {
    char *name;      /* "main" or the subagent's toolUseId */
    rd_block **slot; /* in order; NULL where an idle removed a block */
    size_t n, cap, live;
    size_t *holes; /* the NULL slots, ascending: a block's position is its
                    * slot less the holes before it */
    size_t nholes, hcap;
    idmap ids; /* block id -> rd_block */
    /* Blocks upserted since the last idle: the only ones an idle can
     * complete or remove, so an idle costs what came since the last. */
    rd_block **watch;
    size_t nwatch, wcap;
} rd_conv;

typedef struct rd_sub {
    json_t *obj; /* the entry without blocks */
    size_t index;
    rd_conv conv;
} rd_sub;

struct reducer {
    rd_conv main;
    rd_sub **sub;
    size_t nsub, subcap;
    idmap by_tool;    /* toolUseId -> rd_sub */
    idmap by_agent;   /* agentId -> first rd_sub with it */
    idmap sub_blocks; /* toolUseId -> the first subagent block that had it */
    json_t *defaults; /* type -> the members a new block of it starts with */
    reducer_now_fn now;
    void *now_ctx;
};

rd_sub *rd_find_sub(reducer *r, const char *ref);

/* Merges partial (borrowed; its members are taken by reference) onto the
 * block of the same id in c, or appends defaults + partial. */
int rd_upsert(reducer *r, rd_conv *c, json_t *partial, json_t *changed);
int rd_delta(rd_conv *c, const char *id, const char *text, size_t len, json_t *changed);
int rd_idle(reducer *r, rd_conv *c, json_t *changed);
/* The first subagent block whose toolUseId is tool: main first, then each
 * subagent in order. */
rd_block *rd_find_subagent_block(reducer *r, const char *tool);
int rd_sync(rd_block *b); /* 0 or -ENOMEM */
int rd_emit_block(rd_block *b, json_t *changed);
/* c's blocks, in order: copies, or (shared) the blocks themselves. */
json_t *rd_conv_blocks(rd_conv *c, bool shared);
/* The block's position among its conversation's blocks. O(log holes). */
size_t rd_position(const rd_conv *c, const rd_block *b);
void rd_conv_free(rd_conv *c); /* the blocks only: indexes are not kept */
json_t *rd_defaults_new(void);

#endif
