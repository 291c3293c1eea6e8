/*
 * sup.h - supervisors, as in Erlang/OTP.
 *
 * A supervisor is an actor that owns children: every actor spawned with
 * `parent = sup` lives on the supervisor's loop and is one of its children,
 * in start order. When a child exits, the supervisor applies the child's
 * restart type (actor.h) and, if a restart is due, its strategy:
 *
 *   one_for_one   restart only that child;
 *   one_for_all   stop all the other children (in reverse start order), then
 *                 restart every child in start order;
 *   rest_for_one  stop the children started after it (reverse order), then
 *                 restart it and them in start order.
 *
 * Temporary siblings stopped by one_for_all or rest_for_one are closed, not
 * restarted (as in OTP).
 *
 * A restart calls the behaviour's stop (if still running) and then init with
 * the same arg: fresh state, same actor identity, same mailbox, so messages
 * queued for the child are handled by the new incarnation.
 *
 * Intensity: more than `intensity` restarts within `period_ms` and the
 * supervisor gives up: it closes all its children (reverse start order) and
 * fails itself (reason RT_EFAIL), so its own supervisor decides next. Every
 * restart counts, whatever caused it (a permanent child's normal exit too);
 * one restart of several children under one_for_all counts once.
 *
 * Children added after start (rt_spawn with this parent) belong to the
 * current incarnation of the supervisor: if the supervisor itself is
 * restarted, its children are closed and its init starts the specs it was
 * given anew. Because supervisor and children share a loop, every decision
 * is taken on one thread, in one turn, without a cross-thread protocol.
 *
 * Each loop has a root supervisor (one_for_one, no intensity limit) that
 * adopts actors spawned without a parent; shutting the runtime down stops the
 * roots, which stop their children in reverse start order, each handling
 * what was queued before its stop request.
 */
#ifndef RT_SUP_H
#define RT_SUP_H

#include "actor.h"

typedef enum {
    RT_ONE_FOR_ONE = 0,
    RT_ONE_FOR_ALL,
    RT_REST_FOR_ONE,
} rt_strategy;

/* A child started by the supervisor's init, at start and at every restart
 * of the supervisor. arg is owned by the caller and must outlive it. */
typedef struct rt_child_spec {
    const rt_behaviour *beh;
    void *arg;
    rt_restart restart;
    uint32_t mailbox_cap;
} rt_child_spec;

typedef struct rt_sup_opts {
    rt_strategy strategy;
    uint32_t intensity; /* 0 means the default, 1 */
    uint64_t period_ms; /* 0 means the default, 5000 */
    const rt_child_spec *children;
    size_t nchildren;
} rt_sup_opts;

/* Spawn a supervisor (options are copied). loop/parent/restart as in
 * rt_spawn_opts; out as in rt_spawn. */
int rt_sup_spawn(rt_runtime *rt, const rt_sup_opts *o, int loop, rt_actor *parent,
                 rt_restart restart, rt_actor **out);

/* A new reference (the caller unrefs it) to the i-th live child in start
 * order, or NULL. Only on the supervisor's loop (e.g. from a child). */
rt_actor *rt_sup_child(rt_actor *sup, size_t i);

#endif
