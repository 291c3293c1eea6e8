/*
 * test_reducer.c - the conversation-state reducer (actors/reducer.h)
 * against every vector of ../shared/vectors/reducer whose source it
 * handles, run and compared as vectors/reducer/README.md says; then the
 * incremental contract (what reducer_apply reports) and its bounds.
 * Vectors of sources not handled yet are listed, not failed.
 */
#include "actors/reducer.h"
#include "actors/reducer_claude.h"
#include "actors/reducer_opencode.h"

#include "support_sync.h"
#include "support_json.h"

#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ helpers --- */

static void fixed_now(void *ctx, char out[32])
{
    (void)ctx;
    snprintf(out, 32, "2000-01-01T00:00:00.000Z");
}

static char *vector_dir(void)
{
    const char *base = getenv("PARLEY_SHARED_DIR");
    if (base == NULL)
        base = PARLEY_SHARED_DIR;
    char *path = malloc(strlen(base) + 32);
    sprintf(path, "%s/vectors/reducer", base);
    return path;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The vector files, sorted; NULL-terminated. */
static char **vector_files(size_t *n)
{
    char *dir = vector_dir();
    DIR *d = opendir(dir);
    ck_assert_msg(d != NULL, "the test vectors are missing: %s (set PARLEY_SHARED_DIR)", dir);
    char **v = calloc(1, sizeof(*v));
    size_t k = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        size_t len = strlen(e->d_name);
        if (len < 6 || strcmp(e->d_name + len - 5, ".json") != 0)
            continue;
        v = realloc(v, (k + 2) * sizeof(*v));
        v[k] = malloc(strlen(dir) + len + 2);
        sprintf(v[k++], "%s/%s", dir, e->d_name);
        v[k] = NULL;
    }
    closedir(d);
    free(dir);
    qsort(v, k, sizeof(*v), cmp_str);
    *n = k;
    return v;
}

static void free_files(char **v)
{
    for (char **p = v; *p; p++)
        free(*p);
    free(v);
}

/* ------------------------------------------------------ comparing --- */

/* Deletes what segs[i..] names under node; "*" is every array index
 * (README, "Comparing": JSON Pointers into expected, applied to both). */
static void strip_at(json_t *node, char **segs, size_t i, size_t n)
{
    if (i == n)
        return;
    if (json_is_array(node)) {
        if (strcmp(segs[i], "*") == 0) {
            for (size_t k = json_array_size(node); k-- > 0;)
                if (i + 1 == n)
                    json_array_remove(node, k);
                else
                    strip_at(json_array_get(node, k), segs, i + 1, n);
            return;
        }
        char *end;
        unsigned long k = strtoul(segs[i], &end, 10);
        if (*end != '\0' || end == segs[i])
            return;
        if (i + 1 == n)
            json_array_remove(node, k);
        else
            strip_at(json_array_get(node, k), segs, i + 1, n);
    } else if (json_is_object(node)) {
        if (i + 1 == n)
            json_object_del(node, segs[i]);
        else
            strip_at(json_object_get(node, segs[i]), segs, i + 1, n);
    }
}

/* RFC 6901: "~1" is '/', "~0" is '~'. In place. */
static void unescape(char *seg)
{
    char *w = seg;
    for (char *s = seg; *s; s++, w++)
        *w = (s[0] == '~' && (s[1] == '0' || s[1] == '1')) ? (*++s == '1' ? '/' : '~') : *s;
    *w = '\0';
}

static void strip(json_t *root, const char *pointer)
{
    char *copy = strdup(pointer), *segs[32];
    size_t n = 0;
    for (char *s = strchr(copy, '/'); s != NULL && n < 32; s = strchr(s, '/')) {
        *s++ = '\0';
        segs[n++] = s;
    }
    for (size_t i = 0; i < n; i++)
        unescape(segs[i]);
    strip_at(root, segs, 0, n);
    free(copy);
}

/* Equal as the README compares: numbers by value (1 == 1.0). */
static bool same(json_t *a, json_t *b)
{
    if (json_is_number(a) && json_is_number(b))
        return json_number_value(a) == json_number_value(b);
    if (json_typeof(a) != json_typeof(b))
        return false;
    if (json_is_array(a)) {
        if (json_array_size(a) != json_array_size(b))
            return false;
        for (size_t i = 0; i < json_array_size(a); i++)
            if (!same(json_array_get(a, i), json_array_get(b, i)))
                return false;
        return true;
    }
    if (json_is_object(a)) {
        if (json_object_size(a) != json_object_size(b))
            return false;
        const char *k;
        json_t *v;
        json_object_foreach(a, k, v)
        {
            json_t *w = json_object_get(b, k);
            if (w == NULL || !same(v, w))
                return false;
        }
        return true;
    }
    return json_equal(a, b);
}

/* Where a and b first differ, as a pointer, into out. */
static void where(json_t *a, json_t *b, char *out, size_t cap)
{
    size_t len = strlen(out);
    if (json_is_array(a) && json_is_array(b)) {
        for (size_t i = 0; i < json_array_size(a) && i < json_array_size(b); i++)
            if (!same(json_array_get(a, i), json_array_get(b, i))) {
                snprintf(out + len, cap - len, "/%zu", i);
                where(json_array_get(a, i), json_array_get(b, i), out, cap);
                return;
            }
        snprintf(out + len, cap - len, " (lengths %zu, %zu)", json_array_size(a),
                 json_array_size(b));
    } else if (json_is_object(a) && json_is_object(b)) {
        const char *k;
        json_t *v;
        json_object_foreach(a, k, v)
        {
            json_t *w = json_object_get(b, k);
            if (w == NULL || !same(v, w)) {
                snprintf(out + len, cap - len, "/%s", k);
                if (w != NULL)
                    where(v, w, out, cap);
                return;
            }
        }
        json_object_foreach(b, k, v) if (json_object_get(a, k) == NULL)
        {
            snprintf(out + len, cap - len, "/%s (not expected)", k);
            return;
        }
    }
}

/* ------------------------------------------------------------ running --- */

static void apply_ok(reducer *r, json_t *ev)
{
    int rc = reducer_apply(r, ev, NULL);
    ck_assert_msg(rc == 0, "reducer_apply: %d for %s", rc,
                  json_string_value(json_object_get(ev, "type")));
}

static void run_events(reducer *r, json_t *input)
{
    size_t i;
    json_t *ev;
    json_array_foreach(input, i, ev) apply_ok(r, ev);
}

static void run_claude(reducer *r, json_t *input)
{
    ck_assert_int_eq(claude_reduce(r, input, NULL), 0);
}

static void run_opencode(reducer *r, json_t *input)
{
    size_t skipped = 0;
    ck_assert_int_eq(opencode_reduce(r, input, &skipped), 0);
    ck_assert_uint_eq(skipped, 0);
}

static void run_opencode_live(reducer *r, json_t *input)
{
    size_t skipped = 0;
    ck_assert_int_eq(opencode_live_reduce(r, input, &skipped), 0);
    ck_assert_uint_eq(skipped, 0);
}

typedef struct source {
    const char *name;
    void (*run)(reducer *r, json_t *input);
} source;

static const source sources[] = {
    {"events", run_events},
    {"claude", run_claude},
    {"opencode", run_opencode},
    {"opencode-live", run_opencode_live},
};

static const source *source_of(const char *name)
{
    for (size_t i = 0; i < sizeof(sources) / sizeof(sources[0]); i++)
        if (strcmp(sources[i].name, name) == 0)
            return &sources[i];
    return NULL;
}

static void idle(reducer *r, const char *conv)
{
    json_t *ev = json_pack("{s:s, s:{}, s:{s:s, s:s}}", "type", "session:idle", "payload",
                           "context", "sessionId", "test", "conversationId", conv);
    apply_ok(r, ev);
    json_decref(ev);
}

/* The state the vector's input reduces to, as the README runs it. */
static json_t *run_vector(const source *src, json_t *v)
{
    reducer *r = reducer_new(fixed_now, NULL);
    ck_assert_ptr_nonnull(r);
    src->run(r, json_object_get(v, "input"));
    if (json_is_true(json_object_get(v, "finalize"))) {
        idle(r, "main");
        for (size_t i = 0; i < reducer_subagent_count(r); i++) {
            const json_t *s = reducer_subagent_at(r, i);
            idle(r, json_string_value(json_object_get(s, "toolUseId")));
        }
    }
    json_t *st = reducer_state(r);
    ck_assert_ptr_nonnull(st);
    reducer_free(r);
    return st;
}

/* One vector file: NULL if it passes, else why (caller frees). */
static char *check_vector(const char *path, bool *handled)
{
    json_error_t e;
    json_t *v = json_load_file(path, 0, &e);
    ck_assert_msg(v != NULL, "%s: %s (line %d)", path, e.text, e.line);
    const char *name = strrchr(path, '/') + 1;
    const source *src = source_of(json_string_value(json_object_get(v, "source")));
    *handled = src != NULL;
    char *why = NULL;
    if (src != NULL) {
        json_t *got = run_vector(src, v), *want = json_deep_copy(json_object_get(v, "expected"));
        size_t i;
        json_t *p;
        json_array_foreach(json_object_get(v, "ignore_fields"), i, p)
        {
            strip(got, json_string_value(p));
            strip(want, json_string_value(p));
        }
        if (!same(want, got)) {
            char at[512] = "";
            where(want, got, at, sizeof(at));
            char *g = json_dumps(got, JSON_COMPACT | JSON_SORT_KEYS);
            why = malloc(strlen(name) + strlen(at) + 2100);
            sprintf(why, "%s: differs at %s; got %.2000s", name, at, g);
            free(g);
        }
        json_decref(got);
        json_decref(want);
    }
    json_decref(v);
    return why;
}

START_TEST(test_vectors)
{
    size_t n, handled = 0;
    char **files = vector_files(&n);
    ck_assert_msg(n > 0, "no reducer vector found");
    int failed = 0;
    for (size_t i = 0; i < n; i++) {
        bool h;
        char *why = check_vector(files[i], &h);
        handled += h;
        if (why != NULL) {
            fprintf(stderr, "FAIL %s\n", why);
            failed++;
            free(why);
        }
    }
    fprintf(stderr, "reducer vectors: %zu of %zu handled, %d failed\n", handled, n, failed);
    free_files(files);
    ck_assert_msg(failed == 0, "%d reducer vector(s) failed (see above)", failed);
}
END_TEST

/* Not a failure: which vectors wait for a converter not written yet. */
START_TEST(test_list_unhandled)
{
    size_t n;
    char **files = vector_files(&n);
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_load_file(files[i], 0, NULL);
        const char *src = json_string_value(json_object_get(v, "source"));
        if (src != NULL && source_of(src) == NULL)
            fprintf(stderr, "not handled yet (source %s): %s\n", src, strrchr(files[i], '/') + 1);
        json_decref(v);
    }
    free_files(files);
}
END_TEST

/* ------------------------------------------------------ the contract --- */

static int apply(reducer *r, const char *ev, json_t *changed)
{
    json_t *e = tj_json(ev);
    int rc = reducer_apply(r, e, changed);
    json_decref(e);
    return rc;
}

static void expect_json(json_t *got, const char *want)
{
    json_t *w = tj_json(want);
    char *g = json_dumps(got, JSON_COMPACT | JSON_SORT_KEYS);
    ck_assert_msg(same(w, got), "got %s, want %s", g, want);
    free(g);
    json_decref(w);
}

/* Each event reports what it changed, so a view streams without diffing:
 * a delta is reported as the text appended, not the whole block again. */
START_TEST(test_changes_reported)
{
    reducer *r = reducer_new(fixed_now, NULL);
    json_t *ch = json_array();
    ck_assert_int_eq(apply(r,
                           "{\"type\":\"block:upsert\",\"payload\":{\"block\":{\"id\":\"t\","
                           "\"type\":\"assistant_text\"}},\"context\":{\"sessionId\":\"s\"}}",
                           ch),
                     0);
    expect_json(ch, "[{\"conversation\":\"main\",\"block\":{\"id\":\"t\",\"type\":"
                    "\"assistant_text\",\"content\":\"\",\"status\":\"pending\","
                    "\"timestamp\":\"2000-01-01T00:00:00.000Z\"}}]");
    json_array_clear(ch);
    ck_assert_int_eq(apply(r,
                           "{\"type\":\"block:delta\",\"payload\":{\"blockId\":\"t\",\"delta\":"
                           "\"Hel\"},\"context\":{\"sessionId\":\"s\"}}",
                           ch),
                     0);
    ck_assert_int_eq(apply(r,
                           "{\"type\":\"block:delta\",\"payload\":{\"blockId\":\"t\",\"delta\":"
                           "\"lo\"},\"context\":{\"sessionId\":\"s\"}}",
                           ch),
                     0);
    expect_json(ch, "[{\"conversation\":\"main\",\"id\":\"t\",\"delta\":\"Hel\"},"
                    "{\"conversation\":\"main\",\"id\":\"t\",\"delta\":\"lo\"}]");
    const json_t *b = reducer_block(r, "main", "t");
    ck_assert_str_eq(json_string_value(json_object_get(b, "content")), "Hello");
    /* Reading the block folds the deltas in; a later delta starts a new
     * buffer (a stale capacity once had it write through NULL). */
    ck_assert_int_eq(apply(r,
                           "{\"type\":\"block:delta\",\"payload\":{\"blockId\":\"t\",\"delta\":"
                           "\"!\"},\"context\":{\"sessionId\":\"s\"}}",
                           NULL),
                     0);
    b = reducer_block(r, "main", "t");
    ck_assert_str_eq(json_string_value(json_object_get(b, "content")), "Hello!");
    ck_assert_int_eq(apply(r,
                           "{\"type\":\"block:upsert\",\"payload\":{\"block\":{\"id\":\"t\","
                           "\"content\":\"Hello\"}},\"context\":{}}",
                           NULL),
                     0);

    /* An idle completes what is pending and removes empty text. */
    ck_assert_int_eq(apply(r,
                           "{\"type\":\"block:upsert\",\"payload\":{\"block\":{\"id\":\"g\","
                           "\"type\":\"thinking\",\"content\":\" \\n\"}},\"context\":{}}",
                           NULL),
                     0);
    json_array_clear(ch);
    ck_assert_int_eq(apply(r, "{\"type\":\"session:idle\",\"payload\":{},\"context\":{}}", ch), 0);
    expect_json(ch, "[{\"conversation\":\"main\",\"block\":{\"id\":\"t\",\"type\":"
                    "\"assistant_text\",\"content\":\"Hello\",\"status\":\"complete\","
                    "\"timestamp\":\"2000-01-01T00:00:00.000Z\"}},"
                    "{\"conversation\":\"main\",\"removed\":\"g\"}]");
    ck_assert_uint_eq(reducer_block_count(r), 1);

    /* A second idle has nothing left to do. */
    json_array_clear(ch);
    ck_assert_int_eq(apply(r, "{\"type\":\"session:idle\",\"payload\":{},\"context\":{}}", ch), 0);
    ck_assert_uint_eq(json_array_size(ch), 0);
    json_decref(ch);
    reducer_free(r);
}
END_TEST

START_TEST(test_bad_and_other_events)
{
    reducer *r = reducer_new(fixed_now, NULL);
    json_t *ch = json_array();
    ck_assert_int_eq(
        apply(r, "{\"type\":\"block:upsert\",\"payload\":{\"block\":{\"type\":\"x\"}}}", ch),
        -EINVAL);
    ck_assert_int_eq(apply(r, "{\"type\":\"subagent:spawned\",\"payload\":{}}", ch), -EINVAL);
    ck_assert_int_eq(apply(r, "{\"type\":\"block:delta\",\"payload\":[]}", ch), -EINVAL);
    ck_assert_int_eq(apply(r, "{\"payload\":{}}", ch), -EINVAL);
    ck_assert_int_eq(apply(r, "{\"type\":\"metadata:update\",\"payload\":{}}", ch), 0);
    /* Deltas to unknown blocks, conversations or non-text change nothing. */
    ck_assert_int_eq(apply(r,
                           "{\"type\":\"block:delta\",\"payload\":{\"blockId\":\"nope\","
                           "\"delta\":\"x\"},\"context\":{\"conversationId\":\"toolu_x\"}}",
                           ch),
                     0);
    ck_assert_uint_eq(json_array_size(ch), 0);
    json_t *st = reducer_state(r);
    expect_json(st, "{\"blocks\":[],\"subagents\":[]}");
    json_decref(st);
    json_decref(ch);
    reducer_free(r);
}
END_TEST

/* spec §B.8, 5, 6 and 8: spawn is idempotent and fills, completion sets
 * both halves, a spawn inside a subagent nests its block there. */
START_TEST(test_subagent_events)
{
    reducer *r = reducer_new(fixed_now, NULL);
    json_t *ch = json_array();
    const char *spawn = "{\"type\":\"subagent:spawned\",\"payload\":{\"toolUseId\":\"T\","
                        "\"prompt\":\"\"},\"context\":{\"timestamp\":\"t0\"}}";
    ck_assert_int_eq(apply(r, spawn, NULL), 0);
    ck_assert_int_eq(apply(r, spawn, ch), 0);
    ck_assert_uint_eq(json_array_size(ch), 0);
    ck_assert_int_eq(apply(r,
                           "{\"type\":\"subagent:spawned\",\"payload\":{\"toolUseId\":\"T\","
                           "\"agentId\":\"A\",\"prompt\":\"go\",\"subagentType\":\"gp\"}}",
                           ch),
                     0);
    ck_assert_uint_eq(json_array_size(ch), 2);
    ck_assert_ptr_eq(reducer_subagent(r, "A"), reducer_subagent(r, "T"));
    ck_assert_int_eq(apply(r,
                           "{\"type\":\"subagent:spawned\",\"payload\":{\"toolUseId\":\"T2\","
                           "\"prompt\":\"deeper\"},\"context\":{\"conversationId\":\"A\","
                           "\"timestamp\":\"t1\"}}",
                           NULL),
                     0);
    ck_assert_int_eq(apply(r,
                           "{\"type\":\"subagent:completed\",\"payload\":{\"toolUseId\":\"T\","
                           "\"agentId\":\"A\",\"status\":\"failed\",\"output\":\"no\"}}",
                           NULL),
                     0);
    json_t *st = reducer_state(r);
    expect_json(st, "{\"blocks\":[{\"id\":\"subagent-block-T\",\"type\":\"subagent\","
                    "\"timestamp\":\"t0\",\"status\":\"error\",\"toolUseId\":\"T\",\"input\":"
                    "\"go\",\"name\":\"gp\",\"subagentId\":\"agent-A\",\"output\":\"no\"}],"
                    "\"subagents\":[{\"toolUseId\":\"T\",\"agentId\":\"A\",\"status\":"
                    "\"error\",\"prompt\":\"go\",\"output\":\"no\",\"blocks\":[{\"id\":"
                    "\"subagent-block-T2\",\"type\":\"subagent\",\"timestamp\":\"t1\","
                    "\"status\":\"pending\",\"toolUseId\":\"T2\",\"input\":\"deeper\"}]},"
                    "{\"toolUseId\":\"T2\",\"status\":\"running\",\"prompt\":\"deeper\","
                    "\"blocks\":[]}]}");
    json_decref(st);
    json_decref(ch);
    reducer_free(r);
}
END_TEST

/* F2: a line that cannot be converted is skipped alone, leaving no trace;
 * the lines around it still count. */
START_TEST(test_claude_bad_line)
{
    claude_conv *c = claude_conv_new();
    json_t *out = json_array(), *bad = tj_json("{\"type\":\"user\",\"uuid\":\"u1\"}");
    char why[128] = "";
    ck_assert_int_eq(claude_conv_line(c, bad, NULL, out, why, sizeof(why)), -EINVAL);
    ck_assert_uint_eq(json_array_size(out), 0);
    ck_assert_str_ne(why, "");
    claude_conv_free(c);
    json_decref(bad);
    json_decref(out);

    reducer *r = reducer_new(fixed_now, NULL);
    json_t *session =
        tj_json("{\"main\":[{\"type\":\"user\",\"uuid\":\"a\",\"message\":{\"content\":"
                "\"hi\"}},{\"type\":\"assistant\",\"uuid\":\"b\"},{\"type\":\"system\","
                "\"subtype\":\"error\"},{\"type\":\"assistant\",\"uuid\":\"c\","
                "\"message\":{\"id\":\"m\",\"content\":[{\"type\":\"text\",\"text\":"
                "\"yo\"}]}}]}");
    size_t skipped = 0;
    ck_assert_int_eq(claude_reduce(r, session, &skipped), 0);
    ck_assert_uint_eq(skipped, 1);
    ck_assert_uint_eq(reducer_block_count(r), 2);
    ck_assert_ptr_nonnull(reducer_block(r, "main", "m-0"));
    json_decref(session);
    reducer_free(r);
}
END_TEST

/* Malformed OpenCode input is refused with a reason and leaves no trace;
 * in a whole session only the bad message is skipped. */
START_TEST(test_opencode_bad_input)
{
    static const char *exports[] = {
        "[]",
        "{\"messages\":{}}",
        "{\"messages\":[7]}",
        "{\"messages\":[{\"info\":{\"role\":\"user\"},\"parts\":[]}]}",
        "{\"messages\":[{\"info\":{\"id\":\"m\",\"role\":\"user\"},\"parts\":{}}]}",
        "{\"messages\":[{\"info\":{\"id\":\"m\",\"role\":\"user\"},\"parts\":[\"x\"]}]}",
        "{\"messages\":[{\"info\":{\"id\":\"m\",\"role\":\"assistant\"},\"parts\":[{\"type\":"
        "\"text\",\"text\":\"hi\"}]}]}",
        "{\"messages\":[{\"info\":{\"id\":\"m\",\"role\":\"assistant\"},\"parts\":[{\"id\":\"p\","
        "\"type\":\"tool\",\"state\":{}}]}]}",
    };
    json_t *out = tj_json("[1]");
    for (size_t i = 0; i < sizeof(exports) / sizeof(exports[0]); i++) {
        char why[128] = "";
        json_t *x = tj_json(exports[i]);
        ck_assert_int_eq(opencode_export_events(x, "main", NULL, out, why, sizeof(why)), -EINVAL);
        ck_assert_uint_eq(json_array_size(out), 1);
        ck_assert_msg(why[0] != '\0', "no reason for %s", exports[i]);
        json_decref(x);
    }
    static const char *events[] = {
        "[]",
        "{\"properties\":{}}",
        "{\"type\":\"message.updated\",\"properties\":{\"info\":{\"role\":\"user\"}}}",
        "{\"type\":\"message.part.updated\",\"properties\":{\"part\":[]}}",
        "{\"type\":\"message.part.updated\",\"properties\":{\"part\":{\"sessionID\":\"s\","
        "\"messageID\":\"m\",\"type\":\"text\"}}}",
        "{\"type\":\"message.part.updated\",\"properties\":{\"part\":{\"id\":\"p\","
        "\"type\":\"text\"},\"delta\":\"x\"}}",
        "{\"type\":\"session.idle\",\"properties\":{}}",
    };
    opencode_live *l = opencode_live_new("s");
    for (size_t i = 0; i < sizeof(events) / sizeof(events[0]); i++) {
        char why[128] = "";
        json_t *x = tj_json(events[i]);
        ck_assert_int_eq(opencode_live_event(l, x, out, why, sizeof(why)), -EINVAL);
        ck_assert_uint_eq(json_array_size(out), 1);
        ck_assert_msg(why[0] != '\0', "no reason for %s", events[i]);
        json_decref(x);
    }
    opencode_live_free(l);
    json_decref(out);

    reducer *r = reducer_new(fixed_now, NULL);
    json_t *session = tj_json("{\"main\":{\"messages\":[{\"info\":{\"id\":\"u\",\"role\":\"user\"},"
                              "\"parts\":[{\"id\":\"p1\",\"type\":\"text\",\"text\":\"hi\"}]},"
                              "{\"info\":{\"id\":\"a\",\"role\":\"assistant\"},\"parts\":[5]}]},"
                              "\"subagents\":[{\"transcript\":{}}]}");
    size_t skipped = 0;
    ck_assert_int_eq(opencode_reduce(r, session, &skipped), 0);
    ck_assert_uint_eq(skipped, 2);
    ck_assert_uint_eq(reducer_block_count(r), 1);
    json_decref(session);
    reducer_free(r);
}
END_TEST

/* A task's typed summary parts fill its subagent, complete and under the
 * agent id known from the spawn (F11), unless the child's export is
 * given; a user message with an image keeps its parts in order (F9). */
START_TEST(test_opencode_summary_and_images)
{
    const char *task =
        "{\"id\":\"pt\",\"type\":\"tool\",\"tool\":\"task\",\"callID\":\"c1\",\"state\":{"
        "\"status\":\"completed\",\"input\":{\"prompt\":\"go\"},\"output\":\"done\",\"metadata\":{"
        "\"sessionId\":\"ses_child\",\"summary\":[{\"id\":\"s0\",\"tool\":\"read\"},{\"id\":\"s1\","
        "\"type\":\"text\",\"text\":\"sub text\"}]}}}";
    char text[2048];
    snprintf(
        text, sizeof(text),
        "{\"main\":{\"messages\":[{\"info\":{\"id\":\"u\",\"role\":\"user\",\"time\":{"
        "\"created\":0}},\"parts\":[{\"id\":\"p1\",\"type\":\"text\",\"text\":\"see\"},{\"id\":"
        "\"p2\",\"type\":\"file\",\"mime\":\"image/png\",\"url\":\"data:image/png;base64,QUJD\"},"
        "{\"id\":\"p3\",\"type\":\"file\",\"mime\":\"image/gif\",\"url\":\"https://x/y.gif\"}]},"
        "{\"info\":{\"id\":\"a\",\"role\":\"assistant\",\"time\":{\"created\":1000}},\"parts\":"
        "[%s]}]}}",
        task);
    json_t *session = tj_json(text);
    reducer *r = reducer_new(fixed_now, NULL);
    ck_assert_int_eq(opencode_reduce(r, session, NULL), 0);
    expect_json((json_t *)reducer_block(r, "main", "u"),
                "{\"id\":\"u\",\"type\":\"user_message\",\"status\":\"complete\",\"timestamp\":"
                "\"1970-01-01T00:00:00.000Z\",\"content\":[{\"type\":\"text\",\"text\":\"see\"},"
                "{\"type\":\"image\",\"source\":{\"type\":\"base64\",\"data\":\"QUJD\","
                "\"mediaType\":\"image/png\"}},{\"type\":\"image\",\"source\":{\"type\":\"url\","
                "\"data\":\"https://x/y.gif\",\"mediaType\":\"image/gif\"}}]}");
    ck_assert_uint_eq(reducer_subagent_count(r), 1);
    const json_t *b = reducer_block(r, "ses_child", "s1");
    ck_assert_ptr_nonnull(b);
    ck_assert_str_eq(json_string_value(json_object_get(b, "status")), "complete");
    ck_assert_str_eq(json_string_value(json_object_get(b, "timestamp")),
                     "1970-01-01T00:00:01.000Z");
    reducer_free(r);

    /* With the child's export, the summary is not used. */
    json_object_set_new(session, "subagents",
                        tj_json("[{\"id\":\"ses_child\",\"transcript\":{\"messages\":[]}}]"));
    r = reducer_new(fixed_now, NULL);
    ck_assert_int_eq(opencode_reduce(r, session, NULL), 0);
    ck_assert_ptr_null(reducer_block(r, "ses_child", "s1"));
    ck_assert_str_eq(json_string_value(json_object_get(reducer_subagent(r, "ses_child"), "status")),
                     "success");
    reducer_free(r);
    json_decref(session);
}
END_TEST

/* Live: a task's child session is its subagent's conversation, and an idle
 * completes only its own session's blocks, then forgets its parts. */
START_TEST(test_opencode_live_child)
{
    json_t *input = tj_json(
        "{\"mainSessionId\":\"m\",\"events\":["
        "{\"type\":\"message.part.updated\",\"properties\":{\"part\":{\"id\":\"pt\",\"sessionID\":"
        "\"m\",\"messageID\":\"a\",\"type\":\"tool\",\"tool\":\"task\",\"callID\":\"c1\",\"state\":"
        "{"
        "\"status\":\"running\",\"input\":{\"description\":\"d\",\"subagent_type\":\"general\"},"
        "\"metadata\":{\"sessionId\":\"ch\"},\"time\":{\"start\":5}}}}},"
        "{\"type\":\"message.part.updated\",\"properties\":{\"part\":{\"id\":\"ct\",\"sessionID\":"
        "\"ch\",\"messageID\":\"b\",\"type\":\"text\",\"text\":\"\"},\"delta\":\"child\"}},"
        "{\"type\":\"message.part.updated\",\"properties\":{\"part\":{\"id\":\"mt\",\"sessionID\":"
        "\"m\",\"messageID\":\"a\",\"type\":\"text\",\"text\":\"\"},\"delta\":\"main\"}},"
        "{\"type\":\"session.idle\",\"properties\":{\"sessionID\":\"ch\"}}]}");
    reducer *r = reducer_new(fixed_now, NULL);
    ck_assert_int_eq(opencode_live_reduce(r, input, NULL), 0);
    json_t *st = reducer_state(r);
    expect_json(json_object_get(st, "subagents"),
                "[{\"toolUseId\":\"c1\",\"agentId\":\"ch\",\"status\":\"running\",\"prompt\":\"d\","
                "\"blocks\":[{\"id\":\"ct\",\"type\":\"assistant_text\",\"content\":\"child\","
                "\"status\":\"complete\",\"timestamp\":\"2000-01-01T00:00:00.000Z\",\"metadata\":"
                "{\"opencodeMessageId\":\"b\"}}]}]");
    const json_t *mt = reducer_block(r, "main", "mt");
    ck_assert_str_eq(json_string_value(json_object_get(mt, "status")), "pending");
    ck_assert_str_eq(json_string_value(json_object_get(mt, "content")), "main");
    json_decref(st);
    reducer_free(r);
    json_decref(input);
}
END_TEST

/* O(1) amortized: 100,000 blocks of 20 deltas each, idles every 100
 * blocks, in a few seconds at most (a linear search per event, or copying
 * the text per delta, would take minutes). */
START_TEST(test_many_blocks)
{
    reducer *r = reducer_new(fixed_now, NULL);
    json_t *up = tj_json("{\"type\":\"block:upsert\",\"payload\":{\"block\":{\"type\":"
                         "\"assistant_text\"}},\"context\":{}}");
    json_t *delta = tj_json("{\"type\":\"block:delta\",\"payload\":{},\"context\":{}}");
    json_t *idle_ev = tj_json("{\"type\":\"session:idle\",\"payload\":{}}");
    json_t *block = json_object_get(json_object_get(up, "payload"), "block");
    json_t *dp = json_object_get(delta, "payload");
    char id[32];
    int bad = 0; /* not ck_assert: Check writes a checkpoint per call */
    for (int i = 0; i < 100000; i++) {
        snprintf(id, sizeof(id), "b%d", i);
        json_object_set_new(block, "id", json_string(id));
        bad += reducer_apply(r, up, NULL) != 0;
        snprintf(id, sizeof(id), "b%d", i / 2 * 2);
        json_object_set_new(dp, "blockId", json_string(id));
        for (int k = 0; k < 20; k++) {
            json_object_set_new(dp, "delta", json_string(k ? "word " : ""));
            bad += reducer_apply(r, delta, NULL) != 0;
        }
        if (i % 100 == 99)
            bad += reducer_apply(r, idle_ev, NULL) != 0;
    }
    ck_assert_int_eq(bad, 0);
    /* Odd blocks never got text: every idle removed them. */
    ck_assert_uint_eq(reducer_block_count(r), 50000);
    const json_t *b = reducer_block(r, "main", "b99998");
    ck_assert_uint_eq(json_string_length(json_object_get(b, "content")), 38 * 5);
    ck_assert_ptr_null(reducer_block(r, "main", "b99999"));
    ck_assert_int_eq(reducer_position(r, "main", "b99998"), 49999);
    ck_assert_int_eq(reducer_position(r, "main", "b99999"), -1);
    json_decref(up);
    json_decref(delta);
    json_decref(idle_ev);
    reducer_free(r);
}
END_TEST

/* A block's position is where reducer_range shows it, while idles leave
 * holes (a third of the blocks removed: never squeezed) and after. */
START_TEST(test_positions)
{
    reducer *r = reducer_new(fixed_now, NULL);
    json_t *up = tj_json("{\"type\":\"block:upsert\",\"payload\":{\"block\":{\"type\":"
                         "\"assistant_text\"}},\"context\":{}}");
    json_t *idle_ev = tj_json("{\"type\":\"session:idle\",\"payload\":{}}");
    json_t *block = json_object_get(json_object_get(up, "payload"), "block");
    char id[32];
    int bad = 0;
    for (int i = 0; i < 600; i++) {
        snprintf(id, sizeof(id), "b%d", i);
        json_object_set_new(block, "id", json_string(id));
        json_object_set_new(block, "content", json_string(i % 3 == 1 ? "" : "text"));
        bad += reducer_apply(r, up, NULL) != 0;
        if (i % 50 != 49)
            continue;
        bad += reducer_apply(r, idle_ev, NULL) != 0;
        json_t *all = json_array();
        size_t total, k;
        json_t *b;
        bad += reducer_range(r, "main", 0, 1000, all, &total) != 0;
        bad += total != json_array_size(all);
        json_array_foreach(all, k, b)
        {
            const char *bid = json_string_value(json_object_get(b, "id"));
            bad += reducer_position(r, "main", bid) != (long long)k;
        }
        json_decref(all);
    }
    ck_assert_int_eq(bad, 0);
    ck_assert_int_eq(reducer_position(r, "main", "b1"), -1);
    ck_assert_int_eq(reducer_position(r, "main", "b599"), 399);
    ck_assert_int_eq(reducer_position(r, "nobody", "b0"), -1);
    json_decref(up);
    json_decref(idle_ev);
    reducer_free(r);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("reducer");
    TCase *tc = tcase_create("vectors");
    tcase_add_test(tc, test_vectors);
    tcase_add_test(tc, test_list_unhandled);
    suite_add_tcase(s, tc);

    tc = tcase_create("contract");
    tcase_add_test(tc, test_changes_reported);
    tcase_add_test(tc, test_bad_and_other_events);
    tcase_add_test(tc, test_subagent_events);
    tcase_add_test(tc, test_claude_bad_line);
    tcase_add_test(tc, test_opencode_bad_input);
    tcase_add_test(tc, test_opencode_summary_and_images);
    tcase_add_test(tc, test_opencode_live_child);
    tcase_add_test(tc, test_many_blocks);
    tcase_add_test(tc, test_positions);
    suite_add_tcase(s, tc);
    return ts_run_suite(s);
}
