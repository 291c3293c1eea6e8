/*
 * bench_runtime.c - `parley bench runtime`: the actor runtime's three
 * figures, each the median of --runs runs.
 *
 *  same-loop hops   a ring of actors on one loop passing tokens around;
 *                   every hop is a real rt_send + mailbox + turn.
 *  cross-loop msgs  one producer on loop 0, one consumer on loop 1, with a
 *                   credit window so that the mailbox stays bounded.
 *  idle actor bytes heap in use per spawned, started, idle actor (glibc
 *                   malloc's own accounting, chunk overhead included; with
 *                   mimalloc, the resident set's growth: cli_heap_bytes).
 *
 * Clocks are read inside the actors, so thread start-up is not measured.
 */
#include "cli.h"

#include "runtime/rt.h"

#include <stdlib.h>
#include <string.h>
#include <uv.h>

enum { K_GO = RT_KIND_RANGE(9), K_TOKEN, K_DATA, K_CREDIT, K_PUMP };

/* ------------------------------------------------------------ the ring --- */

typedef struct ring {
    uint64_t remaining; /* hops left; touched only on the ring's loop */
    double t0, t1;
    uint32_t tokens;
    uv_sem_t done;
} ring;

typedef struct ring_node {
    ring *r;
    rt_actor *next;
} ring_node;

static int ring_handle(rt_actor *self, void *state, rt_msg *m)
{
    (void)self;
    ring_node *n = state;
    ring *r = n->r;
    if (m->kind == K_GO) {
        r->t0 = cli_now_s();
        for (uint32_t i = 0; i < r->tokens; i++)
            rt_send(n->next, K_TOKEN, 0, NULL);
        return 0;
    }
    if (r->remaining == 0)
        return 0;
    if (--r->remaining == 0) {
        r->t1 = cli_now_s();
        uv_sem_post(&r->done);
        return 0;
    }
    return rt_send(n->next, K_TOKEN, 0, NULL);
}

static const rt_behaviour ring_beh = {.name = "bench-ring", .handle = ring_handle};

static double run_ring(int actors, uint32_t tokens, uint64_t hops)
{
    rt_runtime *rt;
    rt_opts o = {.loops = 1};
    rt_runtime_new(&o, &rt);
    ring r = {.remaining = hops, .tokens = tokens};
    uv_sem_init(&r.done, 0);
    ring_node *nodes = calloc((size_t)actors, sizeof(*nodes));
    rt_actor **as = calloc((size_t)actors, sizeof(*as));
    for (int i = 0; i < actors; i++) {
        nodes[i].r = &r;
        rt_spawn_opts so = {.beh = &ring_beh, .arg = &nodes[i], .loop = 0};
        rt_spawn(rt, &so, &as[i]);
    }
    for (int i = 0; i < actors; i++)
        nodes[i].next = as[(i + 1) % actors];
    rt_send(as[0], K_GO, 0, NULL);
    uv_sem_wait(&r.done);
    double rate = (double)hops / (r.t1 - r.t0);
    for (int i = 0; i < actors; i++)
        rt_actor_unref(as[i]);
    rt_runtime_free(rt);
    uv_sem_destroy(&r.done);
    free(as);
    free(nodes);
    return rate;
}

/* ------------------------------------------------- producer / consumer --- */

typedef struct pc {
    rt_actor *producer, *consumer;
    uint64_t total, sent, got;
    uint64_t credits;
    bool pump_queued;
    double t0, t1;
    uv_sem_t done;
} pc;

enum { PC_CHUNK = 1024, PC_WINDOW = 16384 };

static void pc_pump(rt_actor *self, pc *p)
{
    uint64_t k = p->total - p->sent;
    if (k > p->credits)
        k = p->credits;
    if (k > PC_CHUNK)
        k = PC_CHUNK; /* then yield, so that credits can come in */
    for (uint64_t i = 0; i < k; i++)
        rt_send(p->consumer, K_DATA, p->sent + i, NULL);
    p->sent += k;
    p->credits -= k;
    if (p->credits > 0 && p->sent < p->total && !p->pump_queued) {
        p->pump_queued = true;
        rt_send(self, K_PUMP, 0, NULL);
    }
}

static int producer_handle(rt_actor *self, void *state, rt_msg *m)
{
    pc *p = state;
    if (m->kind == K_GO)
        p->t0 = cli_now_s();
    else if (m->kind == K_CREDIT)
        p->credits += m->arg;
    else if (m->kind == K_PUMP)
        p->pump_queued = false;
    pc_pump(self, p);
    return 0;
}

static int consumer_handle(rt_actor *self, void *state, rt_msg *m)
{
    (void)self;
    pc *p = state;
    (void)m;
    if (++p->got % PC_CHUNK == 0)
        rt_send(p->producer, K_CREDIT, PC_CHUNK, NULL);
    if (p->got == p->total) {
        p->t1 = cli_now_s();
        uv_sem_post(&p->done);
    }
    return 0;
}

static const rt_behaviour producer_beh = {.name = "bench-producer", .handle = producer_handle};
static const rt_behaviour consumer_beh = {.name = "bench-consumer", .handle = consumer_handle};

static double run_cross(uint64_t total)
{
    rt_runtime *rt;
    rt_opts o = {.loops = 2};
    rt_runtime_new(&o, &rt);
    pc p = {.total = total, .credits = PC_WINDOW};
    uv_sem_init(&p.done, 0);
    rt_spawn_opts po = {.beh = &producer_beh, .arg = &p, .loop = 0};
    rt_spawn_opts co = {.beh = &consumer_beh, .arg = &p, .loop = 1};
    rt_spawn(rt, &co, &p.consumer);
    rt_spawn(rt, &po, &p.producer);
    rt_send(p.producer, K_GO, 0, NULL);
    uv_sem_wait(&p.done);
    double rate = (double)total / (p.t1 - p.t0);
    rt_actor_unref(p.producer);
    rt_actor_unref(p.consumer);
    rt_runtime_free(rt);
    uv_sem_destroy(&p.done);
    return rate;
}

/* -------------------------------------------------------- idle actors --- */

typedef struct idle {
    _Atomic int started;
    int want;
    uv_sem_t done;
} idle;

static int idle_init(rt_actor *self, void *arg, void **state)
{
    (void)self;
    idle *d = arg;
    *state = NULL; /* an idle actor with no state of its own */
    if (atomic_fetch_add(&d->started, 1) + 1 == d->want)
        uv_sem_post(&d->done);
    return 0;
}

static int idle_handle(rt_actor *self, void *state, rt_msg *m)
{
    (void)self, (void)state, (void)m;
    return 0;
}

static const rt_behaviour idle_beh = {
    .name = "bench-idle", .init = idle_init, .handle = idle_handle};

static double run_idle(int n)
{
    rt_runtime *rt;
    rt_opts o = {.loops = 1};
    rt_runtime_new(&o, &rt);
    idle d = {.want = n};
    uv_sem_init(&d.done, 0);
    size_t before = cli_heap_bytes();
    for (int i = 0; i < n; i++) {
        rt_spawn_opts so = {.beh = &idle_beh, .arg = &d, .loop = 0};
        rt_spawn(rt, &so, NULL);
    }
    uv_sem_wait(&d.done);
    size_t after = cli_heap_bytes();
    rt_runtime_free(rt);
    uv_sem_destroy(&d.done);
    return ((double)after - (double)before) / n;
}

/* ------------------------------------------------------------- driver --- */

static const char usage[] =
    "usage: parley bench runtime [--runs N] [--json] [--hops N] [--messages N] [--actors N]\n\n"
    "Measure the actor runtime; each figure is the median of N runs (default 5).\n\n"
    "  --runs N       runs per figure (default 5)\n"
    "  --hops N       same-loop: token hops per run (default 20000000)\n"
    "  --messages N   cross-loop: messages per run (default 10000000)\n"
    "  --actors N     idle memory: actors spawned per run (default 100000)\n"
    "  --json         print one JSON object: same_loop_msgs_per_s,\n"
    "                 cross_loop_msgs_per_s, idle_actor_bytes\n"
    "  -h, --help     show this help\n";

int bench_runtime(int argc, char **argv)
{
    int runs = 5, hops_m = 20000000, msgs = 10000000, actors = 100000;
    bool json = false;
    const cli_int_opt ints[] = {{"--hops", &hops_m, 1000, 2000000000},
                                {"--messages", &msgs, PC_CHUNK, 2000000000},
                                {"--actors", &actors, 1, 10000000}};
    int st = cli_bench_args("bench runtime", usage, argc, argv, &runs, &json, NULL, ints, 3);
    if (st >= 0)
        return st;

    rt_log_set_level(RT_LOG_WARN);
    double *same = calloc((size_t)runs, sizeof(double));
    double *cross = calloc((size_t)runs, sizeof(double));
    double *bytes = calloc((size_t)runs, sizeof(double));
    double *pingpong = calloc((size_t)runs, sizeof(double));
    for (int i = 0; i < runs; i++) {
        if (!json)
            fprintf(stderr, "\rrun %d/%d: same-loop...  ", i + 1, runs);
        same[i] = run_ring(1000, 1000, (uint64_t)hops_m);
        /* the worst case: one token, every hop finds an idle mailbox and
         * schedules its receiver */
        pingpong[i] = run_ring(2, 1, (uint64_t)hops_m / 4);
        if (!json)
            fprintf(stderr, "\rrun %d/%d: cross-loop... ", i + 1, runs);
        cross[i] = run_cross((uint64_t)msgs);
        if (!json)
            fprintf(stderr, "\rrun %d/%d: idle actors...", i + 1, runs);
        bytes[i] = run_idle(actors);
    }
    double s = cli_median(same, runs), x = cli_median(cross, runs), b = cli_median(bytes, runs);
    double pp = cli_median(pingpong, runs);
    if (json) {
        printf("{\"same_loop_msgs_per_s\": %.0f, \"cross_loop_msgs_per_s\": %.0f, "
               "\"idle_actor_bytes\": %.0f, \"same_loop_pingpong_msgs_per_s\": %.0f, "
               "\"runs\": %d}\n",
               s, x, b, pp, runs);
    } else {
        fprintf(stderr, "\r%40s\r", "");
        printf("parley bench runtime (median of %d runs)\n", runs);
        printf("  same-loop hops     %8.2f M msgs/s  (ring of 1000 actors, 1000 tokens, 1 loop)\n",
               s / 1e6);
        printf("  same-loop 1 token  %8.2f M msgs/s  (2 actors ping-pong: a schedule per hop)\n",
               pp / 1e6);
        printf("  cross-loop msgs    %8.2f M msgs/s  (1 producer -> 1 consumer, 2 loops)\n",
               x / 1e6);
        printf("  idle actor         %8.0f bytes     (%d idle actors, heap in use per actor)\n", b,
               actors);
    }
    free(same);
    free(cross);
    free(bytes);
    free(pingpong);
    return CLI_OK;
}
