/*
 * bench_conversation.c - `parley bench conversation`: the full path of an
 * event (validate, gate, stamp, serialize, durable append, answer) through
 * real conversation actors and store, and opening a 1M-event conversation.
 *
 *  path   16 conversations, each fed by a producer actor that streams the
 *         cycle an agent produces (user message, action, observation, agent
 *         message; 0.5-4 KiB each) with up to 16 events in flight, durable
 *         `full`. Reported: events/s, and the gate's share of the process'
 *         CPU time (the actors time their gate calls with the monotonic clock).
 *  open   a conversation of 1M small events whose last action is pending,
 *         built through the actor; then the time from a fresh start to the
 *         conversation answering, and whether it knows the call is pending.
 */
#include "cli.h"

#include "actors/conversation.h"
#include "runtime/log.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

enum { CONVS = 16, WINDOW = 16, K_GO = RT_KIND_RANGE(9) };

typedef struct shared {
    uint64_t per_conv;
    _Atomic int errors;
    _Atomic int done;
    double t1;
    uv_sem_t finished;
    char err[256];
} shared;

typedef struct producer {
    shared *s;
    rt_actor *conv;
    int n; /* conversation number */
    uint64_t sent, acked;
} producer;

/* A pool of text generated once: events take slices of it at varying
 * places, so that producing them costs the producer next to nothing. */
static char text_pool[1 << 16];
static pthread_once_t text_once = PTHREAD_ONCE_INIT;

static void make_pool(void)
{
    uint64_t seed = 42;
    for (size_t i = 0; i < sizeof(text_pool); i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        text_pool[i] = (seed >> 40) % 7 == 0 ? ' ' : (char)('a' + (seed >> 33) % 26);
    }
}

static void fill(char *p, size_t len, uint64_t seed)
{
    pthread_once(&text_once, make_pool);
    size_t at = (size_t)(seed % (sizeof(text_pool) - len));
    memcpy(p, text_pool + at, len);
    p[len] = '\0';
}

/* See cli.h. */
rt_buf *bench_cycle_event(int n, uint64_t seq)
{
    char pad[4096], out[8192];
    uint64_t turn = seq / 4, seed = seq * 2654435761u + (uint64_t)n;
    int len = 0;
    switch (seq % 4) {
    case 0:
        fill(pad, 400 + seed % 600, seed);
        len = snprintf(
            out, sizeof(out),
            "{\"id\":\"c%d-%llu\",\"source\":\"user\",\"llm_message\":{\"role\":\"user\","
            "\"content\":[{\"type\":\"text\",\"text\":\"%s\"}]},\"kind\":\"MessageEvent\"}",
            n, (unsigned long long)seq, pad);
        break;
    case 1:
        fill(pad, 400 + seed % 800, seed);
        len =
            snprintf(out, sizeof(out),
                     "{\"id\":\"c%d-%llu\",\"source\":\"agent\",\"thought\":[{\"type\":\"text\","
                     "\"text\":\"%s\"}],\"action\":{\"command\":\"ls -la /tmp/%llu\","
                     "\"is_input\":false,\"reset\":false,\"kind\":\"TerminalAction\"},"
                     "\"tool_name\":\"terminal\",\"tool_call_id\":\"call_%llu\",\"tool_call\":{"
                     "\"id\":\"call_%llu\",\"name\":\"terminal\",\"arguments\":\"{}\","
                     "\"origin\":\"completion\"},\"llm_response_id\":\"resp_%llu\","
                     "\"kind\":\"ActionEvent\"}",
                     n, (unsigned long long)seq, pad, (unsigned long long)turn,
                     (unsigned long long)turn, (unsigned long long)turn, (unsigned long long)turn);
        break;
    case 2:
        fill(pad, 900 + seed % 3000, seed);
        len =
            snprintf(out, sizeof(out),
                     "{\"id\":\"c%d-%llu\",\"source\":\"environment\",\"tool_name\":\"terminal\","
                     "\"tool_call_id\":\"call_%llu\",\"observation\":{\"content\":[{\"type\":"
                     "\"text\",\"text\":\"%s\"}],\"is_error\":false,\"command\":\"ls\","
                     "\"exit_code\":0,\"kind\":\"TerminalObservation\"},\"action_id\":\"c%d-%llu\","
                     "\"kind\":\"ObservationEvent\"}",
                     n, (unsigned long long)seq, (unsigned long long)turn, pad, n,
                     (unsigned long long)(seq - 1));
        break;
    default:
        fill(pad, 400 + seed % 1500, seed);
        len = snprintf(out, sizeof(out),
                       "{\"id\":\"c%d-%llu\",\"source\":\"agent\",\"llm_message\":{\"role\":"
                       "\"assistant\",\"content\":[{\"type\":\"text\",\"text\":\"%s\"}]},"
                       "\"llm_response_id\":\"done_%llu\",\"kind\":\"MessageEvent\"}",
                       n, (unsigned long long)seq, pad, (unsigned long long)turn);
    }
    return rt_buf_copy(out, (size_t)len);
}

static void send_next(rt_actor *self, producer *p)
{
    rt_buf *b = bench_cycle_event(p->n, p->sent);
    if (b == NULL || rt_ask(p->conv, CONV_APPEND, 0, b, self) < 0) {
        rt_buf_unref(b);
        atomic_fetch_add(&p->s->errors, 1);
        return;
    }
    p->sent++;
}

static int producer_handle(rt_actor *self, void *state, rt_msg *m)
{
    producer *p = state;
    if (m->kind == K_GO) {
        while (p->sent < p->s->per_conv && p->sent < WINDOW)
            send_next(self, p);
        return 0;
    }
    const conv_reply *cr = m->kind == CONV_RESULT ? conv_reply_of(m) : NULL;
    if (cr == NULL || cr->v.outcome != PL_COMMITTED) {
        if (atomic_fetch_add(&p->s->errors, 1) == 0)
            snprintf(p->s->err, sizeof(p->s->err), "an append was answered %s: %s",
                     cr != NULL ? pl_outcome_name(cr->v.outcome) : rt_strerror(m->status),
                     cr != NULL ? cr->v.detail : "");
    }
    p->acked++;
    if (p->sent < p->s->per_conv)
        send_next(self, p);
    if (p->acked == p->s->per_conv && atomic_fetch_add(&p->s->done, 1) + 1 == CONVS) {
        p->s->t1 = cli_now_s();
        uv_sem_post(&p->s->finished);
    }
    return 0;
}

static const rt_behaviour producer_beh = {.name = "bench-producer", .handle = producer_handle};

/* --------------------------------------------------------- the server --- */

typedef struct server {
    st_store *store;
    rt_runtime *rt;
    convs *svc;
} server;

static void server_start(server *s, const char *dir, st_durability d)
{
    /* the local store: the open figure rewrites a conversation's state.json
     * in its directory, as a crash leaves it */
    char where[4200];
    snprintf(where, sizeof(where), "local:%s", dir);
    st_opts so = {.dir = where, .durability = d};
    char err[512];
    conv_opts co = {.measure = true};
    rt_opts ro = {.loops = 0};
    if (st_store_open(&so, &s->store, err, sizeof(err)) != 0 || rt_runtime_new(&ro, &s->rt) != 0 ||
        convs_new(s->rt, s->store, &co, &s->svc) != 0) {
        fprintf(stderr, "parley bench conversation: cannot start: %s\n", err);
        exit(CLI_FAIL);
    }
}

static void server_stop(server *s)
{
    rt_runtime_wait(s->rt);
    st_store_close(s->store);
    convs_free(s->svc);
    rt_runtime_free(s->rt);
}

typedef struct answer {
    uv_sem_t sem;
    int code;        /* the outcome, or the runtime's error */
    conv_reply info; /* what the conversation said it knows (its pointers dangle) */
    char detail[256];
} answer;

static void on_answer(void *ctx, rt_msg *m)
{
    answer *a = ctx;
    const conv_reply *cr = m->kind == CONV_RESULT ? conv_reply_of(m) : NULL;
    a->code = cr != NULL ? (int)cr->v.outcome : m->status;
    if (cr != NULL) {
        a->info = *cr;
        snprintf(a->detail, sizeof(a->detail), "%s", cr->v.detail);
    }
    uv_sem_post(&a->sem);
}

/* A request to a conversation, waited for: the outcome, the reply in a->info. */
static int ask(server *s, rt_actor *conv, uint32_t kind, rt_buf *body, answer *a)
{
    uv_sem_init(&a->sem, 0);
    if (rt_call(s->rt, RT_LOOP_ANY, conv, kind, 0, body, 0, on_answer, a) != 0)
        return -1;
    uv_sem_wait(&a->sem);
    uv_sem_destroy(&a->sem);
    return a->code;
}

static uint64_t gate_ns_of(server *s, rt_actor *conv)
{
    answer a;
    if (ask(s, conv, CONV_STATUS, NULL, &a) != PL_DONE)
        return 0;
    return a.info.gate_ns;
}

static double cpu_s(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
           (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

/* One run of the path: events/s and the gate's share of the CPU. */
static void run_path(const char *dir, uint64_t events, double *rate, double *gate_share)
{
    cli_rm_tree(dir);
    sync();
    server s;
    server_start(&s, dir, ST_FULL);
    shared sh = {.per_conv = events / CONVS};
    uv_sem_init(&sh.finished, 0);
    rt_actor *conv[CONVS], *prod[CONVS];
    producer ps[CONVS];
    rt_buf *meta = rt_buf_copy("{}", 2);
    for (int i = 0; i < CONVS; i++) {
        rt_uuid id;
        rt_uuid_v4(&id);
        if (convs_create(s.svc, &id, NULL, meta, NULL, &conv[i], NULL) != 0) {
            fprintf(stderr, "parley bench conversation: cannot create a conversation\n");
            exit(CLI_FAIL);
        }
        ps[i] = (producer){.s = &sh, .conv = conv[i], .n = i};
        rt_spawn_opts o = {.beh = &producer_beh, .arg = &ps[i], .loop = RT_LOOP_ANY};
        rt_spawn(s.rt, &o, &prod[i]);
    }
    rt_buf_unref(meta);
    uint64_t gate0 = 0;
    for (int i = 0; i < CONVS; i++)
        gate0 += gate_ns_of(&s, conv[i]); /* also waits until each is open */
    double c0 = cpu_s(), t0 = cli_now_s();
    for (int i = 0; i < CONVS; i++)
        rt_send(prod[i], K_GO, 0, NULL);
    uv_sem_wait(&sh.finished);
    double c1 = cpu_s();
    uint64_t gate1 = 0;
    for (int i = 0; i < CONVS; i++)
        gate1 += gate_ns_of(&s, conv[i]);
    if (atomic_load(&sh.errors) > 0) {
        fprintf(stderr, "parley bench conversation: %d appends failed: %s\n",
                atomic_load(&sh.errors), sh.err);
        exit(CLI_FAIL);
    }
    *rate = (double)(sh.per_conv * CONVS) / (sh.t1 - t0);
    *gate_share = (double)(gate1 - gate0) / 1e9 / (c1 - c0);
    for (int i = 0; i < CONVS; i++) {
        rt_actor_unref(conv[i]);
        rt_actor_unref(prod[i]);
    }
    server_stop(&s);
    uv_sem_destroy(&sh.finished);
}

/* ---------------------------------------------------- the 1M-event open --- */

static const char *open_hex = "0b5e55ed00004000800000000000001a";

/* The conversation's state checkpoint, as a crash leaves it: written 1022
 * events before the end, so that every open replays those (a clean stop
 * writes an up-to-date one, which makes opening cheaper than this). */
enum { STALE = 1022 };
static char *stale_ckpt;
static size_t stale_len;

static void ckpt_path(const char *dir, char *out, size_t cap)
{
    snprintf(out, cap, "%s/conversations/%s/state.json", dir, open_hex);
}

static void save_stale(const char *dir)
{
    char path[4300];
    ckpt_path(dir, path, sizeof(path));
    FILE *f = fopen(path, "rb");
    free(stale_ckpt);
    stale_ckpt = malloc(1 << 20);
    stale_len = f != NULL && stale_ckpt != NULL ? fread(stale_ckpt, 1, 1 << 20, f) : 0;
    if (f != NULL)
        fclose(f);
    if (stale_len == 0) {
        fprintf(stderr, "parley bench conversation: no checkpoint in %s\n", path);
        exit(CLI_FAIL);
    }
}

static void restore_stale(const char *dir)
{
    char path[4300];
    ckpt_path(dir, path, sizeof(path));
    FILE *f = fopen(path, "wb");
    if (f == NULL || fwrite(stale_ckpt, 1, stale_len, f) != stale_len || fclose(f) != 0) {
        fprintf(stderr, "parley bench conversation: cannot write %s\n", path);
        exit(CLI_FAIL);
    }
}

/* Appends action/result pairs [from, to) to the conversation, in arrays. */
static void append_pairs(server *s, rt_actor *conv, uint64_t from, uint64_t to, uint64_t total)
{
    enum { BATCH = 500 };
    char *buf = malloc(BATCH * 512 + 16);
    for (uint64_t at = from; at < to; at += BATCH) {
        size_t len = 0, k = to - at < BATCH ? (size_t)(to - at) : BATCH;
        buf[len++] = '[';
        for (size_t i = 0; i < k; i++) {
            unsigned long long seq = at + i, turn = seq / 2;
            const char *sep = i ? "," : "";
            if (i % 2 == 0)
                len += (size_t)sprintf(
                    buf + len,
                    "%s{\"id\":\"e%llu\",\"source\":\"agent\",\"thought\":[],\"action\":{"
                    "\"command\":\"echo %llu\",\"kind\":\"TerminalAction\"},\"tool_name\":"
                    "\"terminal\",\"tool_call_id\":\"t%llu\",\"tool_call\":{\"id\":\"t%llu\","
                    "\"name\":\"terminal\",\"arguments\":\"{}\",\"origin\":\"completion\"},"
                    "\"llm_response_id\":\"r%llu\",\"kind\":\"ActionEvent\"}",
                    sep, seq, turn, turn, turn, turn);
            else
                len += (size_t)sprintf(
                    buf + len,
                    "%s{\"id\":\"e%llu\",\"source\":\"environment\",\"tool_name\":\"terminal\","
                    "\"tool_call_id\":\"t%llu\",\"observation\":{\"content\":[],\"kind\":"
                    "\"TerminalObservation\"},\"action_id\":\"e%llu\",\"kind\":"
                    "\"ObservationEvent\"}",
                    sep, seq, turn, seq - 1);
        }
        buf[len++] = ']';
        answer a;
        if (ask(s, conv, CONV_APPEND, rt_buf_copy(buf, len), &a) != PL_COMMITTED) {
            fprintf(stderr, "parley bench conversation: building the log failed: %s\n", a.detail);
            exit(CLI_FAIL);
        }
        if ((at / BATCH) % 100 == 0)
            fprintf(stderr, "\rbuilding a %llu-event conversation... %3.0f%%",
                    (unsigned long long)total, 100.0 * (double)at / (double)total);
    }
    free(buf);
}

static rt_actor *open_conv(server *s)
{
    rt_uuid id;
    rt_uuid_parse(open_hex, 32, &id);
    rt_actor *conv = NULL;
    if (convs_get(s->svc, &id, &conv) != 0) {
        rt_buf *meta = rt_buf_copy("{}", 2);
        int r = convs_create(s->svc, &id, NULL, meta, NULL, &conv, NULL);
        rt_buf_unref(meta);
        if (r != 0) {
            fprintf(stderr, "parley bench conversation: cannot create a conversation\n");
            exit(CLI_FAIL);
        }
    }
    return conv;
}

/* Build it through the actor (with `none` durability, in arrays of small
 * events): pairs of action and result, then one action left pending; the
 * checkpoint is kept from a stop STALE events before the end. */
static void build_open(const char *dir, uint64_t events)
{
    cli_rm_tree(dir);
    uint64_t pairs_end = (events - 1) & ~(uint64_t)1, cut = (pairs_end - STALE) & ~(uint64_t)1;
    server s;
    server_start(&s, dir, ST_NONE);
    rt_actor *conv = open_conv(&s);
    append_pairs(&s, conv, 0, cut, events);
    rt_actor_unref(conv);
    server_stop(&s);
    save_stale(dir);
    server_start(&s, dir, ST_NONE);
    conv = open_conv(&s);
    append_pairs(&s, conv, cut, pairs_end, events);
    /* the last action, left without a result */
    char buf[1024];
    int len =
        sprintf(buf, "{\"id\":\"last\",\"source\":\"agent\",\"thought\":[],\"action\":{\"command\":"
                     "\"sleep 1000\",\"kind\":\"TerminalAction\"},\"tool_name\":\"terminal\","
                     "\"tool_call_id\":\"pending\",\"tool_call\":{\"id\":\"pending\",\"name\":"
                     "\"terminal\",\"arguments\":\"{}\",\"origin\":\"completion\"},"
                     "\"llm_response_id\":\"rlast\",\"kind\":\"ActionEvent\"}");
    answer a;
    if (ask(&s, conv, CONV_APPEND, rt_buf_copy(buf, (size_t)len), &a) != PL_COMMITTED) {
        fprintf(stderr, "parley bench conversation: building the log failed: %s\n", a.detail);
        exit(CLI_FAIL);
    }
    fprintf(stderr, "\r%60s\r", "");
    rt_actor_unref(conv);
    server_stop(&s);
}

/* From a fresh start, with the stale checkpoint, to the conversation's
 * first answer. */
static double run_open(const char *dir, bool *pending_ok)
{
    restore_stale(dir);
    server s;
    server_start(&s, dir, ST_FULL);
    rt_uuid id;
    rt_uuid_parse(open_hex, 32, &id);
    double t0 = cli_now_s();
    rt_actor *conv = NULL;
    answer a;
    int code = convs_get(s.svc, &id, &conv) == 0 ? ask(&s, conv, CONV_STATUS, NULL, &a) : -1;
    double ms = (cli_now_s() - t0) * 1000;
    *pending_ok = code == PL_DONE && a.info.status == CONV_IDLE && a.info.pending == 1;
    rt_actor_unref(conv);
    server_stop(&s);
    return ms;
}

/* ------------------------------------------------------------- driver --- */

static const char usage[] =
    "usage: parley bench conversation [--runs N] [--json] [--dir DIR] [--events N]\n"
    "                                 [--open-events N]\n\n"
    "Measure the full path of an event through the conversation actors and the store,\n"
    "and opening a large conversation; each figure is the median of N runs (default 5).\n\n"
    "  --runs N          runs per figure (default 5)\n"
    "  --dir DIR         where to work (default: a new directory under $TMPDIR or /tmp)\n"
    "  --events N        events per path run (default 160000)\n"
    "  --open-events N   events in the conversation that is opened (default 1000000,\n"
    "                    at least 4096: its checkpoint is from 1022 events before the end)\n"
    "  --json            print one JSON object: events_per_s, gate_fraction,\n"
    "                    open_1m_ms, open_pending_ok\n"
    "  -h, --help        show this help\n";

int bench_conversation(int argc, char **argv)
{
    int runs = 5, events = 160000, open_events = 1000000;
    bool json = false;
    const char *base = NULL;
    const cli_int_opt ints[] = {{"--events", &events, 1600, 100000000},
                                {"--open-events", &open_events, 4096, 100000000}};
    int st = cli_bench_args("bench conversation", usage, argc, argv, &runs, &json, &base, ints, 2);
    if (st >= 0)
        return st;
    rt_log_set_level(RT_LOG_WARN);
    char root[4096];
    if (cli_scratch_dir("bench conversation", base, root, sizeof(root)) != 0)
        return CLI_FAIL;
    char pdir[4200], odir[4200];
    snprintf(pdir, sizeof(pdir), "%s/path", root);
    snprintf(odir, sizeof(odir), "%s/open", root);
    double *rate = calloc((size_t)runs, sizeof(double));
    double *share = calloc((size_t)runs, sizeof(double));
    double *open_ms = calloc((size_t)runs, sizeof(double));
    for (int i = 0; i < runs; i++) {
        if (!json)
            fprintf(stderr, "\rrun %d/%d: the path...   ", i + 1, runs);
        run_path(pdir, (uint64_t)events, &rate[i], &share[i]);
    }
    build_open(odir, (uint64_t)open_events);
    bool pending_ok = true;
    for (int i = 0; i < runs; i++) {
        if (!json)
            fprintf(stderr, "\rrun %d/%d: opening...    ", i + 1, runs);
        bool ok;
        open_ms[i] = run_open(odir, &ok);
        pending_ok = pending_ok && ok;
    }
    free(stale_ckpt);
    if (base == NULL)
        cli_rm_tree(root);
    double r = cli_median(rate, runs), g = cli_median(share, runs), o = cli_median(open_ms, runs);
    if (json) {
        printf("{\"events_per_s\": %.0f, \"gate_fraction\": %.4f, \"open_1m_ms\": %.1f, "
               "\"open_pending_ok\": %s, \"open_events\": %d, \"runs\": %d}\n",
               r, g, o, pending_ok ? "true" : "false", open_events, runs);
    } else {
        fprintf(stderr, "\r%40s\r", "");
        printf("parley bench conversation (median of %d runs)\n", runs);
        printf("  full path       %9.0f events/s  (validate, gate, durable full; 16 "
               "conversations, 0.5-4 KiB mix)\n",
               r);
        printf("  gate's share    %9.2f %%         (of the process' CPU time on that path)\n",
               g * 100);
        printf("  open            %9.1f ms        (%d events, last action pending: %s)\n", o,
               open_events, pending_ok ? "known" : "LOST");
    }
    free(rate);
    free(share);
    free(open_ms);
    return pending_ok ? CLI_OK : CLI_FAIL;
}
