/*
 * viz.h - the visualizer: one actor per watched conversation, keeping its
 * view state (view.h: the log folded into blocks) and serving it to the
 * REST route /state, to WebSocket block views and to anyone else who asks.
 *
 * It reads the committed log like every other service: it subscribes to
 * the conversation, folds the log from the start in slices (so a long log
 * never holds its loop for long), then each event as it is published. It
 * never changes anything. Requests that come before it has folded every
 * event known when it subscribed wait for that, so an answer is never
 * older than the request.
 *
 * It starts on first use (convs_viz) and stops once nobody has watched or
 * asked for conv_opts.viz_idle_ms; watchers are told (VIZ_GONE) and watch
 * again, which starts a new one. It is a temporary child of the
 * conversation's tree, so it goes when the conversation does.
 *
 * Requests (rt_ask), each answered with one VIZ_RESULT: status 0, or
 * -ENOENT (no such conversation), -EBUSY (too many watchers or waiting
 * requests), -EIO (the log cannot be read), with a one-line reason as buf;
 * arg: the events folded into the answer (the state's index + 1).
 */
#ifndef VIZ_H
#define VIZ_H

#include "runtime/rt.h"

#include <stdatomic.h>
#include <stdint.h>

enum {
    /* arg: after + 1 (0: the whole state); buf: view_since's JSON */
    VIZ_STATE = RT_KIND_RANGE(7),
    /* as VIZ_STATE, but buf: view_frames (one frame per line, maybe none);
     * reply_to becomes a watcher: whenever the state moves past what it was
     * last answered, it gets one VIZ_TICK (no more until it asks again),
     * and asks VIZ_PULL when it is ready for more */
    VIZ_WATCH,
    VIZ_PULL,    /* arg: after + 1; answered as VIZ_WATCH, from a watcher */
    VIZ_UNWATCH, /* a notice: the sender watches no more */
    VIZ_RESULT,
    VIZ_TICK, /* arg: the events folded */
    VIZ_GONE, /* to watchers: the visualizer stopped; watch again */
    /* buf: a viz_range; answered as VIZ_STATE, buf: view_range's JSON
     * (-ENOENT too for a conversation the view does not have) */
    VIZ_RANGE,
};

typedef struct viz_range {
    uint64_t from, limit;
    char conv[256]; /* "main" or a subagent's toolUseId */
} viz_range;

/* arg: the conversation's conv_ctx (conv_impl.h). */
extern const rt_behaviour viz_behaviour;

/* Visualizers running, process-wide (/metrics: parley_visualizers). */
extern _Atomic int64_t viz_running;

#endif
