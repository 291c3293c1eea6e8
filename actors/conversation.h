/*
 * conversation.h - a conversation's actors, and the service that finds
 * them: the protocol producers and subscribers speak to a conversation.
 *
 * Each conversation is a small supervision tree on one loop (chosen by
 * hashing its id): the conversation actor, which owns the status and the
 * order of the conversation's events, and its stuck detector. Every append
 * goes through the conversation actor: validated (event.h), ordered by the
 * sequencer (sequencer.h: the compliance gate, holds, deferrals, status),
 * stamped, serialized once, handed to the store's committer, and answered
 * only once durable (or refused). Only then do subscribers see it. Status
 * changes, the stuck detector's findings, nudges and crash recovery are
 * events too, appended through the same path, so the log alone rebuilds
 * everything after a restart.
 *
 * Requests (rt_ask or rt_call) are each answered once with CONV_RESULT:
 * arg is the outcome (pl_outcome), buf a conv_reply (conv_reply.h): the
 * typed verdict and what the conversation knows. Nothing here speaks
 * HTTP; net/ maps verdicts to statuses and bodies.
 */
#ifndef CONVERSATION_H
#define CONVERSATION_H

#include "actors/conv_reply.h"
#include "actors/conv_status.h"
#include "runtime/metrics.h"
#include "runtime/rt.h"
#include "store/store.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum {
    /* requests */
    CONV_APPEND = RT_KIND_RANGE(1), /* buf: one event object, or an array
                                         (all or nothing) */
    CONV_CONTROL,                   /* arg: conv_control */
    CONV_SUBSCRIBE,                 /* arg: how many past events to replay
                                       first (at most 20), | CONV_SUB_NOTES to
                                       get CONV_NOTE instead of CONV_EVENT,
                                       | CONV_SUB_TOLD (see CONV_DROPPED);
                                       reply_to is the subscriber; answered
                                       DONE with count (the index of the first
                                       event it will get live) and the durable
                                       status; BUSY once max_subscribers
                                       CONV_SUB_TOLD subscribers are there */
    CONV_UNSUBSCRIBE,               /* reply_to is the subscriber */
    CONV_EXPIRE,                    /* expire every hold and deferral now */
    CONV_STATUS,                    /* answered DONE with status, count,
                                       pending, updated (the reply's info) */
    CONV_SYNC,                      /* answered once every subscriber has handled
                                       what was published before, and all that
                                       was accepted (including what subscribers
                                       asked for meanwhile) is durable (DONE with
                                       count); also sent to subscribers, who
                                       answer CONV_SYNC_DONE */
    CONV_SYNC_DONE,
    CONV_DELETE,   /* remove the conversation and its files, once what was
                      accepted before is durable; answered DONE; then
                      the conversation's actors stop, and every later
                      request is answered NOT_FOUND */
    CONV_SET_META, /* buf: a JSON object of members to set in the stored info
                      (title, tags...); merged into the info as the changes
                      before it left it and written durably, then answered
                      DONE; one at a time, so none is lost */
    CONV_STOPPING, /* a notice: the server is stopping, so every event held
                      for its parent is refused now (BUSY), and so is any
                      that would be held from now on */
    /* the reply */
    CONV_RESULT,
    /* to subscribers, in log order: arg = index, buf = the event's bytes */
    CONV_EVENT,
    /* to CONV_SUB_NOTES subscribers instead: arg = index, buf = the event's
     * stuck_note (stuck.h), computed once from the parsed event, so that the
     * stuck detector never parses an event again */
    CONV_NOTE,
    /* to a CONV_SUB_TOLD subscriber, as its last message from this
     * conversation actor: it is no longer subscribed. arg 0: it was not
     * keeping up (its mailbox was full), 1: the conversation actor stopped
     * (deleted, restarted, shutting down). Nothing it was owed is lost: the
     * events are in the log; subscribe again to go on. */
    CONV_DROPPED,
};

enum { CONV_SUB_NOTES = 0x100, CONV_SUB_TOLD = 0x200 };

/* How long a conversation keeps its log open without a request, by default. */
#define CONV_IDLE_CLOSE_MS (5 * 60 * 1000ull)

typedef struct conv_opts {
    conv_policy policy;
    uint64_t defer_timeout_ms;         /* default 10 min */
    uint32_t defer_max;                /* default 64 */
    uint64_t hold_timeout_ms;          /* default 5 s */
    uint32_t hold_max;                 /* default 64 */
    uint32_t checkpoint_every;         /* state checkpoint every N events; default 1024 */
    uint32_t mailbox_cap;              /* bound of the conversation's mailbox; default 4096 */
    uint32_t max_subscribers;          /* CONV_SUB_TOLD subscribers (WebSockets); default 1000 */
    uint64_t idle_close_ms;            /* let the log go after this long without a request;
                                          default 5 min; UINT64_MAX: never */
    bool measure;                      /* time the gate: CONV_STATUS reports "gate_ns"
                                          (for benchmarks) */
    int loops;                         /* conversations live on loops 0..loops-1; 0: all */
    uint32_t sup_intensity;            /* a conversation's tree gives up past this many
                                          restarts... (0: 1) */
    uint64_t sup_period_ms;            /* ...in this window (0: 5 s) */
    const struct acp_registry *agents; /* the agents conversations may host
                                          (acp_registry.h); NULL: none */
    bool agents_in_working_dir;        /* a hosted agent works in its
                                          conversation's workspace.working_dir
                                          (pl_options) */
    uint64_t viz_idle_ms;              /* a visualizer nobody watches or asks
                                          stops after this long; default 60 s */
    uint64_t viz_max_blocks;           /* a conversation folding into more blocks
                                          than this has no view (its visualizer
                                          answers -E2BIG); default 500,000 */
} conv_opts;

/* Secrets never reach the disk or an answer: a conversation's info keeps
 * the names of its secrets and of an LLM's keys (api_key, aws_*), their
 * values replaced by CONV_REDACTED, as upstream redacts what it cannot
 * encrypt. parley runs no LLM itself, so it needs none of them. */
#define CONV_REDACTED "**********"
void conv_meta_redact(json_t *meta);

/* The member of a conversation's stored info that sets its compliance
 * policy ("reject" or "observe"); without it, conv_opts.policy. */
#define CONV_META_POLICY "compliance_policy"

/* The conversations' figures (process-wide), as /metrics shows them. */
enum { CONV_METRIC_RULES = 16 };
typedef struct conv_metrics {
    _Atomic uint64_t appended, deferred, held;
    _Atomic uint64_t rejected[CONV_METRIC_RULES]; /* by the gate's rule */
    _Atomic int64_t open;                         /* conversations with their log open */
    _Atomic int64_t active;                       /* conversation actors running */
} conv_metrics;
extern conv_metrics conv_metrics_g;
void conv_metrics_render(rt_text *t);

/* The service: one per server. */
typedef struct convs convs;

int convs_new(rt_runtime *rt, st_store *store, const conv_opts *o, convs **out);
/* Frees the service. Conversations end with the runtime; the order to
 * close a server in is rt_runtime_wait, st_store_close, convs_free,
 * rt_runtime_free. */
void convs_free(convs *c);

/* The agents its conversations may host (NULL: none). */
const struct acp_registry *convs_agents(const convs *c);

/* The loop a conversation's actors live on, open or not (its id decides). */
int convs_home(const convs *c, const rt_uuid *id);

/* The conversation actor of an existing conversation, started on first use
 * (a held reference: rt_actor_unref it). -ENOENT if the store has no such
 * conversation. Any thread. */
int convs_get(convs *c, const rt_uuid *id, rt_actor **out);
/* rt_call (runtime/call.h: loop, timeout, cb, buf taken on 0) to the
 * conversation actor of id, sent once more to the tree that replaced it if
 * it reached one that retired at rest before handling it (RT_ECLOSED).
 * -ENOENT if the store has no such conversation, or rt_call's error; cb
 * runs once when 0. Every request to a conversation goes this way. Any
 * thread. */
int convs_call(convs *c, const rt_uuid *id, int loop, uint32_t kind, uint64_t arg, rt_buf *buf,
               uint64_t timeout_ms, rt_reply_cb cb, void *ctx);
/* Tests only: the lookup convs_call makes (NULL: convs_get), so that a test
 * can hand it trees that retire at the moments it chooses. */
extern int (*convs_call_find)(convs *c, const rt_uuid *id, rt_actor **out);
/* Once a subscribe is answered: *held (a reference, replaced) becomes the
 * actor that has the subscription now, which is another than the one asked
 * when that one was retiring at rest and passed the subscribe on. */
void convs_refresh(convs *c, const rt_uuid *id, rt_actor **held);
/* The conversation's visualizer (viz.h), started if it has none: 0,
 * -ENOENT, or another error. */
int convs_viz(convs *c, const rt_uuid *id, rt_actor **out);
/* The supervisor of a conversation's tree (started if need be; a held
 * reference), to attach actors to. -ENOENT if the store has no such
 * conversation. Any thread. */
int convs_sup(convs *c, const rt_uuid *id, rt_actor **out);
/* Stop the actors of a conversation (after CONV_DELETE removed it). */
void convs_stop(convs *c, const rt_uuid *id);
/* The server is stopping: CONV_STOPPING to every running conversation. */
void convs_stopping(convs *c);
/* Create it (meta stored as given) as a child of parent (NULL: top-level)
 * and start it; *created false if it existed already (then it is returned
 * as is, nothing checked). A parent must exist (-ENOENT), not be the
 * conversation itself (-ELOOP) and have the same workspace.working_dir in
 * its meta (-EXDEV). */
int convs_create(convs *c, const rt_uuid *id, const rt_uuid *parent, rt_buf *meta, json_t *secrets,
                 rt_actor **out, bool *created);

/* A conversation's secrets: {name: value} of strings, handed to its hosted
 * agent (its environment, and values masked in what it says). In memory
 * only, never stored: after a restart they must be set again (upstream
 * without a secret key loses them the same way). convs_create takes the
 * first ones (NULL: none) before the tree starts; convs_set_secrets merges
 * more (later names win; -ENOENT for an unknown conversation);
 * convs_secrets is a copy (NULL: none). Deleting a conversation drops
 * them. Any thread. */
int convs_set_secrets(convs *c, const rt_uuid *id, json_t *secrets);
/* Secrets as a request gives them, upstream's forms: {name: "value" or
 * {"value": ...} or {"kind": "StaticSecret", "value": ...}}; names are
 * environment variable names. A new {name: value} object, or NULL with
 * the reason in why. */
enum { CONV_SECRETS_MAX = 100, CONV_SECRET_NAME_MAX = 128, CONV_SECRET_VALUE_MAX = 65536 };
json_t *conv_secrets_parse(json_t *v, char *why, size_t cap);
json_t *convs_secrets(convs *c, const rt_uuid *id);

/* What a list of conversations shows of one, kept by the service so that
 * lists need no conversation's actors: the info's created_at and
 * updated_at (read once, then noted when the info changes), and what its
 * conversation actor last noted, if it has run since the server started
 * (known; then status, count, findings and last_event are set). */
typedef struct conv_summary {
    bool exists; /* false: the store has no such conversation */
    bool known;
    conv_status status;     /* live, as CONV_STATUS says */
    uint64_t count;         /* durable events */
    conv_findings findings; /* in the log */
    char created[40];       /* the info's created_at, "" if none */
    char meta_updated[40];  /* the info's updated_at, "" if none */
    char last_event[40];    /* the last durable event's timestamp, "" if none */
} conv_summary;

/* The summaries of n conversations (out[i] for ids[i]): 0 or -ENOMEM. Any
 * thread; reads the info of one asked for the first time. */
int convs_summaries(convs *c, const rt_uuid *ids, size_t n, conv_summary *out);
/* The summaries across a restart: written to the store by a clean close
 * (after the runtime stopped, before the store closes), taken back (and
 * removed from the store) when the service starts. */
void convs_save(convs *c);

/* A conversation's last update: the later of its info's updated_at
 * (created_at if it has none) and its last event's timestamp; any may be
 * NULL or "" (none). NULL if all are. */
const char *conv_last_update(const char *updated, const char *created, const char *last_event);
/* The same of a summary. */
const char *conv_summary_updated(const conv_summary *c);

/* Start the adapter of the agent the conversation's info names, in its
 * running tree, if it has none (start does this by itself; a conversation
 * given its agent after its start needs it). -ENOENT: no running tree. */
int convs_attach_host(convs *c, const rt_uuid *id);

/* Fork src: a new top-level conversation id whose info is src's (less its
 * id, times, title and agent session) with changes merged over it, whose
 * secrets are src's, and whose log is src's up to and including the event
 * from_event (NULL: all of it), status changes left out (it starts idle),
 * each event through the fork's gate. Blocking (the thread pool, or a
 * thread that is no loop's). 0; else, with a line in detail: -ENOENT no
 * src, -ESRCH no from_event in it, -EEXIST id taken, -EPROTO the fork's
 * gate refused an event (the fork is deleted again), -EAGAIN out of files,
 * another -errno. A hosted agent is given to the fork once its log is
 * copied, so that it owes only the messages after the agent's last word. */
int convs_fork(convs *c, const rt_uuid *src, const rt_uuid *id, json_t *changes,
               const char *from_event, char *detail, size_t cap);

#endif
