/*
 * conv_impl.h - the inside of a conversation's actors, shared by the files
 * that make them up:
 *   conversation.c  the actor: its messages, start and stop, controls, delete
 *   conv_commit.c   driving the sequencer: units to the store, durable
 *                   units published and answered, checkpoints, deferrals kept
 *   conv_subs.c     subscribers, and syncs
 *   conv_meta.c     changes of the conversation's stored info
 *   conv_idle.c     opening (and reopening) the log, letting it go when idle,
 *                   requests that come while it is closed
 *   conv_open.c     opening and rebuilding the state off the loop
 *   conv_confirm.c  an append whose checks the store answers only off the loop
 *   conv_refresh.c  a status where another node writes the log: what it appended first
 *   conv_stuck.c    the stuck detector
 *   convs.c         the service that starts conversations
 */
#ifndef CONV_IMPL_H
#define CONV_IMPL_H

#include "actors/conversation.h"
#include "actors/event.h"
#include "actors/gate.h"
#include "actors/sequencer.h"
#include "actors/stuck.h"

#include <stdatomic.h>
#include <pthread.h>
#include <stddef.h>
#include <uv.h>

/* Messages among the conversation's own actors and its helpers. */
enum {
    CONV_OPENED = CONV_DROPPED + 1, /* arg: conv_opened * (the open finished) */
    CONV_STORED,                    /* arg: conv_stored_arg (an append is durable) */
    CONV_DELETED,                   /* arg: errno of the removal, or 0 */
    CONV_STORE_FAILED,              /* arg: conv_stored_arg of -errno (an append failed) */
    CONV_FILE_SAVED,                /* arg: gen << 8 | errno (a put_file finished) */
    CONV_NUDGE,                     /* from the detector: buf = the text */
    CONV_STUCK_FOUND,               /* from the detector: arg = stuck_rule */
    CONV_TICK,                      /* timer: expire holds and deferrals */
    CONV_IDLE_CHECK,                /* timer: let the log go if nothing asked for it */
    CONV_META_SAVED,                /* arg: errno of writing the info, or 0 */
    CONV_CONFIRMED,                 /* arg: 1 failed (buf: why); an append's checks are
                                       answered from memory now (conv_confirm.c) */
    CONV_GREW,                      /* arg: the log's count, written by another node
                                       (conv_follow.c) */
    CONV_FOLLOWED,                  /* a page of such events read (conv_read_answer) */
    CONV_REFRESHED,                 /* buf: what other nodes appended, read for a status
                                       (conv_refresh.c) */
    CONV_REFRESH_LATE,              /* timer: that read takes too long: answer from memory */
};

/* Shared by one conversation's actors; lives as long as the service. */
typedef struct conv_ctx {
    struct convs *svc;
    rt_uuid id;
    rt_actor *conv; /* the conversation actor (the service's reference) */
    /* A conversation just created: its open, made by its creator (which
     * may block), for the first start of its actor to take instead of
     * opening in the thread pool (conv_open_fresh). */
    _Atomic(struct conv_opened *) fresh;
    /* Incarnations of its actor so far (a restart is a new one): the
     * committer's answers name the one whose append they answer. */
    _Atomic uint32_t incarnations;
} conv_ctx;

/* What the committer's answer (CONV_STORED, CONV_STORE_FAILED) carries:
 * the value (the first index, or -errno) and the incarnation that made
 * the append, in one arg. An answer to an incarnation that failed since
 * is not the current one's: appends it handed over may still land after
 * its failure, and must never be taken for the next one's. */
#define CONV_INC_BITS 20u
static inline uint64_t conv_stored_arg(uint64_t value, uint32_t inc)
{
    return value << CONV_INC_BITS | (inc & ((1u << CONV_INC_BITS) - 1));
}
static inline bool conv_stored_mine(uint64_t arg, uint32_t inc, uint64_t *value)
{
    *value = arg >> CONV_INC_BITS;
    return (arg & ((1u << CONV_INC_BITS) - 1)) == (inc & ((1u << CONV_INC_BITS) - 1));
}

/* The service's record of one conversation (convs.c; lock held for all
 * but ctx, which its actors read). */
typedef struct conv_entry {
    struct conv_entry *next;
    conv_ctx ctx;
    rt_actor *sup;   /* the tree's supervisor */
    rt_actor *viz;   /* its visualizer, once asked for (maybe stopped) */
    json_t *secrets; /* {name: value}, in memory only; NULL: none */
    bool hosted;     /* the tree has an agent's adapter */
    bool attached;   /* an embedder attached actors to its tree (convs_sup):
                        it never retires at rest */
    /* what lists show of it, kept here so that a list never needs its
     * actors (convs_summaries); the info's part is read once, the rest is
     * what its conversation actor last noted (convs_note) */
    bool meta_known, known;
    conv_status status;
    uint64_t count;
    conv_findings findings;
    char created[40], meta_updated[40], last_event[40];
} conv_entry;

/* The entry whose context ctx is. */
static inline conv_entry *conv_entry_of(conv_ctx *ctx)
{
    return (conv_entry *)(void *)((char *)ctx - offsetof(conv_entry, ctx));
}

/* The entry of id (lock held): NULL if none; convs_entry adds one (with no
 * actors) if need be, NULL if out of memory. */
conv_entry *convs_find(struct convs *s, const rt_uuid *id);
conv_entry *convs_entry(struct convs *s, const rt_uuid *id);

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
    int err; /* the open failed: why says how (conv_read.h), detail says why */
    pl_outcome why;
    char detail[1024];
    st_conv *sc; /* held */
    st_log *log; /* valid while sc is held */
    gate *g;     /* the state after the last durable event */
    conv_status status;
    uint64_t count;         /* events in the log */
    char updated[40];       /* the last event's timestamp, "" if none */
    conv_findings findings; /* in the log */
    json_t *deferred;       /* [{"event": {...}, "deadline": ms}] not yet in the log */
    int policy;             /* its stored CONV_META_POLICY, or -1 */
} conv_opened;

/* Open the conversation's log and rebuild its state in the thread pool of
 * `loop`; `self` gets CONV_OPENED with the result (which it then owns).
 * log_only: only the log and its count (a conversation that let its log
 * go while idle, and has its state still). */
int conv_open_start(const conv_ctx *ctx, rt_actor *self, uv_loop_t *loop, bool log_only);
/* The open of a conversation just created (empty: nothing to read but its
 * info's policy), taking over the caller's hold of sc; NULL if it cannot
 * (sc is then still the caller's). Blocking. */
conv_opened *conv_open_fresh(st_conv *sc);
void conv_opened_free(conv_opened *o);

/* The state checkpoint's file, and building one:
 * {"index", "status", "gate", "findings": {"violations", "stuck"}}. */
#define CONV_STATE_FILE    "state.json"
#define CONV_DEFERRED_FILE "deferred.json"
rt_buf *conv_state_json(uint64_t index, conv_status status, const gate *g, const conv_findings *f);

/* The service's summary of ctx's conversation (convs_summaries): what its
 * actor knows now (NULL: not known, ask it), and its info after a change.
 * Any thread. */
void convs_note(conv_ctx *ctx, const conv_reply *info);
void convs_note_meta(conv_ctx *ctx, rt_buf *meta);
/* Let a conversation at rest go: its tree stops and the next request
 * starts a new one (from the log and its checkpoint), so that a
 * conversation nobody uses costs only its summary. Only if nothing else is
 * in its tree (a hosted agent, a visualizer, an embedder's actors); self is
 * its conversation actor. True if it was let go. */
bool convs_retire(conv_ctx *ctx, rt_actor *self);
/* The conversation actor of ctx's running tree, referenced; NULL once it
 * retired (an actor of its tree starting late finds it gone). */
rt_actor *convs_running(conv_ctx *ctx);
/* Take back what the last clean close saved (convs_save). */
void convs_load(struct convs *s);

uint64_t conv_wall_ms(void);
uint64_t conv_mono_ms(void);

extern const rt_behaviour conv_behaviour;
extern const rt_behaviour conv_stuck_behaviour;

/* ---- the conversation actor's state ------------------------------------- */

typedef struct conv_waiter { /* a deferral, answered once its deferred set is durable */
    struct conv_waiter *next;
    rt_promise *reply;
    char *id;
    uint64_t gen;
} conv_waiter;

typedef struct conv_flush { /* a CONV_SYNC waiting for subscribers and commits */
    struct conv_flush *next;
    rt_promise reply;
    uint64_t id;
    size_t waiting;    /* subscribers yet to answer */
    uint64_t asked_at; /* durable events when they were asked (UINT64_MAX: not yet) */
} conv_flush;

typedef struct conv_early { /* a message that came before the log was open */
    struct conv_early *next;
    uint32_t kind;
    uint64_t arg;
    rt_buf *buf;
    rt_promise reply;
} conv_early;

typedef struct conv_sub {
    rt_actor *a;
    bool notes; /* wants CONV_NOTE */
    bool told;  /* wants CONV_DROPPED */
} conv_sub;

typedef struct conv {
    conv_ctx *ctx;
    uint32_t incarnation; /* of ctx's actor: this state's (conv_stored_arg) */
    const conv_opts *o;
    rt_actor *self;
    sequencer *sq;    /* the ordering rules and state; NULL until first opened */
    bool open;        /* the log is open: sc and log are set */
    bool asleep;      /* it let its log go while idle, and kept its state */
    bool waking;      /* asleep, and opening the log again */
    bool retired;     /* at rest: its tree stops, a new one serves the next
                         request (what still comes here is passed on) */
    bool deleted;     /* CONV_DELETE was accepted: sc is gone */
    bool recovering;  /* what opening made (recovery) is not durable yet:
                         requests wait, so none is answered from a state
                         the log does not have */
    int failed;       /* the store refused a unit: the actor fails (restarts) */
    bool unsure;      /* a check of the log could not be answered without a
                         wait: what was decided is not, the actor restarts */
    uint64_t last_ms; /* when a request last came (monotonic) */
    st_conv *sc;
    st_log *log;
    char updated[40]; /* the last durable event's timestamp */
    struct {          /* what it last told the service (convs_note) */
        bool done;
        conv_status status;
        uint64_t count;
        conv_findings findings;
    } noted;
    rt_promise delete_reply;
    conv_waiter *waiters;
    uint64_t gen_sent, gen_saved; /* the deferred sets saved, and durable */
    uint64_t saves_sent, saves_done;
    conv_sub *subs;
    size_t nsubs, subs_cap, ntold;
    rt_timer_id tick;
    uint64_t since_ckpt;
    conv_flush *syncs;
    uint64_t sync_seq;
    conv_early *early_head, *early_tail;
    struct meta_change *meta_queue; /* changes of the info, oldest first */
    bool meta_busy;                 /* the oldest is being written */
    conv_early *confirm;            /* an append whose checks the thread pool answers:
                                       requests wait behind it (early) */
    bool confirmed;                 /* it is being handled: its checks are answered */
    conv_early *refresh;            /* a status waiting for what other nodes appended:
                                       requests wait behind it (early) */
    bool refreshed;                 /* it is being answered: the state is the log's */
    bool refreshing;                /* that read is in the thread pool (one at a time) */
    /* conv_follow.c: what other nodes append, to the subscribers here */
    struct st_follow *follow; /* while it has told subscribers, on a shared store */
    uint64_t published;       /* the events subscribers were given: [0, published) */
    uint64_t follow_to;       /* the log's count as the last notice said */
    bool follow_reading;      /* a page is being read in the thread pool */
} conv;

/* conversation.c: the process's counters, from the sequencer's decisions */
void conv_count_decision(void *ctx, const ev *e, const seq_verdict *v, seq_was was, uint64_t index,
                         void *tag);

/* conv_commit.c */
/* After the sequencer was told anything: units to the store, deferrals
 * kept, answers sent, the expiry timer set. */
void conv_drive(conv *c);
/* The oldest unit handed to the store is durable (arg: conv_stored_arg of
 * the index of its first event); an answer to another incarnation is
 * dropped, and one at another index than counted fails the actor. */
void conv_stored(conv *c, uint64_t arg);
void conv_file_saved(conv *c, uint64_t gen, int err);
void conv_checkpoint(conv *c);
/* The seq_log over the conversation's durable log. */
seq_log conv_seq_log(conv *c);
/* Answer a request (taken promise, heap) with a sequencer verdict. */
void conv_answer_verdict(conv *c, rt_promise *p, const seq_verdict *v);
/* Answer everything that waits for units, deferred saves or holds with
 * BUSY (why): the actor stops, or fails. */
void conv_refuse_waiting(conv *c, pl_outcome o, const char *why);

/* conv_confirm.c */
/* Before the sequencer sees append evs (body, reply): 0 if the store
 * answers every check its verdicts may make from memory; 1 if one would
 * wait for another machine: the checks are made in the thread pool, and
 * the append (reply taken) is handled when CONV_CONFIRMED comes; or
 * -ENOMEM / -ESHUTDOWN. */
int conv_confirm(conv *c, const ev *evs, size_t n, const rt_buf *body, rt_promise *reply);
void conv_confirmed(conv *c, const rt_msg *m);
/* Answer the append set aside (o, why): the actor stops. */
void conv_refuse_confirm(conv *c, pl_outcome o, const char *why);

/* conv_refresh.c */
/* Whether other nodes may append without this actor knowing: a shared
 * store, and this node is not the log's writer. */
bool conv_may_lag(const conv *c);
/* Before a status (kind, arg, buf, reply) is answered by a node that may
 * lag: 1 if the events other nodes appended are read in the thread pool
 * first (reply taken: answered when CONV_REFRESHED comes); 0: answer now. */
int conv_refresh(conv *c, uint32_t kind, uint64_t arg, const rt_buf *buf, rt_promise *reply);
void conv_refreshed(conv *c, const rt_msg *m);
/* CONV_REFRESH_LATE: the status set aside, if it still waits, is answered
 * from memory. */
void conv_refresh_late(conv *c);
/* Answer the status set aside (o, why): the actor stops. */
void conv_refuse_refresh(conv *c, pl_outcome o, const char *why);

/* conv_subs.c */
void conv_subscribe(conv *c, rt_promise *reply, uint64_t arg);
void conv_unsubscribe(conv *c, rt_actor *sub);
/* A durable event to every subscriber: its bytes, or, to the stuck
 * detector, its note (made from e or its bytes when note is NULL). */
void conv_publish(conv *c, uint64_t index, const ev *e, rt_buf *bytes, rt_buf *note);
/* Forget subscriber i; a told one learns it (why: CONV_DROPPED's arg). */
void conv_drop_sub(conv *c, size_t i, uint64_t why);
void conv_start_sync(conv *c, rt_promise *reply);
void conv_sync_answered(conv *c, uint64_t id);
void conv_check_syncs(conv *c);
/* What the conversation knows now, for replies. */
conv_reply conv_info(const conv *c);
/* Tell the service what it knows now, if that changed since it last did:
 * before answering anything a list might be asked about next. */
void conv_note(conv *c);

/* conv_follow.c */
/* Follow the log while there are told subscribers (a store shared by
 * nodes), or stop: after subscribers came or went. */
void conv_follow_update(conv *c);
void conv_follow_stop(conv *c);
/* CONV_GREW and CONV_FOLLOWED. */
void conv_follow_msg(conv *c, rt_msg *m);
/* The index of the next event subscribers get: what a subscribe answers. */
uint64_t conv_next_published(const conv *c);
/* Give the told subscribers the events of p they were not given, in order
 * (another node's, read by conv_refresh.c). */
void conv_follow_publish(conv *c, const st_page *p);

/* conv_meta.c: changes of the stored info, one at a time */
void conv_set_meta(conv *c, const rt_buf *changes, rt_promise *reply);
void conv_meta_saved(conv *c, int err);
void conv_refuse_meta(conv *c, pl_outcome o, const char *why);

/* conv_idle.c */
void conv_set_open(conv *c, bool open);
void conv_arm_idle(conv *c, uint64_t ms);
void conv_idle_check(conv *c);
/* After a message: past the store's bound of open logs, sleep if quiet. */
void conv_sleep_if_crowded(conv *c);
/* A message for a retired conversation actor: a request is passed on to
 * the conversation's new tree, the rest (its own timers and helpers'
 * news) dropped. */
void conv_pass_on(conv *c, rt_msg *m);
/* Handle the open's result (CONV_OPENED): 0, or the error that fails the actor. */
int conv_on_open_result(conv *c, conv_opened *o);
/* A message that needs the log while it is closed: kept (and the log
 * opened again if it was let go). true if it was kept. */
bool conv_keep_early(conv *c, rt_msg *m);
/* After a unit is durable: if it ended the recovery, what waited goes on. */
void conv_recovered(conv *c);
/* Refuse what came early (o, why) or, why NULL, handle it now. */
void conv_run_early(conv *c, pl_outcome o, const char *why);
/* A request set aside (conv_confirm.c, conv_refresh.c): kind, arg, a
 * reference to buf, the reply taken; NULL (nothing taken) when out of
 * memory. Ended by conv_early_end: refused (o, why), or, why NULL,
 * handled now; then freed. */
conv_early *conv_early_new(uint32_t kind, uint64_t arg, const rt_buf *buf, rt_promise *reply);
void conv_early_end(conv *c, conv_early *e, pl_outcome o, const char *why);
void conv_dispatch(conv *c, uint32_t kind, uint64_t arg, const rt_buf *buf, rt_promise *reply);

#endif
