/*
 * test_equivalence.c - `parley lint` and a live conversation say the same.
 *
 * Every public vector (compliance and stuck) and a set of generated event
 * streams are played twice: offline, through the replay lint uses
 * (actors/replay.h), and live, through a real conversation actor on a real
 * store, one append at a time with a sync after each (so that the stuck
 * detector has spoken before the next event, as lint assumes). Then:
 * - every producer gets the same answer: the same HTTP status (the one
 *   net/ gives), and for refusals the same rule, detail and pending calls;
 * - the logs are the same: the same events in the same order, the
 *   conversation's own (status updates, stuck findings, nudges,
 *   violations, expired deferrals) included. Ids and timestamps the
 *   conversation made are random or the time of day, so they are
 *   compared by where they point (an id by its event's index).
 * Both policies are played. Holds and deferrals wait as long as the test
 * runs; after the last step everything expires on both sides.
 */
#include "support_conv.h"

#include "actors/replay.h"
#include "net/verdict.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_STEPS = 400, STREAMS = 40 };

/* ------------------------------------------------------------- answers --- */

/* An answer as compared: the status net/ gives it, and for refusals what
 * they say. */
typedef struct said {
    bool done;
    int status;
    char text[1400]; /* rule | detail | pending ids */
} said;

static void said_json(said *s, int status, const char *body)
{
    s->done = true;
    s->status = status;
    s->text[0] = '\0';
    if (status == 201 || status == 202 || status == 200 || body == NULL)
        return;
    json_t *j = json_loads(body, 0, NULL);
    char *pending = json_dumps(json_object_get(j, "pending_tool_call_ids"), JSON_ENCODE_ANY);
    snprintf(s->text, sizeof(s->text), "%s | %s | %s",
             json_string_value(json_object_get(j, "rule"))
                 ? json_string_value(json_object_get(j, "rule"))
                 : "-",
             json_string_value(json_object_get(j, "detail"))
                 ? json_string_value(json_object_get(j, "detail"))
                 : "-",
             pending != NULL ? pending : "-");
    free(pending);
    json_decref(j);
}

/* The replay's verdict as net/ would answer it. */
static void said_verdict(said *s, const seq_verdict *v)
{
    static const pl_outcome of[] = {
        [SEQ_ACCEPTED] = PL_COMMITTED, [SEQ_DUPLICATE] = PL_DUPLICATE, [SEQ_DEFERRED] = PL_DEFERRED,
        [SEQ_HELD] = PL_HELD,          [SEQ_REJECTED] = PL_REJECTED,   [SEQ_INVALID] = PL_INVALID,
        [SEQ_CONFLICT] = PL_CONFLICT,  [SEQ_BUSY] = PL_BUSY,           [SEQ_FAILED] = PL_FAILED,
        [SEQ_DONE] = PL_DONE};
    char full[1300];
    const char *pending[64];
    size_t np = json_array_size(v->pending) < 64 ? json_array_size(v->pending) : 64;
    for (size_t i = 0; i < np; i++)
        pending[i] = json_string_value(json_array_get(v->pending, i));
    snprintf(full, sizeof(full), "%s: %s", gate_rule_name(v->rule), v->detail ? v->detail : "");
    pl_verdict pv = {.outcome = of[v->kind],
                     .detail = v->kind == SEQ_REJECTED ? full
                               : v->detail             ? v->detail
                                                       : "",
                     .rule = v->kind == SEQ_REJECTED ? gate_rule_name(v->rule) : NULL,
                     .event_id = v->event_id,
                     .pending = pending,
                     .npending = np,
                     .retry_after = v->retry_after};
    rt_buf *body;
    unsigned retry;
    int status = net_verdict_http(&pv, &body, &retry);
    char *text = body != NULL ? strndup((const char *)rt_buf_data(body), rt_buf_len(body)) : NULL;
    said_json(s, status, text);
    free(text);
    rt_buf_unref(body);
}

/* ---------------------------------------------------------- the replay --- */

typedef struct offline {
    said answers[MAX_STEPS];
    json_t *log;
} offline;

/* What the generated streams made happen, over all of them: each kind of
 * decision, each rule, the conversation's own events by kind, restarts. */
static unsigned seen_kind[SEQ_DONE + 1], seen_rule[GATE_INVALID_EVENT + 1], seen_stuck, seen_nudge,
    seen_restart, seen_released;

static void decided(void *ctx, const ev *e, const seq_verdict *v, seq_was was, uint64_t index,
                    void *tag)
{
    (void)ctx;
    (void)index;
    (void)tag;
    seen_kind[v->kind]++;
    if (v->kind == SEQ_REJECTED || (v->kind == SEQ_ACCEPTED && v->rule != GATE_OK))
        seen_rule[v->rule]++;
    if (v->kind == SEQ_ACCEPTED && (was == SEQ_WAS_HELD || was == SEQ_WAS_DEFERRED))
        seen_released++;
    const char *code = ev_string(e, "code");
    if (was == SEQ_OWN && code != NULL && strcmp(code, "StuckPatternDetected") == 0)
        seen_stuck++;
    if (was == SEQ_OWN && e->kind == EV_MESSAGE)
        seen_nudge++;
}

static void answered(void *ctx, void *token, const seq_verdict *v)
{
    offline *o = ctx;
    size_t k = (size_t)(uintptr_t)token - 1;
    if (k < MAX_STEPS && !o->answers[k].done)
        said_verdict(&o->answers[k], v);
}

static void durable(void *ctx, const seq_unit *u, uint64_t first)
{
    (void)first;
    offline *o = ctx;
    for (size_t i = 0; i < u->n; i++)
        json_array_append_new(o->log, json_loadb((const char *)rt_buf_data(u->items[i].bytes),
                                                 rt_buf_len(u->items[i].bytes), 0, NULL));
}

/* ------------------------------------------------------------- the logs --- */

/* Ids the conversation made that are in no event's id (the id of a
 * message that was deferred, then expired, in a detail) as "<id>". */
static void unuuid(char *s)
{
    static const char shape[] = "xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx";
    for (char *p = s; *p != '\0'; p++) {
        size_t k = 0;
        for (; shape[k] != '\0' && p[k] != '\0'; k++)
            if (shape[k] == '-' ? p[k] != '-' : strchr("0123456789abcdef", p[k]) == NULL)
                break;
        if (shape[k] == '\0') {
            memcpy(p, "<id>", 4);
            memmove(p + 4, p + k, strlen(p + k) + 1);
        }
    }
}

/* Each event with the ids it names replaced by the index of the event
 * that has them ("@3"), timestamps left out, as canonical text. */
static json_t *normalized(json_t *log)
{
    json_t *where = json_object(), *out = json_array(), *e;
    size_t i;
    json_array_foreach(log, i, e)
    {
        const char *id = json_string_value(json_object_get(e, "id"));
        if (id != NULL && json_object_get(where, id) == NULL)
            json_object_set_new(where, id, json_sprintf("@%zu", i));
    }
    static const char *const refs[] = {"id", "parent_id", "action_id"};
    json_array_foreach(log, i, e)
    {
        json_t *c = json_deep_copy(e);
        json_object_del(c, "timestamp");
        for (size_t k = 0; k < 3; k++) {
            const char *ref = json_string_value(json_object_get(c, refs[k]));
            json_t *at = ref != NULL ? json_object_get(where, ref) : NULL;
            if (at != NULL)
                json_object_set(c, refs[k], at);
        }
        char *s = ev_canonical_json(c);
        unuuid(s);
        json_array_append_new(out, json_string(s));
        free(s);
        json_decref(c);
    }
    json_decref(where);
    return out;
}

/* --------------------------------------------------------- one playing --- */

typedef struct steps {
    size_t n;
    json_t *step[MAX_STEPS]; /* an event, or NULL for a restart */
} steps;

/* Play steps both ways; a malloc'd description of the first difference,
 * or NULL. */
static char *play(const char *name, const steps *st, conv_policy policy, const char *meta,
                  const stuck_thresholds *th)
{
    offline *off = calloc(1, sizeof(*off));
    off->log = json_array();
    replay_opts ro = {
        .seq = {.policy = policy, .hold_timeout_ms = 3600 * 1000, .defer_timeout_ms = 3600 * 1000}};
    if (th != NULL)
        ro.stuck = *th;
    replay_hooks h = {.ctx = off, .decided = decided, .answered = answered, .durable = durable};
    replay *rp = replay_new(&ro, &h);
    tc_env e = {.meta = meta};
    conv_opts co = {
        .policy = policy, .hold_timeout_ms = 3600 * 1000, .defer_timeout_ms = 3600 * 1000};
    tc_start(&e, NULL, &co, ST_FULL);
    tc_slot *slots[MAX_STEPS] = {0};
    size_t appended = 0;
    for (size_t i = 0; i < st->n; i++) {
        if (st->step[i] == NULL) { /* a restart, when nothing is held on either side */
            bool held = seq_held(replay_seq(rp)) > 0;
            for (size_t k = 0; k < appended && !held; k++)
                held = !tc_done(slots[k]);
            if (held)
                continue;
            replay_restart(rp);
            tc_restart(&e);
            seen_restart++;
            continue;
        }
        char err[256];
        ev one;
        uintptr_t token = appended + 1;
        json_t *mine = json_deep_copy(st->step[i]); /* stamping writes into it */
        int bad = seq_event(mine, &one, err, sizeof(err));
        json_decref(mine);
        if (bad == 0)
            replay_offer(rp, &one, (void *)token);
        else { /* as the live conversation answers it */
            json_t *d = json_pack("{s:s}", "detail", err);
            char *text = json_dumps(d, JSON_COMPACT);
            said_json(&off->answers[appended], 422, text);
            free(text);
            json_decref(d);
        }
        char *body = json_dumps(st->step[i], JSON_COMPACT);
        slots[appended++] = tc_request(&e, CONV_APPEND, 0, body);
        free(body);
        tc_sync(&e);
    }
    replay_end(rp);
    ck_assert_int_eq(tc_call(&e, CONV_EXPIRE, 0, NULL, NULL), 200);
    tc_sync(&e);
    char *diff = NULL;
    for (size_t k = 0; k < appended && diff == NULL; k++) {
        ck_assert_msg(tc_wait(slots[k]), "%s: no live answer to step %zu", name, k + 1);
        said live;
        said_json(&live, slots[k]->code, slots[k]->body);
        said *o = &off->answers[k];
        if (!o->done || o->status != live.status || strcmp(o->text, live.text) != 0) {
            diff = malloc(4096);
            snprintf(diff, 4096, "%s (%s): append %zu: lint says %d %s, live says %d %s", name,
                     policy == CONV_OBSERVE ? "observe" : "reject", k + 1, o->status, o->text,
                     live.status, live.text);
        }
    }
    json_t *live_log = tc_log(&e);
    json_t *a = normalized(off->log), *b = normalized(live_log);
    for (size_t k = 0; diff == NULL && k < json_array_size(a) + 1; k++) {
        json_t *x = json_array_get(a, k), *y = json_array_get(b, k);
        if ((x == NULL) != (y == NULL) || (x != NULL && !json_equal(x, y))) {
            diff = malloc(4096);
            snprintf(diff, 4096, "%s (%s): log event %zu: lint has %s, live has %s", name,
                     policy == CONV_OBSERVE ? "observe" : "reject", k,
                     x ? json_string_value(x) : "nothing", y ? json_string_value(y) : "nothing");
        }
        if (x == NULL && y == NULL)
            break;
    }
    json_decref(a);
    json_decref(b);
    json_decref(live_log);
    for (size_t k = 0; k < appended; k++)
        tc_slot_free(slots[k]);
    tc_finish(&e);
    replay_free(rp);
    json_decref(off->log);
    free(off);
    return diff;
}

/* ------------------------------------------------------------- vectors --- */

static char *shared_dir(const char *sub)
{
    const char *base = getenv("PARLEY_SHARED_DIR");
    if (base == NULL)
        base = PARLEY_SHARED_DIR;
    char *path = malloc(strlen(base) + strlen(sub) + 16);
    sprintf(path, "%s/vectors/%s", base, sub);
    return path;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Both policies over every vector of a folder; the number that differ. */
static int vectors(const char *sub)
{
    char *dir = shared_dir(sub);
    DIR *d = opendir(dir);
    ck_assert_msg(d != NULL, "the test vectors are missing: %s (set PARLEY_SHARED_DIR)", dir);
    char *names[256];
    size_t n = 0;
    for (struct dirent *de; (de = readdir(d)) != NULL && n < 256;)
        if (strlen(de->d_name) > 5 && strcmp(de->d_name + strlen(de->d_name) - 5, ".json") == 0)
            names[n++] = strdup(de->d_name);
    closedir(d);
    qsort(names, n, sizeof(*names), cmp_str);
    ck_assert_msg(n > 0, "no vectors in %s", dir);
    int failed = 0;
    for (size_t i = 0; i < n; i++) {
        char path[1024];
        snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
        json_t *v = json_load_file(path, 0, NULL);
        ck_assert_ptr_nonnull(v);
        steps st = {0};
        json_t *list = json_object_get(v, "steps"), *x;
        size_t k;
        json_array_foreach(list != NULL ? list : json_object_get(v, "events"), k, x)
        {
            json_t *ap = list != NULL ? json_object_get(x, "append") : x;
            st.step[st.n++] = ap; /* NULL: a restart */
        }
        json_t *t = json_object_get(v, "thresholds");
        char *meta = NULL;
        stuck_thresholds th;
        stuck_defaults(&th);
        if (json_is_object(t)) {
            json_t *m = json_pack("{s:O}", "stuck_detection_thresholds", t);
            meta = json_dumps(m, JSON_COMPACT);
            json_decref(m);
            json_t *f;
            if ((f = json_object_get(t, "action_observation")) != NULL)
                th.action_observation = (int)json_integer_value(f);
            if ((f = json_object_get(t, "action_error")) != NULL)
                th.action_error = (int)json_integer_value(f);
            if ((f = json_object_get(t, "monologue")) != NULL)
                th.monologue = (int)json_integer_value(f);
            if ((f = json_object_get(t, "alternating_pattern")) != NULL)
                th.alternating_pattern = (int)json_integer_value(f);
        }
        for (int p = 0; p < 2; p++) {
            char *diff = play(names[i], &st, p ? CONV_OBSERVE : CONV_REJECT, meta, &th);
            if (diff != NULL) {
                fprintf(stderr, "DIFFER %s\n", diff);
                failed++;
                free(diff);
            }
        }
        free(meta);
        json_decref(v);
        free(names[i]);
    }
    free(dir);
    return failed;
}

START_TEST(test_compliance_vectors)
{
    ck_assert_int_eq(vectors("compliance"), 0);
}
END_TEST

START_TEST(test_stuck_vectors)
{
    ck_assert_int_eq(vectors("stuck"), 0);
}
END_TEST

/* ----------------------------------------------------- generated streams --- */

static uint64_t rng;

static unsigned roll(unsigned n)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (unsigned)(rng % n);
}

/* A stream that wanders through everything the rules look at: turns of
 * one or several calls (sometimes from another LLM response), results
 * matching or not, twice, early (naming a parent to come), agent errors
 * and rejections, messages from every source while calls are pending,
 * parents right, stale and unknown, retries and reused ids, status
 * updates, the same failing call again and again (stuck, nudges),
 * events without ids, and restarts. */
static void generate(steps *st, unsigned len)
{
    char *made[MAX_STEPS];
    size_t nmade = 0;
    unsigned calls = 0, seq = 0;
    st->n = 0;
    static const char *const sources[] = {"user", "agent", "environment", "hook"};
    static const char *const statuses[] = {"\"running\"", "\"finished\"",
                                           "\"paused\"",  "\"idle\"",
                                           "\"error\"",   "\"waiting_for_confirmation\""};
    while (st->n < len) {
        char id[32], call[32], resp[32];
        snprintf(id, sizeof(id), "g%u", ++seq);
        snprintf(call, sizeof(call), "c%u", calls - roll(3 > calls ? calls + 1 : 3));
        snprintf(resp, sizeof(resp), "r%u", calls / 2 + roll(2));
        char *text = NULL;
        switch (roll(16)) {
        case 0:
        case 1:
        case 2: /* a new call, or (sometimes) one used before */
            snprintf(call, sizeof(call), "c%u",
                     calls > 0 && roll(5) == 0 ? calls - roll(calls) : ++calls);
            text = tc_ev_action(id, call, resp, roll(3) == 0 ? "ls" : "make");
            break;
        case 3:
        case 4:
        case 5:
            text = tc_ev_obs(id, call, "g1", roll(2) ? "ok" : "done");
            break;
        case 6:
            text = tc_ev_agent_error(id, call, "Command 'x' not found");
            break;
        case 7:
            text = tc_ev_reject(id, call, "g1");
            break;
        case 8:
        case 9:
            text = tc_ev_msg(id, sources[roll(4)], "hello");
            break;
        case 10: /* a retry, or another event under a used id */
            if (nmade > 0) {
                text = strdup(made[roll((unsigned)nmade)]);
                if (roll(3) == 0)
                    text = tc_ev_with(text, "source", "\"hook\"");
            }
            break;
        case 11:
            text = tc_ev_state(id, "execution_status", statuses[roll(6)]);
            break;
        case 12: { /* parents: a known one (head or stale), or one to come */
            char parent[32];
            snprintf(parent, sizeof(parent), "g%u",
                     roll(2) ? seq - 1 - roll(seq) : seq + 1 + roll(2));
            char *quoted = tc_fmt("\"%s\"", parent);
            text = tc_ev_with(tc_ev_msg(id, "environment", "child"), "parent_id", quoted);
            free(quoted);
            break;
        }
        case 13:
            if (roll(4) == 0) {
                st->step[st->n++] = NULL; /* a restart */
                continue;
            }
            text = tc_fmt("{\"source\":\"user\",\"llm_message\":{\"role\":\"user\",\"content\":"
                          "[{\"type\":\"text\",\"text\":\"no id\"}]},\"kind\":\"MessageEvent\"}");
            break;
        default: /* the same call failing, again and again */
            snprintf(call, sizeof(call), "c%u", ++calls);
            text = tc_ev_action(id, call, resp, "invalid_command");
            st->step[st->n++] = tc_json(text);
            made[nmade++] = text;
            snprintf(id, sizeof(id), "g%u", ++seq);
            text = tc_ev_agent_error(id, call, "Command 'invalid_command' not found");
            break;
        }
        if (text != NULL && st->n >= len)
            free(text);
        if (text == NULL || st->n >= len)
            continue;
        st->step[st->n++] = tc_json(text);
        made[nmade++] = text;
    }
    for (size_t i = 0; i < nmade; i++)
        free(made[i]);
}

START_TEST(test_generated_streams)
{
    memset(seen_kind, 0, sizeof(seen_kind));
    memset(seen_rule, 0, sizeof(seen_rule));
    seen_stuck = seen_nudge = seen_restart = seen_released = 0;
    int failed = 0;
    for (unsigned s = 0; s < STREAMS; s++) {
        rng = 0x9e3779b97f4a7c15ULL * (s + 1);
        steps st;
        generate(&st, 30 + roll(30));
        char name[32];
        snprintf(name, sizeof(name), "stream %u", s);
        stuck_thresholds th;
        stuck_defaults(&th);
        char *diff = play(name, &st, s % 2 ? CONV_OBSERVE : CONV_REJECT, NULL, &th);
        if (diff != NULL) {
            fprintf(stderr, "DIFFER %s\n", diff);
            failed++;
            free(diff);
        }
        for (size_t i = 0; i < st.n; i++)
            json_decref(st.step[i]);
    }
    ck_assert_int_eq(failed, 0);
    /* the streams went where they were meant to */
    static const seq_kind kinds[] = {SEQ_ACCEPTED, SEQ_DUPLICATE, SEQ_DEFERRED,
                                     SEQ_HELD,     SEQ_REJECTED,  SEQ_INVALID};
    for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++)
        ck_assert_msg(seen_kind[kinds[i]] > 0, "no decision of kind %d", (int)kinds[i]);
    for (int r = GATE_INTERLEAVED_MESSAGE; r <= GATE_DUPLICATE_EVENT_ID; r++)
        ck_assert_msg(seen_rule[r] > 0, "rule %s never applied", gate_rule_name((gate_rule)r));
    ck_assert_msg(seen_stuck > 0 && seen_nudge > 0 && seen_restart > 0 && seen_released > 0,
                  "stuck %u, nudges %u, restarts %u, released %u", seen_stuck, seen_nudge,
                  seen_restart, seen_released);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("equivalence");
    TCase *tc = tcase_create("equivalence");
    tcase_add_test(tc, test_compliance_vectors);
    tcase_add_test(tc, test_stuck_vectors);
    tcase_add_test(tc, test_generated_streams);
    suite_add_tcase(s, tc);
    return ts_run_suite(s);
}
