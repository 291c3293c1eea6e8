/*
 * follower.h - an actor that follows one conversation on a server of the
 * API (parley, or an OpenHands agent-server) and keeps a local copy equal
 * to its log: REST for truth, a WebSocket for freshness.
 *
 * It starts from the copy it is given (a cache: possibly empty) and asks
 * the server from the last event it holds, pages of 100 (follow.h says
 * what to fetch; the cost is O(missed events), never the history). Then,
 * when following, it opens /sockets/events/{id}: against parley with
 * envelope=index and after_id=<last event held>, so the server replays what
 * came since and every frame says where it goes (a hole is seen exactly
 * and fetched); without the extension (use_index false), a frame cannot
 * be placed in the log, so one with a new id only rings the bell: the
 * follower fetches from its last event (REST stays the only writer of the
 * copy), and loss shows when GET .../events/count says more.
 * An idle socket is checked that way every check_interval_ms, which also
 * repairs a lost last frame. The socket is opened again after it drops,
 * with jittered exponential backoff (1 s to 30 s, back to 1 s once a
 * socket works); the server's 4001 (auth) and 4004 (no such conversation)
 * end the follow with an error, as does a log that disagrees with the copy.
 *
 * until_done: once a terminal execution_status (finished, error, stuck)
 * is seen, the follower counts the server's events, fetches what it lacks,
 * and ends with 0 only when the copy equals the log.
 *
 * Callbacks run on the actor's loop: each new event of the copy once, in
 * log order; status changes; done (once, last).
 */
#ifndef NET_FOLLOWER_H
#define NET_FOLLOWER_H

#include "actors/follow.h"
#include "net/tls.h"
#include "net/url.h"
#include "runtime/rt.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct follower_stats {
    uint64_t requests;   /* REST requests */
    uint64_t fetched;    /* events that came by REST */
    uint64_t frames;     /* event frames that came on WebSockets */
    uint64_t reconnects; /* WebSockets opened after the first */
    uint64_t ws_lost;    /* WebSockets closed or cut under it (each then opened again) */
} follower_stats;

typedef struct follower_opts {
    net_url url;
    net_tls_config *tls; /* a client config; needed for https */
    const char *api_key; /* NULL: none */
    const char *conversation_id;
    fl *copy; /* taken: the cache to start from (NULL: empty) */
    /* 1-100: with no cache, start from the last start_last events (a
     * count, a page newest first, a count again: 3 requests, whatever the
     * history's length) instead of the whole log. 0: from the first. */
    uint32_t start_last;
    bool follow, use_index, until_done;
    uint64_t check_interval_ms; /* default 5 s */
    uint64_t timeout_ms;        /* one request; default 30 s */
    void (*on_event)(void *ud, uint64_t index, const char *id, const rt_buf *bytes);
    /* rule: the stuck detector's rule with "stuck", when the server said it */
    void (*on_status)(void *ud, const char *status, const char *rule);
    /* The first time nothing is left to fetch (the copy lent for the call). */
    void (*on_synced)(void *ud, const fl *copy);
    /* status 0, or -1 with one line; the copy is lent until the actor ends */
    void (*on_done)(void *ud, int status, const char *why, const fl *copy,
                    const follower_stats *stats);
    void *ud;
} follower_opts;

enum {
    FOLLOWER_STOP = RT_KIND_RANGE(4), /* end now: on_done(0) */
};

/* Spawn the follower on the runtime (strings and url copied). */
int follower_start(rt_runtime *rt, const follower_opts *o, rt_actor **out);

#endif
