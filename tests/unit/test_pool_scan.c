/*
 * test_pool_scan.c - the pool's recovery rule (store/pool_scan.c,
 * stp_scan_buf) on segment bytes made in memory, without I/O: records
 * count once their group's COMMIT is there; a torn tail ends at the last
 * COMMIT; a bad record with valid ones after it is reported with its
 * place and the scan goes on, unless it is in the last segment and no
 * later COMMIT says it was durable (a crash before its sync): a torn tail
 * then.
 */
#include "store/pool_impl.h"
#include "support_sync.h"

#include <stdlib.h>
#include <string.h>

enum { SEQ = 7 };

typedef struct seg {
    uint8_t b[8192];
    size_t len, gstart;
} seg;

static void put_key(seg *s, const uint8_t *tag, uint64_t index, const char *id, const void *key,
                    uint32_t keylen, const void *payload, uint32_t len)
{
    uint8_t *h = s->b + s->len;
    size_t hl = st_rec_encode(h, tag, st_journal_seed(SEQ), index, id, (uint32_t)strlen(id), key,
                              keylen, payload, len);
    memcpy(h + hl, payload, len);
    s->len += hl + len;
}

static void put(seg *s, const uint8_t *tag, uint64_t index, const char *id, const void *payload,
                uint32_t len)
{
    put_key(s, tag, index, id, NULL, 0, payload, len);
}

static void event(seg *s, uint8_t conv, uint64_t index)
{
    uint8_t tag[ST_TAG_LEN] = {conv};
    put(s, tag, index, "ev", "{\"k\":1}", 7);
}

static void commit(seg *s)
{
    static const uint8_t zero[ST_TAG_LEN];
    uint8_t start[8];
    st_put64(start, s->gstart);
    put(s, zero, STP_IDX_COMMIT, "commit", start, 8);
    s->gstart = s->len;
}

/* A COMMIT as the pool writes it now: with what was durable (its key) */
static void commit_synced(seg *s, uint64_t synced)
{
    static const uint8_t zero[ST_TAG_LEN];
    uint8_t start[8], key[8];
    st_put64(start, s->gstart);
    st_put64(key, synced);
    put_key(s, zero, STP_IDX_COMMIT, "commit", key, 8, start, 8);
    s->gstart = s->len;
}

static void init(seg *s)
{
    st_file_header(s->b, STP_SEG_MAGIC, SEQ);
    s->len = s->gstart = ST_FILE_HDR;
}

/* A segment of zeros (as the spare is) with one group: its end. */
static size_t first_group(seg *s)
{
    memset(s, 0, sizeof(*s));
    init(s);
    event(s, 1, 0);
    commit(s);
    return s->len;
}

typedef struct got {
    int records;
    uint64_t last_off;
    int corrupt;
    uint64_t corrupt_at;
} got;

static int on_record(void *ctx, const st_rec *r, uint64_t off)
{
    got *g = ctx;
    (void)r;
    g->records++;
    g->last_off = off;
    return 0;
}

static void on_corrupt(void *ctx, uint64_t off, const uint8_t *tag)
{
    got *g = ctx;
    (void)tag;
    g->corrupt++;
    g->corrupt_at = off;
}

static stp_scan_res scan_as(const seg *s, size_t len, bool last, got *g)
{
    memset(g, 0, sizeof(*g));
    stp_scan_cb cb = {g, on_record, on_corrupt, false, last};
    stp_scan_res res;
    ck_assert_int_eq(stp_scan_buf(s->b, len, st_journal_seed(SEQ), &cb, &res), 0);
    return res;
}

static stp_scan_res scan(const seg *s, size_t len, got *g)
{
    return scan_as(s, len, false, g);
}

/* Two whole groups and one without its COMMIT: the third is dropped. */
START_TEST(test_groups_without_commit_are_dropped)
{
    seg s;
    init(&s);
    event(&s, 1, 0);
    event(&s, 2, 0);
    commit(&s);
    event(&s, 1, 1);
    commit(&s);
    size_t end = s.len;
    event(&s, 2, 1);
    event(&s, 1, 2);
    got g;
    stp_scan_res res = scan(&s, s.len, &g);
    ck_assert_int_eq(g.records, 3);
    ck_assert_uint_eq(res.end, end);
    ck_assert_uint_eq(res.corrupt, 0);
    /* torn anywhere in the last group: the same */
    for (size_t cut = end; cut < s.len; cut += 7) {
        res = scan(&s, cut, &g);
        ck_assert_int_eq(g.records, 3);
        ck_assert_uint_eq(res.end, end);
        ck_assert_uint_eq(res.corrupt, 0);
    }
}
END_TEST

/* A torn COMMIT: its group is dropped. */
START_TEST(test_torn_commit)
{
    seg s;
    init(&s);
    event(&s, 1, 0);
    commit(&s);
    size_t end = s.len;
    event(&s, 1, 1);
    commit(&s);
    got g;
    stp_scan_res res = scan(&s, s.len - 3, &g);
    ck_assert_int_eq(g.records, 1);
    ck_assert_uint_eq(res.end, end);
}
END_TEST

/* A flipped byte in the first group: reported at its place, and what
 * comes after it (acknowledged) is still taken. */
START_TEST(test_corruption_in_the_middle)
{
    seg s;
    init(&s);
    event(&s, 1, 0);
    size_t second = s.len;
    event(&s, 2, 0);
    commit(&s);
    event(&s, 1, 1);
    commit(&s);
    size_t end = s.len;
    s.b[second + ST_JREC_HDR + 4] ^= 0x40;
    got g;
    stp_scan_res res = scan(&s, s.len, &g);
    ck_assert_uint_eq(res.corrupt, 1);
    ck_assert_int_eq(g.corrupt, 1);
    ck_assert_uint_eq(g.corrupt_at, second);
    ck_assert_int_eq(g.records, 2); /* conv 1's two events */
    ck_assert_uint_eq(res.end, end);
}
END_TEST

/* Leftovers of another segment (another CRC seed) never validate. */
START_TEST(test_other_seed_never_validates)
{
    seg s;
    init(&s);
    event(&s, 1, 0);
    commit(&s);
    got g;
    memset(&g, 0, sizeof(g));
    stp_scan_cb cb = {&g, on_record, on_corrupt, false, false};
    stp_scan_res res;
    ck_assert_int_eq(stp_scan_buf(s.b, s.len, st_journal_seed(SEQ + 1), &cb, &res), 0);
    ck_assert_int_eq(g.records, 0);
    ck_assert_uint_eq(res.end, ST_FILE_HDR);
    ck_assert_uint_eq(res.corrupt, 0);
}
END_TEST

/* A spare segment's zeros after the last group are no record: the end is
 * the last COMMIT, nothing is corrupt; a group torn inside the zeros too.
 * Zeros in the middle (a lost page) with a valid group after them: that
 * group is found again and the zeros reported once. */
START_TEST(test_zeros_after_the_last_group)
{
    seg s;
    size_t end = first_group(&s);
    got g;
    stp_scan_res res = scan(&s, sizeof(s.b), &g);
    ck_assert_int_eq(g.records, 1);
    ck_assert_uint_eq(res.end, end);
    ck_assert_uint_eq(res.corrupt, 0);
    event(&s, 1, 1); /* torn: no COMMIT, zeros after it */
    res = scan(&s, sizeof(s.b), &g);
    ck_assert_int_eq(g.records, 1);
    ck_assert_uint_eq(res.end, end);
    ck_assert_uint_eq(res.corrupt, 0);
    size_t hole = s.len;
    s.len += 1000; /* zeros, then a whole group */
    s.gstart = s.len;
    event(&s, 2, 0);
    commit(&s);
    res = scan(&s, sizeof(s.b), &g);
    ck_assert_uint_eq(res.corrupt, 1);
    ck_assert_uint_eq(g.corrupt_at, hole);
    ck_assert_uint_eq(res.end, s.len);
}
END_TEST

/* A scan of the first len bytes finds `records` records up to `end`,
 * and corruption at corrupt_at (0: none). */
static void expect_scan(const seg *s, size_t len, bool last, size_t corrupt_at, int records,
                        size_t end)
{
    got g;
    stp_scan_res res = scan_as(s, len, last, &g);
    ck_assert_uint_eq(res.corrupt, corrupt_at != 0);
    ck_assert_int_eq(g.corrupt, corrupt_at != 0);
    if (corrupt_at != 0)
        ck_assert_uint_eq(g.corrupt_at, corrupt_at);
    ck_assert_int_eq(g.records, records);
    ck_assert_uint_eq(res.end, end);
}

/* A crash during the last group's fdatasync: a page of it lost (zeros),
 * its later records and its COMMIT whole after the hole. In the log's last
 * segment that group was never acknowledged: a torn tail, dropped whole;
 * in a segment with others after it, corruption as before. A later group
 * committed after the hole makes it corruption in the last segment too. */
START_TEST(test_hole_in_the_last_group)
{
    seg s;
    size_t end = first_group(&s);
    event(&s, 1, 1);
    size_t hole = s.len;
    event(&s, 2, 0);
    event(&s, 1, 2);
    commit(&s);
    size_t whole = s.len;
    memset(s.b + hole, 0, ST_JREC_HDR + 4); /* a lost page: conv 2's event */
    expect_scan(&s, sizeof(s.b), true, 0, 1, end);
    /* its COMMIT lost too: the same */
    expect_scan(&s, whole - 3, true, 0, 1, end);
    /* not the last segment: corruption, the group taken with what is left */
    expect_scan(&s, sizeof(s.b), false, hole, 3, whole);
    /* a group committed after it: the hole was synced, corruption */
    event(&s, 2, 1);
    commit(&s);
    expect_scan(&s, sizeof(s.b), true, hole, 4, s.len);
}
END_TEST

/* Under `interval` and `none` groups follow each other unsynced: a hole
 * in one with later groups whole after it is a torn tail, cut at the
 * damaged group, unless a later COMMIT says it was durable. */
START_TEST(test_hole_before_later_unsynced_groups)
{
    seg s;
    size_t end = first_group(&s);
    event(&s, 1, 1);
    size_t hole = s.len;
    event(&s, 2, 0);
    commit_synced(&s, end); /* the first group synced: it was a create */
    event(&s, 1, 2);
    commit_synced(&s, end);
    event(&s, 2, 1);
    commit_synced(&s, end);
    size_t unsynced = s.len;
    memset(s.b + hole, 0, ST_JREC_HDR + 4);
    expect_scan(&s, sizeof(s.b), true, 0, 1, end);
    /* a sync, then a group: its COMMIT says the hole was durable */
    event(&s, 1, 3);
    commit_synced(&s, unsynced);
    expect_scan(&s, sizeof(s.b), true, hole, 5, s.len);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("pool_scan");
    TCase *tc = tcase_create("scan");
    tcase_add_test(tc, test_groups_without_commit_are_dropped);
    tcase_add_test(tc, test_torn_commit);
    tcase_add_test(tc, test_corruption_in_the_middle);
    tcase_add_test(tc, test_other_seed_never_validates);
    tcase_add_test(tc, test_zeros_after_the_last_group);
    tcase_add_test(tc, test_hole_in_the_last_group);
    tcase_add_test(tc, test_hole_before_later_unsynced_groups);
    suite_add_tcase(s, tc);
    return ts_run_suite(s);
}
