/*
 * idmap.h - a string -> pointer hash map for the reducer's indexes (block
 * ids in a conversation, subagents by tool use id and agent id). Open
 * addressing with linear probing and backward-shift deletion, so removing
 * a key leaves no tombstone behind and lookups stay short; at most half
 * full. Keys are copied (the map owns them); values are borrowed.
 */
#ifndef IDMAP_H
#define IDMAP_H

#include <stddef.h>

typedef struct idmap_slot {
    char *key; /* NULL: empty */
    size_t hash;
    void *val;
} idmap_slot;

typedef struct idmap {
    idmap_slot *slot;
    size_t cap; /* a power of two, or 0 */
    size_t n;
} idmap;

/* A zeroed idmap is empty and valid. */
void idmap_free(idmap *m);
void *idmap_get(const idmap *m, const char *key);
/* Sets key to val (replacing any value). 0 or -ENOMEM (map unchanged). */
int idmap_put(idmap *m, const char *key, void *val);
/* Removes key if it is there. */
void idmap_del(idmap *m, const char *key);

#endif
