/*
 * follow.c - a follower's local copy and what to fetch. See follow.h.
 *
 * The copy is an array in log order with an id -> index hash table (open
 * addressing, FNV-1a) for de-duplication; frames past a hole wait in a
 * small array sorted by index until the hole is filled.
 */
#include "follow.h"

#include "runtime/grow.h"

#include <stdlib.h>
#include <string.h>

typedef struct held {
    char *id;
    rt_buf *bytes;
} held;

typedef struct ahead {
    uint64_t index;
    char *id;
    rt_buf *bytes;
} ahead;

struct fl {
    held *v;
    size_t n, cap;
    uint64_t *slots; /* index + 1 per slot; 0: empty */
    size_t nslots;
    ahead *ah;
    size_t nah, ahcap;
    uint64_t known;      /* events known to exist on the server */
    char next[256];      /* the next_page_id of the last page, "" when none */
    uint64_t next_index; /* the event it names */
    bool probe;          /* fl_probe: one page from the last event held, due */
    uint64_t base;       /* the index of v[0]: 0, or where a copy of the tail began */
};

static uint64_t hash(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s != '\0'; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

fl *fl_new(void)
{
    return calloc(1, sizeof(fl));
}

fl *fl_new_at(uint64_t base)
{
    fl *f = fl_new();
    if (f != NULL)
        f->base = f->known = base;
    return f;
}

uint64_t fl_first(const fl *f)
{
    return f->base;
}

void fl_free(fl *f)
{
    if (f == NULL)
        return;
    for (size_t i = 0; i < f->n; i++) {
        free(f->v[i].id);
        rt_buf_unref(f->v[i].bytes);
    }
    for (size_t i = 0; i < f->nah; i++) {
        free(f->ah[i].id);
        rt_buf_unref(f->ah[i].bytes);
    }
    free(f->v);
    free(f->slots);
    free(f->ah);
    free(f);
}

uint64_t fl_count(const fl *f)
{
    return f->base + f->n;
}

const char *fl_id(const fl *f, uint64_t i)
{
    return i >= f->base && i - f->base < f->n ? f->v[i - f->base].id : NULL;
}

const rt_buf *fl_bytes(const fl *f, uint64_t i)
{
    return i >= f->base && i - f->base < f->n ? f->v[i - f->base].bytes : NULL;
}

/* The index of the event with this id, or -1. */
static int64_t find(const fl *f, const char *id)
{
    if (f->nslots == 0)
        return -1;
    for (size_t k = hash(id) & (f->nslots - 1);; k = (k + 1) & (f->nslots - 1)) {
        uint64_t s = f->slots[k];
        if (s == 0)
            return -1;
        if (strcmp(f->v[s - 1].id, id) == 0)
            return (int64_t)(s - 1);
    }
}

static void slot_put(uint64_t *slots, size_t nslots, const char *id, uint64_t index)
{
    size_t k = hash(id) & (nslots - 1);
    while (slots[k] != 0)
        k = (k + 1) & (nslots - 1);
    slots[k] = index + 1;
}

/* Append (id copied, bytes referenced); FL_NOMEM if it cannot. */
static fl_result append(fl *f, const char *id, rt_buf *bytes)
{
    if (rt_grow((void **)&f->v, &f->cap, f->n + 1, sizeof(*f->v), 64) != 0)
        return FL_NOMEM;
    if (2 * (f->n + 1) > f->nslots) { /* at most half full */
        size_t ns = f->nslots ? 2 * f->nslots : 128;
        uint64_t *s = calloc(ns, sizeof(*s));
        if (s == NULL)
            return FL_NOMEM;
        for (size_t i = 0; i < f->n; i++)
            slot_put(s, ns, f->v[i].id, i);
        free(f->slots);
        f->slots = s;
        f->nslots = ns;
    }
    char *c = strdup(id);
    if (c == NULL)
        return FL_NOMEM;
    f->v[f->n] = (held){c, rt_buf_ref(bytes)};
    slot_put(f->slots, f->nslots, c, f->n);
    f->n++;
    if (f->known < f->base + f->n)
        f->known = f->base + f->n;
    return FL_ADDED;
}

/* Event `index` is (id): held already (duplicate), the next (appended), or
 * at odds with the copy. */
static fl_result place(fl *f, uint64_t index, const char *id, rt_buf *bytes)
{
    if (index < f->base)
        return FL_DUPLICATE; /* before a tail copy: not kept, not checked */
    if (index - f->base < f->n)
        return strcmp(f->v[index - f->base].id, id) == 0 ? FL_DUPLICATE : FL_DIVERGED;
    if (find(f, id) >= 0)
        return FL_DIVERGED; /* the same id at another place */
    return append(f, id, bytes);
}

/* Frames held past the hole that now follow the copy go in. */
static fl_result drain(fl *f)
{
    fl_result r = FL_ADDED;
    size_t k = 0;
    for (; k < f->nah && f->ah[k].index <= f->base + f->n && r != FL_DIVERGED && r != FL_NOMEM; k++)
        r = place(f, f->ah[k].index, f->ah[k].id, f->ah[k].bytes);
    for (size_t i = 0; i < k; i++) {
        free(f->ah[i].id);
        rt_buf_unref(f->ah[i].bytes);
    }
    if (k > 0) {
        memmove(f->ah, f->ah + k, (f->nah - k) * sizeof(*f->ah));
        f->nah -= k;
    }
    return r == FL_DUPLICATE ? FL_ADDED : r;
}

static fl_result hold(fl *f, uint64_t index, const char *id, rt_buf *bytes)
{
    size_t at = 0;
    while (at < f->nah && f->ah[at].index < index)
        at++;
    if (at < f->nah && f->ah[at].index == index)
        return strcmp(f->ah[at].id, id) == 0 ? FL_DUPLICATE : FL_DIVERGED;
    if (f->nah == FL_AHEAD_MAX) { /* the newest goes: fetched with the hole instead */
        if (at == f->nah)
            return FL_AHEAD;
        free(f->ah[f->nah - 1].id);
        rt_buf_unref(f->ah[f->nah - 1].bytes);
        f->nah--;
    }
    if (rt_grow((void **)&f->ah, &f->ahcap, f->nah + 1, sizeof(*f->ah), 16) != 0)
        return FL_NOMEM;
    char *c = strdup(id);
    if (c == NULL)
        return FL_NOMEM;
    memmove(f->ah + at + 1, f->ah + at, (f->nah - at) * sizeof(*f->ah));
    f->ah[at] = (ahead){index, c, rt_buf_ref(bytes)};
    f->nah++;
    return FL_AHEAD;
}

fl_result fl_live(fl *f, uint64_t index, const char *id, rt_buf *bytes)
{
    fl_result r = index > f->base + f->n ? hold(f, index, id, bytes) : place(f, index, id, bytes);
    if (r == FL_ADDED)
        r = drain(f);
    if ((r == FL_ADDED || r == FL_AHEAD) && index + 1 > f->known)
        f->known = index + 1; /* a frame held or not: the server has it */
    return r;
}

fl_result fl_live_unindexed(fl *f, const char *id, rt_buf *bytes)
{
    return find(f, id) >= 0 ? FL_DUPLICATE : append(f, id, bytes);
}

bool fl_has(const fl *f, const char *id)
{
    return find(f, id) >= 0;
}

void fl_probe(fl *f)
{
    f->probe = true;
}

void fl_server_count(fl *f, uint64_t n)
{
    if (n > f->known)
        f->known = n;
}

bool fl_want(const fl *f, fl_fetch *out)
{
    uint64_t end = f->nah > 0 ? f->ah[0].index : f->known; /* the hole, or the tail */
    uint64_t count = f->base + f->n;
    if (count >= end && !(f->probe && f->nah == 0))
        return false;
    out->limit = FL_PAGE;
    if (f->next[0] != '\0' && f->next_index == count) { /* go on where the last page ended */
        memcpy(out->cursor, f->next, sizeof(out->cursor));
        out->first = count;
    } else if (f->n > 0) { /* from the last event held, which comes again first */
        strncpy(out->cursor, f->v[f->n - 1].id, sizeof(out->cursor) - 1);
        out->cursor[sizeof(out->cursor) - 1] = '\0';
        out->first = count - 1;
    } else {
        out->cursor[0] = '\0';
        out->first = 0;
    }
    return true;
}

fl_result fl_page(fl *f, const fl_fetch *asked, const char *const *ids, rt_buf *const *bytes,
                  size_t n, const char *next_page_id)
{
    f->next[0] = '\0';
    f->probe = false;
    if (asked->cursor[0] != '\0' && (n == 0 || strcmp(ids[0], asked->cursor) != 0))
        return FL_DIVERGED; /* the cursor's event is not where it was */
    for (size_t i = 0; i < n; i++) {
        uint64_t index = asked->first + i;
        if (index > f->base + f->n)
            return FL_DIVERGED; /* cannot be: a page starts at or before the end */
        fl_result r = place(f, index, ids[i], bytes[i]);
        if (r == FL_ADDED)
            r = drain(f);
        if (r == FL_DIVERGED || r == FL_NOMEM)
            return r;
    }
    uint64_t end = asked->first + n;
    if (end > f->known || (next_page_id == NULL && f->nah == 0))
        f->known = end; /* the last page: the server had exactly this many when it answered */
    if (next_page_id != NULL && strlen(next_page_id) < sizeof(f->next)) {
        memcpy(f->next, next_page_id, strlen(next_page_id) + 1);
        f->next_index = end;
        if (end + 1 > f->known)
            f->known = end + 1; /* the server has the event it names */
    }
    return FL_ADDED;
}
