/*
 * index.h - the in-memory index of one log: where each event's record
 * starts (4 bytes per event) and which index an event id has (an open-
 * addressing table of 8-byte slots holding a 32-bit hash and the index).
 * Event bodies never stay in memory: an id match is confirmed by reading
 * the record's id from disk.
 *
 * One writer, many readers on other threads, no locks: the writer fills
 * entries first and publishes the log's count afterwards (release); readers
 * load the count (acquire) and only look at entries below it. Growing a
 * structure publishes a new copy with one atomic store; the old copy stays
 * valid (a reader may still be in it) until the log is closed, which costs
 * at most as much again as the live copy.
 */
#ifndef ST_INDEX_H
#define ST_INDEX_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A list of superseded copies, freed together when their owner closes. */
typedef struct st_retired st_retired;
int st_retire(st_retired **list, void *mem); /* 0 or -ENOMEM (then mem is not retired) */
void st_retired_free(st_retired **list);

typedef struct st_offsets {
    struct st_odir *_Atomic dir;
    st_retired *retired;
    _Atomic size_t first_cap; /* entries of the first chunk (written by the writer) */
} st_offsets;

int st_offsets_init(st_offsets *o, uint64_t expect);
void st_offsets_free(st_offsets *o);
/* Writer: set entry i (growing as needed); 0 or -ENOMEM. */
int st_offsets_set(st_offsets *o, uint64_t i, uint32_t off);
/* Reader: entry i, which must be below the published count. */
uint32_t st_offsets_get(const st_offsets *o, uint64_t i);
size_t st_offsets_bytes(const st_offsets *o);

typedef struct st_idtab {
    struct st_islots *_Atomic tab;
    uint64_t used;
    st_retired *retired;
} st_idtab;

uint64_t st_id_hash(const void *id, size_t len);
int st_idtab_init(st_idtab *t, uint64_t expect);
void st_idtab_free(st_idtab *t);
/* Writer: make room for `extra` more entries, so that the next adds cannot
 * fail; 0 or -ENOMEM. */
int st_idtab_reserve(st_idtab *t, uint64_t extra);
/* Writer: record that `index` (< 2^32 - 1) has an id with this hash (only
 * its high 32 bits are kept). 0, or -ENOMEM when nothing was reserved. */
int st_idtab_add(st_idtab *t, uint64_t hash, uint64_t index);
/* A hint that the slot of `hash` is wanted soon: bulk adds that prefetch
 * a few entries ahead wait for memory in parallel, not one miss at a time. */
void st_idtab_prefetch(const st_idtab *t, uint64_t hash);
/* Reader: calls match(ctx, index) for every index below `count` stored
 * with this hash, oldest first, until match returns true; returns that
 * index, or UINT64_MAX. */
uint64_t st_idtab_find(const st_idtab *t, uint64_t hash, uint64_t count,
                       bool (*match)(void *ctx, uint64_t index), void *ctx);
size_t st_idtab_bytes(const st_idtab *t);
/* Bytes the id tables of all logs hold in mappings of their own, outside
 * malloc's accounting (a process-wide total, for measuring memory). */
size_t st_index_mapped(void);

#endif
