/*
 * internal.h - the runtime's private structures, shared by its files only.
 *
 * Threading rule: fields marked (home) are touched only on the actor's home
 * loop thread; (any) fields are atomics; the rest are fixed at spawn.
 */
#ifndef RT_INTERNAL_H
#define RT_INTERNAL_H

#include "rt.h"

#include <setjmp.h>
#include <stdbool.h>
#include <stddef.h>
#include <uv.h>

#define rt__container_of(ptr, type, field) ((type *)((char *)(ptr)-offsetof(type, field)))

typedef struct rt_loop rt_loop;
typedef struct rt_timer_rec rt_timer_rec;

enum rt_status {
    RT_A_NEW = 0, /* spawned, START not handled yet */
    RT_A_WAITING, /* START handled, but the parent's own START has not run yet */
    RT_A_RUNNING, /* has state, handles messages */
    RT_A_PARKED,  /* exited or failed, no state: waits for its supervisor */
    RT_A_CLOSED,  /* for good: sends refused, mailbox drained */
};

/* Kinds of the runtime's own messages to a loop's calls actor (call.c):
 * above RT_KIND_ERROR, so that its handler gets them, and below any kind a
 * reply can have. */
enum {
    RT__CALL_BEGIN = RT_KIND_ERROR + 1, /* a call made on another thread: its record */
    RT__CALL_DUE = RT_KIND_ERROR + 2,   /* the loop's call timer fired */
};

/* rt_msg.flags */
enum {
    RT_MSGF_COUNTED = 1, /* counted against a bounded mailbox */
    RT_MSGF_TIMER = 2,   /* fired by a timer: dropped unless epoch matches */
};

/* rt_behaviour.flags */
enum {
    RT_BEH_SYSMSG = 1, /* the handler receives STOP and EXIT itself (supervisors) */
};

struct rt_actor {
    rt_mpsc mbox;
    rt_mpsc_node sched; /* link in a loop's run list or cross-thread run queue */
    rt_loop *loop;
    const rt_behaviour *beh;
    void *state; /* (home) */
    void *arg;
    void (*arg_free)(void *);
    uint64_t id;
    _Atomic uint32_t refs;
    _Atomic uint32_t closed;  /* (any) set once: sends fail from then on */
    _Atomic uint32_t epoch;   /* incarnation, bumped at each init; written (home) only */
    uint32_t parent_epoch;    /* the parent's incarnation this child was spawned under */
    uint8_t status;           /* (home) enum rt_status */
    uint8_t restart;          /* rt_restart */
    uint8_t claimed;          /* (home) parked with its mailbox claimed: holds a run ref */
    uint8_t linked;           /* (home) in its parent's child list */
    uint32_t qcap;            /* bound of the mailbox, 0 none */
    _Atomic uint32_t qlen;    /* (any) counted messages queued */
    _Atomic uint32_t pending; /* (any) supervisors: children spawned, START not yet run */
    rt_actor *parent;         /* supervisor; holds a reference while set */
    rt_actor *prev, *next;    /* (home) siblings in the parent's child list */
    rt_timer_rec *timers;     /* (home) */
};

/* A loop's calls in flight (call.c), all (home) but the actor pointer,
 * fixed at start, and the tag counter. */
typedef struct rt_call_rec rt_call_rec;
enum { RT__CALL_LANES = 4 };
typedef struct rt_calls {
    rt_actor *actor;           /* their reply address; the loop holds a reference */
    _Atomic uint64_t last_tag; /* (any) tags are handed out once each, from 1 */
    rt_call_rec **tab;         /* by tag: open addressing, linear probing */
    uint32_t cap, n;           /* slots (a power of two, or 0), calls in them */
    bool stopping;             /* the actor's stop has begun: no new calls */
    /* calls with a deadline, earliest first, in one list per timeout
     * (call.c, "lanes") */
    struct rt_call_lane {
        uint64_t timeout_ms; /* of its calls; any, while it is empty */
        rt_call_rec *first, *last;
    } lane[RT__CALL_LANES];
    uv_timer_t timer; /* set for `armed` */
    uint64_t armed;   /* a deadline (uv_now ms), 0: the timer is not set */
} rt_calls;

struct rt_loop {
    uv_loop_t uv;
    uv_async_t wake;
    uv_prepare_t prepare;
    uv_idle_t idle;
    uv_thread_t thread;
    rt_runtime *rt;
    int index;
    rt_mpsc inject;           /* actors scheduled from other threads */
    _Atomic int wake_pending; /* an uv_async_send is on its way */
    _Atomic int closing;      /* shutdown's last step: drain and close handles */
    rt_mpsc_node *run_head;   /* (home) FIFO of actors to run */
    rt_mpsc_node *run_tail;
    size_t run_len;
    rt_actor *root;   /* root supervisor */
    rt_msg *stop_msg; /* the root's STOP, ready before it is needed */
    rt_calls calls;
};

struct rt_runtime {
    int nloops;
    rt_loop *loops;
    rt_opts opts;
    _Atomic int stopping;      /* shutdown has begun */
    _Atomic int inflight;      /* calls from outside the loops that may still wake one */
    _Atomic int trees_running; /* loops whose root supervisor has not exited */
    _Atomic uint32_t next_loop;
    _Atomic int joined; /* the loops' threads are joined */
};

/* thread state (loop.c) */
extern _Thread_local rt_loop *rt__tl_loop;
extern _Thread_local rt_actor *rt__tl_actor;
extern _Thread_local jmp_buf *rt__tl_jmp;

/* loop.c */
int rt__loop_init(rt_loop *l, rt_runtime *rt, int index);
int rt__loop_start(rt_loop *l);
void rt__loop_run_push(rt_loop *l, rt_actor *a);
void rt__schedule(rt_actor *a);
void rt__loop_close_all(rt_runtime *rt);

/* send.c */
rt_msg *rt__msg_new(uint32_t kind, uint64_t arg, rt_buf *buf);
int rt__deliver(rt_actor *to, rt_msg *m);
void rt__msg_finish(rt_msg *m, int32_t status);
void rt__error_reply(rt_actor *to, uint32_t req_kind, int32_t status, uint64_t tag);
int rt__ask_tagged(rt_actor *to, uint32_t kind, uint64_t arg, rt_buf *buf, rt_actor *reply_to,
                   uint64_t tag);
bool rt__outside(const rt_runtime *rt);

/* actor.c */
rt_actor *rt__actor_new(rt_loop *l, const rt_spawn_opts *o, rt_actor *parent);
void rt__actor_turn(rt_loop *l, rt_actor *a);
int rt__actor_init(rt_actor *a);
void rt__actor_teardown(rt_actor *a);
void rt__actor_close(rt_actor *a);
void rt__actor_resume(rt_actor *a);
void rt__actor_notify_exit(rt_actor *a, int reason);

/* sup.c */
extern const rt_behaviour rt__sup_behaviour;
bool rt__sup_adopt(rt_actor *sup, rt_actor *child);
void rt__sup_unlink(rt_actor *sup, rt_actor *child);
int rt__sup_new_root(rt_loop *l);

/* call.c */
int rt__calls_start(rt_loop *l);
void rt__calls_close(rt_loop *l);
void rt__calls_free(rt_loop *l);

/* timer.c */
void rt__timers_cancel(rt_actor *a);

/* runtime.c */
void rt__loop_tree_done(rt_loop *l);
rt_loop *rt__pick_loop(rt_runtime *rt, int index);

#endif
