/*
 * test_vectors.c - every file of ../shared/vectors, through the real
 * conversation actors and store: compliance vectors append their steps as a
 * producer would (a restart step really closes everything and reopens it
 * from disk), stuck vectors append their events and look at what the
 * detector did, in the log, after each check point.
 */
#include "support_conv.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *vector_dir(const char *sub)
{
    const char *base = getenv("PARLEY_SHARED_DIR");
    if (base == NULL)
        base = PARLEY_SHARED_DIR;
    char *path = malloc(strlen(base) + strlen(sub) + 16);
    sprintf(path, "%s/vectors/%s", base, sub);
    DIR *d = opendir(path);
    ck_assert_msg(d != NULL, "the test vectors are missing: %s (set PARLEY_SHARED_DIR)", path);
    closedir(d);
    return path;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The .json files of a vector folder, sorted. */
static char **vector_files(const char *dir, size_t *n)
{
    DIR *d = opendir(dir);
    char **v = NULL;
    size_t k = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        size_t len = strlen(e->d_name);
        if (len < 6 || strcmp(e->d_name + len - 5, ".json") != 0)
            continue;
        v = realloc(v, (k + 1) * sizeof(*v));
        v[k] = malloc(strlen(dir) + len + 2);
        sprintf(v[k++], "%s/%s", dir, e->d_name);
    }
    closedir(d);
    qsort(v, k, sizeof(*v), cmp_str);
    ck_assert_msg(k > 0, "no vector in %s", dir);
    *n = k;
    return v;
}

static const char *str(json_t *o, const char *key)
{
    return json_string_value(json_object_get(o, key));
}

/* ---------------------------------------------------------- compliance --- */

typedef struct step_out {
    char name[64]; /* id, or id#2 for its second appearance */
    tc_slot *slot;
} step_out;

/* The event a deferral expiry reported, from the error's detail. */
static const char *expired_id(json_t *ev, char *buf, size_t cap)
{
    const char *code = str(ev, "code"), *detail = str(ev, "detail");
    if (code == NULL || strcmp(code, "DeferredMessageExpired") != 0 || detail == NULL)
        return NULL;
    const char *p = strstr(detail, "MessageEvent ");
    if (p == NULL)
        return NULL;
    p += strlen("MessageEvent ");
    size_t n = strcspn(p, " ");
    snprintf(buf, cap, "%.*s", (int)(n < cap ? n : cap - 1), p);
    return buf;
}

/* Runs one compliance vector; returns a malloc'd description of the first
 * difference, or NULL. */
static char *run_compliance(const char *path)
{
    json_error_t je;
    json_t *v = json_load_file(path, 0, &je);
    ck_assert_msg(v != NULL, "%s: %s", path, je.text);
    tc_env e = {0};
    tc_start(&e, NULL, NULL, ST_FULL);
    json_t *steps = json_object_get(v, "steps");
    step_out *outs = calloc(json_array_size(steps), sizeof(*outs));
    size_t nout = 0, i;
    json_t *step, *seen = json_object();
    json_array_foreach(steps, i, step)
    {
        json_t *ev = json_object_get(step, "append");
        if (ev == NULL) { /* restart: everything durable, then close and reopen */
            ck_assert_int_eq(tc_call(&e, CONV_SYNC, 0, NULL, NULL), 200);
            for (size_t k = 0; k < nout; k++)
                ck_assert(tc_wait(outs[k].slot));
            tc_restart(&e);
            continue;
        }
        const char *id = str(ev, "id");
        json_int_t times = json_integer_value(json_object_get(seen, id)) + 1;
        json_object_set_new(seen, id, json_integer(times));
        if (times == 1)
            snprintf(outs[nout].name, sizeof(outs[nout].name), "%s", id);
        else
            snprintf(outs[nout].name, sizeof(outs[nout].name), "%s#%d", id, (int)times);
        char *body = json_dumps(ev, JSON_COMPACT);
        outs[nout++].slot = tc_request(&e, CONV_APPEND, 0, body);
        free(body);
    }
    /* after the last step every hold and deferral expires */
    ck_assert_int_eq(tc_call(&e, CONV_EXPIRE, 0, NULL, NULL), 200);
    ck_assert_int_eq(tc_call(&e, CONV_SYNC, 0, NULL, NULL), 200);
    json_t *rejected = json_object(), *deferred = json_array(), *logged = json_array();
    for (size_t k = 0; k < nout; k++) {
        ck_assert_msg(tc_wait(outs[k].slot), "%s: no answer for %s", path, outs[k].name);
        json_t *b = outs[k].slot->body ? json_loads(outs[k].slot->body, 0, NULL) : NULL;
        if (outs[k].slot->code == 409)
            json_object_set_new(rejected, outs[k].name, json_string(str(b, "rule")));
        if (outs[k].slot->code == 202)
            json_array_append_new(deferred, json_string(outs[k].name));
        json_decref(b);
    }
    json_t *log = tc_log(&e);
    json_t *ev;
    json_array_foreach(log, i, ev)
    {
        char buf[256];
        const char *gone = expired_id(ev, buf, sizeof(buf));
        if (gone != NULL)
            json_object_set_new(rejected, gone, json_string("interleaved_message"));
        if (str(ev, "id") != NULL && json_object_get(seen, str(ev, "id")) != NULL)
            json_array_append_new(logged, json_string(str(ev, "id")));
    }
    json_t *expect = json_object_get(v, "expect");
    json_t *want_deferred = json_object_get(expect, "deferred");
    if (want_deferred == NULL)
        want_deferred = json_array();
    else
        json_incref(want_deferred);
    char *diff = NULL;
    const char *what[] = {"log", "rejected", "deferred"};
    json_t *got[] = {logged, rejected, deferred};
    json_t *want[] = {json_object_get(expect, "log"), json_object_get(expect, "rejected"),
                      want_deferred};
    for (int k = 0; k < 3 && diff == NULL; k++) {
        if (!json_equal(got[k], want[k])) {
            char *g = json_dumps(got[k], JSON_COMPACT), *w = json_dumps(want[k], JSON_COMPACT);
            diff = malloc(strlen(path) + strlen(g) + strlen(w) + 64);
            sprintf(diff, "%s: %s is %s, expected %s", strrchr(path, '/') + 1, what[k], g, w);
            free(g);
            free(w);
        }
    }
    for (size_t k = 0; k < nout; k++)
        tc_slot_free(outs[k].slot);
    free(outs);
    json_decref(want_deferred);
    json_decref(seen);
    json_decref(rejected);
    json_decref(deferred);
    json_decref(logged);
    json_decref(log);
    json_decref(v);
    tc_finish(&e);
    return diff;
}

START_TEST(test_compliance_vectors)
{
    char *dir = vector_dir("compliance");
    size_t n;
    char **files = vector_files(dir, &n);
    int failed = 0;
    for (size_t i = 0; i < n; i++) {
        char *diff = run_compliance(files[i]);
        if (diff != NULL) {
            fprintf(stderr, "FAIL %s\n", diff);
            failed++;
            free(diff);
        }
        free(files[i]);
    }
    free(files);
    free(dir);
    ck_assert_msg(failed == 0, "%d compliance vector(s) failed (see above)", failed);
}
END_TEST

/* ---------------------------------------------------------------- stuck --- */

/* What the detector left in the log among events [from, ...): a nudge
 * message, and the rule of a stuck finding ("" if none). */
static void findings(json_t *log, size_t from, json_t *ids, bool *nudge, char *rule, size_t cap)
{
    *nudge = false;
    rule[0] = '\0';
    size_t i;
    json_t *ev;
    json_array_foreach(log, i, ev)
    {
        if (i < from || json_object_get(ids, str(ev, "id")) != NULL)
            continue;
        const char *kind = str(ev, "kind");
        if (strcmp(kind, "MessageEvent") == 0 && strcmp(str(ev, "source"), "environment") == 0)
            *nudge = true;
        if (strcmp(kind, "ConversationErrorEvent") == 0 &&
            strcmp(str(ev, "code"), "StuckPatternDetected") == 0) {
            const char *d = str(ev, "detail"); /* "stuck: <rule>: ..." */
            const char *p = strstr(d, ": ");
            size_t n = p != NULL ? strcspn(p + 2, ":") : 0;
            snprintf(rule, cap, "%.*s", (int)n, p != NULL ? p + 2 : "");
        }
    }
}

static char *run_stuck(const char *path)
{
    json_error_t je;
    json_t *v = json_load_file(path, 0, &je);
    ck_assert_msg(v != NULL, "%s: %s", path, je.text);
    tc_env e = {0};
    json_t *th = json_object_get(v, "thresholds");
    char *meta = NULL;
    if (json_is_object(th)) {
        json_t *m = json_pack("{s:O}", "stuck_detection_thresholds", th);
        meta = json_dumps(m, JSON_COMPACT);
        json_decref(m);
        e.meta = meta;
    }
    tc_start(&e, NULL, NULL, ST_FULL);
    json_t *events = json_object_get(v, "events"), *ids = json_object();
    json_t *checks = json_object_get(v, "checks");
    size_t next_check = 0, appended = 0, since = 0, i;
    json_t *ev;
    char *diff = NULL;
    json_array_foreach(events, i, ev)
    {
        json_object_set_new(ids, str(ev, "id"), json_true());
        char *body = json_dumps(ev, JSON_COMPACT), *out = NULL;
        int code = tc_call(&e, CONV_APPEND, 0, body, &out);
        ck_assert_msg(code == 201, "%s: event %s: %d %s", path, str(ev, "id"), code, out);
        free(out);
        free(body);
        appended++;
        json_t *c = json_array_get(checks, next_check);
        if (c == NULL || (size_t)json_integer_value(json_object_get(c, "after")) != appended)
            continue;
        next_check++;
        ck_assert_int_eq(tc_call(&e, CONV_SYNC, 0, NULL, NULL), 200);
        json_t *log = tc_log(&e);
        bool nudge;
        char rule[64];
        findings(log, since, ids, &nudge, rule, sizeof(rule));
        since = json_array_size(log);
        json_decref(log);
        bool want_stuck = json_is_true(json_object_get(c, "stuck"));
        bool want_nudge = json_is_true(json_object_get(c, "nudge"));
        const char *want_rule = str(c, "rule") ? str(c, "rule") : "";
        if ((rule[0] != '\0') != want_stuck || nudge != want_nudge ||
            (want_stuck && strcmp(rule, want_rule) != 0)) {
            diff = malloc(512);
            snprintf(diff, 512,
                     "%s: after %zu events: stuck=%s rule=%s nudge=%d, expected %s %s %d",
                     strrchr(path, '/') + 1, appended, rule[0] ? "yes" : "no", rule, nudge,
                     want_stuck ? "stuck" : "not stuck", want_rule, want_nudge);
            break;
        }
    }
    if (diff == NULL && next_check != json_array_size(checks)) {
        diff = malloc(256);
        snprintf(diff, 256, "%s: %zu of %zu checks reached", strrchr(path, '/') + 1, next_check,
                 json_array_size(checks));
    }
    json_decref(ids);
    json_decref(v);
    tc_finish(&e);
    free(meta);
    return diff;
}

START_TEST(test_stuck_vectors)
{
    char *dir = vector_dir("stuck");
    size_t n;
    char **files = vector_files(dir, &n);
    int failed = 0;
    for (size_t i = 0; i < n; i++) {
        char *diff = run_stuck(files[i]);
        if (diff != NULL) {
            fprintf(stderr, "FAIL %s\n", diff);
            failed++;
            free(diff);
        }
        free(files[i]);
    }
    free(files);
    free(dir);
    ck_assert_msg(failed == 0, "%d stuck vector(s) failed (see above)", failed);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("vectors");
    TCase *tc = tcase_create("vectors");
    tcase_add_test(tc, test_compliance_vectors);
    tcase_add_test(tc, test_stuck_vectors);
    suite_add_tcase(s, tc);
    return ts_run_suite(s);
}
