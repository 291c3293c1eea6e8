/*
 * timer.h - timers for actors, delivered as ordinary messages.
 *
 * A timer belongs to the actor that starts it and fires into its mailbox as a
 * message of the given kind and arg (sender 0). Timers are started and
 * stopped only by the actor itself, from its own handler or init: they live
 * on its home loop. All of an actor's timers are cancelled when it exits or
 * is restarted, and a timer message still queued from a previous incarnation
 * is discarded, so fresh state never sees a stale tick.
 */
#ifndef RT_TIMER_H
#define RT_TIMER_H

#include "actor.h"

#include <stdint.h>

typedef uint64_t rt_timer_id; /* 0 is never a valid id */

/* First fire after `after_ms`, then every `repeat_ms` (0: once). Returns
 * the timer's id, or 0 if called from anywhere but self's handler/init. */
rt_timer_id rt_timer_start(rt_actor *self, uint64_t after_ms, uint64_t repeat_ms, uint32_t kind,
                           uint64_t arg);
/* Cancel; RT_EINVAL if the id is unknown (already fired once, or stopped). */
int rt_timer_stop(rt_actor *self, rt_timer_id id);

#endif
