/*
 * support_rt.h - small helpers around the runtime for its unit tests:
 * starting and freeing a runtime with a deadline, spawning with a reference,
 * and buffers that count their own destruction so that a test can tell who
 * still holds one.
 */
#ifndef SUPPORT_RT_H
#define SUPPORT_RT_H

#include "runtime/rt.h"
#include "support_sync.h"

/* A runtime with `loops` worker loops; on_failure may be NULL (logging) or
 * rtt_on_failure. Fails the test if it cannot be created. */
rt_runtime *rtt_start(int loops, void (*on_failure)(void *, rt_actor *, int));
/* rt_runtime_free on a helper thread: fails the test if it has not returned
 * within the deadline, rather than hanging in it. */
void rtt_free(rt_runtime *rt);

/* rt_spawn that must succeed; returns the caller's reference. */
rt_actor *rtt_spawn(rt_runtime *rt, const rt_behaviour *beh, void *arg, int loop,
                    rt_restart restart, uint32_t mailbox_cap);

/* An on_failure for rt_opts: logs "failure <actor id> <reason>" (and checks
 * that it runs on a loop thread). */
void rtt_on_failure(void *ctx, rt_actor *a, int reason);
/* The entry rtt_on_failure logs for that actor and reason. */
const char *rtt_failure_entry(const rt_actor *a, int reason, char *out, size_t size);

/* Waits until sends to `a` are refused with RT_ECLOSED. The contract does
 * not say at which instant an exiting actor becomes closed, only that it
 * then refuses sends, so this probes (with kind RT_KIND_USER + 0xfff0 and no
 * payload) until it does; probes accepted meanwhile must be dropped, never
 * handled. False on deadline or on an error other than RT_EFULL. */
bool rtt_wait_closed(rt_actor *a);
enum { RTT_PROBE = RT_KIND_USER + 0xfff0 };

/* A gate for handlers: the handler says it has arrived, then waits until
 * the test opens the gate. While it waits, its loop runs nothing else, which
 * is how a test queues messages behind a busy actor deterministically. */
typedef struct rtt_gate {
    ts_counter entered;
    ts_counter open;
} rtt_gate;

void rtt_gate_init(rtt_gate *g);
void rtt_gate_destroy(rtt_gate *g);
/* In a handler: arrive, then wait (failing the test on the deadline). */
void rtt_gate_pass(rtt_gate *g);
/* In the test: wait until n handlers have arrived. */
void rtt_gate_wait_entered(rtt_gate *g, long n);
void rtt_gate_open(rtt_gate *g);

/* An actor that passes the gate given as its arg on every message. */
extern const rt_behaviour rtt_blocker;
/* Spawns a blocker on `loop`, sends it one message and waits until the
 * loop is held in the gate. Returns the blocker's reference. */
rt_actor *rtt_block_loop(rt_runtime *rt, int loop, rtt_gate *g);

/* A short name for a result code, for log entries: "0", "ECLOSED",
 * "EIO", ...; "?" for codes the tests never use. */
const char *rtt_code(int rc);

/* A buffer holding a copy of `text` (without its NUL) whose destruction is
 * counted; rtt_bufs_live() is how many such buffers exist right now. */
rt_buf *rtt_buf(const char *text);
long rtt_bufs_live(void);
long rtt_bufs_freed(void);
/* Whether b holds exactly `text`. */
bool rtt_buf_is(const rt_buf *b, const char *text);

#endif
