/*
 * index.c - the offset array and the id table of a log. See index.h for the
 * concurrency contract; the atomics here are the only ones in store/.
 */
#include "index.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* 1 KiB chunks: the directory of a million-event log is 32 KiB. The first
 * chunk starts at FIRST entries and doubles up to a whole one, so that a
 * log of ten events costs 64 bytes, not 1 KiB. */
enum { CHUNK_BITS = 8, CHUNK = 1 << CHUNK_BITS, FIRST = 16 };

struct st_retired {
    st_retired *next;
    void *mem;
    void (*release)(void *mem);
};

static int retire(st_retired **list, void *mem, void (*release)(void *))
{
    st_retired *r = malloc(sizeof(*r));
    if (r == NULL)
        return -ENOMEM;
    r->mem = mem;
    r->release = release;
    r->next = *list;
    *list = r;
    return 0;
}

int st_retire(st_retired **list, void *mem)
{
    return retire(list, mem, free);
}

void st_retired_free(st_retired **list)
{
    while (*list != NULL) {
        st_retired *r = *list;
        *list = r->next;
        r->release(r->mem);
        free(r);
    }
}

/* ------------------------------------------------------------ offsets --- */

struct st_odir {
    size_t cap;
    uint32_t *_Atomic chunk[];
};

static struct st_odir *odir_new(size_t cap)
{
    struct st_odir *d = calloc(1, sizeof(*d) + cap * sizeof(d->chunk[0]));
    if (d != NULL)
        d->cap = cap;
    return d;
}

int st_offsets_init(st_offsets *o, uint64_t expect)
{
    size_t cap = 4;
    while ((uint64_t)cap * CHUNK < expect)
        cap *= 2;
    struct st_odir *d = odir_new(cap);
    if (d == NULL)
        return -ENOMEM;
    atomic_init(&o->dir, d);
    o->retired = NULL;
    atomic_init(&o->first_cap, expect > CHUNK / 2 ? (size_t)CHUNK : (size_t)FIRST);
    return 0;
}

void st_offsets_free(st_offsets *o)
{
    struct st_odir *d = atomic_load_explicit(&o->dir, memory_order_relaxed);
    if (d == NULL)
        return;
    for (size_t i = 0; i < d->cap; i++)
        free(atomic_load_explicit(&d->chunk[i], memory_order_relaxed));
    free(d);
    st_retired_free(&o->retired);
    atomic_store_explicit(&o->dir, NULL, memory_order_relaxed);
}

int st_offsets_set(st_offsets *o, uint64_t i, uint32_t off)
{
    struct st_odir *d = atomic_load_explicit(&o->dir, memory_order_relaxed);
    size_t c = (size_t)(i >> CHUNK_BITS);
    if (c >= d->cap) {
        size_t cap = d->cap;
        while (c >= cap)
            cap *= 2;
        struct st_odir *n = odir_new(cap);
        if (n == NULL || st_retire(&o->retired, d) < 0) {
            free(n);
            return -ENOMEM;
        }
        for (size_t k = 0; k < d->cap; k++)
            atomic_init(&n->chunk[k], atomic_load_explicit(&d->chunk[k], memory_order_relaxed));
        atomic_store_explicit(&o->dir, n, memory_order_release);
        d = n;
    }
    uint32_t *chunk = atomic_load_explicit(&d->chunk[c], memory_order_relaxed);
    size_t first = atomic_load_explicit(&o->first_cap, memory_order_relaxed);
    size_t at = (size_t)(i & (CHUNK - 1)), want = c > 0 ? CHUNK : first;
    while (c == 0 && at >= want)
        want *= 2;
    if (chunk == NULL || (c == 0 && want > first)) {
        /* a new chunk, or a bigger first one: the old stays readable (its
         * entries copied) until the log closes, for readers holding it */
        uint32_t *n = malloc(want * sizeof(uint32_t));
        if (n == NULL || (chunk != NULL && st_retire(&o->retired, chunk) < 0)) {
            free(n);
            return -ENOMEM;
        }
        if (chunk != NULL)
            memcpy(n, chunk, first * sizeof(uint32_t));
        if (c == 0)
            atomic_store_explicit(&o->first_cap, want, memory_order_relaxed);
        chunk = n;
        atomic_store_explicit(&d->chunk[c], chunk, memory_order_release);
    }
    chunk[at] = off;
    return 0;
}

uint32_t st_offsets_get(const st_offsets *o, uint64_t i)
{
    struct st_odir *d = atomic_load_explicit(&((st_offsets *)o)->dir, memory_order_acquire);
    uint32_t *chunk = atomic_load_explicit(&d->chunk[i >> CHUNK_BITS], memory_order_acquire);
    return chunk[i & (CHUNK - 1)];
}

size_t st_offsets_bytes(const st_offsets *o)
{
    struct st_odir *d = atomic_load_explicit(&((st_offsets *)o)->dir, memory_order_relaxed);
    size_t n = sizeof(*d) + d->cap * sizeof(d->chunk[0]);
    for (size_t i = 0; i < d->cap; i++)
        if (atomic_load_explicit(&d->chunk[i], memory_order_relaxed) != NULL)
            n += (i > 0 ? CHUNK : atomic_load_explicit(&o->first_cap, memory_order_relaxed)) *
                 sizeof(uint32_t);
    return n;
}

/* ----------------------------------------------------------- id table --- */

/* slot: high 32 bits = the high half of the id's hash, which also gives the
 * slot's position; low 32 bits = index + 1 (0 = empty). Capacity is a power
 * of two, at most 3/4 full. */
struct st_islots {
    uint64_t mask;
    _Atomic uint64_t *slot;
    size_t mapped; /* bytes of slot mapped by us (0: slot is calloc'ed) */
};

static _Atomic size_t mapped_total;

size_t st_index_mapped(void)
{
    return atomic_load_explicit(&mapped_total, memory_order_relaxed);
}

uint64_t st_id_hash(const void *id, size_t len)
{
    /* FNV-1a, then a murmur-style finalizer to spread the low bits */
    const uint8_t *p = id;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < len; i++)
        h = (h ^ p[i]) * 0x100000001b3ull;
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ull;
    return h ^ (h >> 33);
}

/* A big table is probed at random: on 2 MiB pages (where the kernel offers
 * them) a probe costs a cache miss, not also a page walk. Such tables are
 * mapped on their own, aligned, and zeroed by the kernel as they are first
 * touched: nothing is written (or allocated) beyond their size. */
enum { HUGE = 2 << 20 };

static void *map_aligned(size_t size)
{
    uint8_t *p =
        mmap(NULL, size + HUGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return NULL;
    size_t head = (HUGE - (uintptr_t)p % HUGE) % HUGE;
    if (head > 0)
        munmap(p, head);
    munmap(p + head + size, HUGE - head);
    madvise(p + head, size, MADV_HUGEPAGE);
    return p + head;
}

static void islots_free(void *mem)
{
    struct st_islots *t = mem;
    if (t == NULL)
        return;
    if (t->mapped > 0) {
        munmap((void *)t->slot, t->mapped);
        atomic_fetch_sub_explicit(&mapped_total, t->mapped, memory_order_relaxed);
    } else {
        free((void *)t->slot);
    }
    free(t);
}

static struct st_islots *islots_new(uint64_t cap)
{
    struct st_islots *t = calloc(1, sizeof(*t));
    size_t size = cap * sizeof(t->slot[0]);
    if (t == NULL)
        return NULL;
    if (size < HUGE) {
        t->slot = calloc(cap, sizeof(t->slot[0]));
    } else if ((t->slot = map_aligned(size)) != NULL) {
        t->mapped = size;
        atomic_fetch_add_explicit(&mapped_total, size, memory_order_relaxed);
    }
    if (t->slot == NULL) {
        free(t);
        return NULL;
    }
    t->mask = cap - 1;
    return t;
}

static void islots_put(struct st_islots *t, uint64_t hash, uint64_t entry)
{
    uint64_t i = hash & t->mask;
    while (atomic_load_explicit(&t->slot[i], memory_order_relaxed) != 0)
        i = (i + 1) & t->mask;
    atomic_store_explicit(&t->slot[i], entry, memory_order_release);
}

int st_idtab_init(st_idtab *t, uint64_t expect)
{
    uint64_t cap = 16; /* a new log's table is 128 bytes; it doubles as it fills */
    while (cap / 4 * 3 < expect)
        cap *= 2;
    struct st_islots *s = islots_new(cap);
    if (s == NULL)
        return -ENOMEM;
    atomic_init(&t->tab, s);
    t->used = 0;
    t->retired = NULL;
    return 0;
}

void st_idtab_free(st_idtab *t)
{
    islots_free(atomic_load_explicit(&t->tab, memory_order_relaxed));
    atomic_store_explicit(&t->tab, NULL, memory_order_relaxed);
    st_retired_free(&t->retired);
}

static uint64_t entry_of(uint64_t hash, uint64_t index)
{
    return (hash & 0xffffffff00000000ull) | (index + 1);
}

int st_idtab_reserve(st_idtab *t, uint64_t extra)
{
    struct st_islots *s = atomic_load_explicit(&t->tab, memory_order_relaxed);
    uint64_t cap = s->mask + 1;
    while (t->used + extra > cap / 4 * 3)
        cap *= 2;
    if (cap == s->mask + 1)
        return 0;
    struct st_islots *n = islots_new(cap);
    if (n == NULL || retire(&t->retired, s, islots_free) < 0) {
        islots_free(n);
        return -ENOMEM;
    }
    /* positions derive from the stored high bits, so a bigger table can be
     * filled from the slots alone */
    for (uint64_t i = 0; i <= s->mask; i++) {
        uint64_t e = atomic_load_explicit(&s->slot[i], memory_order_relaxed);
        if (e != 0)
            islots_put(n, e >> 32, e);
    }
    atomic_store_explicit(&t->tab, n, memory_order_release);
    return 0;
}

int st_idtab_add(st_idtab *t, uint64_t hash, uint64_t index)
{
    if (index >= 0xffffffffull)
        return -EOVERFLOW;
    int r = st_idtab_reserve(t, 1);
    if (r < 0)
        return r;
    struct st_islots *s = atomic_load_explicit(&t->tab, memory_order_relaxed);
    islots_put(s, hash >> 32, entry_of(hash, index));
    t->used++;
    return 0;
}

void st_idtab_prefetch(const st_idtab *t, uint64_t hash)
{
    struct st_islots *s = atomic_load_explicit(&((st_idtab *)t)->tab, memory_order_relaxed);
    __builtin_prefetch(&s->slot[(hash >> 32) & s->mask], 1);
}

uint64_t st_idtab_find(const st_idtab *t, uint64_t hash, uint64_t count,
                       bool (*match)(void *ctx, uint64_t index), void *ctx)
{
    struct st_islots *s = atomic_load_explicit(&((st_idtab *)t)->tab, memory_order_acquire);
    uint64_t want = hash & 0xffffffff00000000ull;
    uint64_t best = UINT64_MAX;
    /* Probe the whole run: with several records of one hash (or one id
     * appended twice) the oldest index wins, wherever its slot is. */
    for (uint64_t i = (hash >> 32) & s->mask;; i = (i + 1) & s->mask) {
        uint64_t e = atomic_load_explicit(&s->slot[i], memory_order_acquire);
        if (e == 0)
            break;
        uint64_t index = (e & 0xffffffffull) - 1;
        if ((e & 0xffffffff00000000ull) == want && index < count && index < best &&
            match(ctx, index))
            best = index;
    }
    return best;
}

size_t st_idtab_bytes(const st_idtab *t)
{
    struct st_islots *s = atomic_load_explicit(&((st_idtab *)t)->tab, memory_order_relaxed);
    return sizeof(*s) + (s->mask + 1) * sizeof(s->slot[0]);
}
