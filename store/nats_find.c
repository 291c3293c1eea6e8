/*
 * nats_find.c - an event's index from its id or key, on the JetStream log:
 * an index of hashes in memory (16 bytes per slot, at most half full), the
 * writer adding its own appends as it makes them, anyone else loading what
 * it lacks from the page entries (one bucket read per 100 events) and the
 * open page. A hash that matches is confirmed by reading the event.
 */
#include "nats_impl.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

uint32_t stn_hash(const void *p, size_t len)
{
    uint32_t h = 2166136261u; /* FNV-1a */
    const unsigned char *b = p;
    for (size_t i = 0; i < len; i++)
        h = (h ^ b[i]) * 16777619u;
    return h ? h : 1;
}

int stn_table_put(stn_table *t, uint32_t h, uint64_t index)
{
    if ((t->used + 1) * 2 > t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 256;
        struct stn_slot *v = calloc(cap, sizeof *v);
        if (!v)
            return -ENOMEM;
        for (size_t i = 0; i < t->cap; i++)
            if (t->v[i].idx1) {
                size_t j = t->v[i].h & (cap - 1);
                while (v[j].idx1)
                    j = (j + 1) & (cap - 1);
                v[j] = t->v[i];
            }
        free(t->v);
        t->v = v;
        t->cap = cap;
    }
    size_t j = h & (t->cap - 1);
    while (t->v[j].idx1)
        j = (j + 1) & (t->cap - 1);
    t->v[j] = (struct stn_slot){.h = h, .idx1 = index + 1};
    t->used++;
    return 0;
}

void stn_index_add(st_nats_log *l, uint64_t index, uint32_t idh, uint32_t keyh)
{
    if (index != l->covered)
        return;
    if (stn_table_put(&l->ids, idh, index) || (keyh && stn_table_put(&l->keys, keyh, index))) {
        stn_index_free(l); /* out of memory: start again on the next find */
        return;
    }
    l->covered++;
}

void stn_table_free(stn_table *t)
{
    free(t->v);
    memset(t, 0, sizeof *t);
}

int stn_table_each(const stn_table *t, uint32_t h, int (*fn)(void *ctx, uint64_t index), void *ctx)
{
    int r = 0;
    for (size_t j = h & (t->cap - 1); r == 0 && t->cap && t->v[j].idx1; j = (j + 1) & (t->cap - 1))
        if (t->v[j].h == h)
            r = fn(ctx, t->v[j].idx1 - 1);
    return r;
}

void stn_index_free(st_nats_log *l)
{
    stn_table_free(&l->ids);
    stn_table_free(&l->keys);
    l->covered = 0;
}

int stn_index_load(st_nats_log *l)
{
    uint64_t count;
    int r = 0;
    if (l->owner && !l->fenced)
        count = l->next_index;
    else if ((r = st_nats_log_count(l, &count)))
        return r;
    while (l->covered < count) {
        uint64_t page = l->covered / ST_NATS_PAGE, at = l->covered % ST_NATS_PAGE;
        stn_page pg;
        uint32_t have;
        bool closed;
        if ((r = stn_page_get(l, page, &pg, &have, &closed)))
            return r;
        if (have <= at)
            break;
        for (uint64_t i = at; i < have && l->covered == page * ST_NATS_PAGE + i; i++)
            stn_index_add(l, page * ST_NATS_PAGE + i, pg.idh[i], pg.keyh[i]);
        if (l->covered != page * ST_NATS_PAGE + have)
            return stn_fail(l, -ENOMEM, "out of memory indexing %s", l->subject);
    }
    return 0;
}

static int find(st_nats_log *l, bool key, const void *v, size_t len, uint64_t *index)
{
    if (len == 0 || len > 255)
        return -ENOENT;
    int r = stn_index_load(l);
    if (r)
        return r;
    const stn_table *t = key ? &l->keys : &l->ids;
    uint32_t h = stn_hash(v, len);
    uint64_t best = UINT64_MAX;
    for (size_t j = h & (t->cap - 1); t->cap && t->v[j].idx1; j = (j + 1) & (t->cap - 1)) {
        uint64_t at = t->v[j].idx1 - 1;
        if (t->v[j].h != h || at >= best)
            continue;
        st_nats_page *p = NULL;
        if ((r = st_nats_log_read(l, at, 1, &p)))
            return r;
        const st_nats_event *e = p->n ? &p->ev[0] : NULL;
        const char *got = e ? (key ? e->key : e->id) : NULL;
        if (got && (key ? e->keylen : e->idlen) == len && memcmp(got, v, len) == 0)
            best = at;
        st_nats_page_free(p);
    }
    if (best == UINT64_MAX)
        return -ENOENT;
    *index = best;
    return 0;
}

int st_nats_log_find(st_nats_log *l, const void *id, size_t idlen, uint64_t *index)
{
    return find(l, false, id, idlen, index);
}

int st_nats_log_find_key(st_nats_log *l, const void *key, size_t keylen, uint64_t *index)
{
    return find(l, true, key, keylen, index);
}

size_t st_nats_log_memory(const st_nats_log *l)
{
    return sizeof *l + (l->ids.cap + l->keys.cap) * sizeof(struct stn_slot);
}
