/*
 * embed_agent.c - parley embedded in a program: it hosts a conversation
 * and an agent of its own, an actor on parley's loops that posts tool
 * calls and their results through the compliance gate. Half-way through a
 * tool call the agent crashes (on purpose); the conversation's supervisor
 * restarts it, it finds where it was from the log, and goes on. At the end
 * the program checks that the log is valid: every call answered, in order,
 * nothing twice, and it prints what a subscription saw.
 *
 * Build against an installed parley:
 *   cc embed_agent.c $(pkg-config --cflags --libs parley) -o embed_agent
 *   ./embed_agent [DATA_DIR]        (default: a new temporary directory)
 * Exit status 0 when the log is as it should be.
 */
#define _GNU_SOURCE /* memmem */
#include <parley.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { STEPS = 5, CRASH_AT = 2, K_STEP = 1 };

/* What the agent is given at every (re)start: the conversation, and a way
 * to tell main() it is done. */
typedef struct agent_arg {
    pl_conv *conv;
    atomic_int crashes, starts;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done; /* 1 finished, -1 failed */
} agent_arg;

/* ---------------------------------------------------------- the agent --- */

static char *action_json(int i)
{
    char *s = malloc(1024);
    snprintf(s, 1024,
             "{\"id\":\"act-%d\",\"source\":\"agent\",\"thought\":[{\"type\":\"text\",\"text\":"
             "\"step %d\"}],\"action\":{\"command\":\"echo %d\",\"kind\":\"TerminalAction\"},"
             "\"tool_name\":\"terminal\",\"tool_call_id\":\"call-%d\",\"tool_call\":{\"id\":"
             "\"call-%d\",\"name\":\"terminal\",\"arguments\":\"{}\",\"origin\":\"completion\"},"
             "\"llm_response_id\":\"resp-%d\",\"kind\":\"ActionEvent\"}",
             i, i, i, i, i, i);
    return s;
}

static char *observation_json(int i)
{
    char *s = malloc(1024);
    snprintf(s, 1024,
             "{\"id\":\"obs-%d\",\"source\":\"environment\",\"tool_name\":\"terminal\","
             "\"tool_call_id\":\"call-%d\",\"observation\":{\"content\":[{\"type\":\"text\","
             "\"text\":\"%d\"}],\"kind\":\"TerminalObservation\"},\"action_id\":\"act-%d\","
             "\"kind\":\"ObservationEvent\"}",
             i, i, i, i);
    return s;
}

static char *final_message(void)
{
    return strdup("{\"id\":\"done\",\"source\":\"agent\",\"llm_message\":{\"role\":\"assistant\","
                  "\"content\":[{\"type\":\"text\",\"text\":\"all steps done\"}]},"
                  "\"kind\":\"MessageEvent\"}");
}

static void finish(agent_arg *a, int how)
{
    pthread_mutex_lock(&a->mu);
    a->done = how;
    pthread_cond_signal(&a->cv);
    pthread_mutex_unlock(&a->mu);
}

/* An append's answer, on the agent's loop: go on with the next step (a
 * message to itself: the handler, not this callback, owns its state). */
static void on_verdict(void *ctx, const pl_verdict *v)
{
    pl_actor *self = ctx;
    if (v->outcome != PL_COMMITTED && v->outcome != PL_DUPLICATE) {
        fprintf(stderr, "embed_agent: an append was %s: %s\n", pl_outcome_name(v->outcome),
                v->detail);
        return;
    }
    pl_send(self, K_STEP, 0, NULL, 0);
}

/* The next event the log lacks (the log is the agent's memory: after a
 * restart it starts from there), or NULL when the script is done. */
static char *next_event(pl_conv *c, int *step, int *half)
{
    uint64_t at;
    char id[32];
    for (int i = 0; i < STEPS; i++) {
        snprintf(id, sizeof(id), "act-%d", i);
        if (pl_find(c, id, &at) != 0) {
            *step = i, *half = 0;
            return action_json(i);
        }
        snprintf(id, sizeof(id), "obs-%d", i);
        if (pl_find(c, id, &at) != 0) {
            *step = i, *half = 1;
            return observation_json(i);
        }
    }
    *step = STEPS;
    return pl_find(c, "done", &at) != 0 ? final_message() : NULL;
}

static int agent_init(pl_actor *self, void *arg, void **state)
{
    agent_arg *a = arg;
    *state = a;
    atomic_fetch_add(&a->starts, 1);
    return pl_send(self, K_STEP, 0, NULL, 0); /* (re)start: find where it was */
}

static int agent_handle(pl_actor *self, void *state, const pl_msg *m)
{
    agent_arg *a = state;
    if (m->kind != K_STEP)
        return 0;
    int step, half;
    char *ev = next_event(a->conv, &step, &half);
    if (ev == NULL) {
        finish(a, 1);
        return 0;
    }
    /* the crash, once: a tool call made and its result not posted yet */
    if (step == CRASH_AT && half == 1 && atomic_load(&a->crashes) == 0) {
        atomic_fetch_add(&a->crashes, 1);
        printf("agent: crashing on purpose with call-%d pending\n", step);
        free(ev);
        return PL_EFAIL;
    }
    int r = pl_append(a->conv, ev, strlen(ev), on_verdict, self);
    free(ev);
    if (r != 0) {
        fprintf(stderr, "embed_agent: cannot append: %s\n", pl_strerror(r));
        finish(a, -1);
    }
    return 0;
}

static const pl_behaviour agent = {.name = "scripted-agent",
                                   .init = agent_init,
                                   .handle = agent_handle};

/* -------------------------------------------------------- the watcher --- */

static atomic_int seen;

static void on_event(void *ctx, const pl_event *e)
{
    (void)ctx;
    atomic_fetch_add(&seen, 1);
    printf("event %llu: %.*s\n", (unsigned long long)e->index, (int)(e->len < 110 ? e->len : 110),
           e->json);
}

/* ------------------------------------------------------------- checks --- */

static int fail(const char *what)
{
    fprintf(stderr, "embed_agent: FAILED: %s\n", what);
    return 1;
}

/* Every action answered by its observation right after it, each once, and
 * the final message last. */
static int check_log(pl_conv *c)
{
    pl_page *pg;
    if (pl_read(c, 0, 1000, &pg) != 0)
        return fail("cannot read the log");
    int r = 0, expect = 0;
    for (size_t i = 0; i < pl_page_len(pg) && r == 0; i++) {
        pl_event e = pl_page_event(pg, i);
        char want[32];
        if (expect < 2 * STEPS)
            snprintf(want, sizeof(want), "\"id\":\"%s-%d\"", expect % 2 ? "obs" : "act",
                     expect / 2);
        else
            snprintf(want, sizeof(want), "\"id\":\"done\"");
        static const char update[] = "\"source\":\"environment\",\"key\"";
        if (memmem(e.json, e.len, update, sizeof(update) - 1) != NULL)
            continue; /* a status update of the conversation's own */
        if (memmem(e.json, e.len, want, strlen(want)) == NULL)
            r = fail("the log is not action, observation, action, ... then the message");
        expect++;
    }
    if (r == 0 && expect != 2 * STEPS + 1)
        r = fail("events are missing from the log");
    pl_page_free(pg);
    return r;
}

/* An answer main() waits for. */
typedef struct answer {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done;
    pl_outcome outcome;
} answer;

static void on_answer(void *ctx, const pl_verdict *v)
{
    answer *w = ctx;
    printf("gate: %s: %s\n", pl_outcome_name(v->outcome), v->detail);
    pthread_mutex_lock(&w->mu);
    w->outcome = v->outcome;
    w->done = 1;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

int main(int argc, char **argv)
{
    char tmp[] = "/tmp/parley-embed-XXXXXX";
    const char *data = argc > 1 ? argv[1] : mkdtemp(tmp);
    if (data == NULL)
        return fail("cannot make a temporary directory");
    pl_options o = {.workers = 2, .data_dir = data, .sup_intensity = 3};
    pl_instance *p;
    char err[256];
    if (pl_open(&o, &p, err, sizeof(err)) != 0) {
        fprintf(stderr, "embed_agent: %s\n", err);
        return 1;
    }
    pl_conv *c;
    pl_conv_options co = {.meta_json = "{\"title\":\"an embedded agent\"}"};
    if (pl_conv_create(p, &co, &c) != 0)
        return fail("cannot create a conversation");
    printf("conversation %s in %s\n", pl_conv_id(c), data);

    pl_sub *sub;
    pl_sub_callbacks cb = {.event = on_event};
    if (pl_subscribe(c, 0, &cb, NULL, &sub) != 0)
        return fail("cannot subscribe");

    agent_arg a = {.conv = c};
    pthread_mutex_init(&a.mu, NULL);
    pthread_cond_init(&a.cv, NULL);
    pl_spawn_options so = {.beh = &agent, .arg = &a, .restart = PL_PERMANENT};
    pl_actor *actor;
    if (pl_conv_attach(c, &so, &actor) != 0)
        return fail("cannot attach the agent");
    pthread_mutex_lock(&a.mu);
    while (a.done == 0)
        pthread_cond_wait(&a.cv, &a.mu);
    pthread_mutex_unlock(&a.mu);

    /* the gate still guards the log: a result for a call nobody made */
    answer rejected = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
    const char *bad = "{\"id\":\"stray\",\"source\":\"environment\",\"tool_name\":\"terminal\","
                      "\"tool_call_id\":\"call-99\",\"observation\":{\"content\":[],\"kind\":"
                      "\"TerminalObservation\"},\"action_id\":\"x\",\"kind\":\"ObservationEvent\"}";
    if (pl_append(c, bad, strlen(bad), on_answer, &rejected) != 0)
        return fail("cannot append");
    pthread_mutex_lock(&rejected.mu);
    while (!rejected.done)
        pthread_cond_wait(&rejected.cv, &rejected.mu);
    pthread_mutex_unlock(&rejected.mu);

    pl_info info;
    int r = a.done == 1 ? 0 : fail("the agent did not finish");
    if (r == 0 && pl_conv_info(c, &info) == 0) {
        printf("status %s, %llu events, %zu tool calls pending; the agent started %d times\n",
               pl_status_name(info.status), (unsigned long long)info.events,
               info.pending_tool_calls, atomic_load(&a.starts));
        if (info.pending_tool_calls != 0)
            r = fail("a tool call is still pending");
        pl_info_clear(&info);
    }
    if (r == 0 && atomic_load(&a.starts) < 2)
        r = fail("the agent was not restarted");
    if (r == 0 && rejected.outcome != PL_REJECTED)
        r = fail("the gate let a stray result in");
    if (r == 0)
        r = check_log(c);
    pl_unsubscribe(sub);
    pl_actor_release(actor);
    pl_conv_release(c);
    pl_close(p);
    pthread_mutex_destroy(&a.mu);
    pthread_cond_destroy(&a.cv);
    if (r == 0)
        printf("ok: %d events seen by the subscription; the log is valid\n", atomic_load(&seen));
    return r;
}
