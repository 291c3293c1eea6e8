/*
 * test_pool_ckpt.c - the pool's sealed index files and catalog checkpoints
 * (store/pool_idx.c, pool_ckpt.c, pool_seal.c).
 *
 * Their encodings are checked without I/O: what is written decodes to the
 * same, and any byte changed or cut is refused. Then the promise that
 * matters: an open from the checkpoint (and the index files) sees exactly
 * what an open that scans every segment sees, the same catalog and the
 * same reads, after random workloads of creations with parents, appends,
 * metas, files, deletes and creations of the same ids again, on small
 * segments that roll often; after a clean close and on a copy taken while
 * the store ran (what a crash leaves). A checkpoint or an index file that
 * is corrupt, cut, missing, of another segment, or that names a segment
 * that is gone is never trusted: the open falls back and sees the same.
 * Faults injected into their writes (io.h) cost nothing but the next
 * open's time. Corruption inside a segment a checkpoint covers is
 * reported when a reader reaches it (a scan makes the conversation
 * read-only at its valid prefix). A segment rolled without a sync and
 * found short ends the log (test_lazy_roll_short_segment).
 */
#include "runtime/log.h"
#include "store/crc32c.h"
#include "store/io.h"
#include "store/pool_impl.h"
#include "store/store.h"
#include "support_store.h"
#include "support_sync.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

enum { SEG = 8 << 10, IDS = 24, OPS = 400 };

/* ---- pure: the index file -------------------------------------------------------- */

static void some_ents(stp_ent *e, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        memset(&e[i], 0, sizeof(e[i]));
        e[i].id.b[0] = (uint8_t)(i / 3);
        e[i].index = i;
        e[i].off = (uint32_t)(16 + 100 * i);
        e[i].size = 100;
        e[i].hash = (uint32_t)(i * 2654435761u);
        e[i].khash = (uint32_t)i;
    }
}

START_TEST(test_idx_encoding)
{
    enum { N = 9 };
    stp_ent e[N];
    some_ents(e, N);
    size_t len = stp_idx_file_size(N);
    uint8_t *b = malloc(len);
    stp_idx_encode(b, 5, 916, e, N);
    size_t n;
    const char *why;
    ck_assert_int_eq(stp_idx_check(b, len, 5, 916, &n, &why), 0);
    ck_assert_uint_eq(n, N);
    ck_assert_int_eq(memcmp(b + STP_IDX_HDR, e, sizeof(e)), 0);
    ck_assert_int_eq(stp_idx_check(b, len, 6, 916, &n, &why), -EBADMSG); /* another segment */
    ck_assert_int_eq(stp_idx_check(b, len, 5, 917, &n, &why), -EBADMSG); /* another end */
    for (size_t cut = 0; cut < len; cut += 7)
        ck_assert_int_eq(stp_idx_check(b, cut, 5, 916, &n, &why), -EBADMSG);
    for (size_t at = 0; at < len; at++) {
        b[at] ^= 0x20;
        ck_assert_msg(stp_idx_check(b, len, 5, 916, &n, &why) == -EBADMSG, "flip at %zu", at);
        b[at] ^= 0x20;
    }
    stp_idx_encode(b, 5, 16, NULL, 0); /* an empty segment's */
    ck_assert_int_eq(stp_idx_check(b, stp_idx_file_size(0), 5, 16, &n, &why), 0);
    ck_assert_uint_eq(n, 0);
    free(b);
}
END_TEST

/* ---- pure: the checkpoint ----------------------------------------------------------- */

typedef struct convs {
    stp_conv *v[8];
    size_t n;
} convs;

static int collect(void *ctx, stp_conv *c)
{
    convs *x = ctx;
    if (x->n == 8) {
        stp_conv_free(c);
        return -EBADMSG;
    }
    x->v[x->n++] = c;
    return 0;
}

static void convs_free(convs *x)
{
    for (size_t i = 0; i < x->n; i++)
        stp_conv_free(x->v[i]);
    x->n = 0;
}

static stp_conv *make_conv(unsigned k, bool parent, uint32_t nruns, int nfiles)
{
    rt_uuid id;
    tst_conv_id(k, &id);
    stp_conv *c = stp_conv_new(NULL, &id);
    c->has_parent = parent;
    if (parent)
        tst_conv_id(k + 100, &c->parent);
    c->broken = k % 2 == 1;
    if (k % 3 == 0) /* records under a copy's tag (pool_copy.c) */
        tst_conv_id(k + 200, &c->tag);
    c->count = 10 * nruns;
    c->create_seq = k + 1;
    c->meta_at = (stp_loc){k, 16 + k, 30};
    for (uint32_t r = 0; r < nruns; r++)
        ck_assert_int_eq(stp_note_run(c, 2 + 2 * r, 10 * r), 0);
    for (int f = 0; f < nfiles; f++) {
        char name[16];
        int len = snprintf(name, sizeof(name), "f%d.json", f);
        ck_assert_int_eq(stp_set_file(c, name, (size_t)len, (stp_loc){3, 40u + (uint32_t)f, 9}), 0);
    }
    return c;
}

static void same_conv(const stp_conv *a, const stp_conv *b)
{
    ck_assert(rt_uuid_eq(&a->id, &b->id));
    ck_assert(rt_uuid_eq(&a->tag, &b->tag));
    ck_assert_int_eq(a->has_parent, b->has_parent);
    if (a->has_parent)
        ck_assert(rt_uuid_eq(&a->parent, &b->parent));
    ck_assert_int_eq(a->broken, b->broken);
    ck_assert_uint_eq(a->count, b->count);
    ck_assert_uint_eq(a->create_seq, b->create_seq);
    ck_assert_int_eq(memcmp(&a->meta_at, &b->meta_at, sizeof(a->meta_at)), 0);
    const stp_runs *ra = atomic_load(&a->runs), *rb = atomic_load(&b->runs);
    ck_assert_uint_eq(ra ? ra->n : 0, rb ? rb->n : 0);
    for (uint32_t k = 0; ra != NULL && k < ra->n; k++)
        ck_assert(ra->r[k].seq == rb->r[k].seq && ra->r[k].first == rb->r[k].first);
    const stp_file *fa = a->files, *fb = b->files;
    for (; fa != NULL && fb != NULL; fa = fa->next, fb = fb->next) {
        ck_assert_str_eq(fa->name, fb->name);
        ck_assert_int_eq(memcmp(&fa->at, &fb->at, sizeof(fa->at)), 0);
    }
    ck_assert(fa == NULL && fb == NULL);
}

START_TEST(test_ckpt_encoding)
{
    convs in = {.n = 0}, out = {.n = 0};
    in.v[in.n++] = make_conv(1, false, 0, 0);
    in.v[in.n++] = make_conv(2, true, 3, 2);
    in.v[in.n++] = make_conv(3, true, 1, 0);
    uint64_t ends[4] = {100, 200, 300, 400};
    stp_ckpt h = {.first = 2, .seq = 5, .ends = ends};
    snprintf(h.corrupt, sizeof(h.corrupt), "a corrupt record somewhere");
    uint8_t *b;
    size_t len;
    ck_assert_int_eq(stp_ckpt_encode(&h, in.v, in.n, &b, &len), 0);
    stp_ckpt g;
    ck_assert_int_eq(stp_ckpt_decode(b, len, &g, NULL, collect, &out), 0);
    ck_assert(g.first == 2 && g.seq == 5);
    ck_assert_int_eq(memcmp(g.ends, ends, sizeof(ends)), 0);
    ck_assert_str_eq(g.corrupt, h.corrupt);
    free(g.ends);
    ck_assert_uint_eq(out.n, in.n);
    for (size_t i = 0; i < in.n; i++)
        same_conv(in.v[i], out.v[i]);
    convs_free(&out);
    in.v[0]->create_seq = 6; /* after the segments it covers */
    uint8_t *bad;
    size_t badlen;
    ck_assert_int_eq(stp_ckpt_encode(&h, in.v, in.n, &bad, &badlen), 0);
    ck_assert_int_eq(stp_ckpt_decode(bad, badlen, &g, NULL, collect, &out), -EBADMSG);
    convs_free(&out);
    free(bad);
    for (size_t cut = 0; cut < len; cut++) {
        ck_assert_msg(stp_ckpt_decode(b, cut, &g, NULL, collect, &out) == -EBADMSG, "cut %zu", cut);
        convs_free(&out);
    }
    for (size_t at = 0; at < len; at++) {
        b[at] ^= 0x01;
        ck_assert_msg(stp_ckpt_decode(b, len, &g, NULL, collect, &out) == -EBADMSG, "flip %zu", at);
        convs_free(&out);
        b[at] ^= 0x01;
    }
    free(b);
    convs_free(&in);
}
END_TEST

/* A checkpoint of the first format (no create_seq) still opens: each
 * conversation's CREATE taken as the first segment it covers, so that
 * nothing is dropped before the conversation is deleted. */
START_TEST(test_ckpt_first_format)
{
    convs in = {.n = 0}, out = {.n = 0};
    in.v[in.n++] = make_conv(4, false, 2, 0);
    uint64_t ends[2] = {100, 200};
    stp_ckpt h = {.first = 3, .seq = 4, .ends = ends};
    uint8_t *b;
    size_t len;
    ck_assert_int_eq(stp_ckpt_encode(&h, in.v, in.n, &b, &len), 0);
    /* header, ends, an empty corrupt string; then id, flags, count */
    size_t at = 28 + 2 * 8 + 4 + 16 + 1 + 4;
    memmove(b + at, b + at + 4, len - at - 4);
    len -= 4;
    memcpy(b, STP_CKPT_MAGIC_V1, 8);
    st_put32(b + len - 4, st_crc32c(0, b, len - 4));
    stp_ckpt g;
    ck_assert_int_eq(stp_ckpt_decode(b, len, &g, NULL, collect, &out), 0);
    free(g.ends);
    ck_assert_uint_eq(out.n, 1);
    ck_assert_uint_eq(out.v[0]->create_seq, 3);
    in.v[0]->create_seq = 3;
    same_conv(in.v[0], out.v[0]);
    convs_free(&out);
    convs_free(&in);
    free(b);
}
END_TEST

/* ---- the store: a workload and what it looks like ------------------------------------ */

static uint64_t rnd(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static st_store *open_at(const char *dir, st_durability d)
{
    char where[4200], err[256] = "";
    snprintf(where, sizeof(where), "pool:%s", dir);
    st_opts o = {.dir = where, .durability = d, .segment_bytes = SEG};
    st_store *s = NULL;
    int r = st_store_open(&o, &s, err, sizeof(err));
    ck_assert_msg(r == 0, "open %s: %s", dir, err);
    return s;
}

static int wait_done(st_waiter *w)
{
    return st_waiter_wait(w);
}

/* n events appended to c, w told when they are durable. */
static int append_start(st_conv *c, uint64_t *seed, unsigned n, st_waiter *w)
{
    st_item it[20];
    rt_buf *b[20];
    char ids[20][40];
    for (unsigned i = 0; i < n; i++) {
        size_t len = 20 + rnd(seed) % 700;
        b[i] = rt_buf_new(len);
        uint8_t *p = rt_buf_wdata(b[i]);
        for (size_t k = 0; k < len; k++)
            p[k] = (uint8_t)('a' + rnd(seed) % 26);
        snprintf(ids[i], sizeof(ids[i]), "e%016llx", (unsigned long long)rnd(seed));
        it[i] = (st_item){.id = ids[i], .idlen = (uint32_t)strlen(ids[i]), .payload = b[i]};
    }
    st_waiter_init(w);
    int r = st_append(c, it, n, st_waiter_done, w);
    for (unsigned i = 0; i < n; i++)
        rt_buf_unref(b[i]);
    return r;
}

static int append_n(st_conv *c, uint64_t *seed, unsigned n)
{
    st_waiter w;
    int r = append_start(c, seed, n, &w);
    return r == 0 ? wait_done(&w) : r;
}

static rt_buf *text(const char *fmt, unsigned long long v)
{
    char s[64];
    int n = snprintf(s, sizeof(s), fmt, v);
    return rt_buf_copy(s, (size_t)n);
}

/* OPS random operations on conversations among IDS ids. */
static void workload(st_store *s, uint64_t seed)
{
    for (int op = 0; op < OPS; op++) {
        rt_uuid id, parent;
        unsigned k = (unsigned)(rnd(&seed) % IDS);
        tst_conv_id(k, &id);
        st_conv *c = NULL;
        unsigned what = (unsigned)(rnd(&seed) % 20);
        if (st_conv_get(s, &id, &c) != 0) {
            if (what < 12)
                continue;
            tst_conv_id((unsigned)(rnd(&seed) % IDS), &parent);
            st_conv *p = NULL;
            bool has = st_conv_get(s, &parent, &p) == 0;
            if (p != NULL)
                st_conv_release(p);
            rt_buf *meta = text("{\"m\":%llu}", rnd(&seed) % 1000);
            int r =
                st_conv_create(s, &id, has && !rt_uuid_eq(&id, &parent) ? &parent : NULL, meta, &c);
            rt_buf_unref(meta);
            ck_assert_int_eq(r, 0);
            st_conv_release(c);
            continue;
        }
        if (what < 13) {
            ck_assert_int_eq(append_n(c, &seed, 1 + (unsigned)(rnd(&seed) % 20)), 0);
        } else if (what < 15) {
            rt_buf *meta = text("{\"m\":%llu}", rnd(&seed) % 1000);
            ck_assert_int_eq(st_conv_set_meta(c, meta), 0);
            rt_buf_unref(meta);
        } else if (what < 18) {
            rt_buf *data = text("{\"f\":%llu}", rnd(&seed));
            st_waiter w;
            st_waiter_init(&w);
            ck_assert_int_eq(st_conv_put_file(c, what == 15 ? "a.json" : "b.json", data, what != 17,
                                              st_waiter_done, &w),
                             0);
            ck_assert_int_eq(wait_done(&w), 0);
            rt_buf_unref(data);
        } else {
            st_waiter w;
            st_waiter_init(&w);
            ck_assert_int_eq(st_conv_delete(c, st_waiter_done, &w), 0);
            ck_assert_int_eq(wait_done(&w), 0);
            continue; /* the delete took the reference */
        }
        st_conv_release(c);
    }
}

typedef struct sbuf {
    char *p;
    size_t len, cap;
} sbuf;

static void add(sbuf *b, const void *data, size_t n)
{
    if (b->len + n + 1 > b->cap) {
        b->cap = (b->len + n + 1) * 2;
        b->p = realloc(b->p, b->cap);
        ck_assert_ptr_nonnull(b->p);
    }
    memcpy(b->p + b->len, data, n);
    b->len += n;
    b->p[b->len] = '\0';
}

static void addf(sbuf *b, const char *fmt, unsigned long long v)
{
    char s[64];
    int n = snprintf(s, sizeof(s), fmt, v);
    add(b, s, (size_t)n);
}

static int by_uuid(const void *a, const void *b)
{
    return memcmp(a, b, sizeof(rt_uuid));
}

/* Everything a reader can see of the store, as text: the conversations in
 * id order, each with its parent, meta, files, read-only flag and every
 * event (id and payload, read in pages). bad: what reads failed, where. */
static char *view(st_store *s)
{
    sbuf b = {0};
    rt_uuid *ids;
    size_t n;
    ck_assert_int_eq(st_store_list(s, &ids, &n), 0);
    qsort(ids, n, sizeof(*ids), by_uuid);
    addf(&b, "%llu conversations\n", n);
    for (size_t i = 0; i < n; i++) {
        char hex[33];
        rt_uuid_hex(&ids[i], hex);
        add(&b, hex, 32);
        st_conv *c;
        ck_assert_int_eq(st_conv_get(s, &ids[i], &c), 0);
        rt_uuid p;
        if (st_conv_parent(c, &p)) {
            rt_uuid_hex(&p, hex);
            add(&b, " parent ", 8);
            add(&b, hex, 32);
        }
        rt_buf *m = st_conv_meta(c);
        add(&b, " meta ", 6);
        add(&b, rt_buf_data(m), rt_buf_len(m));
        rt_buf_unref(m);
        static const char *const files[] = {"a.json", "b.json"};
        for (int f = 0; f < 2; f++) {
            char *data;
            size_t len;
            int r = st_conv_get_file(c, files[f], &data, &len);
            addf(&b, " file %lld ", r);
            if (r == 0) {
                add(&b, data, len);
                free(data);
            }
        }
        st_log *l;
        st_open_report rep;
        int r = st_conv_log(c, &l, &rep);
        addf(&b, " log %lld", r);
        if (r == 0) {
            uint64_t count = st_log_count(l);
            addf(&b, " count %llu", count);
            addf(&b, " read-only %llu\n", st_log_read_only(l));
            for (uint64_t at = 0; at < count;) {
                st_page *pg;
                r = st_log_read(l, at, 100, &pg);
                if (r < 0) {
                    addf(&b, "  read error at %llu\n", at);
                    at += 100;
                    continue;
                }
                const uint8_t *base = rt_buf_data(pg->bytes);
                for (uint32_t j = 0; j < pg->n; j++) {
                    addf(&b, "  %llu ", pg->ev[j].index);
                    add(&b, base + pg->ev[j].id_off, pg->ev[j].id_len);
                    add(&b, " ", 1);
                    add(&b, base + pg->ev[j].off, pg->ev[j].len);
                    add(&b, "\n", 1);
                }
                at += pg->n;
                st_page_free(pg);
            }
        } else {
            add(&b, "\n", 1);
        }
        st_conv_release(c);
    }
    free(ids);
    return b.p;
}

static void same_view(const char *a, const char *b, const char *what)
{
    if (strcmp(a, b) == 0)
        return;
    size_t i = 0;
    while (a[i] == b[i])
        i++;
    size_t from = i > 200 ? i - 200 : 0;
    ck_abort_msg("%s: views differ at %zu:\n--- %.300s\n+++ %.300s", what, i, a + from, b + from);
}

static char *view_of(const char *dir)
{
    st_store *s = open_at(dir, ST_FULL);
    char *v = view(s);
    st_store_close(s);
    return v;
}

/* The view of a running store at dir, from a copy of it (a view opens
 * logs; the copy is what a crash leaves). */
static char *running_view(const char *dir)
{
    char *copy = tst_mkdtemp();
    tst_rmdir(copy);
    tst_copydir(dir, copy);
    char *v = view_of(copy);
    tst_rmdir(copy);
    free(copy);
    return v;
}

/* Open dir: it looks as `want`. */
static void expect_view(const char *dir, const char *want, const char *what)
{
    char *got = view_of(dir);
    same_view(want, got, what);
    free(got);
}

/* Remove the files of the pool named *.ext. */
static int remove_ext(const char *dir, const char *ext)
{
    char pdir[4200], path[4500];
    snprintf(pdir, sizeof(pdir), "%s/pool", dir);
    DIR *d = opendir(pdir);
    ck_assert_ptr_nonnull(d);
    int n = 0;
    size_t el = strlen(ext);
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        size_t l = strlen(e->d_name);
        if (l > el && strcmp(e->d_name + l - el, ext) == 0) {
            snprintf(path, sizeof(path), "%s/%s", pdir, e->d_name);
            ck_assert_int_eq(unlink(path), 0);
            n++;
        }
    }
    closedir(d);
    return n;
}

/* The numbers of the pool's files *.ext, ascending. */
static size_t numbered(const char *dir, const char *ext, uint64_t **v)
{
    char pdir[4200];
    snprintf(pdir, sizeof(pdir), "%s/pool", dir);
    size_t n;
    ck_assert_int_eq(st_list_numbered(pdir, ext, v, &n), 0);
    return n;
}

static void pool_file(const char *dir, uint64_t seq, const char *ext, char *out, size_t cap)
{
    snprintf(out, cap, "%s/pool/%020llu.%s", dir, (unsigned long long)seq, ext);
}

/* A copy of dir as an open that reads every segment finds it. */
static char *scan_copy(const char *dir)
{
    char *copy = tst_mkdtemp();
    tst_rmdir(copy);
    tst_copydir(dir, copy);
    remove_ext(copy, ".ckpt");
    remove_ext(copy, ".idx");
    return copy;
}

/* A view of dir after an open that scans every segment (on a copy). */
static char *scan_view(const char *dir)
{
    char *copy = scan_copy(dir);
    char *v = view_of(copy);
    tst_rmdir(copy);
    free(copy);
    return v;
}

/* The store at dir, closed, looks as `want` opened (from its checkpoint)
 * and by a scan of its segments. */
static void expect_reopened(const char *dir, const char *want, const char *what)
{
    char buf[200];
    snprintf(buf, sizeof(buf), "%s: reopened", what);
    expect_view(dir, want, buf);
    char *scanned = scan_view(dir);
    snprintf(buf, sizeof(buf), "%s: by a scan", what);
    same_view(want, scanned, buf);
    free(scanned);
}

/* A store after a workload, closed: its view (from the checkpoint). It
 * has two checkpoints: a close writes one, while the sealing thread may
 * have written none of the rolls' (each replaces one not yet written), so
 * the workload runs in two sessions. */
static char *prepared(char *dir, uint64_t seed)
{
    for (int session = 0; session < 2; session++) {
        st_store *s = open_at(dir, ST_FULL);
        workload(s, seed + (uint64_t)session);
        if (session == 1) {
            char *v = view(s);
            st_store_close(s);
            return v;
        }
        st_store_close(s);
    }
    return NULL;
}

/* Open from the checkpoint = open by a full scan = what was there before
 * the close; on a copy taken while the store ran too (a crash image). */
START_TEST(test_checkpoint_equals_scan)
{
    uint64_t seed = 0x9e3779b97f4a7c15ull * (uint64_t)(_i + 1);
    char *dir = tst_mkdtemp(), *crash = tst_mkdtemp();
    tst_rmdir(crash);
    st_store *s = open_at(dir, ST_FULL);
    workload(s, seed);
    char *live = view(s);
    tst_copydir(dir, crash); /* the sealing thread may be anywhere */
    workload(s, seed + 1);   /* and go on: deletes and creations after it */
    char *live2 = view(s);
    st_store_close(s);

    uint64_t *v;
    size_t nseg = numbered(dir, "seg", &v);
    uint64_t last = v[nseg - 1];
    free(v);
    ck_assert_uint_ge(nseg, 10); /* it rolled often */
    uint64_t *ck;
    size_t nck = numbered(dir, "ckpt", &ck);
    /* the newest two; or only the close's, if the sealing thread had each
     * roll's replaced by the next before it wrote it (a busy machine) */
    ck_assert(nck == 1 || nck == 2);
    ck_assert_uint_eq(ck[nck - 1], last); /* the close's covers every segment */
    free(ck);

    char *scanned = scan_view(dir);
    expect_view(dir, live2, "reopened from the checkpoint");
    same_view(live2, scanned, "reopened by a scan");
    char *c2 = scan_view(crash);
    expect_view(crash, live, "crash image, from its checkpoint");
    same_view(live, c2, "crash image, by a scan");
    /* the crash image's open wrote a checkpoint: the next open uses it */
    expect_view(crash, live, "crash image, reopened");
    free(c2);
    free(scanned);
    free(live);
    free(live2);
    tst_rmdir(dir);
    tst_rmdir(crash);
    free(dir);
    free(crash);
}
END_TEST

/* A checkpoint that is corrupt, cut, or gone: the one before it is used,
 * or every segment is scanned; the view is the same. */
START_TEST(test_bad_checkpoint_falls_back)
{
    char *dir = tst_mkdtemp();
    char *want = prepared(dir, 77);
    uint64_t *ck;
    size_t nck = numbered(dir, "ckpt", &ck);
    ck_assert_uint_eq(nck, 2);
    char newest[4400], older[4400];
    pool_file(dir, ck[1], "ckpt", newest, sizeof(newest));
    pool_file(dir, ck[0], "ckpt", older, sizeof(older));
    free(ck);
    switch (_i) {
    case 0: /* a flipped byte */
        tst_flip(newest, tst_file_size(newest) / 2);
        break;
    case 1: /* cut */
        tst_truncate(newest, tst_file_size(newest) - 5);
        break;
    case 2: /* gone */
        ck_assert_int_eq(unlink(newest), 0);
        break;
    case 3: /* both bad: a scan of everything */
        tst_flip(newest, 40);
        tst_truncate(older, 10);
        break;
    case 4: /* the newest named for another segment */
        ck_assert_int_eq(rename(newest, older), 0);
        break;
    }
    expect_view(dir, want, "after a bad checkpoint");
    expect_view(dir, want, "reopened"); /* the open that fell back wrote a good one */
    free(want);
    tst_rmdir(dir);
    free(dir);
}
END_TEST

/* A checkpoint covering a segment that is gone, or shorter than it says,
 * is not used: the open sees what a scan of what is there sees. */
START_TEST(test_checkpoint_of_missing_segment)
{
    char *dir = tst_mkdtemp();
    char *before = prepared(dir, 1234);
    char seg[4400];
    pool_file(dir, 3, "seg", seg, sizeof(seg));
    if (_i == 0)
        ck_assert_int_eq(unlink(seg), 0);
    else
        tst_truncate(seg, 200);
    char *want = scan_view(dir);
    ck_assert_msg(strcmp(want, before) != 0, "nothing was lost");
    expect_view(dir, want, "a checkpoint whose segment is damaged");
    free(want);
    free(before);
    tst_rmdir(dir);
    free(dir);
}
END_TEST

static void copy_file(const char *from, const char *to)
{
    char *data;
    size_t len;
    ck_assert_int_eq(st_read_file(from, 1 << 30, &data, &len), 0);
    FILE *f = fopen(to, "w");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(data, 1, len, f), len);
    fclose(f);
    free(data);
}

/* Index files that are missing, cut, corrupt, or another segment's: each
 * is rebuilt from its segment when first needed, said in the open
 * report, and written again. */
START_TEST(test_bad_index_is_rebuilt)
{
    char *dir = tst_mkdtemp();
    char *want = prepared(dir, 4321);
    uint64_t *v;
    size_t n = numbered(dir, "idx", &v);
    ck_assert_uint_ge(n, 5);
    for (size_t i = 0; i < n; i++) {
        char path[4400], other[4400];
        pool_file(dir, v[i], "idx", path, sizeof(path));
        switch (_i) {
        case 0:
            ck_assert_int_eq(unlink(path), 0);
            break;
        case 1:
            tst_truncate(path, tst_file_size(path) - 1);
            break;
        case 2:
            tst_flip(path, tst_file_size(path) / 2);
            break;
        case 3:
            tst_truncate(path, 0);
            break;
        case 4:
            pool_file(dir, v[(i + 1) % n], "idx", other, sizeof(other));
            copy_file(other, path);
            break;
        }
    }
    /* the report of a log that needed one */
    st_store *s = open_at(dir, ST_FULL);
    rt_uuid *ids;
    size_t nids;
    ck_assert_int_eq(st_store_list(s, &ids, &nids), 0);
    bool said = false;
    for (size_t i = 0; i < nids && !said; i++) {
        st_conv *c;
        st_log *l;
        st_open_report rep;
        ck_assert_int_eq(st_conv_get(s, &ids[i], &c), 0);
        ck_assert_int_eq(st_conv_log(c, &l, &rep), 0);
        said = strstr(rep.detail, "rescanned") != NULL;
        st_conv_release(c);
    }
    free(ids);
    ck_assert_msg(said, "no open report said an index was rebuilt");
    char *got = view(s);
    st_store_close(s);
    same_view(want, got, "with bad index files");
    free(got);
    /* those a log needed are written again, whole (the others wait for
     * their first use) */
    int whole = 0;
    for (size_t i = 0; i < n; i++) {
        char path[4400];
        pool_file(dir, v[i], "idx", path, sizeof(path));
        char *data;
        size_t len, cnt;
        const char *why;
        if (st_read_file(path, 1 << 30, &data, &len) != 0)
            continue;
        whole +=
            len >= STP_IDX_HDR && stp_idx_check((uint8_t *)data, len, (uint32_t)v[i],
                                                st_get64((uint8_t *)data + 24), &cnt, &why) == 0;
        free(data);
    }
    ck_assert_int_gt(whole, 0);
    free(v);
    expect_view(dir, want, "reopened");
    free(want);
    tst_rmdir(dir);
    free(dir);
}
END_TEST

/* ---- faults in their writes ------------------------------------------------------------ */

static struct {
    pthread_mutex_t mu;
    int op; /* 0: pwritev, 1: fsync */
    const char *ext;
    long failed;
} fl = {.mu = PTHREAD_MUTEX_INITIALIZER};

/* The path fd was opened at ("" if unknown). */
static void fd_path(int fd, char *path, size_t cap)
{
    char link[64];
    snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, path, cap - 1);
    path[n > 0 ? n : 0] = '\0';
}

/* Is fd a file of ours (an index or a checkpoint, or its temp file)? */
static bool ours(int fd)
{
    char path[4096];
    fd_path(fd, path, sizeof(path));
    return fl.ext != NULL ? strstr(path, fl.ext) != NULL
                          : strstr(path, ".idx") != NULL || strstr(path, ".ckpt") != NULL;
}

static bool hit(int fd, int op)
{
    if (fl.op != op || !ours(fd))
        return false;
    pthread_mutex_lock(&fl.mu);
    fl.failed++;
    pthread_mutex_unlock(&fl.mu);
    return true;
}

static ssize_t f_pwritev(int fd, const struct iovec *iov, int n, off_t off)
{
    if (hit(fd, 0)) {
        errno = ENOSPC;
        return -1;
    }
    return pwritev(fd, iov, n, off);
}

static int f_fsync(int fd)
{
    if (hit(fd, 1)) {
        errno = EIO;
        return -1;
    }
    return fsync(fd);
}

static const st_io faulty = {f_pwritev, fdatasync, f_fsync, NULL};

/* Every write (or fsync) of index files, checkpoints, or both fails: the
 * store works on (its indexes stay in memory), a reopen scans and sees
 * the same; once the disk is well, the next open writes them. */
START_TEST(test_faults_in_their_writes)
{
    static const char *const ext[] = {".idx", ".ckpt", NULL};
    fl.op = _i % 2;
    fl.ext = ext[_i / 2];
    fl.failed = 0;
    char *dir = tst_mkdtemp();
    st_io_set(&faulty);
    char *want = prepared(dir, 99 + (uint64_t)_i);
    ck_assert_int_gt(fl.failed, 0);
    expect_view(dir, want, "after faults in their writes");
    st_io_set(NULL);
    expect_view(dir, want, "once the disk is well"); /* writes them now */
    uint64_t *v;
    ck_assert_uint_ge(numbered(dir, "ckpt", &v), 1);
    free(v);
    expect_view(dir, want, "from what was written");
    free(want);
    tst_rmdir(dir);
    free(dir);
}
END_TEST

/* ---- corruption in a segment a checkpoint covers ---------------------------------------- */

enum { ANY = -1 }; /* ent_of's index: the conversation's first event */

/* Conversation k's event `index` (ANY: its first) in segment seq's index
 * file, into *out; false if not there. */
static bool ent_of(const char *dir, uint64_t seq, unsigned k, int64_t index, stp_ent *out)
{
    char path[4400];
    pool_file(dir, seq, "idx", path, sizeof(path));
    char *data;
    size_t len;
    if (st_read_file(path, 1 << 30, &data, &len) != 0)
        return false;
    rt_uuid id;
    tst_conv_id(k, &id);
    size_t n = (len - stp_idx_file_size(0)) / STP_ENT_BYTES;
    const stp_ent *e = (const stp_ent *)(data + STP_IDX_HDR);
    bool found = false;
    for (size_t i = 0; i < n && !found; i++)
        if (rt_uuid_eq(&e[i].id, &id) && e[i].index <= STP_EVENT_MAX &&
            (index == ANY || e[i].index == (uint64_t)index)) {
            *out = e[i];
            found = true;
        }
    free(data);
    return found;
}

/* A place in the payload of conversation k's first event in segment seq
 * (its index into *index); 0 if there is none. */
static uint64_t event_at(const char *dir, uint64_t seq, unsigned k, uint64_t *index)
{
    stp_ent e;
    if (!ent_of(dir, seq, k, ANY, &e))
        return 0;
    *index = e.index;
    return e.off + e.size - 3;
}

/* As the local store's checkpoints do, the pool's open does not look for
 * it: the reader that reaches the record gets -EBADMSG, the other events
 * read. A scan (no checkpoint) finds it and opens the conversation
 * read-only, its valid prefix readable. */
START_TEST(test_corruption_under_checkpoint)
{
    char *dir = tst_mkdtemp();
    st_store *s = open_at(dir, ST_FULL);
    rt_uuid a, b;
    tst_conv_id(1, &a);
    tst_conv_id(2, &b);
    rt_buf *meta = rt_buf_copy("{}", 2);
    st_conv *ca, *cb;
    ck_assert_int_eq(st_conv_create(s, &a, NULL, meta, &ca), 0);
    ck_assert_int_eq(st_conv_create(s, &b, NULL, meta, &cb), 0);
    rt_buf_unref(meta);
    uint64_t seed = 5;
    for (int i = 0; i < 30; i++) {
        ck_assert_int_eq(append_n(ca, &seed, 5), 0);
        ck_assert_int_eq(append_n(cb, &seed, 5), 0);
    }
    st_conv_release(ca);
    st_conv_release(cb);
    st_store_close(s);
    uint64_t index = 0, off = event_at(dir, 2, 1, &index);
    ck_assert_uint_gt(off, 0);
    ck_assert_uint_gt(index, 0);
    char seg[4400];
    pool_file(dir, 2, "seg", seg, sizeof(seg));
    tst_flip(seg, off);

    s = open_at(dir, ST_FULL);
    st_log *l;
    st_page *p;
    ck_assert_int_eq(st_conv_get(s, &a, &ca), 0);
    ck_assert_int_eq(st_conv_log(ca, &l, NULL), 0);
    ck_assert_uint_eq(st_log_count(l), 150);
    ck_assert_int_eq(st_log_read(l, index, 1, &p), -EBADMSG);
    ck_assert_int_eq(st_log_read(l, 0, (uint32_t)index, &p), 0);
    ck_assert_uint_eq(p->n, index);
    st_page_free(p);
    st_conv_release(ca);
    ck_assert_int_eq(st_conv_get(s, &b, &cb), 0);
    ck_assert_int_eq(st_conv_log(cb, &l, NULL), 0);
    for (uint64_t at = 0; at < 150; at += 100) {
        ck_assert_int_eq(st_log_read(l, at, 100, &p), 0);
        st_page_free(p);
    }
    st_conv_release(cb);
    st_store_close(s);

    /* the checkpoint again, but the segment's index file lost: the index
     * is rebuilt from the segment, which misses the record, and the
     * conversation opens read-only at its valid prefix (not an error) */
    char idx[4400];
    pool_file(dir, 2, "idx", idx, sizeof(idx));
    ck_assert_int_eq(unlink(idx), 0);
    s = open_at(dir, ST_FULL);
    ck_assert_int_eq(st_conv_get(s, &a, &ca), 0);
    st_open_report rep;
    ck_assert_int_eq(st_conv_log(ca, &l, &rep), 0);
    ck_assert_msg(rep.corrupt && st_log_read_only(l), "%s", rep.detail);
    ck_assert_uint_eq(st_log_count(l), index);
    ck_assert_int_eq(st_log_read(l, 0, (uint32_t)index, &p), 0);
    ck_assert_uint_eq(p->n, index);
    st_page_free(p);
    ck_assert_int_eq(append_n(ca, &seed, 1), -EROFS); /* nothing after the hole */
    st_conv_release(ca);
    ck_assert_int_eq(st_conv_get(s, &b, &cb), 0);
    ck_assert_int_eq(st_conv_log(cb, &l, &rep), 0);
    ck_assert(!rep.corrupt);
    ck_assert_uint_eq(st_log_count(l), 150);
    st_conv_release(cb);
    st_store_close(s);

    remove_ext(dir, ".ckpt");
    s = open_at(dir, ST_FULL);
    ck_assert_int_eq(st_conv_get(s, &a, &ca), 0);
    ck_assert_int_eq(st_conv_log(ca, &l, &rep), 0);
    ck_assert(rep.corrupt && st_log_read_only(l));
    ck_assert_uint_eq(st_log_count(l), index);
    st_conv_release(ca);
    st_store_close(s);
    tst_rmdir(dir);
    free(dir);
}
END_TEST

/* ---- lazy rolls --------------------------------------------------------------- */

/* Where segment seq's lazily sealed predecessor ends, from seq's header
 * (0: it was durable when seq began). */
static uint32_t prev_end_of(const char *dir, uint64_t seq)
{
    char path[4400];
    pool_file(dir, seq, "seg", path, sizeof(path));
    char *data;
    size_t len;
    ck_assert_int_eq(st_read_file(path, 1 << 30, &data, &len), 0);
    uint64_t v = 0;
    ck_assert(len >= ST_FILE_HDR && st_file_header_ok((uint8_t *)data, STP_SEG_MAGIC, &v));
    free(data);
    ck_assert_uint_eq((uint32_t)v, seq);
    return (uint32_t)(v >> 32);
}

/* A middle segment k of dir's pool sealed lazily, with two after it (the
 * last: *last): where its successor's header says it ends. */
static uint32_t lazy_middle(const char *dir, uint64_t *k, uint64_t *last)
{
    uint64_t *v;
    size_t nseg = numbered(dir, "seg", &v);
    uint32_t end = 0;
    *k = 0;
    for (size_t i = 1; i + 2 < nseg && *k == 0; i++)
        if ((end = prev_end_of(dir, v[i + 1])) != 0)
            *k = v[i];
    ck_assert_msg(*k != 0, "no lazy roll in %zu segments", nseg);
    *last = v[nseg - 1];
    free(v);
    return end;
}

/* n zeros over path from at: pages that never reached the disk. */
static void zeros_at(const char *path, uint64_t at, size_t n)
{
    static const char zeros[1024];
    ck_assert_uint_le(n, sizeof(zeros));
    FILE *f = fopen(path, "r+");
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(fseek(f, (long)at, SEEK_SET), 0);
    ck_assert_uint_eq(fwrite(zeros, 1, n, f), n);
    fclose(f);
}

/* Segment k's index file from dir into crash, as the sealing thread wrote it. */
static void keep_idx(const char *dir, const char *crash, uint64_t k)
{
    char kept[4400], idx[4400];
    pool_file(dir, k, "idx", kept, sizeof(kept));
    pool_file(crash, k, "idx", idx, sizeof(idx));
    copy_file(kept, idx);
}

/* The view of dir's pool with k its last segment (k+1..last gone), cut at
 * `at` (0: whole). */
static char *cut_view(const char *dir, uint64_t k, uint64_t last, uint64_t at)
{
    char *cut = scan_copy(dir), cpath[4400];
    for (uint64_t q = k + 1; q <= last; q++) {
        pool_file(cut, q, "seg", cpath, sizeof(cpath));
        ck_assert_int_eq(unlink(cpath), 0);
    }
    pool_file(cut, k, "seg", cpath, sizeof(cpath));
    if (at != 0)
        tst_truncate(cpath, at);
    char *want = view_of(cut);
    tst_rmdir(cut);
    free(cut);
    return want;
}

/* Under `none` a segment rolls without a sync; its successor's header says
 * where it ends. A crash that leaves it short (cut: case 0) or with a hole
 * where pages never reached the disk (case 1) ends the whole log there:
 * the segments after it go (nothing in them was durable, as every sync
 * covers the segments before first), and no conversation is left with
 * missing events, which would make it read-only. The view is exactly what
 * the segments up to that place hold, as when it is the last segment with
 * a torn tail. Undamaged (case 2), every segment is kept. With its index
 * file, written only once it was durable (case 3), a cut is corruption,
 * not a crash's: the segments after it stay (and a conversation that lost
 * events there is read-only, as test_corruption_under_checkpoint checks). */
START_TEST(test_lazy_roll_short_segment)
{
    char *dir = tst_mkdtemp();
    st_store *s = open_at(dir, ST_NONE);
    workload(s, 4242);
    char *live = view(s);
    st_store_close(s);
    uint64_t k, last;
    uint32_t end = lazy_middle(dir, &k, &last);
    char *crash = scan_copy(dir), path[4400];
    if (_i == 3)
        keep_idx(dir, crash, k);
    pool_file(crash, k, "seg", path, sizeof(path));
    ck_assert_uint_eq(tst_file_size(path), end);
    uint64_t at = end / 2;
    if (_i == 0 || _i == 3)
        tst_truncate(path, at);
    else if (_i == 1)
        zeros_at(path, at, 1024);
    char *want = live;
    if (_i < 2) { /* what k as the last segment, cut at the damage, holds */
        want = cut_view(dir, k, last, at);
        ck_assert_msg(strcmp(want, live) != 0, "nothing was lost");
    }
    if (_i < 3) {
        ck_assert_ptr_null(strstr(want, "read-only 1"));
        expect_view(crash, want, "a lazily sealed segment left short");
    } else {
        free(view_of(crash)); /* an open that scans it */
    }
    uint64_t *after;
    size_t nafter = numbered(crash, "seg", &after);
    ck_assert_uint_eq(after[nafter - 1],
                      _i < 2 ? k : last); /* the segments after it gone, or not */
    free(after);
    if (_i < 3)
        expect_view(crash, want, "reopened");
    if (want != live)
        free(want);
    free(live);
    tst_rmdir(crash);
    free(crash);
    tst_rmdir(dir);
    free(dir);
}
END_TEST

/* A lazy roll makes the next segment without a sync (stp_sync_names). A
 * crash can leave that segment with a header of zeros (case 0) or empty
 * (case 1): nothing in it or after it was synced, and its predecessor may
 * not be durable either, so the log ends at the predecessor's first damage
 * and the segments after it go, as when the successor's header says where
 * it ends. With its index file (case 2, undamaged), the predecessor was
 * durable: kept whole, the segments after it gone. */
START_TEST(test_lazy_roll_unfinished_successor)
{
    char *dir = tst_mkdtemp();
    st_store *s = open_at(dir, ST_NONE);
    workload(s, 2718);
    st_store_close(s);
    uint64_t k, last;
    uint32_t end = lazy_middle(dir, &k, &last);
    char *crash = scan_copy(dir), path[4400], next[4400];
    pool_file(crash, k, "seg", path, sizeof(path));
    pool_file(crash, k + 1, "seg", next, sizeof(next));
    if (_i == 1)
        tst_truncate(next, 0);
    else
        zeros_at(next, 0, ST_FILE_HDR);
    uint64_t at = end / 2;
    if (_i < 2)
        zeros_at(path, at, 1024); /* a hole where pages never reached the disk */
    else
        keep_idx(dir, crash, k);
    /* k the last segment, cut at the hole (whole, with its index file) */
    char *want = cut_view(dir, k, last, _i < 2 ? at : 0);
    ck_assert_ptr_null(strstr(want, "read-only 1"));
    expect_view(crash, want, "an unfinished segment after a lazy roll");
    uint64_t *after;
    size_t nafter = numbered(crash, "seg", &after);
    ck_assert_uint_eq(after[nafter - 1], k); /* the segments after it gone */
    free(after);
    expect_view(crash, want, "reopened");
    free(want);
    tst_rmdir(crash);
    free(crash);
    tst_rmdir(dir);
    free(dir);
}
END_TEST

/* The first segment after an open that scanned segments says where the
 * last of them ends: it may have been only in the page cache (a kill), and
 * is synced before anything names it. Should it be found short later, the
 * log ends there as after a lazy roll, with the new segment gone. */
START_TEST(test_open_after_crash_marks_last_scanned)
{
    char *dir = tst_mkdtemp();
    st_store *s = open_at(dir, ST_NONE);
    workload(s, 99);
    st_store_close(s);
    char *crash = scan_copy(dir), *cut = scan_copy(dir), path[4400];
    uint64_t *v;
    size_t nseg = numbered(crash, "seg", &v);
    uint64_t last = v[nseg - 1];
    free(v);
    pool_file(cut, last, "seg", path, sizeof(path));
    uint64_t end = tst_file_size(path);
    tst_truncate(path, end - 1); /* its last group torn */
    char *want = view_of(cut);
    s = open_at(crash, ST_NONE); /* scans every segment */
    rt_uuid id;
    st_conv *c = NULL;
    for (unsigned k = 0; c == NULL && k < IDS; k++) {
        tst_conv_id(k, &id);
        if (st_conv_get(s, &id, &c) != 0)
            c = NULL;
    }
    ck_assert_ptr_nonnull(c);
    uint64_t seed = 5;
    ck_assert_int_eq(append_n(c, &seed, 3), 0);
    st_conv_release(c);
    st_store_close(s);
    ck_assert_uint_eq(prev_end_of(crash, last + 1), end);
    /* that open closed cleanly (a checkpoint, every segment synced): as if
     * it had not, with the segment it scanned short of its last group */
    char *again = scan_copy(crash);
    pool_file(again, last, "seg", path, sizeof(path));
    tst_truncate(path, end - 1);
    ck_assert_ptr_null(strstr(want, "read-only 1"));
    expect_view(again, want, "the last segment an open scanned, found short");
    ck_assert_uint_eq(numbered(again, "seg", &v), nseg); /* the one after it gone */
    ck_assert_uint_eq(v[nseg - 1], last);
    free(v);
    free(want);
    tst_rmdir(again);
    tst_rmdir(cut);
    tst_rmdir(crash);
    tst_rmdir(dir);
    free(again);
    free(cut);
    free(crash);
    free(dir);
}
END_TEST

/* Conversation 1, created in s. */
static st_conv *conv_one(st_store *s)
{
    rt_uuid a;
    tst_conv_id(1, &a);
    rt_buf *meta = rt_buf_copy("{}", 2);
    st_conv *c;
    ck_assert_int_eq(st_conv_create(s, &a, NULL, meta, &c), 0);
    rt_buf_unref(meta);
    return c;
}

/* A crash's hole: conversation 1's event `index`, in the last segment
 * (zeros over its header); the checkpoints gone, so that the open scans.
 * Returns that segment's seq. */
static uint64_t punch_last(const char *dir, uint64_t index)
{
    uint64_t *v;
    size_t nseg = numbered(dir, "seg", &v);
    uint64_t last = v[nseg - 1];
    free(v);
    stp_ent hole;
    ck_assert(ent_of(dir, last, 1, (int64_t)index, &hole));
    char path[4400];
    pool_file(dir, last, "seg", path, sizeof(path));
    zeros_at(path, hole.off, ST_JREC_HDR);
    remove_ext(dir, ".ckpt");
    return last;
}

/* Conversation 1 after the open: `count` events, and either corrupt and
 * read-only, or writable (one more appended). */
static void expect_hole(const char *dir, st_durability d, bool corrupt, uint64_t count,
                        uint64_t *seed)
{
    st_store *s = open_at(dir, d);
    rt_uuid a;
    tst_conv_id(1, &a);
    st_conv *c;
    ck_assert_int_eq(st_conv_get(s, &a, &c), 0);
    st_log *l;
    st_open_report rep;
    ck_assert_int_eq(st_conv_log(c, &l, &rep), 0);
    ck_assert_msg(rep.corrupt == corrupt && st_log_read_only(l) == corrupt, "%s", rep.detail);
    ck_assert_uint_eq(st_log_count(l), count);
    if (!corrupt) {
        ck_assert_int_eq(append_n(c, seed, 1), 0);
        ck_assert_uint_eq(st_log_count(l), count + 1);
    }
    st_conv_release(c);
    st_store_close(s);
}

/* A crash during the last group's fdatasync can leave a hole in that
 * group with its later records and its COMMIT whole after it (its pages
 * reach the disk in any order): an open that scans the last segment drops
 * the group as a torn tail, and the conversation stays writable with the
 * events acknowledged before it. Unless the segment's index file says it
 * was synced: corruption then. */
START_TEST(test_hole_in_the_last_group)
{
    char *dir = tst_mkdtemp();
    st_store *s = open_at(dir, ST_FULL);
    st_conv *c = conv_one(s);
    uint64_t seed = 11;
    for (int i = 0; i < 6; i++)
        ck_assert_int_eq(append_n(c, &seed, 3), 0);
    st_conv_release(c);
    st_store_close(s);
    /* the last group: events 15-17; a hole where event 16 was */
    uint64_t last = punch_last(dir, 16);
    char *synced = scan_copy(dir), idx[4400], kept[4400];
    pool_file(dir, last, "idx", idx, sizeof(idx));
    pool_file(synced, last, "idx", kept, sizeof(kept));
    copy_file(idx, kept);
    remove_ext(dir, ".idx");
    expect_hole(dir, ST_FULL, false, 15, &seed); /* scans every segment */
    /* with the segment's index file there (written after its sync, here by
     * the close) the group was durable: the hole is corruption */
    expect_hole(synced, ST_FULL, true, 16, &seed);
    tst_rmdir(synced);
    tst_rmdir(dir);
    free(synced);
    free(dir);
}
END_TEST

/* Under `none` (and `interval`) groups follow each other unsynced, so a
 * crash can leave a hole in one of them with later groups whole after
 * it: the open cuts the log at the damaged group (what those policies
 * may lose), and the conversation stays writable. But if a synced group
 * (here a meta's) came after the damaged one, the hole was durable, and
 * is corruption: with a group after the meta's (loop 1) or without
 * (loop 2: the meta's own COMMIT says so). */
START_TEST(test_hole_before_unsynced_groups)
{
    char *dir = tst_mkdtemp();
    st_store *s = open_at(dir, ST_NONE);
    st_conv *c = conv_one(s);
    uint64_t seed = 12;
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq(append_n(c, &seed, 3), 0);
    if (_i >= 1) {
        rt_buf *meta = rt_buf_copy("{}", 2);
        ck_assert_int_eq(st_conv_set_meta(c, meta), 0);
        rt_buf_unref(meta);
    }
    if (_i == 1)
        ck_assert_int_eq(append_n(c, &seed, 3), 0);
    st_conv_release(c);
    st_store_close(s);
    /* a hole where event 4 was: the second group's, groups after it */
    punch_last(dir, 4);
    remove_ext(dir, ".idx");
    if (_i == 0)
        expect_hole(dir, ST_NONE, false, 3, &seed);
    else
        expect_hole(dir, ST_NONE, true, 4, &seed);
    tst_rmdir(dir);
    free(dir);
}
END_TEST

/* A conversation's space comes back once it is deleted: the segments
 * before the oldest CREATE of a conversation still there go, once a
 * checkpoint that starts after them is written. What is left opens the
 * same from that checkpoint and by a scan; and an open after a drop that
 * a crash cut short (its first segment gone, a checkpoint that covers it
 * too) scans what is there and sees the same. */
/* Store s, open, looks as `want`. */
static void expect_live(st_store *s, const char *want, const char *what)
{
    char *got = view(s);
    same_view(want, got, what);
    free(got);
}

/* The lowest segment number there now (there is one). */
static uint64_t first_seg(const char *dir)
{
    uint64_t *v;
    ck_assert_uint_gt(numbered(dir, "seg", &v), 0);
    uint64_t first = v[0];
    free(v);
    return first;
}

static uint64_t last_seg(const char *dir)
{
    uint64_t *v;
    size_t n = numbered(dir, "seg", &v);
    uint64_t last = n > 0 ? v[n - 1] : 0;
    free(v);
    return last;
}

START_TEST(test_deleted_space_is_reclaimed)
{
    uint64_t seed = 42;
    char *dir = tst_mkdtemp(), *crash = tst_mkdtemp();
    tst_rmdir(crash);
    st_store *s = open_at(dir, ST_FULL);
    rt_uuid a_id, b_id;
    tst_conv_id(1, &a_id);
    tst_conv_id(2, &b_id);
    st_conv *a, *b;
    rt_buf *meta = text("{\"m\":%llu}", 1);
    ck_assert_int_eq(st_conv_create(s, &a_id, NULL, meta, &a), 0);
    for (int i = 0; i < 30; i++) /* about 14 segments of 8 KiB */
        ck_assert_int_eq(append_n(a, &seed, 10), 0);
    uint64_t b_at = last_seg(dir); /* B's CREATE goes in the active segment, or after it */
    ck_assert_uint_ge(b_at, 8);
    ck_assert_int_eq(st_conv_create(s, &b_id, NULL, meta, &b), 0);
    rt_buf_unref(meta);
    ck_assert_int_eq(append_n(b, &seed, 10), 0);
    st_waiter w;
    st_waiter_init(&w);
    ck_assert_int_eq(st_conv_delete(a, st_waiter_done, &w), 0);
    ck_assert_int_eq(wait_done(&w), 0);
    char *deleted = view(s);
    tst_copydir(dir, crash);    /* no roll since the delete: nothing dropped yet */
    for (int i = 0; i < 6; i++) /* rolls, and their checkpoints, after the delete */
        ck_assert_int_eq(append_n(b, &seed, 10), 0);
    char *live = view(s);
    st_conv_release(b);
    st_store_close(s); /* the close's checkpoint drops them, if no roll's did */

    uint64_t first = first_seg(dir);
    ck_assert_msg(first >= b_at, "segment %llu of the deleted conversation is still there",
                  (unsigned long long)first);
    uint64_t *x;
    size_t nx = numbered(dir, "idx", &x);
    ck_assert(nx == 0 || x[0] >= b_at); /* and their index files */
    free(x);
    char *scanned = scan_view(dir);
    expect_view(dir, live, "reopened from the checkpoint after the drop");
    same_view(live, scanned, "reopened by a scan after the drop");

    /* the drop cut short after its checkpoint was written (its first
     * segment gone, the others not yet): the open finishes it and uses
     * that checkpoint (its segments' indexes not loaded: nothing scanned) */
    char seg[4400], from[4400];
    for (uint64_t q = 2; q < b_at; q++) {
        pool_file(crash, q, "seg", from, sizeof(from));
        pool_file(dir, q, "seg", seg, sizeof(seg));
        copy_file(from, seg);
    }
    s = open_at(dir, ST_FULL);
    stp_store *ps = (stp_store *)s;
    ck_assert_uint_gt(ps->nsealed, 0);
    ck_assert_uint_ge(ps->sealed[0].seq, b_at);
    ck_assert_int_eq(ps->sealed[0].state, STP_IDX_LAZY);
    expect_live(s, live, "reopened after a drop cut short behind its checkpoint");
    st_store_close(s);
    ck_assert_uint_ge(first_seg(dir), b_at);

    /* a drop cut short (the first of its segments gone) after a crash:
     * no checkpoint covers what is left, every segment there is scanned */
    pool_file(crash, 1, "seg", seg, sizeof(seg));
    ck_assert_int_eq(unlink(seg), 0);
    expect_view(crash, deleted, "after a drop cut short");
    ck_assert_uint_ge(first_seg(crash), b_at); /* that open's checkpoint finished the drop */
    expect_view(crash, deleted, "after a drop cut short, reopened");
    free(deleted);
    free(scanned);
    free(live);
    tst_rmdir(dir);
    tst_rmdir(crash);
    free(dir);
    free(crash);
}
END_TEST

/* The highest segment number there now. */

/* Where c was created (its lock held: the committer writes it, and the
 * sealing thread's carries run beside the test). */
static uint32_t created_in(st_conv *sc)
{
    stp_conv *c = (stp_conv *)sc;
    pthread_mutex_lock(stp_lock(c));
    uint32_t seq = c->create_seq;
    pthread_mutex_unlock(stp_lock(c));
    return seq;
}

/* A log's events (index, id, payload, and whether each is found by its
 * id), as text. */
static char *log_text(st_log *l)
{
    sbuf b = {0};
    uint64_t count = st_log_count(l);
    for (uint64_t at = 0; at < count;) {
        st_page *pg;
        int r = st_log_read(l, at, 7, &pg);
        if (r < 0) {
            addf(&b, "read error %lld\n", r);
            return b.p;
        }
        const uint8_t *base = rt_buf_data(pg->bytes);
        for (uint32_t j = 0; j < pg->n; j++) {
            uint64_t found = UINT64_MAX;
            st_log_find(l, base + pg->ev[j].id_off, pg->ev[j].id_len, &found);
            addf(&b, "%llu ", pg->ev[j].index);
            add(&b, base + pg->ev[j].id_off, pg->ev[j].id_len);
            addf(&b, " found at %llu ", found);
            add(&b, base + pg->ev[j].off, pg->ev[j].len);
            add(&b, "\n", 1);
        }
        at += pg->n;
        st_page_free(pg);
    }
    add(&b, "", 1);
    return b.p;
}

/* A thread that reads a log whole until told to stop: each time the same. */
typedef struct reader {
    st_conv *c;
    st_log *l;
    char *want;
    _Atomic bool stop;
    long reads;
    char *bad; /* the first read that differed */
} reader;

static void *read_loop(void *arg)
{
    reader *rd = arg;
    while (!atomic_load(&rd->stop) && rd->bad == NULL) {
        char *got = log_text(rd->l);
        if (strcmp(got, rd->want) != 0)
            rd->bad = got;
        else
            free(got);
        rd->reads++;
    }
    return NULL;
}

/* A store whose sealing thread carries nothing: the test's rounds only. */
static st_store *open_paused(const char *dir)
{
    st_store *s = open_at(dir, ST_FULL);
    atomic_store(&((stp_store *)s)->carry_paused, true);
    return s;
}

/* A conversation made and deleted: about `rounds` x 10 events of space. */
static void bulk_deleted(st_store *s, unsigned k, uint64_t *seed, int rounds)
{
    rt_uuid id;
    tst_conv_id(k, &id);
    st_conv *c;
    rt_buf *meta = text("{\"bulk\":%llu}", k);
    ck_assert_int_eq(st_conv_create(s, &id, NULL, meta, &c), 0);
    rt_buf_unref(meta);
    for (int i = 0; i < rounds; i++)
        ck_assert_int_eq(append_n(c, seed, 10), 0);
    st_waiter w;
    st_waiter_init(&w);
    ck_assert_int_eq(st_conv_delete(c, st_waiter_done, &w), 0);
    ck_assert_int_eq(wait_done(&w), 0);
}

/* Two old conversations that live (a parent and its child, with events, a
 * file and a newer meta) keep every segment written since they were made,
 * a deleted one's included; a carry writes them again at the end, and
 * the next checkpoint drops what is before. The store looks the same
 * throughout: on a copy taken before the carry and one taken after it,
 * before any checkpoint (what a crash leaves), after the drop from the
 * checkpoint, and by a scan of what is left; and carried under its open
 * log, read all the while by another thread. */
START_TEST(test_live_conversations_are_carried)
{
    uint64_t seed = 7;
    char *dir = tst_mkdtemp(), *copy = tst_mkdtemp();
    tst_rmdir(copy);
    st_store *s = open_paused(dir);
    rt_uuid p_id, a_id, c_id;
    tst_conv_id(1, &p_id);
    tst_conv_id(2, &a_id);
    tst_conv_id(4, &c_id);
    st_conv *p, *a, *c;
    rt_buf *meta = text("{\"m\":%llu}", 1);
    ck_assert_int_eq(st_conv_create(s, &p_id, NULL, meta, &p), 0);
    ck_assert_int_eq(st_conv_create(s, &a_id, &p_id, meta, &a), 0);
    rt_buf_unref(meta);
    ck_assert_int_eq(append_n(a, &seed, 10), 0);
    ck_assert_int_eq(append_n(p, &seed, 3), 0);
    rt_buf *file = text("{\"f\":%llu}", 9);
    st_waiter w;
    st_waiter_init(&w);
    ck_assert_int_eq(st_conv_put_file(a, "a.json", file, true, st_waiter_done, &w), 0);
    ck_assert_int_eq(wait_done(&w), 0);
    rt_buf_unref(file);
    ck_assert_int_eq(append_n(a, &seed, 10), 0);
    meta = text("{\"m\":%llu}", 2);
    ck_assert_int_eq(st_conv_set_meta(a, meta), 0);
    rt_buf_unref(meta);
    bulk_deleted(s, 3, &seed, 30); /* about 14 segments of 8 KiB */
    uint64_t c_at = last_seg(dir);
    meta = text("{\"m\":%llu}", 3);
    ck_assert_int_eq(st_conv_create(s, &c_id, NULL, meta, &c), 0);
    rt_buf_unref(meta);
    ck_assert_int_eq(append_n(c, &seed, 10), 0);
    stp_store *ps = (stp_store *)s;
    ck_assert_uint_lt(created_in(a), c_at);
    uint32_t seq0 = ps->act.seq;
    uint64_t size0 = ps->act_size;

    char *before = running_view(dir);

    uint64_t carried = atomic_load(&st_pool_carried_bytes);
    uint64_t removed = atomic_load(&st_pool_removed_bytes);
    stp_carry(ps);
    ck_assert_uint_gt(atomic_load(&st_pool_carried_bytes), carried); /* /metrics */
    ck_assert_uint_ge(created_in(a), c_at);
    ck_assert_uint_ge(created_in(p), c_at);
    /* a crash anywhere in the carries' two groups (one each), or after:
     * the same */
    uint32_t seq1 = ps->act.seq;
    uint64_t from = seq1 == seq0 ? size0 : ST_FILE_HDR, to = ps->act_size;
    ck_assert_uint_gt(to, from);
    for (int k = 0; k <= 8; k++) {
        tst_copydir(dir, copy);
        char seg[4400];
        pool_file(copy, seq1, "seg", seg, sizeof(seg));
        ck_assert_int_eq(truncate(seg, (off_t)(from + (to - from) * (uint64_t)k / 8)), 0);
        expect_view(copy, before, "a copy cut in the carry's groups");
        tst_rmdir(copy);
    }

    bulk_deleted(s, 5, &seed, 8); /* rolls, and their checkpoints drop */
    expect_live(s, before, "after the carry, in the store");
    st_conv_release(p);
    st_conv_release(a);
    st_conv_release(c);
    st_store_close(s);

    uint64_t *v;
    ck_assert_uint_gt(numbered(dir, "seg", &v), 0);
    ck_assert_msg(v[0] >= c_at, "segment %llu, kept by the carried ones, is still there",
                  (unsigned long long)v[0]);
    ck_assert_uint_ge(atomic_load(&st_pool_removed_bytes) - removed, (c_at - 1) * (SEG / 2));
    free(v);
    expect_reopened(dir, before, "after the drop");

    /* the child's log open, a reader reading it all over and over: carried
     * twice under it, and it reads the same throughout */
    s = open_paused(dir);
    ck_assert_int_eq(st_conv_get(s, &c_id, &c), 0);
    st_waiter_init(&w);
    ck_assert_int_eq(st_conv_delete(c, st_waiter_done, &w), 0);
    ck_assert_int_eq(wait_done(&w), 0);
    char *without_c = running_view(dir);
    ck_assert_int_eq(st_conv_get(s, &a_id, &a), 0);
    reader rd = {.c = a};
    ck_assert_int_eq(st_conv_log(a, &rd.l, NULL), 0);
    rd.want = log_text(rd.l);
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, read_loop, &rd), 0);
    for (unsigned k = 6; k < 8; k++) {
        uint32_t a_seq = created_in(a);
        bulk_deleted(s, k, &seed, 30);
        stp_carry((stp_store *)s);
        ck_assert_uint_gt(created_in(a), a_seq);
    }
    bulk_deleted(s, 8, &seed, 8); /* the old segments go while it reads */
    atomic_store(&rd.stop, true);
    pthread_join(t, NULL);
    ck_assert_msg(rd.bad == NULL, "a read under the carries: %s", rd.bad ? rd.bad : "");
    ck_assert_int_gt(rd.reads, 0);
    fprintf(stderr, "carried twice under an open log, read whole %ld times meanwhile\n", rd.reads);
    /* carried with no read in progress: what it superseded goes at once */
    uint32_t a_seq = created_in(a);
    bulk_deleted(s, 9, &seed, 30);
    stp_carry((stp_store *)s);
    ck_assert_uint_gt(created_in(a), a_seq);
    stp_log *al = (stp_log *)rd.l;
    pthread_mutex_lock(stp_lock((stp_conv *)a));
    ck_assert_ptr_null(al->old);
    ck_assert_ptr_null(al->retired);
    ck_assert_uint_eq(atomic_load(&al->old_bytes), 0);
    pthread_mutex_unlock(stp_lock((stp_conv *)a));
    char *again = log_text(rd.l);
    ck_assert_str_eq(again, rd.want);
    free(again);
    free(rd.want);
    st_conv_release(a);
    st_store_close(s);
    expect_view(dir, without_c, "after carries under an open log");
    free(without_c);
    free(before);
    tst_rmdir(dir);
    free(dir);
    free(copy);
}
END_TEST

/* A carry request by hand: the CREATE (meta), then events e0.. with
 * payloads p0.., as they were appended; read when c had `first` events and
 * its catalog records' mark was `expect`. */
static int carry_by_hand(st_conv *c, rt_buf *meta, unsigned n, uint64_t first, uint64_t expect)
{
    st_item it[8];
    rt_buf *b[8];
    char ids[8][16];
    it[0] = (st_item){.id = "create", .idlen = 6, .payload = meta};
    for (unsigned i = 0; i < n; i++) {
        snprintf(ids[i], sizeof(ids[i]), "e%u", i);
        b[i] = text("p%llu", i);
        it[1 + i] = (st_item){.id = ids[i], .idlen = (uint32_t)strlen(ids[i]), .payload = b[i]};
    }
    int err;
    st_req *r = st_req_append(it, 1 + n, &err);
    for (unsigned i = 0; i < n; i++)
        rt_buf_unref(b[i]);
    ck_assert_ptr_nonnull(r);
    r->kind = REQ_CARRY;
    r->first = first;
    r->expect = expect;
    st_waiter w;
    st_waiter_init(&w);
    ck_assert_int_eq(stp_submit((stp_conv *)c, r, st_waiter_done, &w), 0);
    return wait_done(&w);
}

/* The committer writes a carry only as it was read: not one read before
 * an append, nor one whose meta or file records moved since; one read
 * right is taken under the conversation's open log. The store looks the
 * same, open and reopened, from its checkpoint or by a scan. */
START_TEST(test_carry_checked_by_the_committer)
{
    char *dir = tst_mkdtemp();
    st_store *s = open_paused(dir);
    rt_uuid id;
    tst_conv_id(1, &id);
    st_conv *c;
    rt_buf *meta = text("{\"m\":%llu}", 1);
    ck_assert_int_eq(st_conv_create(s, &id, NULL, meta, &c), 0);
    st_item it[3];
    rt_buf *b[3];
    for (unsigned i = 0; i < 3; i++) {
        b[i] = text("p%llu", i);
        it[i] = (st_item){.id = i == 0 ? "e0" : i == 1 ? "e1" : "e2", .idlen = 2, .payload = b[i]};
    }
    st_waiter w;
    st_waiter_init(&w);
    ck_assert_int_eq(st_append(c, it, 3, st_waiter_done, &w), 0);
    ck_assert_int_eq(wait_done(&w), 0);
    for (unsigned i = 0; i < 3; i++)
        rt_buf_unref(b[i]);
    char *before = view(s); /* its log is open from here on */
    pthread_mutex_lock(stp_lock((stp_conv *)c));
    uint64_t mark = stp_carry_print((stp_conv *)c);
    pthread_mutex_unlock(stp_lock((stp_conv *)c));
    uint32_t created = created_in(c);

    ck_assert_int_eq(carry_by_hand(c, meta, 2, 2, mark), -EAGAIN);
    ck_assert_int_eq(carry_by_hand(c, meta, 3, 3, mark + 1), -EAGAIN);
    ck_assert_uint_eq(created_in(c), created);
    ck_assert_int_eq(carry_by_hand(c, meta, 3, 3, mark), 0); /* under its open log */
    ck_assert_uint_ge(created_in(c), created);
    expect_live(s, before, "after the refused carries");
    rt_buf_unref(meta);
    st_conv_release(c);
    st_store_close(s);
    expect_reopened(dir, before, "after the carries");
    free(before);
    tst_rmdir(dir);
    free(dir);
}
END_TEST

/* A conversation larger than a round's bound (a quarter segment, 2 KiB
 * here) is carried alone, as a round's first carry, once the deletions
 * after it free twice its size; one larger than four segments (32 KiB),
 * in one group with nothing else, waits for a round of its own (where it
 * moves in several: test_large_conversation_carried_in_groups), and keeps
 * the segments from its creation on until then. */
START_TEST(test_large_conversation_carried_alone)
{
    uint64_t seed = 11;
    char *dir = tst_mkdtemp();
    st_store *s = open_paused(dir);
    stp_store *ps = (stp_store *)s;
    rt_uuid big_id, huge_id;
    tst_conv_id(1, &big_id);
    tst_conv_id(2, &huge_id);
    st_conv *big, *huge;
    rt_buf *meta = text("{\"m\":%llu}", 1);
    ck_assert_int_eq(st_conv_create(s, &big_id, NULL, meta, &big), 0);
    for (int i = 0; i < 6; i++) /* about 24 KiB */
        ck_assert_int_eq(append_n(big, &seed, 10), 0);
    bulk_deleted(s, 3, &seed, 30);
    ck_assert_int_eq(st_conv_create(s, &huge_id, NULL, meta, &huge), 0);
    rt_buf_unref(meta);
    for (int i = 0; i < 12; i++) /* about 48 KiB */
        ck_assert_int_eq(append_n(huge, &seed, 10), 0);
    bulk_deleted(s, 4, &seed, 60);
    uint32_t big_at = created_in(big), huge_at = created_in(huge);
    ck_assert_uint_lt(big_at, huge_at);
    char *before = running_view(dir);

    uint64_t carried = atomic_load(&st_pool_carried_bytes);
    stp_carry(ps);
    uint64_t moved = atomic_load(&st_pool_carried_bytes) - carried;
    ck_assert_uint_gt(moved, (uint64_t)SEG); /* a round's bound four times over, at once */
    ck_assert_uint_lt(moved, (uint64_t)SEG * 4);
    ck_assert_uint_gt(created_in(big), huge_at);
    ck_assert_uint_eq(created_in(huge), huge_at); /* worth it: the next round's */
    bulk_deleted(s, 5, &seed, 8);                 /* rolls, and their checkpoints drop */
    expect_live(s, before, "after the large carry, in the store");
    st_conv_release(big);
    st_conv_release(huge);
    st_store_close(s);
    ck_assert_uint_eq(first_seg(dir), huge_at);
    expect_reopened(dir, before, "after the large carry");
    free(before);
    tst_rmdir(dir);
    free(dir);
}
END_TEST

/* Three live conversations made in one segment, more together than one
 * round's first carry may write (32 KiB here) though each is less: one
 * round carries those that fit, the next rounds the others (before, none
 * moved, and they kept every segment from theirs on). */
START_TEST(test_conversations_carried_over_rounds)
{
    uint64_t seed = 19;
    char *dir = tst_mkdtemp();
    st_store *s = open_paused(dir);
    stp_store *ps = (stp_store *)s;
    st_conv *c[3];
    rt_buf *meta = text("{\"m\":%llu}", 1);
    for (unsigned i = 0; i < 3; i++) {
        rt_uuid id;
        tst_conv_id(1 + i, &id);
        ck_assert_int_eq(st_conv_create(s, &id, NULL, meta, &c[i]), 0);
    }
    rt_buf_unref(meta);
    uint32_t at = created_in(c[0]);
    for (unsigned i = 0; i < 3; i++) {
        ck_assert_uint_eq(created_in(c[i]), at);
        for (int k = 0; k < 5; k++) /* about 18 KiB each */
            ck_assert_int_eq(append_n(c[i], &seed, 10), 0);
    }
    bulk_deleted(s, 9, &seed, 60);
    char *before = view(s);
    unsigned moved = 0;
    for (int round = 0; round < 3; round++) {
        stp_carry(ps);
        unsigned now = 0;
        for (unsigned i = 0; i < 3; i++)
            now += created_in(c[i]) != at;
        ck_assert_uint_gt(now, moved); /* some, each round */
        ck_assert(round > 0 || now < 3);
        moved = now;
    }
    ck_assert_uint_eq(moved, 3);
    bulk_deleted(s, 10, &seed, 8); /* rolls, and their checkpoints drop */
    expect_live(s, before, "after carries over rounds");
    for (unsigned i = 0; i < 3; i++)
        st_conv_release(c[i]);
    st_store_close(s);
    ck_assert_uint_gt(first_seg(dir), at);
    expect_reopened(dir, before, "after carries over rounds");
    free(before);
    tst_rmdir(dir);
    free(dir);
}
END_TEST

/* The carry's hook: appends to the conversation carried, once after its
 * first group of events and once after its last group is read (which the
 * committer then refuses: read again, then taken). */
static st_conv *hook_conv;
static int hook_calls[2];
static uint64_t hook_seed;

static void append_in_carry(stp_store *s, int where)
{
    (void)s;
    if (hook_calls[where]++ == 0)
        ck_assert_int_eq(append_n(hook_conv, &hook_seed, where == 0 ? 10 : 3), 0);
}

/* A parent and its child of about 48 KiB (a file, a newer meta), more
 * than one group may hold (four segments, 32 KiB here), made before a
 * large deleted one. */
static void large_child(st_store *s, uint64_t *seed, st_conv **p, st_conv **c)
{
    rt_uuid p_id, c_id;
    tst_conv_id(1, &p_id);
    tst_conv_id(2, &c_id);
    rt_buf *meta = text("{\"m\":%llu}", 1);
    ck_assert_int_eq(st_conv_create(s, &p_id, NULL, meta, p), 0);
    ck_assert_int_eq(st_conv_create(s, &c_id, &p_id, meta, c), 0);
    rt_buf_unref(meta);
    ck_assert_int_eq(append_n(*p, seed, 3), 0);
    for (int i = 0; i < 12; i++)
        ck_assert_int_eq(append_n(*c, seed, 10), 0);
    rt_buf *file = text("{\"f\":%llu}", 9);
    st_waiter w;
    st_waiter_init(&w);
    ck_assert_int_eq(st_conv_put_file(*c, "a.json", file, true, st_waiter_done, &w), 0);
    ck_assert_int_eq(wait_done(&w), 0);
    rt_buf_unref(file);
    meta = text("{\"m\":%llu}", 2);
    ck_assert_int_eq(st_conv_set_meta(*c, meta), 0);
    rt_buf_unref(meta);
    bulk_deleted(s, 3, seed, 60); /* about 220 KiB */
}

/* One larger than a group may hold is carried in several, under a tag of
 * its own, while it is appended to (the last group read again once) and
 * its log is open; the next round carries its parent, and the segments
 * before go. The store reads the same live, reopened from its checkpoint
 * and by a scan of what is left (its first CREATE gone: the ADOPT creates
 * it). */
START_TEST(test_large_conversation_carried_in_groups)
{
    uint64_t seed = 13;
    char *dir = tst_mkdtemp();
    st_store *s = open_paused(dir);
    stp_store *ps = (stp_store *)s;
    st_conv *p, *c;
    large_child(s, &seed, &p, &c);
    uint32_t at = created_in(c);
    st_log *l;
    ck_assert_int_eq(st_conv_log(c, &l, NULL), 0);
    char *before = log_text(l);
    uint64_t count = st_log_count(l);

    hook_conv = c;
    hook_seed = 99;
    hook_calls[0] = hook_calls[1] = 0;
    stp_carry_hook = append_in_carry;
    uint64_t carried = atomic_load(&st_pool_carried_bytes);
    stp_carry(ps);
    stp_carry_hook = NULL;
    ck_assert_int_ge(hook_calls[0], 16); /* groups of at most 2 KiB */
    ck_assert_int_eq(hook_calls[1], 2);
    ck_assert_uint_gt(atomic_load(&st_pool_carried_bytes) - carried, (uint64_t)SEG * 4);
    ck_assert_uint_gt(created_in(c), at);
    ck_assert_uint_eq(created_in(p), at); /* the next round's */
    ck_assert_int_eq(memcmp(((stp_conv *)c)->tag.b, ((stp_conv *)c)->id.b, 16) != 0, 1);
    /* its open log: the same events, then the 13 appended meanwhile */
    ck_assert_uint_eq(st_log_count(l), count + 13);
    char *after = log_text(l);
    ck_assert_int_eq(strncmp(after, before, strlen(before)), 0);
    free(after);
    free(before);
    stp_carry(ps);
    ck_assert_uint_gt(created_in(p), at);
    char *live = view(s);
    bulk_deleted(s, 5, &seed, 8); /* rolls, and their checkpoints drop */
    expect_live(s, live, "after the carry in groups, in the store");
    st_conv_release(p);
    st_conv_release(c);
    st_store_close(s);
    ck_assert_uint_gt(first_seg(dir), at);
    expect_reopened(dir, live, "after the carry in groups");
    free(live);
    tst_rmdir(dir);
    free(dir);
}
END_TEST

/* The hook of a carry whose every read of its last group is followed by
 * an append, not waited for, so that the committer takes it before the
 * ADOPT: in the held reads it waits instead. stop_at: the read after
 * which the committer is told to stop (-1: none). */
static st_waiter adopt_w[STP_ADOPT_TRIES];
static int adopt_n, stop_at;

static void append_before_adopt(stp_store *s, int where)
{
    if (where != 1)
        return;
    ck_assert_int_lt(adopt_n, STP_ADOPT_TRIES);
    ck_assert_int_eq(append_start(hook_conv, &hook_seed, 2, &adopt_w[adopt_n]), 0);
    if (adopt_n++ == stop_at)
        st_reqq_stop(&s->q);
}

/* A large conversation (large_child) carried while appended to. */
typedef struct appended_case {
    char *dir;
    st_store *s;
    st_conv *p, *c;
    st_log *l;
    uint32_t at;    /* the segment of its creation before */
    uint64_t count; /* its events before */
} appended_case;

static void appended_open(appended_case *k, uint64_t seed)
{
    k->dir = tst_mkdtemp();
    k->s = open_paused(k->dir);
    large_child(k->s, &seed, &k->p, &k->c);
    k->at = created_in(k->c);
    ck_assert_int_eq(st_conv_log(k->c, &k->l, NULL), 0);
    k->count = st_log_count(k->l);
}

static void carry_appended_to(appended_case *k, uint64_t seed, int stop)
{
    appended_open(k, seed);
    hook_conv = k->c;
    hook_seed = 77;
    adopt_n = 0;
    stop_at = stop;
    stp_carry_hook = append_before_adopt;
    stp_carry((stp_store *)k->s);
    stp_carry_hook = NULL;
}

/* Closed, it reopens as it was live. */
static void appended_done(appended_case *k, const char *what)
{
    char *live = view(k->s);
    st_conv_release(k->p);
    st_conv_release(k->c);
    st_store_close(k->s);
    expect_reopened(k->dir, live, what);
    free(live);
    tst_rmdir(k->dir);
    free(k->dir);
}

/* One appended to between every read of its last group and its ADOPT
 * still moves: its requests wait for the last two reads (the first of
 * them may still find the append queued before the hold), are answered
 * in order after the ADOPT, and the store reads the same live and
 * reopened. Before, the eight reads all failed and the copy was given up. */
START_TEST(test_carry_in_groups_holds_appends_back)
{
    appended_case k;
    carry_appended_to(&k, 19, -1);
    ck_assert_int_ge(adopt_n, STP_ADOPT_TRIES - STP_HELD_TRIES + 1);
    for (int i = 0; i < adopt_n; i++) {
        ck_assert_int_eq(wait_done(&adopt_w[i]), 0);
        ck_assert_uint_eq(adopt_w[i].first, k.count + 2 * (uint64_t)i);
    }
    ck_assert_uint_gt(created_in(k.c), k.at);
    ck_assert_int_eq(memcmp(((stp_conv *)k.c)->tag.b, ((stp_conv *)k.c)->id.b, 16) != 0, 1);
    ck_assert_uint_eq(st_log_count(k.l), k.count + 2 * (uint64_t)adopt_n);
    appended_done(&k, "after a carry that held appends back");
}
END_TEST

/* The store closing while a copy holds requests back: the copy gives up,
 * what was held is answered -ESHUTDOWN, what was queued before is
 * durable, and the conversation reopens as it was, copy passed over. */
START_TEST(test_carry_in_groups_held_at_close)
{
    appended_case k;
    int held = STP_ADOPT_TRIES - STP_HELD_TRIES; /* the first held read's append */
    carry_appended_to(&k, 23, held);
    ck_assert_int_eq(adopt_n, held + 1);
    for (int i = 0; i < held; i++)
        ck_assert_int_eq(wait_done(&adopt_w[i]), 0);
    ck_assert_int_eq(wait_done(&adopt_w[held]), -ESHUTDOWN);
    ck_assert_uint_eq(created_in(k.c), k.at);
    ck_assert_uint_eq(st_log_count(k.l), k.count + 2 * (uint64_t)held);
    appended_done(&k, "after a copy given up at the close");
}
END_TEST

/* Another thread appending to it one event after another, each waited
 * for, for as long as the carry lasts. */
typedef struct appender {
    st_conv *c;
    uint64_t base; /* its events before */
    _Atomic bool stop;
    uint64_t n, bad; /* appended; the first refused or out of place, + 1 */
} appender;

static void *append_loop(void *arg)
{
    appender *a = arg;
    uint64_t seed = 31;
    while ((!atomic_load(&a->stop) || a->n < 4) && a->bad == 0) {
        st_waiter w;
        int r = append_start(a->c, &seed, 1, &w);
        if (r == 0)
            r = wait_done(&w);
        if (r != 0 || w.first != a->base + a->n)
            a->bad = a->n + 1;
        else
            a->n++;
    }
    return NULL;
}

/* The same with appends from another thread as fast as they are answered,
 * in whatever interleaving with the carry's reads: it moves, and every
 * append lands once, in order. */
START_TEST(test_carry_in_groups_under_appends)
{
    appended_case k;
    appended_open(&k, 29);
    appender a = {.c = k.c, .base = k.count};
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, append_loop, &a), 0);
    stp_carry((stp_store *)k.s);
    atomic_store(&a.stop, true);
    pthread_join(t, NULL);
    ck_assert_uint_eq(a.bad, 0);
    ck_assert_uint_gt(created_in(k.c), k.at);
    ck_assert_uint_eq(st_log_count(k.l), k.count + a.n);
    fprintf(stderr, "carried in groups under %llu appends\n", (unsigned long long)a.n);
    appended_done(&k, "after a carry under appends");
}
END_TEST

/* A crash anywhere in a carry in several groups: cut at 13 points of the
 * bytes it wrote (the segments after the cut gone, with the index files
 * from the cut's on), the store reads as before. */
START_TEST(test_carry_in_groups_cut)
{
    uint64_t seed = 17;
    char *dir = tst_mkdtemp(), *copy = tst_mkdtemp();
    tst_rmdir(copy);
    st_store *s = open_paused(dir);
    stp_store *ps = (stp_store *)s;
    st_conv *p, *c;
    large_child(s, &seed, &p, &c);
    uint32_t at = created_in(c);
    char *before = running_view(dir);
    uint64_t seq0 = ps->act.seq, size0 = ps->act_size;
    stp_carry(ps);
    ck_assert_uint_gt(created_in(c), at);
    uint64_t seq1 = ps->act.seq, size1 = ps->act_size;
    ck_assert_uint_gt(seq1, seq0 + 4);
    for (unsigned k = 0; k <= 12; k++) {
        uint64_t seg = seq0 + (seq1 - seq0) * k / 12;
        uint64_t from = seg == seq0 ? size0 : ST_FILE_HDR, to = seg == seq1 ? size1 : SEG;
        uint64_t cut = from + (to - from) * ((k * 5) % 8) / 8;
        tst_copydir(dir, copy);
        char path[4400];
        pool_file(copy, seg, "seg", path, sizeof(path));
        ck_assert_int_eq(truncate(path, (off_t)cut), 0);
        for (uint64_t q = seg; q <= seq1 + 1; q++) {
            pool_file(copy, q, "idx", path, sizeof(path));
            unlink(path);
            pool_file(copy, q, "seg", path, sizeof(path));
            if (q > seg)
                unlink(path);
        }
        expect_view(copy, before, "a copy cut in a carry in groups");
        char *scanned = scan_view(copy);
        same_view(before, scanned, "a copy cut in a carry in groups, by a scan");
        free(scanned);
        tst_rmdir(copy);
    }
    st_conv_release(p);
    st_conv_release(c);
    st_store_close(s);
    expect_reopened(dir, before, "after the carry in groups");
    free(before);
    tst_rmdir(dir);
    free(dir);
    free(copy);
}
END_TEST

/* A store opened after a close or a crash makes its next segment at the
 * first group: closed before any, it has nothing of its own to sync (the
 * close once synced a segment it never opened: EBADF, logged as a failed
 * flush). Every sync of the open and close succeeds. */
static int datasync_failures;

static int counted_fdatasync(int fd)
{
    int r = fdatasync(fd);
    if (r != 0)
        datasync_failures++;
    return r;
}

static const st_io counted = {pwritev, counted_fdatasync, fsync, NULL};

START_TEST(test_open_then_close_syncs_nothing_missing)
{
    char *dir = tst_mkdtemp();
    st_store *s = open_at(dir, _i == 0 ? ST_FULL : ST_NONE);
    st_conv *c = conv_one(s);
    uint64_t seed = 7;
    ck_assert_int_eq(append_n(c, &seed, 3), 0);
    st_conv_release(c);
    st_store_close(s);
    datasync_failures = 0;
    st_io_set(&counted);
    s = open_at(dir, _i == 0 ? ST_FULL : ST_NONE);
    st_store_close(s);
    st_io_set(NULL);
    ck_assert_int_eq(datasync_failures, 0);
    tst_rmdir(dir);
    free(dir);
}
END_TEST

/* ---- a checkpoint behind many indexes ------------------------------------------------- */

static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool held, release;
    char order[64]; /* 'i' or 'c' for each index or checkpoint written */
    size_t n;
} hold = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

/* The first index file's fsync waits for the test; each is noted. */
static int held_fsync(int fd)
{
    char path[4096];
    fd_path(fd, path, sizeof(path));
    bool idx = strstr(path, ".idx") != NULL, ckpt = strstr(path, ".ckpt") != NULL;
    pthread_mutex_lock(&hold.mu);
    if ((idx || ckpt) && hold.n + 1 < sizeof(hold.order))
        hold.order[hold.n++] = idx ? 'i' : 'c';
    if (idx && !hold.held) {
        hold.held = true;
        pthread_cond_broadcast(&hold.cv);
        while (!hold.release)
            pthread_cond_wait(&hold.cv, &hold.mu);
    }
    pthread_mutex_unlock(&hold.mu);
    return fsync(fd);
}

static const st_io held = {pwritev, fdatasync, held_fsync, NULL};

/* Segments rolled faster than their indexes are written: the sealing
 * thread's queue holds more indexes than its backlog (8) and a checkpoint.
 * The checkpoint goes once the backlog is down to 8, not after the whole
 * queue (which, under a load that never eases, is never). */
START_TEST(test_checkpoint_not_starved_by_indexes)
{
    char *dir = tst_mkdtemp();
    hold.held = hold.release = false;
    hold.n = 0;
    st_io_set(&held);
    st_store *s = open_paused(dir);
    st_conv *c = conv_one(s);
    uint64_t seed = 17;
    pthread_mutex_lock(&hold.mu);
    while (!hold.held) { /* until the first roll's index is being written */
        pthread_mutex_unlock(&hold.mu);
        ck_assert_int_eq(append_n(c, &seed, 10), 0);
        pthread_mutex_lock(&hold.mu);
        while (!hold.held && last_seg(dir) > 1)
            pthread_cond_wait(&hold.cv, &hold.mu);
    }
    pthread_mutex_unlock(&hold.mu);
    uint64_t from = last_seg(dir);
    while (last_seg(dir) < from + 12) /* 11 more indexes and a checkpoint queued */
        ck_assert_int_eq(append_n(c, &seed, 10), 0);
    pthread_mutex_lock(&hold.mu);
    hold.release = true;
    pthread_cond_broadcast(&hold.cv);
    pthread_mutex_unlock(&hold.mu);
    st_conv_release(c);
    st_store_close(s); /* the sealing thread finishes its queue */
    st_io_set(NULL);
    hold.order[hold.n] = '\0';
    const char *ck = strchr(hold.order, 'c');
    ck_assert_msg(ck != NULL && ck - hold.order <= 4, "written in the order %s", hold.order);
    tst_rmdir(dir);
    free(dir);
}
END_TEST

int main(void)
{
    rt_log_set_level(RT_LOG_ERROR);
    Suite *s = suite_create("pool_ckpt");
    TCase *tc = tcase_create("pool_ckpt");
    tcase_add_test(tc, test_idx_encoding);
    tcase_add_test(tc, test_ckpt_encoding);
    tcase_add_test(tc, test_ckpt_first_format);
    tcase_add_loop_test(tc, test_checkpoint_equals_scan, 0, 4);
    tcase_add_loop_test(tc, test_bad_checkpoint_falls_back, 0, 5);
    tcase_add_loop_test(tc, test_checkpoint_of_missing_segment, 0, 2);
    tcase_add_loop_test(tc, test_bad_index_is_rebuilt, 0, 5);
    tcase_add_loop_test(tc, test_faults_in_their_writes, 0, 6);
    tcase_add_test(tc, test_checkpoint_not_starved_by_indexes);
    tcase_add_test(tc, test_corruption_under_checkpoint);
    tcase_add_loop_test(tc, test_lazy_roll_short_segment, 0, 4);
    tcase_add_loop_test(tc, test_lazy_roll_unfinished_successor, 0, 3);
    tcase_add_test(tc, test_open_after_crash_marks_last_scanned);
    tcase_add_test(tc, test_hole_in_the_last_group);
    tcase_add_loop_test(tc, test_hole_before_unsynced_groups, 0, 3);
    tcase_add_test(tc, test_deleted_space_is_reclaimed);
    tcase_add_test(tc, test_live_conversations_are_carried);
    tcase_add_test(tc, test_carry_checked_by_the_committer);
    tcase_add_test(tc, test_large_conversation_carried_alone);
    tcase_add_test(tc, test_conversations_carried_over_rounds);
    tcase_add_test(tc, test_large_conversation_carried_in_groups);
    tcase_add_test(tc, test_carry_in_groups_cut);
    tcase_add_test(tc, test_carry_in_groups_holds_appends_back);
    tcase_add_test(tc, test_carry_in_groups_held_at_close);
    tcase_add_test(tc, test_carry_in_groups_under_appends);
    tcase_add_loop_test(tc, test_open_then_close_syncs_nothing_missing, 0, 2);
    suite_add_tcase(s, tc);
    return ts_run_suite(s);
}
