/*
 * conv_impl.h - the inside of a conversation's actors, shared by
 * conversation.c (the conversation actor), conv_open.c (opening and
 * rebuilding its state off the loop), conv_stuck.c (its stuck detector)
 * and convs.c (the service that starts them).
 */
#ifndef CONV_IMPL_H
#define CONV_IMPL_H

#include "actors/conversation.h"
#include "actors/event.h"
#include "actors/gate.h"
#include "actors/stuck.h"

#include <pthread.h>
#include <uv.h>

/* Messages among the conversation's own actors and its helpers. */
enum {
    CONV_OPENED = CONV_NOTE + 1, /* arg: conv_opened * (the open finished) */
    CONV_STORED,                 /* arg: first index (an append is durable) */
    CONV_DELETED,                /* arg: errno of the removal, or 0 */
    CONV_STORE_FAILED,           /* arg: -errno (an append failed) */
    CONV_FILE_SAVED,             /* arg: status (a put_file finished) */
    CONV_NUDGE,                  /* from the detector: buf = the text */
    CONV_STUCK_FOUND,            /* from the detector: arg = stuck_rule */
    CONV_TICK,                   /* timer: expire holds and deferrals */
    CONV_IDLE_CHECK,             /* timer: let the log go if nothing asked for it */
};

/* Shared by one conversation's actors; lives as long as the service. */
typedef struct conv_ctx {
    struct convs *svc;
    rt_uuid id;
    rt_actor *conv; /* the conversation actor (the service's reference) */
} conv_ctx;

struct convs {
    rt_runtime *rt;
    st_store *store;
    conv_opts o;
    pthread_mutex_t mu;
    struct conv_entry **buckets;
    size_t nbuckets, count;
};

/* What opening a conversation found (conv_open.c). */
typedef struct conv_opened {
    int err;
    char detail[1024];
    st_conv *sc; /* held */
    st_log *log; /* valid while sc is held */
    gate *g;     /* the state after the last durable event */
    conv_status status;
    uint64_t count;   /* events in the log */
    char updated[40]; /* the last event's timestamp, "" if none */
    json_t *deferred; /* [{"event": {...}, "deadline": ms}] not yet in the log */
} conv_opened;

/* Open the conversation's log and rebuild its state in the thread pool of
 * `loop`; `self` gets CONV_OPENED with the result (which it then owns).
 * log_only: only the log and its count (a conversation that let its log
 * go while idle, and has its state still). */
int conv_open_start(const conv_ctx *ctx, rt_actor *self, uv_loop_t *loop, bool log_only);
void conv_opened_free(conv_opened *o);

/* The state checkpoint's file, and building one: {"index", "status", "gate"}. */
#define CONV_STATE_FILE    "state.json"
#define CONV_DEFERRED_FILE "deferred.json"
rt_buf *conv_state_json(uint64_t index, conv_status status, const gate *g);

uint64_t conv_wall_ms(void);

extern const rt_behaviour conv_behaviour;
extern const rt_behaviour conv_stuck_behaviour;

#endif
