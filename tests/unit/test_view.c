/*
 * test_view.c - the view state (actors/view.h): a log folded into blocks,
 * and "what changed after event N" as the visualizer answers it. The rule
 * checked throughout: a client holding the state at N that applies
 * view_since(N) (replace known ids, append the rest, drop the removed)
 * holds exactly the state the view has; and the frames say the same.
 */
#include "actors/view.h"
#include "support_json.h"

#include <check.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void fixed_now(void *ctx, char out[32])
{
    (void)ctx;
    snprintf(out, 32, "2000-01-01T00:00:00.000Z");
}

#define TS "'timestamp':'2026-08-22T10:15:00.000001'"

static const char *const LOG[] = {
    "{'id':'m0'," TS ",'source':'user','kind':'MessageEvent','llm_message':{'role':'user',"
    "'content':[{'type':'text','text':'list the files'}]}}",
    "{'id':'a1'," TS ",'source':'agent','kind':'ActionEvent','thought':[{'type':'text',"
    "'text':'I will run ls'}],'tool_name':'terminal','tool_call_id':'c1','llm_response_id':'r1',"
    "'action':{'kind':'TerminalAction','command':'ls'}}",
    "{'id':'o2'," TS ",'source':'environment','kind':'ObservationEvent','tool_name':'terminal',"
    "'tool_call_id':'c1','action_id':'a1','observation':{'kind':'TerminalObservation',"
    "'content':[{'type':'text','text':'a.c b.c'}]}}",
    "{'id':'t3'," TS ",'source':'agent','kind':'ActionEvent','tool_name':'task','tool_call_id':"
    "'k1','llm_response_id':'r2','action':{'kind':'TaskAction','prompt':'count lines',"
    "'subagent_type':'explore'}}",
    "{'id':'o4'," TS ",'source':'environment','kind':'ObservationEvent','tool_name':'task',"
    "'tool_call_id':'k1','action_id':'t3','observation':{'kind':'TaskObservation','content':"
    "[{'type':'text','text':'12 lines'}],'task_id':'sub-1'}}",
    "{'id':'m5'," TS ",'source':'agent','kind':'MessageEvent','llm_message':{'role':'assistant',"
    "'content':[{'type':'text','text':'Two files, 12 lines.'}]}}",
    "{'id':'s6'," TS ",'source':'environment','kind':'ConversationStateUpdateEvent','key':"
    "'execution_status','value':'finished'}",
};
enum { NLOG = sizeof(LOG) / sizeof(LOG[0]) };

static view *folded(size_t n)
{
    view *v = view_new(fixed_now, NULL);
    ck_assert_ptr_nonnull(v);
    for (size_t i = 0; i < n; i++) {
        json_t *e = tj_jsonq(LOG[i]);
        ck_assert_int_eq(view_apply(v, i, e), 0);
        json_decref(e);
    }
    ck_assert_uint_eq(view_next(v), n);
    return v;
}

/* Apply a since answer's blocks to a list: replace by id, else append. */
static void merge(json_t *into, json_t *changed)
{
    size_t i, j;
    json_t *b, *have;
    json_array_foreach(changed, i, b)
    {
        bool found = false;
        json_array_foreach(into, j, have)
        {
            if (json_equal(json_object_get(have, "id"), json_object_get(b, "id"))) {
                json_array_set(into, j, b);
                found = true;
                break;
            }
        }
        if (!found)
            json_array_append(into, b);
    }
}

static json_t *entry_of(json_t *subs, const char *tool)
{
    size_t i;
    json_t *e;
    json_array_foreach(subs, i, e)
    {
        if (strcmp(json_string_value(json_object_get(e, "toolUseId")), tool) == 0)
            return e;
    }
    return NULL;
}

/* A client's state at N, given view_since(N): the state after. */
static void apply_since(json_t *state, json_t *since)
{
    merge(json_object_get(state, "blocks"), json_object_get(since, "blocks"));
    size_t i;
    json_t *e;
    json_array_foreach(json_object_get(since, "subagents"), i, e)
    {
        const char *tool = json_string_value(json_object_get(e, "toolUseId"));
        json_t *have = entry_of(json_object_get(state, "subagents"), tool);
        if (have == NULL) {
            json_array_append(json_object_get(state, "subagents"), e);
            continue;
        }
        json_t *blocks = json_incref(json_object_get(have, "blocks"));
        json_object_update(have, e);
        json_object_set_new(have, "blocks", blocks);
        merge(blocks, json_object_get(e, "blocks"));
    }
    ck_assert_uint_eq(json_array_size(json_object_get(since, "removed")), 0);
    json_object_set(state, "index", json_object_get(since, "index"));
}

START_TEST(test_whole_state)
{
    view *v = folded(NLOG);
    json_t *st = view_since(v, -1);
    ck_assert_int_eq(json_integer_value(json_object_get(st, "index")), NLOG - 1);
    json_t *blocks = json_object_get(st, "blocks");
    const char *order[] = {"m0", "a1-thought", "c1", "result-c1", "subagent-block-k1",
                           "k1", "m5",         "s6"};
    ck_assert_uint_eq(json_array_size(blocks), sizeof(order) / sizeof(order[0]));
    for (size_t i = 0; i < json_array_size(blocks); i++)
        ck_assert_str_eq(json_string_value(json_object_get(json_array_get(blocks, i), "id")),
                         order[i]);
    ck_assert_uint_eq(json_array_size(json_object_get(st, "subagents")), 1);
    ck_assert_uint_eq(view_skipped(v), 0);
    json_decref(st);
    view_free(v);
}
END_TEST

/* From every N, the state at N plus since(N) is the state at the end. */
START_TEST(test_since_every_index)
{
    view *whole = folded(NLOG);
    json_t *want = view_since(whole, -1);
    for (size_t n = 1; n <= NLOG; n++) {
        view *part = folded(n);
        json_t *state = view_since(part, -1);
        json_object_del(state, "removed");
        view_free(part);
        json_t *since = view_since(whole, (int64_t)n - 1);
        ck_assert_int_eq(json_integer_value(json_object_get(since, "index")), NLOG - 1);
        apply_since(state, since);
        json_object_set_new(state, "removed", json_array());
        char *a = json_dumps(state, JSON_SORT_KEYS), *b = json_dumps(want, JSON_SORT_KEYS);
        ck_assert_msg(json_equal(state, want), "after %zu:\n%s\nwant\n%s", n, a, b);
        free(a);
        free(b);
        json_decref(since);
        json_decref(state);
    }
    json_decref(want);
    view_free(whole);
}
END_TEST

/* Only what changed: the observation touches its call and its result. */
START_TEST(test_since_is_small)
{
    view *v = folded(3);
    json_t *since = view_since(v, 1);
    json_t *blocks = json_object_get(since, "blocks");
    ck_assert_uint_eq(json_array_size(blocks), 2);
    ck_assert_str_eq(json_string_value(json_object_get(json_array_get(blocks, 0), "id")), "c1");
    ck_assert_str_eq(json_string_value(json_object_get(json_array_get(blocks, 1), "id")),
                     "result-c1");
    json_decref(since);
    since = view_since(v, 2); /* nothing after the last */
    ck_assert_uint_eq(json_array_size(json_object_get(since, "blocks")), 0);
    json_decref(since);
    view_free(v);
}
END_TEST

START_TEST(test_frames)
{
    view *v = folded(NLOG);
    rt_text t = {0};
    ck_assert_int_eq(view_frames(v, -1, &t), 0);
    rt_text_putc(&t, '\0');
    ck_assert(strncmp(t.p, "{\"index\":6,\"state\":{", 20) == 0);
    ck_assert_ptr_eq(strchr(t.p, '\n'), t.p + strlen(t.p) - 1); /* one frame */
    free(t.p);
    t = (rt_text){0};
    ck_assert_int_eq(view_frames(v, 3, &t), 0); /* the task's result, a message, a status */
    rt_text_putc(&t, '\0');
    /* every frame but the last says where the batch began: 3 */
    const char *want[] = {"{\"index\":3,\"subagent\":{",
                          "{\"index\":6,\"conversation\":\"main\",\"at\":"};
    ck_assert(strncmp(t.p, want[0], strlen(want[0])) == 0);
    size_t lines = 0;
    for (char *p = t.p; *p; p++)
        lines += *p == '\n';
    ck_assert_uint_eq(lines, 1 + 4);         /* the entry; its block, the call, m5, s6 */
    const char *last = strstr(t.p, want[1]); /* the one frame that says 6, and last */
    ck_assert_ptr_nonnull(last);
    ck_assert_ptr_eq(strstr(t.p, "{\"index\":6"), last);
    ck_assert_ptr_nonnull(strstr(last, "status: finished"));
    ck_assert_ptr_eq(strchr(last, '\n'), t.p + strlen(t.p) - 1);
    free(t.p);
    t = (rt_text){0};
    ck_assert_int_eq(view_frames(v, 6, &t), 0);
    ck_assert_uint_eq(t.len, 0);
    free(t.p);
    view_free(v);
}
END_TEST

/* Every upsert frame's "at" is where the whole state has its block, in
 * the main conversation or its subagent's. */
START_TEST(test_frames_at)
{
    view *v = folded(NLOG);
    json_t *whole = view_since(v, -1);
    int bad = 0, seen = 0;
    for (int after = 0; after < NLOG; after++) {
        rt_text t = {0};
        ck_assert_int_eq(view_frames(v, after, &t), 0);
        rt_text_putc(&t, '\0');
        for (char *line = t.p, *nl; line != NULL && *line; line = nl ? nl + 1 : NULL) {
            nl = strchr(line, '\n');
            json_t *f = json_loadb(line, nl ? (size_t)(nl - line) : strlen(line), 0, NULL);
            json_t *b = json_object_get(f, "upsert");
            if (b != NULL) {
                const char *conv = json_string_value(json_object_get(f, "conversation"));
                json_t *list = json_object_get(whole, "blocks"), *e;
                size_t i, k;
                if (strcmp(conv, "main") != 0)
                    json_array_foreach(json_object_get(whole, "subagents"), i, e)
                    {
                        if (strcmp(json_string_value(json_object_get(e, "toolUseId")), conv) == 0)
                            list = json_object_get(e, "blocks");
                    }
                long long at = -1;
                json_array_foreach(list, k, e)
                {
                    if (json_equal(json_object_get(e, "id"), json_object_get(b, "id")))
                        at = (long long)k;
                }
                bad += at < 0 || json_integer_value(json_object_get(f, "at")) != at;
                seen++;
            }
            json_decref(f);
        }
        free(t.p);
    }
    ck_assert_int_eq(bad, 0);
    ck_assert_int_gt(seen, NLOG);
    json_decref(whole);
    view_free(v);
}
END_TEST

/* A bad event counts and changes nothing. */
START_TEST(test_skipped)
{
    view *v = view_new(fixed_now, NULL);
    json_t *bad = tj_jsonq("{'id':'x','kind':'ObservationEvent'}");
    ck_assert_int_eq(view_apply(v, 0, bad), 0);
    json_decref(bad);
    ck_assert_uint_eq(view_skipped(v), 1);
    ck_assert_uint_eq(view_blocks(v), 0);
    json_t *e = tj_jsonq("{'id':'m1'," TS ",'source':'agent','kind':'MessageEvent','llm_message':{"
                         "'role':'assistant','content':[{'type':'text','text':'hi'}]}}");
    ck_assert_int_eq(view_apply(v, 1, e), 0);
    json_decref(e);
    json_t *since = view_since(v, 0);
    ck_assert_int_eq(json_integer_value(json_object_get(since, "index")), 1);
    ck_assert_uint_eq(json_array_size(json_object_get(since, "blocks")), 1);
    json_decref(since);
    view_free(v);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("view");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_whole_state);
    tcase_add_test(tc, test_since_every_index);
    tcase_add_test(tc, test_since_is_small);
    tcase_add_test(tc, test_frames);
    tcase_add_test(tc, test_frames_at);
    tcase_add_test(tc, test_skipped);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? 0 : 1;
}
