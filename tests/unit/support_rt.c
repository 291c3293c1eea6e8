/* support_rt.c - runtime helpers shared by the unit tests. */
#include "support_rt.h"

#include <errno.h>
#include <inttypes.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

rt_runtime *rtt_start(int loops, void (*on_failure)(void *, rt_actor *, int))
{
    ts_reset();
    rt_opts o = {.loops = loops, .on_failure = on_failure};
    rt_runtime *rt = NULL;
    int rc = rt_runtime_new(&o, &rt);
    ck_assert_msg(rc == 0, "rt_runtime_new: %s", rt_strerror(rc));
    ck_assert_ptr_nonnull(rt);
    return rt;
}

struct freer {
    rt_runtime *rt;
    ts_counter done;
};

static void *free_thread(void *p)
{
    struct freer *f = p;
    rt_runtime_free(f->rt);
    ts_counter_add(&f->done, 1);
    return NULL;
}

void rtt_free(rt_runtime *rt)
{
    /* Leaked on timeout on purpose: the stuck thread still uses it, and the
     * process is about to report the failure and exit. */
    struct freer *f = malloc(sizeof *f);
    ck_assert_ptr_nonnull(f);
    f->rt = rt;
    ts_counter_init(&f->done);
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, free_thread, f), 0);
    ck_assert_msg(ts_counter_wait(&f->done, 1), "rt_runtime_free did not return");
    pthread_join(t, NULL);
    ts_counter_destroy(&f->done);
    free(f);
}

rt_actor *rtt_spawn(rt_runtime *rt, const rt_behaviour *beh, void *arg, int loop,
                    rt_restart restart, uint32_t mailbox_cap)
{
    rt_spawn_opts o = {
        .beh = beh, .arg = arg, .loop = loop, .restart = restart, .mailbox_cap = mailbox_cap};
    rt_actor *a = NULL;
    int rc = rt_spawn(rt, &o, &a);
    ck_assert_msg(rc == 0, "rt_spawn %s: %s", beh->name, rt_strerror(rc));
    ck_assert_ptr_nonnull(a);
    return a;
}

const char *rtt_failure_entry(const rt_actor *a, int reason, char *out, size_t size)
{
    snprintf(out, size, "failure %" PRIu64 " %d", rt_actor_id(a), reason);
    return out;
}

void rtt_on_failure(void *ctx, rt_actor *a, int reason)
{
    (void)ctx;
    TS_CHECK(rt_current_loop() >= 0);
    char e[64];
    ts_log("%s", rtt_failure_entry(a, reason, e, sizeof e));
}

bool rtt_wait_closed(rt_actor *a)
{
    struct timespec start, now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (;;) {
        int rc = rt_send(a, RTT_PROBE, 0, NULL);
        if (rc == RT_ECLOSED)
            return true;
        if (rc != 0 && rc != RT_EFULL)
            return false; /* full: not drained yet */
        clock_gettime(CLOCK_MONOTONIC, &now);
        long ms = (now.tv_sec - start.tv_sec) * 1000 + (now.tv_nsec - start.tv_nsec) / 1000000;
        if (ms > TS_DEADLINE_MS)
            return false;
        sched_yield();
    }
}

/* ---------------------------------------------------------------- gates --- */

void rtt_gate_init(rtt_gate *g)
{
    ts_counter_init(&g->entered);
    ts_counter_init(&g->open);
}

void rtt_gate_destroy(rtt_gate *g)
{
    ts_counter_destroy(&g->entered);
    ts_counter_destroy(&g->open);
}

void rtt_gate_pass(rtt_gate *g)
{
    ts_counter_add(&g->entered, 1);
    TS_CHECK_MSG(ts_counter_wait(&g->open, 1), "the test never opened a gate");
}

void rtt_gate_wait_entered(rtt_gate *g, long n)
{
    ck_assert_msg(ts_counter_wait(&g->entered, n), "only %ld of %ld handlers reached the gate",
                  ts_counter_get(&g->entered), n);
}

void rtt_gate_open(rtt_gate *g)
{
    ts_counter_add(&g->open, 1);
}

static int blocker_handle(rt_actor *self, void *state, rt_msg *m)
{
    (void)self;
    (void)m;
    rtt_gate_pass(state);
    return 0;
}

const rt_behaviour rtt_blocker = {.name = "blocker", .handle = blocker_handle};

rt_actor *rtt_block_loop(rt_runtime *rt, int loop, rtt_gate *g)
{
    rt_actor *b = rtt_spawn(rt, &rtt_blocker, g, loop, RT_TEMPORARY, 0);
    long before = ts_counter_get(&g->entered);
    ck_assert_int_eq(rt_send(b, RT_KIND_USER, 0, NULL), 0);
    rtt_gate_wait_entered(g, before + 1);
    return b;
}

const char *rtt_code(int rc)
{
    switch (rc) {
    case 0:
        return "0";
    case RT_EINVAL:
        return "EINVAL";
    case RT_ENOMEM:
        return "ENOMEM";
    case RT_ECLOSED:
        return "ECLOSED";
    case RT_EFULL:
        return "EFULL";
    case RT_ETIMEDOUT:
        return "ETIMEDOUT";
    case RT_ENOREPLY:
        return "ENOREPLY";
    case RT_EFAIL:
        return "EFAIL";
    case RT_EASSERT:
        return "EASSERT";
    case RT_ETHREAD:
        return "ETHREAD";
    case -EIO:
        return "EIO";
    case -ENOSPC:
        return "ENOSPC";
    default:
        return "?";
    }
}

/* ------------------------------------------------------ counted buffers --- */

static atomic_long bufs_made, bufs_freed;

static void counted_dtor(void *data, void *ctx)
{
    (void)ctx;
    free(data);
    atomic_fetch_add(&bufs_freed, 1);
}

rt_buf *rtt_buf(const char *text)
{
    size_t len = strlen(text);
    char *copy = malloc(len + 1);
    ck_assert_ptr_nonnull(copy);
    memcpy(copy, text, len + 1);
    rt_buf *b = rt_buf_wrap(copy, len, counted_dtor, NULL);
    ck_assert_ptr_nonnull(b);
    atomic_fetch_add(&bufs_made, 1);
    return b;
}

long rtt_bufs_live(void)
{
    return atomic_load(&bufs_made) - atomic_load(&bufs_freed);
}

long rtt_bufs_freed(void)
{
    return atomic_load(&bufs_freed);
}

bool rtt_buf_is(const rt_buf *b, const char *text)
{
    size_t len = strlen(text);
    return b != NULL && rt_buf_len(b) == len && memcmp(rt_buf_data(b), text, len) == 0;
}
