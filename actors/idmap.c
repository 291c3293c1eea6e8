/*
 * idmap.c - see idmap.h. FNV-1a: keys are short ids, and the map never
 * faces keys chosen to collide more than a client can make the reducer
 * hold blocks anyway (each key is a block or subagent it keeps).
 */
#include "actors/idmap.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static size_t hash_of(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return (size_t)h;
}

void idmap_free(idmap *m)
{
    for (size_t i = 0; i < m->cap; i++)
        free(m->slot[i].key);
    free(m->slot);
    memset(m, 0, sizeof(*m));
}

static size_t find(const idmap *m, const char *key, size_t h)
{
    size_t mask = m->cap - 1;
    for (size_t i = h & mask;; i = (i + 1) & mask)
        if (m->slot[i].key == NULL || (m->slot[i].hash == h && strcmp(m->slot[i].key, key) == 0))
            return i;
}

void *idmap_get(const idmap *m, const char *key)
{
    if (m->n == 0)
        return NULL;
    size_t i = find(m, key, hash_of(key));
    return m->slot[i].key ? m->slot[i].val : NULL;
}

static int rehash(idmap *m, size_t cap)
{
    idmap_slot *s = calloc(cap, sizeof(*s));
    if (s == NULL)
        return -ENOMEM;
    idmap old = *m;
    m->slot = s;
    m->cap = cap;
    for (size_t i = 0; i < old.cap; i++)
        if (old.slot[i].key != NULL)
            m->slot[find(m, old.slot[i].key, old.slot[i].hash)] = old.slot[i];
    free(old.slot);
    return 0;
}

int idmap_put(idmap *m, const char *key, void *val)
{
    if ((m->n + 1) * 2 > m->cap && rehash(m, m->cap ? m->cap * 2 : 16) != 0)
        return -ENOMEM;
    size_t h = hash_of(key), i = find(m, key, h);
    if (m->slot[i].key == NULL) {
        char *k = strdup(key);
        if (k == NULL)
            return -ENOMEM;
        m->slot[i] = (idmap_slot){.key = k, .hash = h};
        m->n++;
    }
    m->slot[i].val = val;
    return 0;
}

void idmap_del(idmap *m, const char *key)
{
    if (m->n == 0)
        return;
    size_t mask = m->cap - 1, i = find(m, key, hash_of(key));
    if (m->slot[i].key == NULL)
        return;
    free(m->slot[i].key);
    m->n--;
    /* Backward shift: move later members of the probe run into the hole
     * when their home slot is not between the hole and them. */
    for (size_t j = (i + 1) & mask; m->slot[j].key != NULL; j = (j + 1) & mask) {
        size_t home = m->slot[j].hash & mask;
        if (((j - home) & mask) >= ((j - i) & mask)) {
            m->slot[i] = m->slot[j];
            i = j;
        }
    }
    m->slot[i] = (idmap_slot){0};
}
