/*
 * call.h - request/reply for code that is not an actor.
 *
 * An HTTP handler runs in a libuv callback on some loop, not inside an actor.
 * rt_call lets it ask an actor on any loop and get the answer back on its own
 * loop: the request goes with that loop's calls actor as reply address and
 * a tag of its own, and `cb` runs in that actor's turn with whatever comes
 * back: the reply, or an RT_KIND_ERROR message whose status says why not
 * (RT_ECLOSED, RT_ENOREPLY, RT_ETIMEDOUT, ...). One caller's requests reach
 * their actors in the order they were made. An actor that passes such a
 * request on uses rt_promise_forward, so that the tag goes with it.
 *
 * If rt_call returns 0, cb runs exactly once, even when the request could not
 * be delivered (closed target, full mailbox: an RT_KIND_ERROR with that
 * status); it returns an error, and cb never runs, only for bad arguments,
 * lack of memory or a runtime that is shutting down. A late reply after a
 * timeout is dropped. The message given to cb is borrowed.
 */
#ifndef RT_CALL_H
#define RT_CALL_H

#include "actor.h"

typedef void (*rt_reply_cb)(void *ctx, rt_msg *reply);

/* `loop`: where cb runs; RT_LOOP_ANY means the calling loop (or round-robin
 * from a thread that is not a loop). timeout_ms 0: wait forever. The request
 * takes buf whenever rt_call returns 0. */
int rt_call(rt_runtime *rt, int loop, rt_actor *to, uint32_t kind, uint64_t arg, rt_buf *buf,
            uint64_t timeout_ms, rt_reply_cb cb, void *ctx);

#endif
