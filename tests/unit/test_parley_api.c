/*
 * test_parley_api.c - the public embedding header: open and close an
 * instance, what it creates, and the errors it reports.
 */
#include "parley.h"

#include "support_sync.h"

#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[256];

static void make_tmp(void)
{
    snprintf(dir, sizeof(dir), "/tmp/parley-api-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
}

START_TEST(test_open_close)
{
    make_tmp();
    char data[300];
    snprintf(data, sizeof(data), "%s/data", dir);
    pl_options o = {.workers = 2, .data_dir = data};
    pl_instance *p = NULL;
    ck_assert_int_eq(pl_open(&o, &p, NULL, 0), 0);
    ck_assert_int_eq(pl_workers(p), 2);
    ck_assert_uint_eq(pl_conversations(p), 0);
    /* one process, or instance, per data directory */
    pl_instance *q = NULL;
    char err[256];
    ck_assert_int_eq(pl_open(&o, &q, err, sizeof(err)), -EBUSY);
    ck_assert_ptr_null(q);
    ck_assert_msg(strstr(err, "in use by another process") != NULL, "%s", err);
    struct stat st;
    ck_assert_int_eq(stat(data, &st), 0);
    ck_assert(S_ISDIR(st.st_mode));
    pl_close(p);
    char cmd[400];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
}
END_TEST

START_TEST(test_errors)
{
    make_tmp();
    char file[300], bad[320];
    snprintf(file, sizeof(file), "%s/file", dir);
    snprintf(bad, sizeof(bad), "%s/sub", file);
    FILE *f = fopen(file, "w");
    fclose(f);
    pl_options o = {.workers = 1, .data_dir = bad};
    pl_instance *p = NULL;
    char err[256];
    int r = pl_open(&o, &p, err, sizeof(err));
    ck_assert_int_eq(r, -ENOTDIR);
    ck_assert_ptr_null(p);
    ck_assert_str_eq(pl_strerror(r), strerror(ENOTDIR));
    ck_assert_msg(strstr(err, bad) && strstr(err, strerror(ENOTDIR)), "%s", err);
    pl_options neg = {.workers = -1, .data_dir = dir};
    ck_assert_int_lt(pl_open(&neg, &p, NULL, 0), 0);
    ck_assert_str_eq(pl_strerror(pl_open(&o, NULL, NULL, 0)), "invalid argument");
    pl_options dur = {.data_dir = dir, .durability = "sometimes"};
    ck_assert_int_eq(pl_open(&dur, &p, err, sizeof(err)), pl_open(&o, NULL, NULL, 0));
    ck_assert_msg(strstr(err, "unknown durability 'sometimes'") != NULL, "%s", err);
    ck_assert_ptr_nonnull(pl_version());
    pl_close(NULL);
    unlink(file);
    rmdir(dir);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("parley_api");
    TCase *tc = tcase_create("lifecycle");
    tcase_add_test(tc, test_open_close);
    tcase_add_test(tc, test_errors);
    suite_add_tcase(s, tc);
    return ts_run_suite(s);
}
