/*
 * test_visual.c - the terminal visualizer's blocks, as snapshots in plain
 * text (one per kind upstream shows), folding, colour, and the events it
 * does not show.
 */
#include "actors/visual.h"
#include "runtime/json.h"

#include <check.h>
#include <stdlib.h>
#include <string.h>

static char *render(const char *json, const visual_opts *o)
{
    json_t *e = rt_json_read(json, strlen(json), 0, NULL);
    ck_assert_ptr_nonnull(e);
    rt_text t = {0};
    visual_event(&t, e, o);
    json_decref(e);
    rt_text_putc(&t, '\0');
    return t.p;
}

/* n box-drawing dashes */
static char *dashes(int n)
{
    char *s = malloc((size_t)n * 3 + 1);
    for (int i = 0; i < n; i++)
        memcpy(s + 3 * i, "\xe2\x94\x80", 3);
    s[n * 3] = '\0';
    return s;
}

static void expect(const char *json, const char *title, const char *body)
{
    visual_opts o = {.width = 40};
    char *got = render(json, &o);
    char *pad = dashes(40 - (int)strlen(title) - 4);
    size_t n = strlen(title) + strlen(pad) + strlen(body) + 64;
    char *want = malloc(n);
    snprintf(want, n, "\xe2\x94\x80\xe2\x94\x80 %s %s\n\n%s\n", title, pad, body);
    ck_assert_msg(strcmp(got, want) == 0, "got:\n%s\nwanted:\n%s", got, want);
    free(pad);
    free(want);
    free(got);
}

START_TEST(test_action)
{
    expect("{\"kind\":\"ActionEvent\",\"source\":\"agent\",\"security_risk\":\"LOW\","
           "\"summary\":\"list test files\",\"thought\":[{\"type\":\"text\",\"text\":\"Let me "
           "look.\"}],\"action\":{\"command\":\"ls tests/\",\"is_input\":false,\"timeout\":null,"
           "\"kind\":\"TerminalAction\"},\"tool_name\":\"terminal\",\"tool_call_id\":\"c1\"}",
           "Agent Action",
           "Predicted Security Risk: LOW\nSummary: list test files\nThought: Let me look.\n"
           "Action: TerminalAction\nArguments:\n  command: ls tests/\n  is_input: false\n");
    expect("{\"kind\":\"ActionEvent\",\"source\":\"agent\",\"security_risk\":\"UNKNOWN\","
           "\"reasoning_content\":\"hmm\",\"thought\":[],\"tool_name\":\"terminal\","
           "\"tool_call_id\":\"c2\",\"tool_call\":{\"id\":\"c2\",\"name\":\"terminal\"}}",
           "Agent Action (Not Executed)", "Reasoning: hmm\nFunction call:\n- terminal (c2)\n");
    expect("{\"kind\":\"ActionEvent\",\"action\":{\"path\":\"a.py\",\"file_text\":\"x = 1\\ny = "
           "2\",\"kind\":\"FileEditorAction\"}}",
           "Agent Action",
           "Action: FileEditorAction\nArguments:\n  path: a.py\n  file_text:\n    x = 1\n    y = "
           "2\n");
}
END_TEST

START_TEST(test_observation_reject_error)
{
    expect("{\"kind\":\"ObservationEvent\",\"tool_name\":\"terminal\",\"observation\":{"
           "\"content\":[{\"type\":\"text\",\"text\":\"a.py\\nb.py\"}],\"is_error\":false}}",
           "Observation", "Tool: terminal\nResult:\na.py\nb.py\n");
    expect("{\"kind\":\"ObservationEvent\",\"tool_name\":\"terminal\",\"observation\":{"
           "\"content\":[{\"type\":\"text\",\"text\":\"boom\"}],\"is_error\":true}}",
           "Observation",
           "Tool: terminal\nResult:\n\xe2\x9c\x97 [An error occurred during execution.]\nboom\n");
    expect("{\"kind\":\"UserRejectObservation\",\"tool_name\":\"terminal\","
           "\"rejection_reason\":\"Not now\"}",
           "User Rejected Action", "Tool: terminal\nRejection Reason: Not now\n");
    expect("{\"kind\":\"AgentErrorEvent\",\"error\":\"bad arguments\"}", "Agent Error",
           "Error Details:\nbad arguments\n");
}
END_TEST

START_TEST(test_messages)
{
    expect("{\"kind\":\"MessageEvent\",\"source\":\"user\",\"llm_message\":{\"role\":\"user\","
           "\"content\":[{\"type\":\"text\",\"text\":\"Add a test\"}]},\"activated_skills\":[]}",
           "Message from User", "Add a test\n");
    expect("{\"kind\":\"MessageEvent\",\"source\":\"agent\",\"llm_message\":{\"role\":"
           "\"assistant\",\"content\":[]},\"activated_skills\":[\"git\",\"py\"]}",
           "Message from Agent", "[no text content]\nActivated Skills: git, py\n");
    expect("{\"kind\":\"MessageEvent\",\"source\":\"environment\",\"llm_message\":{\"role\":"
           "\"user\",\"content\":[{\"type\":\"text\",\"text\":\"nudge\"}]}}",
           "Message from Environment", "nudge\n");
    expect("{\"kind\":\"MessageEvent\",\"source\":\"hook\",\"llm_message\":{\"content\":[{"
           "\"type\":\"text\",\"text\":\"h\"}]}}",
           "Message from Hook", "h\n");
}
END_TEST

START_TEST(test_system_pause_condensation_acp)
{
    expect("{\"kind\":\"SystemPromptEvent\",\"system_prompt\":{\"type\":\"text\",\"text\":\"You "
           "are an agent.\"},\"tools\":[{\"description\":\"Execute a bash command\\nmore\","
           "\"title\":\"terminal\",\"kind\":\"TerminalTool\"}]}",
           "System Prompt",
           "You are an agent.\nTools Available: 1\n  - terminal: Execute a bash command\n");
    expect("{\"kind\":\"PauseEvent\",\"source\":\"user\"}", "User Paused", "Conversation Paused\n");
    expect("{\"kind\":\"Condensation\",\"forgotten_event_ids\":[\"a\",\"b\"],\"summary\":\"did "
           "X\"}",
           "Condensation",
           "Auto Conversation Condensation Triggered.\nForgetting 2 events\n[Summary of Events "
           "Being Forgotten]\ndid X\n");
    expect("{\"kind\":\"CondensationRequest\"}", "Condensation Request",
           "Conversation condensation requested\n");
    expect("{\"kind\":\"ACPToolCallEvent\",\"title\":\"Read file\",\"status\":\"completed\"}",
           "ACP Tool Call", "Tool: Read file\nStatus: completed\n");
}
END_TEST

START_TEST(test_not_shown)
{
    const char *hidden[] = {
        "{\"kind\":\"ConversationStateUpdateEvent\",\"key\":\"execution_status\",\"value\":\"x\"}",
        "{\"kind\":\"ConversationErrorEvent\",\"code\":\"E\",\"detail\":\"d\"}",
        "{\"kind\":\"InterruptEvent\"}", "{\"no\":\"kind\"}", "[1]"};
    for (size_t i = 0; i < sizeof(hidden) / sizeof(hidden[0]); i++) {
        char *got = render(hidden[i], NULL);
        ck_assert_msg(got[0] == '\0', "%s was shown: %s", hidden[i], got);
        free(got);
    }
}
END_TEST

START_TEST(test_fold_and_color)
{
    rt_text big = {0};
    rt_text_puts(&big, "{\"kind\":\"ObservationEvent\",\"tool_name\":\"t\",\"observation\":{"
                       "\"content\":[{\"type\":\"text\",\"text\":\"");
    for (int i = 0; i < 100; i++)
        rt_text_printf(&big, "line %d\\n", i);
    rt_text_puts(&big, "end\"}]}}");
    rt_text_putc(&big, '\0');
    visual_opts o = {.fold_lines = 5};
    char *got = render(big.p, &o);
    ck_assert_ptr_nonnull(strstr(got, "Tool: t\nResult:\nline 0\nline 1\nline 2\n... (98 more "
                                      "lines)\n"));
    free(got);
    o = (visual_opts){.fold_lines = -1};
    got = render(big.p, &o);
    ck_assert_ptr_nonnull(strstr(got, "line 99\nend\n"));
    free(got);
    free(big.p);

    o = (visual_opts){.color = true};
    got = render("{\"kind\":\"ObservationEvent\",\"tool_name\":\"t\",\"observation\":{}}", &o);
    ck_assert_ptr_nonnull(strstr(got, "\x1b[1;33mObservation\x1b[0m"));
    ck_assert_ptr_nonnull(strstr(got, "\x1b[1;33mTool:\x1b[0m t\n"));
    free(got);

    rt_text t = {0};
    visual_status(&t, "stuck", "monologue", NULL);
    rt_text_putc(&t, '\0');
    ck_assert_str_eq(t.p, "\xe2\x80\xa2 status: stuck (rule: monologue)\n");
    free(t.p);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("visual");
    TCase *t = tcase_create("blocks");
    tcase_add_test(t, test_action);
    tcase_add_test(t, test_observation_reject_error);
    tcase_add_test(t, test_messages);
    tcase_add_test(t, test_system_pause_condensation_acp);
    tcase_add_test(t, test_not_shown);
    tcase_add_test(t, test_fold_and_color);
    suite_add_tcase(s, t);
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed == 0 ? 0 : 1;
}
