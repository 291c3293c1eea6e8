/*
 * actor.h - actors: a behaviour, a home loop, a mailbox.
 *
 * An actor lives on one loop (its home) for its whole life and only ever runs
 * there, so its state needs no locks. Messages are handled one at a time, in
 * mailbox order (FIFO per sender), at most RT_BATCH per turn so that a busy
 * actor cannot starve the others on its loop.
 *
 * Life cycle: spawn -> START (init builds fresh state) -> messages -> exit.
 * A handler returns 0 to go on, RT_DONE to exit normally, or a negative error
 * to fail. On exit or failure the behaviour's stop frees the state, the
 * actor's timers are cancelled and its supervisor decides (see sup.h): restart
 * (init again with the same arg: fresh state, same identity, same mailbox) or
 * close. A closed actor refuses sends (RT_ECLOSED) and drops what was still
 * queued, answering any requests among it with RT_KIND_ERROR/RT_ECLOSED.
 *
 * References: rt_spawn hands the caller a reference when asked (`out`); the
 * caller gives it back with rt_actor_unref (also allowed after
 * rt_runtime_free). A reference keeps the memory valid, not the actor
 * running. Any thread may
 * send to an actor it holds a reference to.
 *
 * Every actor that rt_spawn accepted runs init, and stop if init succeeded,
 * even when its supervisor is gone by the time it starts (it is then
 * stopped at once).
 */
#ifndef RT_ACTOR_H
#define RT_ACTOR_H

#include "msg.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct rt_actor rt_actor;
typedef struct rt_runtime rt_runtime;

enum {
    RT_DONE = 1,   /* handler result: exit normally */
    RT_BATCH = 64, /* messages per turn */
    RT_LOOP_ANY = -1,
};

typedef struct rt_behaviour {
    const char *name; /* for logs */
    /* Build fresh state from arg into *state; 0 or a negative error (which
     * counts as a failure; then init frees what it allocated, and stop is
     * not called). NULL: the state is arg itself. */
    int (*init)(rt_actor *self, void *arg, void **state);
    /* Handle one message (borrowed: it is freed after return). 0 to continue,
     * RT_DONE to exit normally, negative to fail. */
    int (*handle)(rt_actor *self, void *state, rt_msg *m);
    /* Free the state (after exit, failure, or before a restart). May be NULL.
     * Also runs after an RT_ASSERT abandoned a handler midway, so it must
     * tolerate state that a handler left half-updated. */
    void (*stop)(rt_actor *self, void *state);
    unsigned flags; /* runtime use */
} rt_behaviour;

/* How the supervisor treats the actor's exit (OTP restart types). */
typedef enum {
    RT_TEMPORARY = 0, /* never restarted */
    RT_TRANSIENT,     /* restarted only after a failure */
    RT_PERMANENT,     /* always restarted */
} rt_restart;

typedef struct rt_spawn_opts {
    const rt_behaviour *beh;
    void *arg;                /* handed to init at every (re)start */
    void (*arg_free)(void *); /* if set, called on arg when the actor is freed */
    int loop;                 /* home loop index, or RT_LOOP_ANY: the calling loop,
                                 else round-robin. Ignored when parent is set. */
    rt_actor *parent;         /* supervisor (children live on its loop); NULL: the
                                 home loop's root supervisor */
    rt_restart restart;       /* default RT_TEMPORARY */
    uint32_t mailbox_cap;     /* 0: unbounded; else rt_send/rt_ask beyond it fail with
                                 RT_EFULL. Only those count: the runtime's own messages
                                 (START, STOP), replies, error replies and timer ticks
                                 always get through, or answers and stops would be lost. */
} rt_spawn_opts;

/* Create an actor; START is its first message. Any thread. With `out`, the
 * caller also gets a reference. RT_ECLOSED once the runtime is stopping. */
int rt_spawn(rt_runtime *rt, const rt_spawn_opts *o, rt_actor **out);

rt_actor *rt_actor_ref(rt_actor *a);
void rt_actor_unref(rt_actor *a); /* NULL is ignored */

uint64_t rt_actor_id(const rt_actor *a); /* unique for the process' life, never 0 */
/* Closed for good (sends to it fail with RT_ECLOSED). Any thread; a false
 * answer may be stale by the time it is used. */
bool rt_actor_closed(const rt_actor *a);
int rt_actor_loop(const rt_actor *a); /* home loop index */
rt_runtime *rt_actor_runtime(const rt_actor *a);
/* The actor whose handler (or init/stop) is running on this thread, or NULL. */
rt_actor *rt_self(void);

/* Post a message. Any thread. `kind` is RT_KIND_USER or above (RT_EINVAL
 * otherwise). On success the message takes the caller's reference to buf;
 * on failure (RT_ECLOSED, RT_EFULL, RT_ENOMEM) the caller keeps it. Never
 * blocks. */
int rt_send(rt_actor *to, uint32_t kind, uint64_t arg, rt_buf *buf);
/* Like rt_send, but not counted against a bounded mailbox: only for news
 * the receiver is owed about work it started (a completion it waits for),
 * which refusing would lose; never for new work. */
int rt_notify(rt_actor *to, uint32_t kind, uint64_t arg, rt_buf *buf);
/* Post a request: like rt_send, plus a reply address; `reply_to` receives
 * exactly one answer: the receiver's reply or an RT_KIND_ERROR message. */
int rt_ask(rt_actor *to, uint32_t kind, uint64_t arg, rt_buf *buf, rt_actor *reply_to);
/* Ask an actor to exit normally after the messages queued before this one. */
int rt_actor_stop(rt_actor *a);

/* Answer a request from inside its handler. Consumes the reply address (a
 * second reply returns RT_EINVAL); buf as in rt_send. Returns RT_ECLOSED if
 * the asker is gone (the reply is dropped and buf stays the caller's). */
int rt_reply(rt_msg *req, uint32_t kind, int32_t status, uint64_t arg, rt_buf *buf);

/* A reply address taken out of a request, to answer later (e.g. once an
 * append is durable). Complete it exactly once with rt_promise_reply or
 * rt_promise_fail; a promise that is never completed leaves its asker
 * waiting (or timing out), so state that holds promises must fail them in
 * the behaviour's stop. Completing zeroes the promise. Completing a zero
 * promise (a message that was no request, or one completed already) does
 * nothing: rt_promise_reply returns RT_EINVAL and does not take buf. */
typedef struct rt_promise {
    rt_actor *to;
    uint32_t req_kind;
    uint64_t tag; /* the request's, for its reply (call.c) */
} rt_promise;

rt_promise rt_msg_promise(rt_msg *req);
int rt_promise_reply(rt_promise *p, uint32_t kind, int32_t status, uint64_t arg, rt_buf *buf);
void rt_promise_fail(rt_promise *p, int32_t status);

/* Pass a request on: `to` gets it as a request of p's asker, and its answer
 * reaches that asker as an answer to the first request would (an rt_call's
 * callback included). Completes p on success; on failure (as rt_ask) p and
 * buf stay the caller's. */
int rt_promise_forward(rt_promise *p, rt_actor *to, uint32_t kind, uint64_t arg, rt_buf *buf);

/* Fail the running handler if cond is false: the actor exits with
 * RT_EASSERT and its supervisor decides as for any failure. Only inside a
 * handler, init or timer message; elsewhere it aborts the process. The
 * handler is abandoned at that point (longjmp), so use it where nothing the
 * handler allocated locally would leak. */
#define RT_ASSERT(cond) ((cond) ? (void)0 : rt__assert_fail(__FILE__, __LINE__, #cond))
_Noreturn void rt__assert_fail(const char *file, int line, const char *expr);

#endif
