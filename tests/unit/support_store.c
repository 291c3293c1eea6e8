/* support_store.c - see support_store.h. */
#include "support_store.h"

#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

char *tst_mkdtemp(void)
{
    const char *base = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    char *path = malloc(strlen(base) + 32);
    sprintf(path, "%s/parley-store-XXXXXX", base);
    ck_assert_ptr_nonnull(mkdtemp(path));
    return path;
}

static int rm_one(const char *p, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    return remove(p);
}

void tst_rmdir(const char *dir)
{
    nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

static const char *copy_src, *copy_dst;

/* One entry of the copy. A file that went between the listing and its
 * copy (a store still running removes and renames files) is left out, as
 * a crash at that moment would have left it. */
static int copy_one(const char *p, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)ftw;
    char to[8192];
    snprintf(to, sizeof(to), "%s%s", copy_dst, p + strlen(copy_src));
    if (flag == FTW_D)
        return mkdir(to, 0755) == 0 || errno == EEXIST ? 0 : -1;
    if (flag != FTW_F)
        return 0; /* FTW_NS: gone since it was listed */
    int in = open(p, O_RDONLY | O_CLOEXEC);
    if (in < 0)
        return errno == ENOENT ? 0 : -1;
    int out = open(to, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    char buf[65536];
    ssize_t n = 0;
    while (out >= 0 && (n = read(in, buf, sizeof(buf))) > 0)
        if (write(out, buf, (size_t)n) != n)
            n = -1;
    close(in);
    if (out >= 0)
        close(out);
    return out >= 0 && n == 0 ? 0 : -1;
}

void tst_copydir(const char *src, const char *dst)
{
    copy_src = src;
    copy_dst = dst;
    ck_assert_int_eq(nftw(src, copy_one, 16, FTW_PHYS), 0);
}

void tst_event_id(uint64_t k, char *id, size_t cap)
{
    snprintf(id, cap, "ev-%llu", (unsigned long long)k);
}

rt_buf *tst_event_body(uint64_t k, size_t maxlen)
{
    size_t pad = maxlen > 64 ? (k * 7919) % (maxlen - 64) : 0;
    char *s = malloc(pad + 96);
    int n = sprintf(s, "{\"id\":\"ev-%llu\",\"pad\":\"", (unsigned long long)k);
    for (size_t i = 0; i < pad; i++)
        s[n + i] = (char)('a' + (k + i) % 26);
    n += (int)pad;
    n += sprintf(s + n, "\"}");
    rt_buf *b = rt_buf_copy(s, (size_t)n);
    free(s);
    return b;
}

int tst_append(st_log *l, uint64_t from, size_t n, size_t maxlen)
{
    st_item *items = calloc(n, sizeof(*items));
    char(*ids)[32] = calloc(n, 32);
    for (size_t i = 0; i < n; i++) {
        tst_event_id(from + i, ids[i], 32);
        items[i].id = ids[i];
        items[i].idlen = (uint32_t)strlen(ids[i]);
        items[i].payload = tst_event_body(from + i, maxlen);
    }
    uint64_t first;
    int r = st_log_write(l, items, n, &first);
    if (r == 0 && first != from)
        r = -1000;
    if (r == 0)
        r = st_log_sync(l);
    if (r == 0)
        st_log_publish(l);
    else
        st_log_rollback(l);
    for (size_t i = 0; i < n; i++)
        rt_buf_unref(items[i].payload);
    free(items);
    free(ids);
    return r;
}

int tst_verify(st_log *l, uint64_t count, uint32_t page, size_t maxlen)
{
    int bad = st_log_count(l) != count;
    for (uint64_t at = 0; at < count; at += page) {
        st_page *p;
        if (st_log_read(l, at, page, &p) != 0)
            return bad + 1;
        uint64_t want = count - at < page ? count - at : page;
        bad += p->n != want;
        for (uint32_t i = 0; i < p->n; i++) {
            rt_buf *b = tst_event_body(at + i, maxlen);
            const uint8_t *base = rt_buf_data(p->bytes);
            char id[32];
            tst_event_id(at + i, id, sizeof(id));
            bad += p->ev[i].index != at + i || p->ev[i].len != rt_buf_len(b) ||
                   memcmp(base + p->ev[i].off, rt_buf_data(b), rt_buf_len(b)) != 0 ||
                   p->ev[i].id_len != strlen(id) || memcmp(base + p->ev[i].id_off, id, strlen(id));
            rt_buf_unref(b);
            uint64_t idx = UINT64_MAX;
            bad += st_log_find(l, id, strlen(id), &idx) != 0 || idx != at + i;
        }
        st_page_free(p);
    }
    return bad;
}

void tst_last_segment(const char *dir, char *out, size_t cap)
{
    DIR *d = opendir(dir);
    ck_assert_ptr_nonnull(d);
    char best[64] = "";
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (strlen(e->d_name) == 24 && strcmp(e->d_name + 20, ".seg") == 0 &&
            strcmp(e->d_name, best) > 0)
            strcpy(best, e->d_name);
    closedir(d);
    ck_assert(best[0] != '\0');
    snprintf(out, cap, "%s/%s", dir, best);
}

uint64_t tst_file_size(const char *path)
{
    struct stat st;
    ck_assert_int_eq(stat(path, &st), 0);
    return (uint64_t)st.st_size;
}

void tst_truncate(const char *path, uint64_t len)
{
    ck_assert_int_eq(truncate(path, (off_t)len), 0);
}

void tst_flip(const char *path, uint64_t off)
{
    int fd = open(path, O_RDWR);
    ck_assert_int_ge(fd, 0);
    uint8_t b;
    ck_assert_int_eq(pread(fd, &b, 1, (off_t)off), 1);
    b ^= 0x5a;
    ck_assert_int_eq(pwrite(fd, &b, 1, (off_t)off), 1);
    close(fd);
}

/* ---- events of several conversations ------------------------------------ */

static uint64_t mix64(uint64_t x) /* splitmix64's finalizer */
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

void tst_conv_id(unsigned k, rt_uuid *out)
{
    /* k in the first bytes too: the catalog hashes those */
    uint64_t h = mix64(0xc0c0c0c0u + k);
    for (int i = 0; i < 8; i++)
        out->b[i] = (uint8_t)(h >> (8 * i));
    for (int i = 8; i < 12; i++)
        out->b[i] = (uint8_t)(0xc0 + i);
    for (int i = 0; i < 4; i++)
        out->b[12 + i] = (uint8_t)(k >> (8 * i));
}

void tst_cevent_id(unsigned k, uint64_t i, char *id, size_t cap)
{
    snprintf(id, cap, "c%u-%llu", k, (unsigned long long)i);
}

rt_buf *tst_cevent_body(unsigned k, uint64_t i, size_t maxlen)
{
    uint64_t h = mix64(((uint64_t)k << 48) ^ i);
    size_t lo = 48, cap = h % 100 < 60 ? 256 : h % 100 < 92 ? 4096 : maxlen;
    if (cap > maxlen)
        cap = maxlen;
    size_t len = cap > lo ? lo + (size_t)((h >> 8) % (cap - lo + 1)) : lo;
    rt_buf *b = rt_buf_new(len);
    if (b == NULL)
        return NULL;
    char *s = (char *)rt_buf_wdata(b);
    char head[64];
    int n = snprintf(head, sizeof(head), "{\"c\":%u,\"i\":%llu,\"p\":\"", k, (unsigned long long)i);
    memcpy(s, head, (size_t)n);
    uint64_t x = h;
    for (size_t at = (size_t)n; at < len - 2; at++) {
        if ((at & 7) == 0)
            x = mix64(x);
        s[at] = (char)('a' + (x >> (8 * (at & 7))) % 26);
    }
    memcpy(s + len - 2, "\"}", 2);
    return b;
}

void tst_items_make(tst_items *t, unsigned k, uint64_t from, size_t n, size_t maxlen)
{
    t->n = n;
    t->v = calloc(n, sizeof(*t->v));
    t->ids = calloc(n, sizeof(*t->ids));
    if (t->v == NULL || t->ids == NULL) {
        free(t->v);
        free(t->ids);
        t->v = NULL;
        t->ids = NULL;
        return;
    }
    for (size_t i = 0; i < n; i++) {
        tst_cevent_id(k, from + i, t->ids[i], sizeof(t->ids[i]));
        t->v[i].id = t->ids[i];
        t->v[i].idlen = (uint32_t)strlen(t->ids[i]);
        t->v[i].payload = tst_cevent_body(k, from + i, maxlen);
    }
}

void tst_items_free(tst_items *t)
{
    for (size_t i = 0; t->v != NULL && i < t->n; i++)
        rt_buf_unref(t->v[i].payload);
    free(t->v);
    free(t->ids);
    t->v = NULL;
    t->ids = NULL;
}

int tst_cverify(st_log *l, unsigned k, uint64_t n, size_t maxlen, char *why, size_t whycap)
{
    char scratch[8];
    if (why == NULL) {
        why = scratch;
        whycap = sizeof(scratch);
    }
    why[0] = '\0';
    int bad = 0;
    enum { PAGE = 64 };
    for (uint64_t at = 0; at < n; at += PAGE) {
        st_page *p;
        int r = st_log_read(l, at, PAGE, &p);
        if (r != 0) {
            if (bad++ == 0)
                snprintf(why, whycap, "conv %u: read at %llu: %s", k, (unsigned long long)at,
                         strerror(-r));
            continue;
        }
        uint64_t want = n - at < PAGE ? n - at : PAGE;
        if (p->n != want && bad++ == 0)
            snprintf(why, whycap, "conv %u: read at %llu gave %u events, expected %llu", k,
                     (unsigned long long)at, p->n, (unsigned long long)want);
        const uint8_t *base = rt_buf_data(p->bytes);
        for (uint32_t i = 0; i < p->n; i++) {
            uint64_t idx = at + i;
            const st_event_ref *e = &p->ev[i];
            char id[32];
            tst_cevent_id(k, idx, id, sizeof(id));
            rt_buf *b = tst_cevent_body(k, idx, maxlen);
            bool same = e->index == idx && e->len == rt_buf_len(b) &&
                        memcmp(base + e->off, rt_buf_data(b), rt_buf_len(b)) == 0 &&
                        e->id_len == strlen(id) && memcmp(base + e->id_off, id, e->id_len) == 0;
            rt_buf_unref(b);
            if (!same && bad++ == 0)
                snprintf(why, whycap, "conv %u: event %llu is not the one appended there (id %.*s)",
                         k, (unsigned long long)idx, (int)e->id_len, base + e->id_off);
            uint64_t found = UINT64_MAX;
            r = st_log_find(l, id, strlen(id), &found);
            if ((r != 0 || found != idx) && bad++ == 0)
                snprintf(why, whycap, "conv %u: find %s: %d, index %llu", k, id, r,
                         (unsigned long long)found);
        }
        st_page_free(p);
    }
    return bad;
}
