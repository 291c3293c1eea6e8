/*
 * pool_scan.c - recovery of the pool at open (pool.c): the records of
 * every segment, in order, into the catalog and the segments' indexes.
 *
 * stp_scan_buf is the rule, without I/O: records are taken while they
 * decode (complete, CRC right for this segment's seed); they count only
 * once their group's COMMIT record (whose payload names the group's start)
 * is there, so a group a crash interrupted is dropped whole. Where a
 * record does not decode, the rest of the buffer is searched for a later
 * valid record: none means a torn tail, cut off at the last COMMIT; one
 * means corruption in the middle, reported with its place, and the scan
 * goes on from there (a group split by the damage is taken with what is
 * left of it: it was acknowledged). In the log's last segment (unless
 * its index file, written after its sync, is there) a later COMMIT must
 * also say that the damaged group was durable before it was written:
 * the pages of what was written since the last sync reach the disk in
 * any order, so a crash can leave a hole there with later records, even
 * later groups, whole after it. What was not synced yet is a torn tail
 * too, cut at the damaged group: under `full` only the last group (never
 * acknowledged), under `interval` and `none` what those policies may
 * lose. Applying the records checks that each
 * conversation's events come with the next index: one that misses some is
 * read-only from there on, its valid prefix readable. A record names its
 * conversation by its tag: the conversation's id, or, after a carry in
 * several groups (pool_carry.c), the copy's tag, which COPY introduces
 * and ADOPT gives the conversation (as a CREATE of it would); a copy
 * without its ADOPT is passed over.
 *
 * A segment sealed lazily (pool_seg.c: its successor's header says where
 * it ends) may have been short, or had holes, when a crash came, and
 * nothing after it was durable then: unless its index file says it was
 * made durable, there the first damage ends the whole log, and the
 * segments after it are removed. So too when its successor is unfinished
 * (a header of zeros, or none: a lazy roll makes the next segment without
 * a sync): nothing from that successor on was ever synced.
 */
#include "pool_impl.h"

#include "io.h"
#include "log_impl.h"
#include "runtime/grow.h"
#include "runtime/log.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static bool plausible_index(uint64_t index)
{
    return index <= STP_EVENT_MAX || index >= STP_IDX_LOWEST;
}

/* The first byte at or after `from` that is not zero, or len. */
static size_t skip_zeros(const uint8_t *p, size_t from, size_t len)
{
    while (from < len && ((uintptr_t)(p + from) & 7) != 0 && p[from] == 0)
        from++;
    for (uint64_t w; from + 8 <= len && (memcpy(&w, p + from, 8), w == 0);)
        from += 8;
    while (from < len && p[from] == 0)
        from++;
    return from;
}

/* The first offset after `from` where a valid record starts, or len.
 * Candidates are filtered by their id's length (never zero: a spare's
 * zeros after the last group are passed over at once) and their index
 * field first: random bytes almost never get as far as a CRC. */
static size_t next_valid(const uint8_t *p, size_t from, size_t len, uint32_t seed)
{
    enum { IDLEN = ST_JREC_HDR - 1 }; /* where a record's id length is */
    for (size_t at = from; at + ST_JREC_HDR <= len; at++) {
        if (p[at + IDLEN] == 0) {
            size_t nz = skip_zeros(p, at + IDLEN, len);
            if (nz >= len)
                return len;
            at = nz - IDLEN; /* nz > at + IDLEN: at moves on */
        }
        if (!plausible_index(st_get64(p + at + 8 + ST_TAG_LEN)))
            continue;
        st_rec rec;
        if (st_rec_decode(p + at, len - at, true, seed, &rec) == ST_REC_OK)
            return at;
    }
    return len;
}

static bool is_commit(const st_rec *r)
{
    static const uint8_t zero[ST_TAG_LEN];
    return r->index == STP_IDX_COMMIT && memcmp(r->tag, zero, ST_TAG_LEN) == 0 && r->len == 8;
}

/* How many bytes of the segment a COMMIT says were durable when it was
 * written (pool_impl.h). */
static uint64_t synced_to(const st_rec *commit)
{
    return commit->keylen == 8 ? st_get64(commit->key) : st_get64(commit->payload);
}

/* Whether a COMMIT at or after q says that the group at gstart was
 * durable before it was written. */
static bool later_group(const uint8_t *p, size_t q, size_t len, uint32_t seed, size_t gstart)
{
    for (size_t at = q; at < len;) {
        st_rec rec;
        if (st_rec_decode(p + at, len - at, true, seed, &rec) != ST_REC_OK) {
            at = next_valid(p, at + 1, len, seed);
            continue;
        }
        if (is_commit(&rec) && synced_to(&rec) > gstart)
            return true;
        at += rec.size;
    }
    return false;
}

typedef struct pend {
    st_rec r;
    uint64_t off;
} pend;

int stp_scan_buf(const uint8_t *p, size_t len, uint32_t seed, const stp_scan_cb *cb,
                 stp_scan_res *res)
{
    pend *v = NULL;
    size_t n = 0, cap = 0;
    size_t pos = ST_FILE_HDR, gstart = pos;
    bool damaged = false; /* the group under way lost records to corruption */
    int e = 0;
    res->end = len < ST_FILE_HDR ? len : ST_FILE_HDR;
    res->corrupt = 0;
    while (e == 0 && pos < len) {
        st_rec rec;
        bool ok = st_rec_decode(p + pos, len - pos, true, seed, &rec) == ST_REC_OK;
        if (ok && is_commit(&rec) && st_get64(rec.payload) != gstart && !damaged)
            ok = false; /* a COMMIT that is not this group's */
        if (!ok) {
            size_t q = cb->stop_at_damage ? len : next_valid(p, pos + 1, len, seed);
            if (q >= len || (cb->last && !later_group(p, q, len, seed, gstart)))
                break; /* a torn tail */
            res->corrupt++;
            if (cb->corrupt != NULL)
                cb->corrupt(cb->ctx, pos, len - pos >= 8 + ST_TAG_LEN ? p + pos + 8 : NULL);
            damaged = true;
            pos = q;
            continue;
        }
        if (is_commit(&rec)) {
            for (size_t i = 0; e == 0 && i < n; i++)
                e = cb->record(cb->ctx, &v[i].r, v[i].off);
            n = 0;
            pos += rec.size;
            gstart = res->end = pos;
            damaged = false;
            continue;
        }
        if (rt_grow((void **)&v, &cap, n + 1, sizeof(*v), 64) < 0) {
            e = -ENOMEM;
            break;
        }
        v[n++] = (pend){rec, pos};
        pos += rec.size;
    }
    free(v);
    return e;
}

/* ---- applying records at open ---------------------------------------------- */

stp_ent stp_ent_of(const st_rec *r, uint64_t off)
{
    stp_ent e = {.index = r->index, .off = (uint32_t)off, .size = (uint32_t)r->size};
    memcpy(e.id.b, r->tag, sizeof(e.id.b));
    e.hash = (uint32_t)(st_id_hash(r->id, r->idlen) >> 32);
    e.khash = r->keylen > 0 ? st_key_hash_hi(r->key, r->keylen) : 0;
    return e;
}

/* What the scan knows of tags that are not a conversation's id: carries
 * in several groups begun and not yet adopted (pool_carry.c: a copy, a
 * conversation outside the catalog), and the conversations that adopted
 * one (their tag's id). */
typedef struct copy_pend {
    rt_uuid of;  /* the conversation copied */
    stp_conv *h; /* the copy: id and tag its tag */
} copy_pend;
typedef struct alias {
    rt_uuid tag, id; /* tag zero: free */
} alias;
typedef struct tags {
    copy_pend *pend;
    size_t npend, pcap;
    alias *al; /* open addressing, at most half full */
    size_t nal, acap;
} tags;

static const rt_uuid no_tag;

static size_t alias_slot(const alias *al, size_t cap, const rt_uuid *tag)
{
    uint64_t h;
    memcpy(&h, tag->b, sizeof(h)); /* tags are random */
    size_t i = (size_t)h & (cap - 1);
    while (!rt_uuid_eq(&al[i].tag, tag) && !rt_uuid_eq(&al[i].tag, &no_tag))
        i = (i + 1) & (cap - 1);
    return i;
}

static int alias_put(tags *t, const rt_uuid *tag, const rt_uuid *id)
{
    if (2 * (t->nal + 1) > t->acap) {
        size_t cap = t->acap ? 2 * t->acap : 64;
        alias *al = calloc(cap, sizeof(*al));
        if (al == NULL)
            return -ENOMEM;
        for (size_t i = 0; i < t->acap; i++)
            if (!rt_uuid_eq(&t->al[i].tag, &no_tag))
                al[alias_slot(al, cap, &t->al[i].tag)] = t->al[i];
        free(t->al);
        t->al = al;
        t->acap = cap;
    }
    alias *a = &t->al[alias_slot(t->al, t->acap, tag)];
    if (!rt_uuid_eq(&a->tag, tag))
        t->nal++;
    *a = (alias){*tag, *id};
    return 0;
}

static copy_pend *pending(tags *t, const rt_uuid *tag)
{
    for (size_t i = 0; i < t->npend; i++)
        if (rt_uuid_eq(&t->pend[i].h->tag, tag))
            return &t->pend[i];
    return NULL;
}

static void tags_free(tags *t)
{
    for (size_t i = 0; i < t->npend; i++)
        stp_conv_free(t->pend[i].h);
    if (t->npend > 0)
        rt_log(RT_LOG_INFO, "store",
               "pool: %zu carry(s) a close or a crash interrupted: their copies are passed over",
               t->npend);
    free(t->pend);
    free(t->al);
}

/* The conversation whose records carry `tag` now: a copy under way, one
 * with its own id as its tag, or one that adopted a copy. */
static stp_conv *conv_of(stp_store *s, tags *t, const rt_uuid *tag)
{
    copy_pend *p = pending(t, tag);
    if (p != NULL)
        return p->h;
    stp_conv *c = stp_lookup(s, tag);
    if (c != NULL && rt_uuid_eq(&c->tag, tag))
        return c;
    alias *a = t->acap > 0 ? &t->al[alias_slot(t->al, t->acap, tag)] : NULL;
    c = a != NULL && rt_uuid_eq(&a->tag, tag) ? stp_lookup(s, &a->id) : NULL;
    return c != NULL && rt_uuid_eq(&c->tag, tag) ? c : NULL;
}

typedef struct rctx {
    stp_store *s;
    uint32_t seq;
    stp_segidx *x;
    uint64_t gaps;
    tags *t;
} rctx;

/* COPY: a copy of a conversation begins, outside the catalog. */
static int copy_begin(rctx *x, const st_rec *r, const rt_uuid *tag, stp_loc at)
{
    rt_uuid of;
    if (r->keylen < 32 || !rt_uuid_parse((const char *)r->key, 32, &of))
        return 0; /* not one of ours: passed over */
    stp_conv *h = stp_conv_new(x->s, tag);
    tags *t = x->t;
    if (h == NULL || (pending(t, tag) == NULL && rt_grow((void **)&t->pend, &t->pcap, t->npend + 1,
                                                         sizeof(*t->pend), 8) < 0)) {
        free(h);
        return -ENOMEM;
    }
    h->meta_at = at;
    h->create_seq = x->seq;
    h->has_parent = r->keylen == 64 && rt_uuid_parse((const char *)r->key + 32, 32, &h->parent);
    copy_pend *p = pending(t, tag); /* tags are random: none */
    if (p != NULL)
        stp_conv_free(p->h);
    else
        p = &t->pend[t->npend++];
    *p = (copy_pend){of, h};
    return 0;
}

/* ADOPT: the copy is the conversation, as a CREATE of it would be. */
static int adopt(rctx *x, const rt_uuid *tag)
{
    tags *t = x->t;
    copy_pend *p = pending(t, tag);
    if (p == NULL)
        return 0; /* its COPY is not there: not one of ours */
    copy_pend got = *p;
    *p = t->pend[--t->npend];
    stp_conv *old = stp_lookup(x->s, &got.of);
    if (old != NULL)
        stp_remove(x->s, old);
    got.h->id = got.of;
    int e = stp_insert(x->s, got.h);
    if (e < 0) {
        stp_conv_free(got.h);
        return e;
    }
    return alias_put(t, tag, &got.of);
}

static void broken(rctx *x, stp_conv *c, const char *why, uint64_t off)
{
    if (c != NULL && !c->broken) {
        c->broken = true;
        x->gaps++;
    }
    if (x->s->corrupt[0] == '\0') {
        snprintf(x->s->corrupt, sizeof(x->s->corrupt),
                 "%s at pool/%020" PRIu32 ".seg offset %" PRIu64 " in %.200s: the "
                 "conversations it touches are read-only with their valid prefix",
                 why, x->seq, off, x->s->dir);
    }
}

static int on_record(void *ctx, const st_rec *r, uint64_t off)
{
    rctx *x = ctx;
    stp_store *s = x->s;
    stp_ent e = stp_ent_of(r, off);
    int err = stp_idx_push(x->x, &e);
    if (err < 0)
        return err;
    stp_loc at = {x->seq, (uint32_t)(r->payload - (r->tag - 8) + off), r->len};
    /* a CREATE is under its conversation's id */
    stp_conv *c = r->index == STP_IDX_CREATE ? stp_lookup(s, &e.id) : conv_of(s, x->t, &e.id);
    switch (r->index) {
    case STP_IDX_COPY:
        return copy_begin(x, r, &e.id, at);
    case STP_IDX_ADOPT:
        return adopt(x, &e.id);
    case STP_IDX_CREATE:
        if (c != NULL)
            stp_remove(s, c); /* a carry's copy (pool_carry.c) replaces it */
        if ((c = stp_conv_new(s, &e.id)) == NULL)
            return -ENOMEM;
        c->meta_at = at;
        c->create_seq = x->seq;
        c->has_parent = r->keylen == 32 && rt_uuid_parse((const char *)r->key, 32, &c->parent);
        return stp_insert(s, c);
    case STP_IDX_META:
        if (c != NULL)
            c->meta_at = at;
        return 0;
    case STP_IDX_FILE:
        return c != NULL ? stp_set_file(c, (const char *)r->id, r->idlen, at) : 0;
    case STP_IDX_DELETE:
        if (c != NULL)
            stp_remove(s, c);
        return 0;
    default:
        if (c == NULL || c->broken || r->index > STP_EVENT_MAX)
            return 0;
        if (r->index != c->count) {
            broken(x, c, "events missing", off);
            return 0;
        }
        err = stp_note_run(c, x->seq, (uint32_t)r->index);
        if (err == 0)
            c->count++;
        return err;
    }
}

static void on_corrupt(void *ctx, uint64_t off, const uint8_t *tag)
{
    rctx *x = ctx;
    rt_uuid id;
    stp_conv *c = NULL;
    if (tag != NULL) {
        memcpy(id.b, tag, sizeof(id.b));
        c = conv_of(x->s, x->t, &id);
    }
    broken(x, c, "a corrupt record with valid records after it", off);
}

int stp_seg_read(stp_store *s, uint32_t seq, char **data, size_t *len)
{
    char path[4096];
    stp_path(s, seq, "seg", path, sizeof(path));
    int r = st_read_file(path, SIZE_MAX / 2, data, len);
    uint64_t got;
    if (r == 0 &&
        (*len < ST_FILE_HDR || !st_file_header_ok((const uint8_t *)*data, STP_SEG_MAGIC, &got) ||
         (uint32_t)got != seq)) {
        free(*data);
        r = -EBADMSG;
    }
    return r;
}

int stp_seg_prev_end(stp_store *s, uint32_t seq, uint32_t *prev_end)
{
    *prev_end = 0;
    char path[4096];
    stp_path(s, seq, "seg", path, sizeof(path));
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    uint8_t h[ST_FILE_HDR];
    ssize_t got = pread(fd, h, sizeof(h), 0);
    int e = errno;
    close(fd);
    if (got < 0)
        return -e;
    /* shorter than a header, or zeros where it goes: never synced */
    bool zeros = true;
    for (ssize_t i = 0; i < got && zeros; i++)
        zeros = h[i] == 0;
    if (got < (ssize_t)sizeof(h) || zeros)
        return 1;
    uint64_t v;
    if (!st_file_header_ok(h, STP_SEG_MAGIC, &v) || (uint32_t)v != seq)
        return -EBADMSG;
    *prev_end = (uint32_t)(v >> 32);
    return 0;
}

/* One segment file into the catalog and its index: 0, or 1 if a crash
 * left it unfinished (removed: made again under its number; the segments
 * after it go too). end: where it must end if its successor began before
 * it was durable (else 0); if it does not (a crash left it short, or with
 * holes where pages never reached the disk), *ends: the log ends at its
 * first damage. stop: its successor is unfinished and it may not be
 * durable either: its first damage ends the log. last: no segment follows
 * and no index file says it was made durable (stp_scan_cb.last). */
static int recover_seg(stp_store *s, tags *t, uint32_t seq, uint32_t end, bool stop, bool last,
                       bool *ends, char *err, size_t errlen)
{
    char path[4096];
    stp_path(s, seq, "seg", path, sizeof(path));
    char *data;
    size_t len;
    int r = stp_seg_read(s, seq, &data, &len);
    if (r == -EBADMSG) {
        uint32_t unused;
        if (stp_seg_prev_end(s, seq, &unused) == 1) { /* unfinished: nothing in it was synced */
            rt_log(RT_LOG_WARN, "store", "removing %s: a segment a crash left unfinished", path);
            return unlink(path) == 0 ? 1 : -errno;
        }
        snprintf(err, errlen, "%s is not a segment of this pool (bad header)", path);
        return r;
    }
    if (r < 0) {
        snprintf(err, errlen, "cannot read %s: %s", path, strerror(-r));
        return r;
    }
    const uint8_t *p = (const uint8_t *)data;
    rctx x = {s, seq, stp_sealed_add(s, seq), 0, t};
    if (x.x == NULL) {
        free(data);
        return -ENOMEM;
    }
    stp_scan_cb cb = {&x, on_record, on_corrupt, end != 0 || stop, last};
    stp_scan_res res;
    r = stp_scan_buf(p, len, st_journal_seed(seq), &cb, &res);
    *ends = r == 0 && end != 0 && res.end != end;
    bool torn = res.end < len && skip_zeros(p, (size_t)res.end, len) < len;
    free(data);
    stp_idx_sort(x.x);
    x.x->end = res.end;
    if (r < 0) {
        snprintf(err, errlen, "cannot recover %s: %s", path, strerror(-r));
        return r;
    }
    if (res.corrupt > 0)
        rt_log(RT_LOG_ERROR, "store", "%s", s->corrupt);
    if (*ends)
        rt_log(RT_LOG_WARN, "store",
               "%s ends at offset %" PRIu64 ", not %" PRIu32
               ": a crash came before it was durable; the log ends there (nothing after it was "
               "acknowledged as durable)",
               path, res.end, end);
    if (res.end < len) { /* a group a crash interrupted (never acknowledged), or zeros */
        if (torn && !*ends)
            rt_log(RT_LOG_INFO, "store",
                   "cut a torn tail of %" PRIu64 " bytes from %s at offset %" PRIu64,
                   (uint64_t)len - res.end, path, res.end);
        int fd = open(path, O_WRONLY | O_CLOEXEC);
        r = fd < 0 ? -errno : st_truncate(fd, res.end);
        if (r == 0)
            r = st_fsync(fd);
        if (fd >= 0)
            close(fd);
        if (r < 0) {
            snprintf(err, errlen, "cannot cut the torn tail of %s: %s", path, strerror(-r));
            return r;
        }
    }
    return 0;
}

/* The segments after one a crash left short: written after it, never
 * durable in order (a sync makes the segments before durable first), so
 * none of it was acknowledged as durable. Their index files go too: the
 * next segments are made again under the same numbers. */
static int drop_after(stp_store *s, const uint64_t *seqs, size_t n, char *err, size_t errlen)
{
    for (size_t i = 0; i < n; i++) {
        char idx[4096], seg[4096];
        stp_path(s, (uint32_t)seqs[i], "idx", idx, sizeof(idx));
        stp_path(s, (uint32_t)seqs[i], "seg", seg, sizeof(seg));
        rt_log(RT_LOG_WARN, "store", "removing %s: written after a segment a crash left short",
               seg);
        const char *bad = unlink(idx) < 0 && errno != ENOENT ? idx : unlink(seg) < 0 ? seg : NULL;
        if (bad != NULL) {
            int e = errno;
            snprintf(err, errlen, "cannot remove %s: %s", bad, strerror(e));
            return -e;
        }
    }
    int r = n > 0 ? st_fsync_dir(s->pool_dir) : 0;
    if (r < 0)
        snprintf(err, errlen, "cannot sync %s: %s", s->pool_dir, strerror(-r));
    return r;
}

/* Whether segment seq has its index file, for its whole length: the
 * sealing thread writes it only once the segment is durable, so damage
 * found there since is corruption, not a crash's. */
static bool indexed(stp_store *s, uint32_t seq, uint32_t end)
{
    stp_segidx x = {.seq = seq, .end = end};
    char why[128];
    if (stp_idx_map(s, &x, why, sizeof(why)) < 0)
        return false;
    stp_idx_unmap(&x);
    return true;
}

int stp_recover(stp_store *s, char *err, size_t errlen)
{
    uint64_t *seqs;
    size_t n;
    int r = st_list_numbered(s->pool_dir, "seg", &seqs, &n);
    if (r < 0) {
        snprintf(err, errlen, "cannot list %s: %s", s->pool_dir, strerror(-r));
        return r;
    }
    uint32_t covered = 0, scanned = 0, nscanned = 0;
    bool records = false; /* in the segments scanned: else the checkpoint is current */
    for (size_t i = 0; i < n; i++)
        if (seqs[i] == 0 || seqs[i] >= UINT32_MAX) {
            snprintf(err, errlen, "%s: a segment number out of range", s->pool_dir);
            r = -EBADMSG;
        }
    if (r == 0 && (r = stp_ckpt_load(s, seqs, n, &covered)) < 0)
        snprintf(err, errlen, "cannot load the pool's checkpoint: %s", strerror(-r));
    tags t = {0}; /* the checkpoint's adopted tags first */
    for (size_t i = 0; r == 0 && i < s->nbuckets; i++)
        for (stp_conv *c = s->buckets[i]; r == 0 && c != NULL; c = c->next)
            if (!rt_uuid_eq(&c->tag, &c->id))
                r = alias_put(&t, &c->tag, &c->id);
    for (size_t i = 0; r == 0 && i < n; i++) {
        if (seqs[i] <= covered)
            continue;
        uint32_t seq = (uint32_t)seqs[i], end = 0; /* where it ends, if sealed lazily */
        bool next = i + 1 < n && seqs[i + 1] == seqs[i] + 1;
        /* an unfinished successor: the log ends in this one, at its first
         * damage unless its index file says it was durable */
        bool cut = next && stp_seg_prev_end(s, seq + 1, &end) == 1;
        if (end != 0 && indexed(s, seq, end))
            end = 0;
        char idx[4096];
        stp_path(s, seq, "idx", idx, sizeof(idx));
        bool durable = access(idx, F_OK) == 0; /* written after its sync */
        bool ends = false;
        r = recover_seg(s, &t, seq, end, cut && !durable, i + 1 == n && !durable, &ends, err,
                        errlen);
        if (r == 1) { /* no gap in the numbers: the next segment takes it */
            r = drop_after(s, seqs + i + 1, n - i - 1, err, errlen);
            n = i;
            break;
        }
        stp_segidx *x = r == 0 ? stp_sealed_of(s, (uint32_t)seqs[i]) : NULL;
        if (x != NULL) {
            scanned = x->seq;
            nscanned++;
            records |= x->n > 0;
        }
        if (r == 0 && (ends || cut)) {
            r = drop_after(s, seqs + i + 1, n - i - 1, err, errlen);
            n = i + 1;
        }
    }
    /* what the scan read may be only in the page cache (a kill): durable
     * before an index or a checkpoint names it */
    if (r == 0 && nscanned > 0)
        stp_lazy_add(s, (uint32_t)(covered + 1), scanned);
    uint32_t next = n > 0 ? (uint32_t)seqs[n - 1] + 1 : 1;
    free(seqs);
    tags_free(&t);
    /* the next segment's file is made by the first group: an open (and a
     * store opened only to read) waits for no fsync; set before the
     * sealing thread is given work below (a checkpoint it writes may start
     * a carry, which reads it) */
    pthread_mutex_lock(&s->seg_mu);
    s->act = (stp_segidx){.seq = next};
    s->act_size = s->act_synced = s->act_alloc = ST_FILE_HDR; /* nothing to sync */
    /* and it says where the last one scanned ends, as after a lazy roll */
    const stp_segidx *last = r == 0 && nscanned > 0 ? stp_sealed_of(s, scanned) : NULL;
    s->open_prev_end = last != NULL && scanned + 1 == next ? (uint32_t)last->end : 0;
    /* their index files, anew (this scan is the truth): queued once the
     * scan is over, as it grows the array of sealed indexes unlocked; the
     * first may be written (its entry swapped) while the next are queued */
    for (size_t k = 0; r == 0 && k < s->nsealed; k++)
        if (s->sealed[k].seq > covered && s->sealed[k].n > 0)
            stp_seal_idx(s, s->sealed[k].seq);
    pthread_mutex_unlock(&s->seg_mu);
    if (r == 0 && records && !s->no_ckpt) { /* so that the next open scans none of it */
        uint8_t *b;
        size_t len;
        if (stp_ckpt_snapshot(s, scanned, &b, &len) == 0)
            stp_seal_ckpt(s, scanned, b, len);
    }
    if (r == 0 && covered > 0)
        rt_log(RT_LOG_INFO, "store",
               "pool: opened from the checkpoint of segment %" PRIu32 ", %" PRIu32
               " segment(s) after it scanned",
               covered, nscanned);
    else if (r == 0 && n > 0)
        rt_log(RT_LOG_INFO, "store", "pool: no checkpoint used, %" PRIu32 " segment(s) scanned",
               nscanned);
    return r;
}
