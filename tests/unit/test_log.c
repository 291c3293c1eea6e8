/*
 * test_log.c - one conversation's log: round trips, paging at every
 * boundary, segment rolls, reopening from checkpoints, id lookups, the
 * writer's invisible/rollback states, torn tails cut at every byte offset,
 * corruption in the middle, the lock, and readers racing the writer.
 */
#include "store/log.h"
#include "support_store.h"
#include "support_sync.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

enum { BODY = 600 };

static st_log *open_log(const char *dir, uint64_t seg_bytes, st_open_report *rep)
{
    st_log_opts o = {.segment_bytes = seg_bytes};
    st_log *l = NULL;
    int r = st_log_open(dir, &o, &l, rep);
    ck_assert_msg(r == 0, "open %s: %s (%s)", dir, strerror(-r), rep ? rep->detail : "");
    return l;
}

START_TEST(test_round_trip_and_paging)
{
    char *dir = tst_mkdtemp();
    st_log *l = open_log(dir, 0, NULL);
    ck_assert_uint_eq(st_log_count(l), 0);
    for (uint64_t at = 0; at < 1000; at += 37)
        ck_assert_int_eq(tst_append(l, at, at + 37 > 1000 ? 1000 - at : 37, BODY), 0);
    ck_assert_uint_eq(st_log_count(l), 1000);
    /* every page size from 1 to 101, so every boundary is crossed */
    for (uint32_t page = 1; page <= 101; page += 4)
        ck_assert_int_eq(tst_verify(l, 1000, page, BODY), 0);
    /* past the end, at the end, straddling the end */
    st_page *p;
    ck_assert_int_eq(st_log_read(l, 1000, 10, &p), 0);
    ck_assert_uint_eq(p->n, 0);
    st_page_free(p);
    ck_assert_int_eq(st_log_read(l, 995, 10, &p), 0);
    ck_assert_uint_eq(p->n, 5);
    ck_assert_uint_eq(p->ev[4].index, 999);
    st_page_free(p);
    ck_assert_int_eq(st_log_read(l, UINT64_MAX - 1, 10, &p), 0);
    ck_assert_uint_eq(p->n, 0);
    st_page_free(p);
    st_log_close(l);
    tst_rmdir(dir);
    free(dir);
}
END_TEST

START_TEST(test_find)
{
    char *dir = tst_mkdtemp();
    st_log *l = open_log(dir, 0, NULL);
    ck_assert_int_eq(tst_append(l, 0, 500, 100), 0);
    uint64_t i = 42;
    ck_assert_int_eq(st_log_find(l, "ev-500", 6, &i), -ENOENT);
    ck_assert_int_eq(st_log_find(l, "ev-1", 4, &i), 0);
    ck_assert_uint_eq(i, 1);
    ck_assert_int_eq(st_log_find(l, "ev-", 3, &i), -ENOENT);
    ck_assert_int_eq(st_log_find(l, "", 0, &i), -ENOENT);
    /* the same id twice: the first occurrence wins, before and after reopen */
    rt_buf *b = rt_buf_copy("{}", 2);
    st_item it = {.id = "ev-7", .idlen = 4, .payload = b};
    uint64_t first;
    ck_assert_int_eq(st_log_write(l, &it, 1, &first), 0);
    st_log_publish(l);
    ck_assert_uint_eq(first, 500);
    ck_assert_int_eq(st_log_find(l, "ev-7", 4, &i), 0);
    ck_assert_uint_eq(i, 7);
    st_log_close(l);
    l = open_log(dir, 0, NULL);
    ck_assert_int_eq(st_log_find(l, "ev-7", 4, &i), 0);
    ck_assert_uint_eq(i, 7);
    rt_buf_unref(b);
    st_log_close(l);
    tst_rmdir(dir);
    free(dir);
}
END_TEST

/* Write events [from, from + n) whose even ones carry the key "call-<k>". */
static void append_keyed(st_log *l, uint64_t from, size_t n)
{
    st_item it[64];
    char ids[64][32], keys[64][32];
    ck_assert_uint_le(n, 64);
    for (size_t i = 0; i < n; i++) {
        uint64_t k = from + i;
        tst_event_id(k, ids[i], sizeof(ids[i]));
        snprintf(keys[i], sizeof(keys[i]), "call-%llu", (unsigned long long)k);
        it[i] = (st_item){.id = ids[i],
                          .idlen = (uint32_t)strlen(ids[i]),
                          .key = k % 2 == 0 ? keys[i] : NULL,
                          .keylen = k % 2 == 0 ? (uint32_t)strlen(keys[i]) : 0,
                          .payload = tst_event_body(k, 300)};
    }
    uint64_t first;
    ck_assert_int_eq(st_log_write(l, it, n, &first), 0);
    ck_assert_uint_eq(first, from);
    st_log_publish(l);
    for (size_t i = 0; i < n; i++)
        rt_buf_unref(it[i].payload);
}

static void check_keys(st_log *l, uint64_t count)
{
    for (uint64_t k = 0; k < count + 4; k++) {
        char key[32];
        snprintf(key, sizeof(key), "call-%llu", (unsigned long long)k);
        uint64_t at = 424242;
        int r = st_log_find_key(l, key, strlen(key), &at);
        if (k % 2 == 0 && k < count) {
            ck_assert_int_eq(r, 0);
            ck_assert_uint_eq(at, k);
        } else {
            ck_assert_int_eq(r, -ENOENT);
        }
    }
    /* ids and keys are apart: an id is not a key, a key is not an id */
    uint64_t at;
    ck_assert_int_eq(st_log_find_key(l, "ev-0", 4, &at), -ENOENT);
    ck_assert_int_eq(st_log_find(l, "call-0", 6, &at), -ENOENT);
    ck_assert_int_eq(tst_verify(l, count, 17, 300), 0);
}

/* The optional second key: found exactly, through checkpoints and scans,
 * and its records read back like any other. */
START_TEST(test_keys)
{
    char *dir = tst_mkdtemp();
    st_log *l = open_log(dir, 16384, NULL);
    for (uint64_t at = 0; at < 300; at += 30)
        append_keyed(l, at, 30);
    check_keys(l, 300);
    st_log_close(l);
    st_open_report rep;
    l = open_log(dir, 16384, &rep);
    ck_assert_uint_eq(rep.scanned, 0);
    check_keys(l, 300);
    st_log_close(l);
    /* without checkpoints: everything comes from scanning the records */
    char cmd[4200];
    snprintf(cmd, sizeof(cmd), "rm -f %s/*.idx", dir);
    ck_assert_int_eq(system(cmd), 0);
    l = open_log(dir, 16384, &rep);
    ck_assert_uint_eq(rep.scanned, 300);
    check_keys(l, 300);
    st_log_close(l);
    tst_rmdir(dir);
    free(dir);
}
END_TEST

START_TEST(test_segments_roll_and_reopen)
{
    char *dir = tst_mkdtemp();
    st_open_report rep;
    st_log *l = open_log(dir, 8192, &rep);
    for (uint64_t at = 0; at < 2000; at += 25)
        ck_assert_int_eq(tst_append(l, at, 25, BODY), 0);
    ck_assert_int_eq(tst_verify(l, 2000, 33, BODY), 0);
    st_log_close(l);
    l = open_log(dir, 8192, &rep);
    ck_assert_uint_eq(rep.count, 2000);
    ck_assert_uint_eq(rep.scanned, 0); /* all from checkpoints */
    ck_assert_str_eq(rep.detail, "");
    ck_assert_int_eq(tst_verify(l, 2000, 100, BODY), 0);
    ck_assert_int_eq(tst_append(l, 2000, 30, BODY), 0);
    ck_assert_int_eq(tst_verify(l, 2030, 7, BODY), 0);
    st_log_close(l);
    tst_rmdir(dir);
    free(dir);
}
END_TEST

START_TEST(test_unpublished_is_invisible_and_rolls_back)
{
    char *dir = tst_mkdtemp();
    st_log *l = open_log(dir, 0, NULL);
    ck_assert_int_eq(tst_append(l, 0, 10, BODY), 0);
    char seg[4096];
    tst_last_segment(dir, seg, sizeof(seg));
    uint64_t size = tst_file_size(seg);
    rt_buf *b = tst_event_body(10, BODY);
    st_item it = {.id = "ev-10", .idlen = 5, .payload = b};
    uint64_t first;
    ck_assert_int_eq(st_log_write(l, &it, 1, &first), 0);
    ck_assert_uint_eq(first, 10);
    ck_assert_uint_eq(st_log_count(l), 10);
    uint64_t i;
    ck_assert_int_eq(st_log_find(l, "ev-10", 5, &i), -ENOENT);
    st_page *p;
    ck_assert_int_eq(st_log_read(l, 10, 5, &p), 0);
    ck_assert_uint_eq(p->n, 0);
    st_page_free(p);
    ck_assert_int_eq(st_log_rollback(l), 0);
    ck_assert_uint_eq(tst_file_size(seg), size);
    rt_buf_unref(b);
    /* the index is given again */
    ck_assert_int_eq(tst_append(l, 10, 5, BODY), 0);
    ck_assert_int_eq(tst_verify(l, 15, 4, BODY), 0);
    st_log_close(l);
    tst_rmdir(dir);
    free(dir);
}
END_TEST

/* A process that dies without closing: the reopen scans what no checkpoint
 * covers and finds everything that was published. */
START_TEST(test_reopen_after_unclean_exit)
{
    char *dir = tst_mkdtemp();
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        st_log_opts o = {.segment_bytes = 1 << 16};
        st_log *l;
        if (st_log_open(dir, &o, &l, NULL) != 0 || tst_append(l, 0, 300, BODY) != 0)
            _exit(1);
        _exit(0); /* no close: no final checkpoint */
    }
    int st;
    waitpid(pid, &st, 0);
    ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    st_open_report rep;
    st_log *l = open_log(dir, 1 << 16, &rep);
    ck_assert_uint_eq(rep.count, 300);
    ck_assert_uint_gt(rep.scanned, 0);
    ck_assert_uint_eq(rep.truncated_bytes, 0); /* a clean end is not a torn tail */
    ck_assert_msg(rep.detail[0] == '\0', "%s", rep.detail);
    ck_assert_int_eq(tst_verify(l, 300, 50, BODY), 0);
    st_log_close(l);
    tst_rmdir(dir);
    free(dir);
}
END_TEST

/* Cut the last record at every byte offset, and flip each of its bytes:
 * every reopen keeps exactly the records before it and invents nothing. */
START_TEST(test_torn_tail_every_offset)
{
    char *dir = tst_mkdtemp();
    st_log *l = open_log(dir, 0, NULL);
    ck_assert_int_eq(tst_append(l, 0, 20, 200), 0);
    char seg[4096];
    tst_last_segment(dir, seg, sizeof(seg));
    uint64_t before = tst_file_size(seg);
    ck_assert_int_eq(tst_append(l, 20, 1, 200), 0);
    uint64_t after = tst_file_size(seg);
    st_log_close(l);
    char *work = tst_mkdtemp();
    char copy[4096], cseg[4200], idx[4300];
    snprintf(copy, sizeof(copy), "%s/c", work);
    for (int mode = 0; mode < 2; mode++) {
        for (uint64_t off = before; off < after; off++) {
            tst_copydir(dir, copy);
            snprintf(cseg, sizeof(cseg), "%s/%s", copy, strrchr(seg, '/') + 1);
            /* the checkpoint would vouch for the whole last record */
            snprintf(idx, sizeof(idx), "%.*s.idx", (int)(strlen(cseg) - 4), cseg);
            unlink(idx);
            if (mode == 0)
                tst_truncate(cseg, off);
            else
                tst_flip(cseg, off);
            st_open_report rep;
            st_log *c = open_log(copy, 0, &rep);
            ck_assert_msg(rep.count == 20 && !rep.corrupt, "mode %d off %llu: count %llu: %s", mode,
                          (unsigned long long)off, (unsigned long long)rep.count, rep.detail);
            ck_assert_uint_eq(rep.truncated_bytes, mode == 0 ? off - before : after - before);
            ck_assert_int_eq(tst_verify(c, 20, 20, 200), 0);
            /* and the log takes the next event where the cut was */
            ck_assert_int_eq(tst_append(c, 20, 1, 200), 0);
            st_log_close(c);
            tst_rmdir(copy);
        }
    }
    tst_rmdir(work);
    free(work);
    tst_rmdir(dir);
    free(dir);
}
END_TEST

/* A bad record with good ones after it is corruption, not a torn tail:
 * reported, read-only, valid prefix readable, nothing cut off. */
START_TEST(test_corrupt_middle_is_read_only)
{
    char *dir = tst_mkdtemp();
    st_log *l = open_log(dir, 0, NULL);
    ck_assert_int_eq(tst_append(l, 0, 10, 200), 0);
    char seg[4096];
    tst_last_segment(dir, seg, sizeof(seg));
    uint64_t mid = tst_file_size(seg);
    ck_assert_int_eq(tst_append(l, 10, 10, 200), 0);
    st_log_close(l);
    snprintf(seg + strlen(seg) - 3, 4, "idx");
    unlink(seg);
    snprintf(seg + strlen(seg) - 3, 4, "seg");
    uint64_t size = tst_file_size(seg);
    tst_flip(seg, mid + 30);
    st_open_report rep;
    l = open_log(dir, 0, &rep);
    ck_assert(rep.corrupt);
    ck_assert(st_log_read_only(l));
    ck_assert_uint_eq(rep.count, 10);
    ck_assert_ptr_nonnull(strstr(rep.detail, "corrupt record"));
    ck_assert_int_eq(tst_verify(l, 10, 3, 200), 0);
    ck_assert_int_eq(tst_append(l, 10, 1, 200), -EROFS);
    st_log_close(l);
    ck_assert_uint_eq(tst_file_size(seg), size);
    tst_rmdir(dir);
    free(dir);
}
END_TEST

/* A sealed segment with a bad record is corruption even at its end. */
START_TEST(test_corrupt_sealed_segment)
{
    char *dir = tst_mkdtemp();
    st_log *l = open_log(dir, 4096, NULL);
    for (uint64_t at = 0; at < 100; at += 10)
        ck_assert_int_eq(tst_append(l, at, 10, 300), 0);
    st_log_close(l);
    char first[4096];
    snprintf(first, sizeof(first), "%s/%020d.seg", dir, 0);
    uint64_t size = tst_file_size(first);
    tst_truncate(first, size - 3);
    st_open_report rep;
    l = open_log(dir, 4096, &rep);
    ck_assert(rep.corrupt);
    ck_assert(st_log_read_only(l));
    ck_assert_uint_lt(rep.count, 100);
    ck_assert_int_eq(tst_verify(l, rep.count, 10, 300), 0);
    st_log_close(l);
    tst_rmdir(dir);
    free(dir);
}
END_TEST

START_TEST(test_second_writer_is_refused)
{
    char *dir = tst_mkdtemp();
    st_log *l = open_log(dir, 0, NULL);
    st_log *m = NULL;
    st_open_report rep;
    ck_assert_int_eq(st_log_open(dir, NULL, &m, &rep), -EBUSY);
    ck_assert_ptr_null(m);
    char pid[64];
    snprintf(pid, sizeof(pid), "pid %ld", (long)getpid());
    ck_assert_msg(strstr(rep.detail, "in use by another process") && strstr(rep.detail, pid), "%s",
                  rep.detail);
    st_log_close(l);
    ck_assert_int_eq(st_log_open(dir, NULL, &m, NULL), 0);
    st_log_close(m);
    tst_rmdir(dir);
    free(dir);
}
END_TEST

typedef struct race {
    st_log *l;
    _Atomic int stop;
    _Atomic long reads;
    _Atomic int bad;
} race;

static void *reader(void *arg)
{
    race *r = arg;
    unsigned seed = 7;
    while (!atomic_load(&r->stop)) {
        uint64_t count = st_log_count(r->l);
        if (count == 0)
            continue;
        uint64_t at = rand_r(&seed) % count;
        st_page *p;
        if (st_log_read(r->l, at, 50, &p) != 0) {
            atomic_fetch_add(&r->bad, 1);
            continue;
        }
        for (uint32_t i = 0; i < p->n; i++)
            if (p->ev[i].index != at + i)
                atomic_fetch_add(&r->bad, 1);
        st_page_free(p);
        char id[32];
        tst_event_id(at, id, sizeof(id));
        uint64_t idx;
        if (st_log_find(r->l, id, strlen(id), &idx) != 0 || idx != at)
            atomic_fetch_add(&r->bad, 1);
        atomic_fetch_add(&r->reads, 1);
    }
    return NULL;
}

/* Readers on other threads page and look up while the writer appends and
 * rolls segments: every answer is consistent (TSan checks the rest). */
START_TEST(test_readers_race_the_writer)
{
    char *dir = tst_mkdtemp();
    race r = {.l = open_log(dir, 1 << 15, NULL)};
    pthread_t t[3];
    for (int i = 0; i < 3; i++)
        pthread_create(&t[i], NULL, reader, &r);
    int total = TS_SCALE(20000, 4000);
    for (int at = 0; at < total; at += 20)
        ck_assert_int_eq(tst_append(r.l, (uint64_t)at, 20, 300), 0);
    atomic_store(&r.stop, 1);
    for (int i = 0; i < 3; i++)
        pthread_join(t[i], NULL);
    ck_assert_int_eq(atomic_load(&r.bad), 0);
    ck_assert_int_gt(atomic_load(&r.reads), 0);
    ck_assert_int_eq(tst_verify(r.l, (uint64_t)total, 100, 300), 0);
    st_log_close(r.l);
    tst_rmdir(dir);
    free(dir);
}
END_TEST

START_TEST(test_memory_does_not_hold_bodies)
{
    char *dir = tst_mkdtemp();
    st_log *l = open_log(dir, 0, NULL);
    for (uint64_t at = 0; at < 20000; at += 500)
        ck_assert_int_eq(tst_append(l, at, 500, 4000), 0);
    /* ~40 MB of bodies; the index must stay a few bytes per event */
    ck_assert_uint_lt(st_log_memory(l), 20000 * 64);
    st_log_close(l);
    tst_rmdir(dir);
    free(dir);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("log");
    TCase *tc = tcase_create("log");
    tcase_add_test(tc, test_round_trip_and_paging);
    tcase_add_test(tc, test_find);
    tcase_add_test(tc, test_keys);
    tcase_add_test(tc, test_segments_roll_and_reopen);
    tcase_add_test(tc, test_unpublished_is_invisible_and_rolls_back);
    tcase_add_test(tc, test_reopen_after_unclean_exit);
    tcase_add_test(tc, test_torn_tail_every_offset);
    tcase_add_test(tc, test_corrupt_middle_is_read_only);
    tcase_add_test(tc, test_corrupt_sealed_segment);
    tcase_add_test(tc, test_second_writer_is_refused);
    tcase_add_test(tc, test_readers_race_the_writer);
    tcase_add_test(tc, test_memory_does_not_hold_bodies);
    suite_add_tcase(s, tc);
    return ts_run_suite(s);
}
