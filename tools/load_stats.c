/*
 * load_stats.c - the pure parts of `parley load`. See load_stats.h.
 */
#include "load_stats.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

/* ---- latency histogram ---------------------------------------------------------- */

enum { SUB = 64, TOP = 47 }; /* 64 steps per power of two; values below 2^47 */

static size_t bucket(uint64_t v)
{
    if (v >= (uint64_t)1 << TOP)
        v = ((uint64_t)1 << TOP) - 1;
    if (v < 2 * SUB)
        return (size_t)v;
    int shift = 63 - __builtin_clzll(v) - 6; /* v >> shift is in [64, 128) */
    return (size_t)shift * SUB + (size_t)(v >> shift);
}

static uint64_t bucket_mid(size_t i)
{
    if (i < 2 * SUB)
        return i;
    unsigned shift = (unsigned)(i / SUB - 1);
    uint64_t low = (uint64_t)(i % SUB + SUB) << shift;
    return low + ((uint64_t)1 << shift) / 2;
}

void load_hist_add(load_hist *h, uint64_t ns)
{
    h->b[bucket(ns)]++;
    h->n++;
    if (ns > h->max)
        h->max = ns;
}

void load_hist_merge(load_hist *into, const load_hist *h)
{
    for (size_t i = 0; i < LOAD_HIST_BUCKETS; i++)
        into->b[i] += h->b[i];
    into->n += h->n;
    if (h->max > into->max)
        into->max = h->max;
}

uint64_t load_hist_pct(const load_hist *h, double p)
{
    if (h->n == 0)
        return 0;
    if (p >= 1)
        return h->max;
    double want = p * (double)h->n;
    uint64_t rank = (uint64_t)want + ((double)(uint64_t)want < want), seen = 0;
    if (rank < 1)
        rank = 1;
    for (size_t i = 0; i < LOAD_HIST_BUCKETS; i++)
        if ((seen += h->b[i]) >= rank) {
            uint64_t v = bucket_mid(i);
            return v < h->max ? v : h->max;
        }
    return h->max;
}

/* ---- order of one subscriber's indexes ------------------------------------------ */

int load_seq_see(load_seq *s, int64_t index)
{
    if (s->next < 0) {
        s->first = index;
        s->next = index + 1;
        return LOAD_SEQ_OK;
    }
    if (index == s->next) {
        s->next++;
        return LOAD_SEQ_OK;
    }
    if (index > s->next) {
        s->gaps++;
        s->next = index + 1;
        return LOAD_SEQ_GAP;
    }
    s->repeats++;
    return LOAD_SEQ_REPEAT;
}

/* ---- sets of indexes -------------------------------------------------------------- */

static int bits_fit(load_bits *b, size_t nw)
{
    if (nw <= b->nw)
        return 0;
    size_t cap = b->nw ? b->nw : 64;
    while (cap < nw)
        cap *= 2;
    uint64_t *w = realloc(b->w, cap * sizeof(*w));
    if (w == NULL)
        return -1;
    memset(w + b->nw, 0, (cap - b->nw) * sizeof(*w));
    b->w = w;
    b->nw = cap;
    return 0;
}

int load_bits_add(load_bits *b, int64_t index)
{
    if (index < 0 || index >= LOAD_BITS_MAX || bits_fit(b, (size_t)index / 64 + 1) != 0)
        return -1;
    uint64_t m = (uint64_t)1 << (index % 64), *w = &b->w[index / 64];
    if (*w & m)
        return 1;
    *w |= m;
    return 0;
}

int64_t load_bits_merge(load_bits *into, const load_bits *from)
{
    if (bits_fit(into, from->nw) != 0)
        return -1;
    int64_t both = 0;
    for (size_t i = 0; i < from->nw; i++) {
        both += __builtin_popcountll(into->w[i] & from->w[i]);
        into->w[i] |= from->w[i];
    }
    return both;
}

void load_bits_free(load_bits *b)
{
    free(b->w);
    *b = (load_bits){0};
}

/* ---- errors by kind --------------------------------------------------------------- */

uint64_t load_errs_add(load_errs *e, const char *kind, uint64_t n)
{
    int i = 0;
    while (i < e->n && strcmp(e->name[i], kind) != 0)
        i++;
    if (i == LOAD_ERR_KINDS) {
        i--; /* the last slot is "other" */
    } else if (i == e->n) {
        snprintf(e->name[i], LOAD_ERR_NAME, "%s", i == LOAD_ERR_KINDS - 1 ? "other" : kind);
        e->n++;
    }
    uint64_t before = e->count[i];
    e->count[i] += n;
    return before;
}

uint64_t load_errs_get(const load_errs *e, const char *kind)
{
    for (int i = 0; i < e->n; i++)
        if (strcmp(e->name[i], kind) == 0)
            return e->count[i];
    return 0;
}

uint64_t load_errs_total(const load_errs *e)
{
    uint64_t t = 0;
    for (int i = 0; i < e->n; i++)
        t += e->count[i];
    return t;
}

void load_errs_merge(load_errs *into, const load_errs *from)
{
    for (int i = 0; i < from->n; i++)
        load_errs_add(into, from->name[i], from->count[i]);
}

/* ---- what frames, acks and /proc say ---------------------------------------------- */

void load_mark_put(char *at, uint64_t ns)
{
    memcpy(at, LOAD_MARK, 3);
    for (int i = LOAD_MARK_LEN - 1; i >= 3; i--, ns /= 10)
        at[i] = (char)('0' + ns % 10);
}

uint64_t load_mark_find(const uint8_t *p, size_t n)
{
    const uint8_t *at;
    size_t before = n; /* the search goes backwards: the marker ends the text */
    while ((at = memrchr(p, '@', before)) != NULL) {
        before = (size_t)(at - p);
        if (n - before < LOAD_MARK_LEN || memcmp(at, LOAD_MARK, 3) != 0)
            continue;
        uint64_t v = 0;
        int i = 3;
        for (; i < LOAD_MARK_LEN && at[i] >= '0' && at[i] <= '9'; i++)
            v = v * 10 + (uint64_t)(at[i] - '0');
        if (i == LOAD_MARK_LEN)
            return v;
    }
    return 0;
}

int64_t load_frame_index(const uint8_t *p, size_t n)
{
    static const char key[] = "\"index\"";
    size_t i = 0;
    if (n == 0 || p[0] != '{')
        return -1;
    for (i = 1; i < n && p[i] == ' '; i++)
        ;
    if (n - i < sizeof(key) - 1 || memcmp(p + i, key, sizeof(key) - 1) != 0)
        return -1;
    for (i += sizeof(key) - 1; i < n && p[i] == ' '; i++)
        ;
    if (i == n || p[i] != ':')
        return -1;
    for (i++; i < n && p[i] == ' '; i++)
        ;
    int64_t v = 0;
    size_t start = i;
    for (; i < n && p[i] >= '0' && p[i] <= '9' && i - start < 18; i++)
        v = v * 10 + (p[i] - '0');
    return i == start || (i < n && p[i] >= '0' && p[i] <= '9') ? -1 : v;
}

bool load_ack_next(const char **p, const char *end, int64_t *index)
{
    static const char key[] = "\"index\"";
    const char *at = *p;
    while (at < end && (at = memmem(at, (size_t)(end - at), key, sizeof(key) - 1)) != NULL) {
        at += sizeof(key) - 1;
        while (at < end && (*at == ' ' || *at == ':'))
            at++;
        if (at == end || *at < '0' || *at > '9')
            continue;
        int64_t v = 0;
        for (int k = 0; at < end && *at >= '0' && *at <= '9' && k < 18; at++, k++)
            v = v * 10 + (*at - '0');
        *p = at;
        *index = v;
        return true;
    }
    *p = end;
    return false;
}

int load_proc_ticks(const char *stat, uint64_t *ticks)
{
    const char *at = strrchr(stat, ')'); /* the command's name may hold anything */
    if (at == NULL)
        return -1;
    unsigned long long ut, st;
    /* after ") ": state (field 3) ... utime (14), stime (15) */
    if (sscanf(at + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
        return -1;
    *ticks = ut + st;
    return 0;
}

long load_proc_kib(const char *status, const char *key)
{
    size_t kl = strlen(key);
    for (const char *line = status; line != NULL && *line != '\0';) {
        if (strncmp(line, key, kl) == 0 && line[kl] == ':')
            return strtol(line + kl + 1, NULL, 10);
        line = strchr(line, '\n');
        if (line != NULL)
            line++;
    }
    return -1;
}

double load_self_cpu_s(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0)
        return 0;
    return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
           (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}
