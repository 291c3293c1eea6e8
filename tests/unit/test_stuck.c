/*
 * test_stuck.c - the stuck detector (spec/checks.md §1): every vector of
 * shared/vectors/stuck/, then each rule at its boundaries (threshold - 1
 * and threshold), custom thresholds, the order of the rules, the one-time
 * action-error nudge, the scan window (20 events, cut after the last user
 * message, state updates not counted), the equality of §1.5, and a long
 * conversation in constant memory.
 *
 * Events are built as the vectors write them and go through ev_from_json,
 * so the detector sees exactly what the conversation actor would feed it.
 */
#include "actors/event.h"
#include "actors/stuck.h"

#include "support_sync.h"

#include <check.h>
#include <dirent.h>
#include <jansson.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------- events --- */

static int g_seq; /* fresh ids and timestamps; each test runs in its own process */

static void stamp(json_t *o, const char *prefix)
{
    char id[32], ts[40];
    g_seq++;
    snprintf(id, sizeof id, "%s%d", prefix, g_seq);
    snprintf(ts, sizeof ts, "2026-08-22T10:%02d:%02d.%06d", (g_seq / 60) % 60, g_seq % 60,
             g_seq % 1000000);
    json_object_set_new(o, "id", json_string(id));
    json_object_set_new(o, "timestamp", json_string(ts));
}

static json_t *text_list(const char *text)
{
    return json_pack("[{s:b, s:s, s:s}]", "cache_prompt", 0, "type", "text", "text", text);
}

static json_t *j_message(const char *source, const char *text)
{
    const char *role = strcmp(source, "agent") == 0 ? "assistant" : "user";
    json_t *o = json_object();
    stamp(o, "m");
    json_object_set_new(o, "source", json_string(source));
    json_object_set_new(
        o, "llm_message",
        json_pack("{s:s, s:o, s:[]}", "role", role, "content", text_list(text), "thinking_blocks"));
    json_object_set_new(o, "activated_skills", json_array());
    json_object_set_new(o, "extended_content", json_array());
    json_object_set_new(o, "kind", json_string("MessageEvent"));
    return o;
}

/* An ActionEvent as an agent writes it: every id-like field fresh. */
static json_t *j_action_full(const char *tool, const char *cmd, const char *thought, int is_input)
{
    char call[32], args[128], resp[32];
    json_t *o = json_object();
    stamp(o, "a");
    snprintf(call, sizeof call, "call%d", g_seq);
    snprintf(resp, sizeof resp, "resp%d", g_seq);
    snprintf(args, sizeof args, "{\"command\": \"%s\", \"n\": %d}", cmd, g_seq);
    json_object_set_new(o, "source", json_string("agent"));
    json_object_set_new(o, "thought", thought ? text_list(thought) : json_array());
    json_object_set_new(o, "thinking_blocks", json_array());
    json_object_set_new(o, "action",
                        json_pack("{s:s, s:b, s:b, s:s}", "command", cmd, "is_input", is_input,
                                  "reset", 0, "kind", "TerminalAction"));
    json_object_set_new(o, "tool_name", json_string(tool));
    json_object_set_new(o, "tool_call_id", json_string(call));
    json_object_set_new(o, "tool_call",
                        json_pack("{s:s, s:s, s:s, s:s}", "id", call, "name", tool, "arguments",
                                  args, "origin", "completion"));
    json_object_set_new(o, "llm_response_id", json_string(resp));
    json_object_set_new(o, "security_risk", json_string(g_seq % 2 ? "UNKNOWN" : "LOW"));
    json_object_set_new(o, "kind", json_string("ActionEvent"));
    return o;
}

static json_t *j_action(const char *cmd)
{
    return j_action_full("terminal", cmd, NULL, 0);
}

static json_t *j_obs_full(const char *tool, const char *out)
{
    char call[32], action_id[32];
    json_t *o = json_object();
    stamp(o, "t");
    snprintf(call, sizeof call, "call%d", g_seq);
    snprintf(action_id, sizeof action_id, "a%d", g_seq - 1);
    json_object_set_new(o, "source", json_string("environment"));
    json_object_set_new(o, "tool_name", json_string(tool));
    json_object_set_new(o, "tool_call_id", json_string(call));
    json_object_set_new(o, "observation",
                        json_pack("{s:o, s:b, s:s, s:i, s:b, s:s}", "content", text_list(out),
                                  "is_error", 0, "command", "cmd", "exit_code", 0, "timeout", 0,
                                  "kind", "TerminalObservation"));
    json_object_set_new(o, "action_id", json_string(action_id));
    json_object_set_new(o, "extended_content", json_array());
    json_object_set_new(o, "kind", json_string("ObservationEvent"));
    return o;
}

static json_t *j_obs(const char *out)
{
    return j_obs_full("terminal", out);
}

static json_t *j_error_full(const char *tool, const char *error)
{
    char call[32];
    json_t *o = json_object();
    stamp(o, "e");
    snprintf(call, sizeof call, "call%d", g_seq);
    json_object_set_new(o, "source", json_string("agent"));
    json_object_set_new(o, "tool_name", json_string(tool));
    json_object_set_new(o, "tool_call_id", json_string(call));
    json_object_set_new(o, "error", json_string(error));
    json_object_set_new(o, "kind", json_string("AgentErrorEvent"));
    return o;
}

static json_t *j_error(const char *error)
{
    return j_error_full("terminal", error);
}

static json_t *j_reject(const char *reason)
{
    char call[32], action_id[32];
    json_t *o = json_object();
    stamp(o, "r");
    snprintf(call, sizeof call, "call%d", g_seq);
    snprintf(action_id, sizeof action_id, "a%d", g_seq - 1);
    json_object_set_new(o, "source", json_string("environment"));
    json_object_set_new(o, "tool_name", json_string("terminal"));
    json_object_set_new(o, "tool_call_id", json_string(call));
    json_object_set_new(o, "action_id", json_string(action_id));
    json_object_set_new(o, "rejection_reason", json_string(reason));
    json_object_set_new(o, "rejection_source", json_string("user"));
    json_object_set_new(o, "kind", json_string("UserRejectObservation"));
    return o;
}

static json_t *j_state_update(void)
{
    json_t *o = json_object();
    stamp(o, "s");
    json_object_set_new(o, "source", json_string("environment"));
    json_object_set_new(o, "key", json_string("execution_status"));
    json_object_set_new(o, "value", json_string("running"));
    json_object_set_new(o, "kind", json_string("ConversationStateUpdateEvent"));
    return o;
}

static json_t *j_summary(void)
{
    json_t *o = json_object();
    stamp(o, "c");
    json_object_set_new(o, "source", json_string("environment"));
    json_object_set_new(o, "summary", json_string("earlier work, condensed"));
    json_object_set_new(o, "kind", json_string("CondensationSummaryEvent"));
    return o;
}

static json_t *j_pause(void)
{
    json_t *o = json_object();
    stamp(o, "p");
    json_object_set_new(o, "source", json_string("user"));
    json_object_set_new(o, "kind", json_string("PauseEvent"));
    return o;
}

/* Feeds one event and drops it: the detector must not keep a pointer. */
static void feed(stuck *s, json_t *o)
{
    char err[256] = "";
    ev e;
    ck_assert_ptr_nonnull(o);
    int rc = ev_from_json(o, &e, err, sizeof err);
    if (rc != 0) {
        char *text = json_dumps(o, JSON_COMPACT);
        ck_abort_msg("ev_from_json refused a test event (%s): %s", err, text);
    }
    json_decref(o);
    stuck_feed(s, &e);
    ev_free(&e);
}

static void pair(stuck *s, const char *cmd, const char *out)
{
    feed(s, j_action(cmd));
    feed(s, j_obs(out));
}

static void err_pair(stuck *s, const char *cmd, const char *error)
{
    feed(s, j_action(cmd));
    feed(s, j_error(error));
}

static void user(stuck *s)
{
    feed(s, j_message("user", "do it"));
}

/* ------------------------------------------------------------ verdicts --- */

static stuck_verdict g_last; /* the last verdict, for the nudge-text checks */

#define EXPECT(s, rule, nudge) expect_at((s), (rule), (nudge), __LINE__)

static void expect_at(stuck *s, stuck_rule rule, bool nudge, int line)
{
    stuck_check(s, &g_last);
    ck_assert_msg(g_last.rule == rule && g_last.nudge == nudge,
                  "line %d: got rule \"%s\", nudge %d; expected rule \"%s\", nudge %d", line,
                  stuck_rule_name(g_last.rule), g_last.nudge, stuck_rule_name(rule), nudge);
    if (!g_last.nudge)
        ck_assert_msg(g_last.nudge_text[0] == '\0', "line %d: nudge text without a nudge", line);
}

static stuck *new_with(int ao, int ae, int mono, int alt)
{
    stuck_thresholds t = {ao, ae, mono, alt};
    stuck *s = stuck_new(&t);
    ck_assert_ptr_nonnull(s);
    return s;
}

static stuck *new_default(void)
{
    stuck *s = stuck_new(NULL);
    ck_assert_ptr_nonnull(s);
    return s;
}

/* -------------------------------------------------------------- vectors --- */

static const char *shared_dir(void)
{
    const char *d = getenv("PARLEY_SHARED_DIR");
    if (d != NULL && d[0] != '\0')
        return d;
#ifdef PARLEY_SHARED_DIR
    return PARLEY_SHARED_DIR;
#else
    return NULL;
#endif
}

static int cmp_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static stuck_rule rule_from_name(const char *name)
{
    for (int r = STUCK_REPEATING_ACTION_OBSERVATION; r <= STUCK_ALTERNATING_ACTION_OBSERVATION; r++)
        if (strcmp(stuck_rule_name((stuck_rule)r), name) == 0)
            return (stuck_rule)r;
    ck_abort_msg("unknown rule name \"%s\" in a vector", name);
    return STUCK_NONE;
}

static int threshold_of(json_t *t, const char *key, int dflt)
{
    json_t *v = json_object_get(t, key);
    return json_is_integer(v) ? (int)json_integer_value(v) : dflt;
}

static void run_vector(const char *path, const char *name)
{
    json_error_t jerr;
    json_t *doc = json_load_file(path, 0, &jerr);
    ck_assert_msg(doc != NULL, "%s: %s (line %d)", name, jerr.text, jerr.line);

    stuck_thresholds t;
    stuck_defaults(&t);
    json_t *th = json_object_get(doc, "thresholds");
    if (th != NULL) {
        t.action_observation = threshold_of(th, "action_observation", t.action_observation);
        t.action_error = threshold_of(th, "action_error", t.action_error);
        t.monologue = threshold_of(th, "monologue", t.monologue);
        t.alternating_pattern = threshold_of(th, "alternating_pattern", t.alternating_pattern);
    }
    stuck *s = stuck_new(&t);
    ck_assert_ptr_nonnull(s);

    json_t *events = json_object_get(doc, "events");
    json_t *checks = json_object_get(doc, "checks");
    ck_assert_msg(json_is_array(events) && json_is_array(checks) && json_array_size(checks) > 0,
                  "%s: needs an events array and a non-empty checks array", name);

    size_t fed = 0;
    const char *last_tool = NULL, *last_error = NULL; /* borrowed from doc */
    size_t ci;
    json_t *c;
    json_array_foreach(checks, ci, c)
    {
        json_int_t after = json_integer_value(json_object_get(c, "after"));
        ck_assert_msg(after >= (json_int_t)fed && (size_t)after <= json_array_size(events),
                      "%s: check %zu: after=%lld is out of order or past the events", name, ci,
                      (long long)after);
        for (; fed < (size_t)after; fed++) {
            json_t *o = json_array_get(events, fed);
            char err[256] = "";
            ev e;
            ck_assert_msg(ev_from_json(o, &e, err, sizeof err) == 0, "%s: event %zu refused: %s",
                          name, fed, err);
            if (e.kind == EV_ACTION)
                last_tool = json_string_value(json_object_get(o, "tool_name"));
            if (e.kind == EV_AGENT_ERROR)
                last_error = json_string_value(json_object_get(o, "error"));
            stuck_feed(s, &e);
            ev_free(&e);
        }
        bool want_stuck = json_is_true(json_object_get(c, "stuck"));
        bool want_nudge = json_is_true(json_object_get(c, "nudge"));
        json_t *rule = json_object_get(c, "rule");

        stuck_verdict v;
        stuck_check(s, &v);
        ck_assert_msg((v.rule != STUCK_NONE) == want_stuck,
                      "%s: after %lld: stuck is %d (rule \"%s\"), expected %d", name,
                      (long long)after, v.rule != STUCK_NONE, stuck_rule_name(v.rule), want_stuck);
        if (want_stuck && json_is_string(rule))
            ck_assert_msg(v.rule == rule_from_name(json_string_value(rule)),
                          "%s: after %lld: rule \"%s\", expected \"%s\"", name, (long long)after,
                          stuck_rule_name(v.rule), json_string_value(rule));
        ck_assert_msg(v.nudge == want_nudge, "%s: after %lld: nudge %d, expected %d", name,
                      (long long)after, v.nudge, want_nudge);
        if (v.nudge) {
            ck_assert_msg(last_tool && strstr(v.nudge_text, last_tool),
                          "%s: the nudge does not name the tool: %s", name, v.nudge_text);
            ck_assert_msg(last_error && strstr(v.nudge_text, last_error),
                          "%s: the nudge does not quote the error: %s", name, v.nudge_text);
        }
    }
    stuck_free(s);
    json_decref(doc);
}

START_TEST(test_vectors)
{
    const char *base = shared_dir();
    ck_assert_msg(base != NULL, "PARLEY_SHARED_DIR is not set: cannot find the stuck vectors");
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/vectors/stuck", base);
    DIR *d = opendir(dir);
    ck_assert_msg(d != NULL, "%s is missing: the stuck vectors must be there", dir);

    char *names[256];
    size_t n = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        size_t len = strlen(de->d_name);
        if (len > 5 && strcmp(de->d_name + len - 5, ".json") == 0) {
            ck_assert_msg(n < sizeof names / sizeof names[0], "too many vectors");
            names[n++] = strdup(de->d_name);
        }
    }
    closedir(d);
    ck_assert_msg(n > 0, "%s holds no .json vector", dir);
    qsort(names, n, sizeof names[0], cmp_names);
    for (size_t i = 0; i < n; i++) {
        char path[8192];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        run_vector(path, names[i]);
        free(names[i]);
    }
}
END_TEST

/* ------------------------------------------------------- configuration --- */

START_TEST(test_defaults_and_names)
{
    stuck_thresholds t = {0, 0, 0, 0};
    stuck_defaults(&t);
    ck_assert_int_eq(t.action_observation, 4);
    ck_assert_int_eq(t.action_error, 3);
    ck_assert_int_eq(t.monologue, 3);
    ck_assert_int_eq(t.alternating_pattern, 6);
    ck_assert_str_eq(stuck_rule_name(STUCK_NONE), "");
    ck_assert_str_eq(stuck_rule_name(STUCK_REPEATING_ACTION_OBSERVATION),
                     "repeating_action_observation");
    ck_assert_str_eq(stuck_rule_name(STUCK_REPEATING_ACTION_ERROR), "repeating_action_error");
    ck_assert_str_eq(stuck_rule_name(STUCK_MONOLOGUE), "monologue");
    ck_assert_str_eq(stuck_rule_name(STUCK_ALTERNATING_ACTION_OBSERVATION),
                     "alternating_action_observation");

    /* An empty detector, and NULLs, are quiet. */
    stuck *s = new_default();
    EXPECT(s, STUCK_NONE, false);
    stuck_feed(s, NULL);
    stuck_feed(NULL, NULL);
    stuck_verdict v;
    stuck_check(NULL, &v);
    ck_assert(v.rule == STUCK_NONE && !v.nudge);
    stuck_free(s);
    stuck_free(NULL);
}
END_TEST

/* Values below 1 fall back to the defaults: 3 identical pairs stay fine and
 * the 4th trips rule 1, as with stuck_new(NULL). */
START_TEST(test_thresholds_below_one_are_defaults)
{
    stuck *s = new_with(0, -1, 0, -7);
    user(s);
    feed(s, j_message("agent", "a"));
    feed(s, j_message("agent", "b"));
    EXPECT(s, STUCK_NONE, false); /* monologue is 3, not 0 */
    user(s);
    for (int i = 0; i < 3; i++)
        pair(s, "ls", "a.txt");
    EXPECT(s, STUCK_NONE, false);
    pair(s, "ls", "a.txt");
    EXPECT(s, STUCK_REPEATING_ACTION_OBSERVATION, false);
    stuck_free(s);
}
END_TEST

/* ------------------------------------------------------ rule 1: repeats --- */

START_TEST(test_action_observation_boundary)
{
    stuck *s = new_default();
    user(s);
    for (int i = 0; i < 3; i++)
        pair(s, "ls", "a.txt");
    EXPECT(s, STUCK_NONE, false);
    feed(s, j_action("ls"));
    EXPECT(s, STUCK_NONE, false); /* 4 actions, 3 observations */
    feed(s, j_obs("a.txt"));
    EXPECT(s, STUCK_REPEATING_ACTION_OBSERVATION, false);
    EXPECT(s, STUCK_REPEATING_ACTION_OBSERVATION, false); /* stays stuck when asked again */
    stuck_free(s);
}
END_TEST

/* Upstream's config test: {action_observation: 6} via a mapping. */
START_TEST(test_custom_action_observation_threshold)
{
    stuck_thresholds t;
    stuck_defaults(&t);
    t.action_observation = 6;
    stuck *s = stuck_new(&t);
    user(s);
    for (int i = 0; i < 4; i++)
        pair(s, "ls", "a.txt");
    EXPECT(s, STUCK_NONE, false);
    pair(s, "ls", "a.txt");
    EXPECT(s, STUCK_NONE, false);
    pair(s, "ls", "a.txt");
    EXPECT(s, STUCK_REPEATING_ACTION_OBSERVATION, false);
    stuck_free(s);
}
END_TEST

/* {8, 6, 10} with alternating_pattern left at 6: identical pairs are also a
 * (degenerate) A,A,A alternation, so 6 of them trip rule 4 before rule 1's
 * 8; at 8 rule 1, checked first, takes over. */
START_TEST(test_mixed_custom_thresholds)
{
    stuck_thresholds t;
    stuck_defaults(&t);
    t.action_observation = 8;
    t.action_error = 6;
    t.monologue = 10;
    stuck *s = stuck_new(&t);
    user(s);
    for (int i = 0; i < 5; i++)
        pair(s, "ls", "a.txt");
    EXPECT(s, STUCK_NONE, false);
    pair(s, "ls", "a.txt");
    EXPECT(s, STUCK_ALTERNATING_ACTION_OBSERVATION, false);
    pair(s, "ls", "a.txt");
    EXPECT(s, STUCK_ALTERNATING_ACTION_OBSERVATION, false);
    pair(s, "ls", "a.txt");
    EXPECT(s, STUCK_REPEATING_ACTION_OBSERVATION, false);

    user(s);
    for (int i = 0; i < 9; i++)
        feed(s, j_message("agent", "thinking"));
    EXPECT(s, STUCK_NONE, false);
    feed(s, j_message("agent", "thinking"));
    EXPECT(s, STUCK_MONOLOGUE, false);
    stuck_free(s);
}
END_TEST

START_TEST(test_different_actions_or_observations)
{
    stuck *s = new_default();
    user(s);
    pair(s, "ls", "a.txt");
    pair(s, "ls", "a.txt");
    pair(s, "ls", "a.txt");
    pair(s, "ls", "b.txt"); /* same action, the newest output differs */
    EXPECT(s, STUCK_NONE, false);
    user(s);
    pair(s, "ls", "a.txt");
    pair(s, "ls", "a.txt");
    pair(s, "pwd", "a.txt");
    pair(s, "ls", "a.txt"); /* an older action differs */
    EXPECT(s, STUCK_NONE, false);
    user(s);
    pair(s, "pwd", "a.txt"); /* the oldest of the 4 actions differs */
    pair(s, "ls", "a.txt");
    pair(s, "ls", "a.txt");
    pair(s, "ls", "a.txt");
    EXPECT(s, STUCK_NONE, false);
    user(s);
    pair(s, "ls", "b.txt"); /* the oldest of the 4 observations differs */
    pair(s, "ls", "a.txt");
    pair(s, "ls", "a.txt");
    pair(s, "ls", "a.txt");
    EXPECT(s, STUCK_NONE, false);
    stuck_free(s);
}
END_TEST

/* ------------------------------------------- rule 2 and the nudge --- */

/* Distinct error texts keep rule 1 out of the way: rule 2 does not need
 * them to match. */
START_TEST(test_action_error_nudge_then_stuck)
{
    stuck *s = new_default();
    user(s);
    err_pair(s, "bad", "error 1");
    err_pair(s, "bad", "error 2");
    EXPECT(s, STUCK_NONE, false);
    err_pair(s, "bad", "error 3");
    EXPECT(s, STUCK_NONE, true);
    ck_assert_msg(strstr(g_last.nudge_text, "`terminal`") != NULL, "%s", g_last.nudge_text);
    ck_assert_msg(strstr(g_last.nudge_text, "error 3") != NULL, "%s", g_last.nudge_text);
    ck_assert_msg(strstr(g_last.nudge_text, " 3 times") != NULL, "%s", g_last.nudge_text);
    EXPECT(s, STUCK_NONE, false); /* asked again: no second nudge, and not stuck */
    err_pair(s, "bad", "error 4");
    EXPECT(s, STUCK_REPEATING_ACTION_ERROR, false);
    stuck_free(s);
}
END_TEST

/* After the nudge the model answers without a new action (an empty or
 * reasoning-only reply, then the nudge message itself): the streak is
 * frozen on the same error, so no second nudge. */
START_TEST(test_nudge_not_repeated_while_frozen)
{
    stuck *s = new_default();
    user(s);
    for (int i = 0; i < 3; i++)
        err_pair(s, "bad", "not found");
    EXPECT(s, STUCK_NONE, true);
    feed(s, j_message("environment", "the nudge"));
    EXPECT(s, STUCK_NONE, false);
    feed(s, j_message("agent", ""));
    EXPECT(s, STUCK_NONE, false);
    feed(s, j_action("bad")); /* a 4th action, not yet answered: still 3 pairs */
    EXPECT(s, STUCK_NONE, false);
    feed(s, j_error("not found"));
    EXPECT(s, STUCK_REPEATING_ACTION_OBSERVATION, false); /* identical errors: rule 1 first */
    stuck_free(s);
}
END_TEST

START_TEST(test_nudge_again_for_a_new_streak)
{
    stuck *s = new_default();
    user(s);
    for (int i = 0; i < 3; i++)
        err_pair(s, "bad", "not found");
    EXPECT(s, STUCK_NONE, true);
    /* The model changes its call, which fails too, three times. */
    err_pair(s, "worse", "denied");
    EXPECT(s, STUCK_NONE, false);
    err_pair(s, "worse", "denied");
    EXPECT(s, STUCK_NONE, false);
    err_pair(s, "worse", "denied");
    EXPECT(s, STUCK_NONE, true);
    ck_assert_msg(strstr(g_last.nudge_text, "denied") != NULL, "%s", g_last.nudge_text);
    EXPECT(s, STUCK_NONE, false);

    /* A user message opens a new window; the same failure, again. */
    user(s);
    for (int i = 0; i < 3; i++)
        err_pair(s, "worse", "denied");
    EXPECT(s, STUCK_NONE, true);
    stuck_free(s);
}
END_TEST

/* When rule 1 would also fire at the nudge point, the nudge comes first;
 * the next check reports the loop. */
START_TEST(test_nudge_before_rules)
{
    stuck *s = new_with(3, 3, 3, 6);
    user(s);
    for (int i = 0; i < 3; i++)
        err_pair(s, "bad", "not found");
    EXPECT(s, STUCK_NONE, true);
    EXPECT(s, STUCK_REPEATING_ACTION_OBSERVATION, false);
    stuck_free(s);

    /* The same thresholds with distinct errors: rule 2 needs action_error
     * + 1 pairs collected although action_observation is only 3. */
    s = new_with(3, 3, 3, 6);
    user(s);
    err_pair(s, "bad", "x1");
    err_pair(s, "bad", "x2");
    err_pair(s, "bad", "x3");
    EXPECT(s, STUCK_NONE, true);
    err_pair(s, "bad", "x4");
    EXPECT(s, STUCK_REPEATING_ACTION_ERROR, false);
    stuck_free(s);
}
END_TEST

START_TEST(test_custom_action_error_threshold)
{
    stuck *s = new_with(4, 1, 3, 6);
    user(s);
    err_pair(s, "bad", "first");
    EXPECT(s, STUCK_NONE, true);
    ck_assert_msg(strstr(g_last.nudge_text, " 1 time ") != NULL, "%s", g_last.nudge_text);
    err_pair(s, "bad", "second");
    EXPECT(s, STUCK_REPEATING_ACTION_ERROR, false);
    stuck_free(s);

    s = new_with(4, 5, 3, 6); /* collects 6 pairs, past action_observation */
    user(s);
    for (int i = 0; i < 4; i++) {
        char e[16];
        snprintf(e, sizeof e, "e%d", i);
        err_pair(s, "bad", e);
    }
    EXPECT(s, STUCK_NONE, false);
    err_pair(s, "bad", "e4");
    EXPECT(s, STUCK_NONE, true);
    err_pair(s, "bad", "e5");
    EXPECT(s, STUCK_REPEATING_ACTION_ERROR, false);
    stuck_free(s);
}
END_TEST

/* The streak counts leading pairs only: a different action, or a success,
 * ends it. */
START_TEST(test_error_streak_breaks)
{
    stuck *s = new_default();
    user(s);
    err_pair(s, "bad", "x1");
    err_pair(s, "other", "x2");
    err_pair(s, "bad", "x3");
    err_pair(s, "bad", "x4");
    EXPECT(s, STUCK_NONE, false); /* streak 2 */
    user(s);
    err_pair(s, "bad", "x1");
    pair(s, "bad", "worked once");
    err_pair(s, "bad", "x3");
    err_pair(s, "bad", "x4");
    EXPECT(s, STUCK_NONE, false); /* streak 2: the success breaks it */
    err_pair(s, "bad", "x5");
    EXPECT(s, STUCK_NONE, true); /* streak 3 */
    err_pair(s, "bad", "x6");
    EXPECT(s, STUCK_REPEATING_ACTION_ERROR, false);
    stuck_free(s);
}
END_TEST

static bool valid_utf8(const char *p)
{
    const unsigned char *s = (const unsigned char *)p;
    while (*s) {
        if ((*s & 0xC0) == 0x80)
            return false; /* a continuation byte where a character starts */
        int n = *s < 0x80 ? 0 : (*s & 0xE0) == 0xC0 ? 1 : (*s & 0xF0) == 0xE0 ? 2 : 3;
        if (*s >= 0x80 && (*s & 0xF8) == 0xF8)
            return false;
        s++;
        for (int i = 0; i < n; i++, s++)
            if ((*s & 0xC0) != 0x80)
                return false;
    }
    return true;
}

/* A huge error text (and a long tool name) are cut, never mid-character,
 * and the text still fits the verdict. */
START_TEST(test_nudge_text_truncated)
{
    size_t big = 5000;
    char *error = malloc(big * 2 + 2);
    error[0] = 'x'; /* error + 1 is all é, error puts them at odd offsets */
    for (size_t i = 0; i < big; i++)
        memcpy(error + 1 + 2 * i, "\xc3\xa9", 2); /* é */
    error[big * 2 + 1] = '\0';
    char tool[200];
    memset(tool, 't', sizeof tool - 1);
    tool[sizeof tool - 1] = '\0';
    for (size_t off = 0; off < 2; off++) { /* both parities of the cut */
        stuck *s = new_default();
        user(s);
        for (int i = 0; i < 3; i++) {
            feed(s, j_action_full(tool, "bad", NULL, 0));
            feed(s, j_error_full(tool, error + off));
        }
        EXPECT(s, STUCK_NONE, true);
        size_t len = strlen(g_last.nudge_text);
        ck_assert_uint_lt(len, sizeof g_last.nudge_text);
        ck_assert_msg(valid_utf8(g_last.nudge_text), "invalid UTF-8 in the nudge");
        ck_assert_ptr_nonnull(strstr(g_last.nudge_text, "\xc3\xa9\xc3\xa9..."));
        ck_assert_ptr_nonnull(strstr(g_last.nudge_text, "different approach."));
        stuck_free(s);
    }
    free(error);
}
END_TEST

/* ------------------------------------------------- rule 3: monologue --- */

START_TEST(test_monologue_boundary)
{
    stuck *s = new_default();
    user(s);
    feed(s, j_message("agent", "one"));
    feed(s, j_message("agent", "two"));
    EXPECT(s, STUCK_NONE, false);
    feed(s, j_message("agent", "three"));
    EXPECT(s, STUCK_MONOLOGUE, false);
    stuck_free(s);

    s = new_with(4, 3, 5, 6);
    user(s);
    for (int i = 0; i < 4; i++)
        feed(s, j_message("agent", "same"));
    EXPECT(s, STUCK_NONE, false);
    feed(s, j_message("agent", "same"));
    EXPECT(s, STUCK_MONOLOGUE, false);
    stuck_free(s);
}
END_TEST

START_TEST(test_monologue_walk)
{
    /* environment and hook messages neither count nor stop */
    stuck *s = new_default();
    user(s);
    feed(s, j_message("agent", "one"));
    feed(s, j_message("environment", "nudge"));
    feed(s, j_message("agent", "two"));
    feed(s, j_message("hook", "stop hook says go on"));
    EXPECT(s, STUCK_NONE, false);
    feed(s, j_message("agent", "three"));
    EXPECT(s, STUCK_MONOLOGUE, false);
    feed(s, j_message("environment", "more"));
    EXPECT(s, STUCK_MONOLOGUE, false);
    stuck_free(s);

    /* an action stops the walk */
    s = new_default();
    user(s);
    feed(s, j_message("agent", "one"));
    feed(s, j_message("agent", "two"));
    feed(s, j_action("ls"));
    feed(s, j_message("agent", "three"));
    feed(s, j_message("agent", "four"));
    EXPECT(s, STUCK_NONE, false);
    feed(s, j_message("agent", "five"));
    EXPECT(s, STUCK_MONOLOGUE, false);
    stuck_free(s);

    /* so do an observation and any other event, e.g. a pause */
    s = new_default();
    user(s);
    feed(s, j_message("agent", "one"));
    feed(s, j_message("agent", "two"));
    feed(s, j_obs("out"));
    feed(s, j_message("agent", "three"));
    feed(s, j_pause());
    feed(s, j_message("agent", "four"));
    feed(s, j_message("agent", "five"));
    EXPECT(s, STUCK_NONE, false);
    stuck_free(s);

    /* a condensation summary is skipped */
    s = new_default();
    user(s);
    feed(s, j_message("agent", "one"));
    feed(s, j_summary());
    feed(s, j_message("agent", "two"));
    feed(s, j_summary());
    feed(s, j_message("agent", "three"));
    EXPECT(s, STUCK_MONOLOGUE, false);
    stuck_free(s);

    /* a user message stops it (and empties the window) */
    s = new_default();
    user(s);
    feed(s, j_message("agent", "one"));
    feed(s, j_message("agent", "two"));
    user(s);
    feed(s, j_message("agent", "three"));
    feed(s, j_message("agent", "four"));
    EXPECT(s, STUCK_NONE, false);
    stuck_free(s);
}
END_TEST

/* ----------------------------------------------- rule 4: alternating --- */

static void ab_cycle(stuck *s, int events)
{
    static const char *cmd[] = {"make", "test"}, *out[] = {"built", "failed"};
    for (int i = 0; i < events; i++) {
        int k = (i / 2) % 2;
        if (i % 2 == 0)
            feed(s, j_action(cmd[k]));
        else
            feed(s, j_obs(out[k]));
    }
}

START_TEST(test_alternating_boundary)
{
    stuck *s = new_default();
    user(s);
    ab_cycle(s, 11); /* 6 actions, 5 observations */
    EXPECT(s, STUCK_NONE, false);
    feed(s, j_obs("failed"));
    EXPECT(s, STUCK_ALTERNATING_ACTION_OBSERVATION, false);
    stuck_free(s);

    /* A rejection is not an observation for this rule: it is skipped and the
     * pattern behind it still counts. */
    s = new_default();
    user(s);
    ab_cycle(s, 12);
    feed(s, j_reject("no"));
    EXPECT(s, STUCK_ALTERNATING_ACTION_OBSERVATION, false);
    stuck_free(s);

    s = new_with(4, 3, 3, 4);
    user(s);
    ab_cycle(s, 7);
    EXPECT(s, STUCK_NONE, false);
    feed(s, j_obs("failed"));
    EXPECT(s, STUCK_ALTERNATING_ACTION_OBSERVATION, false);
    stuck_free(s);
}
END_TEST

START_TEST(test_alternating_variants)
{
    /* errors count as observations here */
    stuck *s = new_default();
    user(s);
    for (int i = 0; i < 3; i++) {
        err_pair(s, "make", "compile error");
        err_pair(s, "test", "no binary");
    }
    EXPECT(s, STUCK_ALTERNATING_ACTION_OBSERVATION, false);
    stuck_free(s);

    /* A,B,A,B actions with observations that do not alternate */
    s = new_default();
    user(s);
    for (int i = 0; i < 6; i++) {
        char out[16];
        snprintf(out, sizeof out, "out %d", i);
        feed(s, j_action(i % 2 ? "test" : "make"));
        feed(s, j_obs(out));
    }
    EXPECT(s, STUCK_NONE, false);
    stuck_free(s);

    /* every position counts, the newest... */
    s = new_default();
    user(s);
    ab_cycle(s, 11);
    feed(s, j_obs("something else"));
    EXPECT(s, STUCK_NONE, false);
    stuck_free(s);

    /* ...and the oldest: C,B,A,B,A,B,A,B,A... */
    s = new_default();
    user(s);
    pair(s, "clean", "cleaned");
    ab_cycle(s, 10);
    EXPECT(s, STUCK_NONE, false);
    stuck_free(s);

    /* period 3 is not period 2 */
    s = new_default();
    user(s);
    static const char *cmd[] = {"a", "b", "c"};
    for (int i = 0; i < 9; i++)
        pair(s, cmd[i % 3], cmd[i % 3]);
    EXPECT(s, STUCK_NONE, false);
    stuck_free(s);

    /* the monologue rule is checked before */
    s = new_default();
    user(s);
    ab_cycle(s, 12);
    EXPECT(s, STUCK_ALTERNATING_ACTION_OBSERVATION, false);
    for (int i = 0; i < 3; i++)
        feed(s, j_message("agent", "hmm"));
    EXPECT(s, STUCK_MONOLOGUE, false);
    stuck_free(s);
}
END_TEST

/* The early exit counts min(action_observation, action_error, monologue)
 * and not alternating_pattern: with alternating_pattern 1 (where a single
 * action and observation already "alternate"), 2 events are still too few. */
START_TEST(test_early_exit)
{
    stuck *s = new_with(4, 3, 3, 1);
    user(s);
    pair(s, "ls", "a.txt");
    EXPECT(s, STUCK_NONE, false);
    feed(s, j_message("environment", "note"));
    EXPECT(s, STUCK_ALTERNATING_ACTION_OBSERVATION, false);
    stuck_free(s);

    s = new_with(4, 3, 2, 6);
    user(s);
    feed(s, j_message("agent", "one"));
    EXPECT(s, STUCK_NONE, false);
    feed(s, j_message("agent", "two"));
    EXPECT(s, STUCK_MONOLOGUE, false);
    stuck_free(s);
}
END_TEST

/* ------------------------------------------------------------- window --- */

START_TEST(test_window_cut_at_user_message)
{
    stuck *s = new_default();
    user(s);
    pair(s, "ls", "a.txt");
    user(s);
    for (int i = 0; i < 3; i++)
        pair(s, "ls", "a.txt");
    EXPECT(s, STUCK_NONE, false); /* the pair before the user message is gone */
    pair(s, "ls", "a.txt");
    EXPECT(s, STUCK_REPEATING_ACTION_OBSERVATION, false);
    user(s);
    EXPECT(s, STUCK_NONE, false);
    stuck_free(s);

    /* environment and hook messages do not reset */
    s = new_default();
    user(s);
    pair(s, "ls", "a.txt");
    feed(s, j_message("environment", "nudge"));
    pair(s, "ls", "a.txt");
    feed(s, j_message("hook", "keep going"));
    pair(s, "ls", "a.txt");
    EXPECT(s, STUCK_NONE, false);
    pair(s, "ls", "a.txt");
    EXPECT(s, STUCK_REPEATING_ACTION_OBSERVATION, false);
    stuck_free(s);
}
END_TEST

/* Only the last 20 events count; without a user message among them, all
 * 20 are analysed. */
START_TEST(test_window_is_twenty_events)
{
    for (int filler = 12; filler <= 13; filler++) {
        stuck *s = new_default();
        user(s);
        pair(s, "ls", "a.txt");
        for (int i = 0; i < filler; i++)
            feed(s, j_message("environment", "log line"));
        for (int i = 0; i < 3; i++)
            pair(s, "ls", "a.txt");
        /* 12 fillers: 21 events, the window is the 20 after the user
         * message, with 4 pairs; 13: the first action falls out too, its
         * observation stays, so 3 actions and 4 observations remain. */
        EXPECT(s, filler == 12 ? STUCK_REPEATING_ACTION_OBSERVATION : STUCK_NONE, false);
        stuck_free(s);
    }

    /* A long tail of fillers pushes a complete loop out of the window. */
    stuck *s = new_default();
    for (int i = 0; i < 4; i++)
        pair(s, "ls", "a.txt");
    EXPECT(s, STUCK_REPEATING_ACTION_OBSERVATION, false);
    for (int i = 0; i < 12; i++)
        feed(s, j_message("environment", "log line"));
    EXPECT(s, STUCK_REPEATING_ACTION_OBSERVATION, false); /* 4 pairs + 12 lines */
    feed(s, j_message("environment", "log line"));
    EXPECT(s, STUCK_NONE, false);
    stuck_free(s);
}
END_TEST

/* The ring grows with the conversation (4, 8, 16, then the window): a loop
 * that starts anywhere across a growth step is seen the same, in order. */
START_TEST(test_ring_grows_in_order)
{
    for (int filler = 0; filler <= 16; filler++) {
        stuck *s = new_default();
        for (int i = 0; i < filler; i++)
            feed(s, j_message("environment", "log line"));
        for (int i = 0; i < 3; i++)
            pair(s, "ls", "a.txt");
        EXPECT(s, STUCK_NONE, false);
        pair(s, "ls", "b.txt"); /* the newest pair differs: no loop */
        EXPECT(s, STUCK_NONE, false);
        for (int i = 0; i < 3; i++)
            pair(s, "ls", "b.txt");
        EXPECT(s, STUCK_REPEATING_ACTION_OBSERVATION, false);
        stuck_free(s);
    }
}
END_TEST

/* State updates are not tree nodes: they neither take room in the window
 * nor break the monologue walk. */
START_TEST(test_state_updates_ignored)
{
    stuck *s = new_default();
    user(s);
    for (int i = 0; i < 4; i++) {
        for (int k = 0; k < 10; k++)
            feed(s, j_state_update());
        pair(s, "ls", "a.txt");
    }
    for (int k = 0; k < 30; k++)
        feed(s, j_state_update());
    EXPECT(s, STUCK_REPEATING_ACTION_OBSERVATION, false);
    stuck_free(s);

    s = new_default();
    user(s);
    for (int i = 0; i < 3; i++) {
        feed(s, j_message("agent", "talking"));
        feed(s, j_state_update());
    }
    EXPECT(s, STUCK_MONOLOGUE, false);
    stuck_free(s);
}
END_TEST

/* ----------------------------------------------------------- equality --- */

/* Every pair differs in ids, timestamps, tool-call ids, raw arguments,
 * response ids, security risk and action ids (the builders make them
 * fresh), and in extras that are not compared. */
START_TEST(test_equality_ignores_ids)
{
    stuck *s = new_default();
    user(s);
    for (int i = 0; i < 4; i++) {
        json_t *a = j_action("ls");
        if (i % 2)
            json_object_set_new(a, "reasoning_content", json_string("hmm"));
        if (i == 2)
            json_object_set_new(a, "summary", json_string("listing"));
        feed(s, a);
        json_t *o = j_obs("a.txt");
        if (i == 1)
            json_object_set_new(o, "extended_content", text_list("extra"));
        feed(s, o);
    }
    EXPECT(s, STUCK_REPEATING_ACTION_OBSERVATION, false);
    stuck_free(s);

    /* errors compare on the text only: tool names and call ids may differ */
    s = new_default();
    user(s);
    static const char *tools[] = {"terminal", "file_editor", "browser", "terminal"};
    for (int i = 0; i < 4; i++) {
        feed(s, j_action("bad"));
        feed(s, j_error_full(tools[i], "boom"));
    }
    EXPECT(s, STUCK_REPEATING_ACTION_OBSERVATION, false);
    stuck_free(s);
}
END_TEST

/* The compared fields do matter: the newest event differs in one of them. */
START_TEST(test_equality_compares_fields)
{
    for (int variant = 0; variant < 5; variant++) {
        stuck *s = new_default();
        user(s);
        for (int i = 0; i < 3; i++)
            pair(s, "ls", "a.txt");
        switch (variant) {
        case 0: /* thought */
            feed(s, j_action_full("terminal", "ls", "let me look", 0));
            feed(s, j_obs("a.txt"));
            break;
        case 1: /* an action field */
            feed(s, j_action_full("terminal", "ls", NULL, 1));
            feed(s, j_obs("a.txt"));
            break;
        case 2: /* the action's tool name */
            feed(s, j_action_full("shell", "ls", NULL, 0));
            feed(s, j_obs("a.txt"));
            break;
        case 3: /* the observation's tool name */
            feed(s, j_action("ls"));
            feed(s, j_obs_full("shell", "a.txt"));
            break;
        default: { /* the observation's source */
            feed(s, j_action("ls"));
            json_t *o = j_obs("a.txt");
            json_object_set_new(o, "source", json_string("agent"));
            feed(s, o);
            break;
        }
        }
        stuck_verdict v;
        stuck_check(s, &v);
        ck_assert_msg(v.rule == STUCK_NONE, "variant %d: stuck (%s)", variant,
                      stuck_rule_name(v.rule));
        stuck_free(s);
    }
}
END_TEST

/* Equality is of meaning, not of bytes: object keys in another order and
 * null fields (the same as absent ones) still make the same action. */
START_TEST(test_equality_ignores_key_order_and_nulls)
{
    stuck *s = new_default();
    user(s);
    for (int i = 0; i < 3; i++)
        pair(s, "ls", "a.txt");
    EXPECT(s, STUCK_NONE, false);
    json_t *a = j_action("ls");
    json_object_set_new(a, "action",
                        json_pack("{s:s, s:b, s:n, s:b, s:s}", "kind", "TerminalAction", "reset", 0,
                                  "timeout", "is_input", 0, "command", "ls"));
    feed(s, a);
    feed(s, j_obs("a.txt"));
    EXPECT(s, STUCK_REPEATING_ACTION_OBSERVATION, false);
    stuck_free(s);
}
END_TEST

/* Different kinds are never equal, even when the observation list is
 * otherwise uniform. */
START_TEST(test_different_kinds_never_equal)
{
    stuck *s = new_default();
    user(s);
    for (int i = 0; i < 3; i++)
        pair(s, "ls", "boom");
    err_pair(s, "ls", "boom");
    EXPECT(s, STUCK_NONE, false);
    stuck_free(s);
}
END_TEST

/* Rejections compare on everything, ids included: identical rejections of
 * identical actions never make a loop, however many. */
START_TEST(test_rejections_never_equal)
{
    stuck *s = new_default();
    user(s);
    for (int i = 0; i < 9; i++) {
        feed(s, j_action("rm -rf /"));
        feed(s, j_reject("User rejected the action"));
        EXPECT(s, STUCK_NONE, false);
    }
    stuck_free(s);
}
END_TEST

/* --------------------------------------------------------------- long --- */

/* 100k events of a busy, varied conversation: never stuck, the live heap
 * does not grow (the detector keeps fingerprints, not events), and a loop
 * at the end is still found. */
START_TEST(test_long_conversation)
{
    stuck *s = new_default();
    const int total = 100000;
    size_t before = 0;
    stuck_verdict v;
    /* 16 steps, 29 events: a user message, state updates, an agent
     * message, a failed call and successful calls, every command new. */
    for (int i = 0, step = 0; i < total; step++) {
        char cmd[32], out[32];
        snprintf(cmd, sizeof cmd, "step %d", step);
        snprintf(out, sizeof out, "result %d", step);
        switch (step % 16) {
        case 0:
            user(s);
            i++;
            break;
        case 3:
            feed(s, j_state_update());
            i++;
            break;
        case 5:
            feed(s, j_message("agent", cmd));
            i++;
            break;
        case 9:
            err_pair(s, cmd, out);
            i += 2;
            break;
        default:
            pair(s, cmd, out);
            i += 2;
            break;
        }
        stuck_check(s, &v);
        ts_require(v.rule == STUCK_NONE && !v.nudge, "event %d: rule %s, nudge %d", i,
                   stuck_rule_name(v.rule), v.nudge);
        if (before == 0 && i >= 1000)
            before = mallinfo2().uordblks;
    }
    size_t after = mallinfo2().uordblks;
    /* Sanitizer builds replace malloc, so glibc's count says nothing there;
     * their leak checker covers that case at exit. */
    if (!TS_SANITIZED)
        ck_assert_msg(after <= before + 4096, "the live heap grew from %zu to %zu bytes", before,
                      after);

    for (int i = 0; i < 4; i++)
        pair(s, "ls", "a.txt");
    EXPECT(s, STUCK_REPEATING_ACTION_OBSERVATION, false);
    stuck_free(s);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("stuck");
    TCase *tc = tcase_create("vectors");
    tcase_add_test(tc, test_vectors);
    suite_add_tcase(s, tc);

    tc = tcase_create("rules");
    tcase_add_test(tc, test_defaults_and_names);
    tcase_add_test(tc, test_thresholds_below_one_are_defaults);
    tcase_add_test(tc, test_action_observation_boundary);
    tcase_add_test(tc, test_custom_action_observation_threshold);
    tcase_add_test(tc, test_mixed_custom_thresholds);
    tcase_add_test(tc, test_different_actions_or_observations);
    tcase_add_test(tc, test_action_error_nudge_then_stuck);
    tcase_add_test(tc, test_nudge_not_repeated_while_frozen);
    tcase_add_test(tc, test_nudge_again_for_a_new_streak);
    tcase_add_test(tc, test_nudge_before_rules);
    tcase_add_test(tc, test_custom_action_error_threshold);
    tcase_add_test(tc, test_error_streak_breaks);
    tcase_add_test(tc, test_nudge_text_truncated);
    tcase_add_test(tc, test_monologue_boundary);
    tcase_add_test(tc, test_monologue_walk);
    tcase_add_test(tc, test_alternating_boundary);
    tcase_add_test(tc, test_alternating_variants);
    tcase_add_test(tc, test_early_exit);
    suite_add_tcase(s, tc);

    tc = tcase_create("window");
    tcase_add_test(tc, test_window_cut_at_user_message);
    tcase_add_test(tc, test_window_is_twenty_events);
    tcase_add_test(tc, test_ring_grows_in_order);
    tcase_add_test(tc, test_state_updates_ignored);
    suite_add_tcase(s, tc);

    tc = tcase_create("equality");
    tcase_add_test(tc, test_equality_ignores_ids);
    tcase_add_test(tc, test_equality_compares_fields);
    tcase_add_test(tc, test_equality_ignores_key_order_and_nulls);
    tcase_add_test(tc, test_different_kinds_never_equal);
    tcase_add_test(tc, test_rejections_never_equal);
    suite_add_tcase(s, tc);

    tc = tcase_create("long");
    tcase_add_test(tc, test_long_conversation);
    suite_add_tcase(s, tc);
    return ts_run_suite(s);
}
