/*
 * parley.h - the public API for programs that embed parley: the
 * conversation core (appends checked by the compliance gate and made
 * durable before anyone sees them, subscriptions, reads, controls), the
 * HTTP server, and the actor runtime it all runs on, for the embedder's
 * own actors (agents) under parley's supervisors.
 *
 * Link with libparley.a and its dependencies: `pkg-config --cflags --libs
 * parley`. Every public name starts with pl_ (PL_ for constants); no
 * internal type shows. Functions return 0 or a negative error code
 * (PL_E*, or a negated errno such as -ENOENT) that pl_strerror describes
 * in one line; nothing is written or changed when a call fails on bad
 * input.
 *
 * Threads. parley runs W worker threads (pl_options.workers), each a loop
 * that hosts conversations and actors, and one more for subscription
 * callbacks. Calls marked "blocking" wait for an answer: make them from
 * your own threads, never from a parley thread (they return PL_ETHREAD
 * there). Everything else may be called from any thread. Callbacks run on
 * parley threads: keep them short and never block in them.
 *
 *   pl_instance *p;
 *   char err[256];
 *   pl_options o = {.workers = 2, .data_dir = "parley-data"};
 *   if (pl_open(&o, &p, err, sizeof err) != 0) ...;
 *   pl_conv *c;
 *   pl_conv_create(p, NULL, &c);
 *   pl_append(c, json, strlen(json), on_verdict, ctx);
 *   ...
 *   pl_conv_release(c);
 *   pl_close(p);   // clean stop: drains work, joins threads, frees all
 */
#ifndef PARLEY_H
#define PARLEY_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pl_instance pl_instance;

/* ---- errors --------------------------------------------------------------- */

enum {
    PL_OK = 0,
    PL_EINVAL = -1001,    /* a bad argument */
    PL_ENOMEM = -1002,    /* out of memory */
    PL_ECLOSED = -1003,   /* the actor or the instance has stopped */
    PL_EFULL = -1004,     /* a bounded mailbox is full: retry later */
    PL_ETIMEDOUT = -1005, /* no answer in time */
    PL_ENOREPLY = -1006,  /* a request was handled without an answer */
    PL_EFAIL = -1007,     /* a handler failed without saying why */
    PL_EASSERT = -1008,   /* an assertion failed in a handler */
    PL_ETHREAD = -1009,   /* a blocking call from a parley thread */
};
/* And negated errno values, among them: */
#define PL_ENOENT (-ENOENT) /* no such conversation (or event) */
#define PL_EEXIST (-EEXIST) /* a conversation with this id exists */
#define PL_EBUSY  (-EBUSY)  /* the data directory is another process's */

/* ---- verdicts: what a conversation answers ----------------------------- */

/* The outcome of a request to a conversation (an append, a control, a
 * delete). parley serve maps them to HTTP: COMMITTED and DUPLICATE 201,
 * DEFERRED 202, REJECTED and CONFLICT 409, INVALID 422, NOT_FOUND 404,
 * BUSY 503, FAILED 500, DONE 200, NO_SPACE 507, TOO_LARGE 413. */
typedef enum pl_outcome {
    PL_COMMITTED = 0, /* durable: events[] with their indexes (a retried one
                         among new ones has duplicate set) */
    PL_DUPLICATE,     /* all of it was in the log already (an idempotent
                         retry): events[] with their indexes */
    PL_DEFERRED,      /* kept durably; committed once the pending tool calls
                         complete (or expired, with a ConversationErrorEvent) */
    PL_HELD,          /* waiting for its parent: only `parley lint` reports
                         it; an append is answered once it is resolved */
    PL_REJECTED,      /* a compliance rule refused it: rule, event_id,
                         pending[]; nothing was appended */
    PL_INVALID,       /* not a valid event, or not allowed now (a status it
                         cannot move to): detail says why */
    PL_CONFLICT,      /* a control the status does not allow (run while
                         running) */
    PL_NOT_FOUND,     /* no such conversation (any more) */
    PL_BUSY,          /* a bound was reached: retry after retry_after s */
    PL_FAILED,        /* the store (or memory) failed: detail says how */
    PL_DONE,          /* a control, delete or sync is done */
    PL_NO_SPACE,      /* the disk is full: nothing was stored; retry once
                         space is freed (what was acknowledged is kept) */
    PL_TOO_LARGE,     /* an event larger than the store keeps
                         (st_store_max_event): nothing was appended */
} pl_outcome;

#define PL_NO_INDEX UINT64_MAX

typedef struct pl_event_ref {
    const char *id;
    uint64_t index; /* its place in the log; PL_NO_INDEX if not known */
    int duplicate;  /* it was in the log before this append */
} pl_event_ref;

/* Valid for the duration of the callback that gets it. */
typedef struct pl_verdict {
    pl_outcome outcome;
    const char *detail;         /* one line ("" when there is nothing to say) */
    const char *rule;           /* PL_REJECTED: "interleaved_message", ...; else NULL */
    const char *event_id;       /* PL_REJECTED: the refused event's id, or NULL */
    const char *const *pending; /* PL_REJECTED: the tool calls pending */
    size_t npending;
    const pl_event_ref *events; /* COMMITTED, DUPLICATE, DEFERRED */
    size_t nevents;
    unsigned retry_after; /* PL_BUSY: seconds; 0 if unsaid */
} pl_verdict;

/* "committed", "duplicate", ... */
const char *pl_outcome_name(pl_outcome o);

/* An agent the instance may host: a program speaking the Agent Client
 * Protocol on stdio (Claude Code, Codex, Gemini CLI... ship one), started
 * per conversation that asks for it by name, in its own process group.
 * Conversations name agents; only the embedder (the operator) says what
 * they run. */
typedef struct pl_agent {
    const char *name;        /* letters, digits, '-', '_', '.' (1 to 64) */
    const char *const *argv; /* NULL-terminated; argv[0] is looked up in PATH */
    const char *const *env;  /* NULL-terminated "K=V", added to parley's; may be NULL */
    const char *cwd;         /* NULL: the conversation's workspace directory */
} pl_agent;

typedef struct pl_options {
    int workers; /* worker loops (threads); 0 = number of cores */
    /* created if missing; NULL = "parley-data". A new directory keeps its
     * conversations in shared segment files (the pool); one that holds a
     * store already keeps its kind. local:DIR or pool:DIR names the kind. */
    const char *data_dir;
    const char *durability; /* "full" (default), "interval=250ms", "none" */
    /* Bounds of the compliance gate, per conversation (0 = the default):
     * user or environment messages deferred while a tool call is pending,
     * and events held for a parent that has not arrived yet. */
    unsigned long long defer_timeout_ms; /* default 10 minutes */
    unsigned defer_max;                  /* default 64 */
    unsigned long long hold_timeout_ms;  /* default 5 seconds */
    unsigned hold_max;                   /* default 64 */
    /* WebSocket subscribers per conversation (0 = the default, 1000) */
    unsigned max_subscribers;
    /* A conversation without requests for this long closes its log (its
     * files and index), and opens it again on the next request that needs
     * it. 0 = the default, 5 minutes; ULLONG_MAX = never. */
    unsigned long long idle_close_ms;
    /* Each conversation is a supervision tree (rest_for_one: the
     * conversation, its stuck detector, then what is attached to it): past
     * this many restarts within period_ms it gives up (and starts afresh on
     * next use). 0 = the defaults, 1 restart in 5 s. */
    unsigned sup_intensity;
    unsigned long long sup_period_ms;
    /* The agents conversations may host (copied), and the one a
     * conversation created without an agent hosts (NULL: none). */
    const pl_agent *agents;
    size_t nagents;
    const char *default_agent;
    /* A conversation's workspace.working_dir, when it is an absolute path
     * to a directory, is where its hosted agent works (its session's cwd,
     * the root of its fs/ calls, its process's directory unless the agent
     * has one of its own) instead of a directory of its own under the data
     * directory. Only for an embedder whose clients may choose directories
     * on this machine (`parley acp --data`: the editor is the user); a
     * server keeps it off, so that an API client names no directory. */
    int agents_in_working_dir;
    /* A conversation's visualizer (its block state, GET .../state and the
     * view=blocks stream) stops after this long unwatched and unasked, and
     * starts again on next use. 0 = the default, 60 seconds. */
    unsigned long long viz_idle_ms;
    /* A conversation that folds into more blocks than this has no view
     * (its state is refused, saying so): a bound on a visualizer's memory
     * (about 2.6 KB a block of agent turns). 0 = the default, 500,000. */
    unsigned long long viz_max_blocks;
    /* The store: NULL for the local one in data_dir; "nats://HOST:PORT[,
     * HOST:PORT...]" for a NATS JetStream cluster, where data_dir holds
     * only this machine's workspaces of hosted agents (and is not locked).
     * For the cluster: this node's id (letters, digits, '.', '_', '-', at
     * most 63; NULL: "<hostname>-<pid>"), and files for cnats: credentials
     * (JWT + NKey seed), the CA of the servers' certificates (TLS then
     * required), this client's certificate chain and key. A build without
     * libnats refuses a nats:// store (PL_EINVAL, "not built"). */
    const char *store;
    const char *node_id;
    const char *nats_creds, *nats_tls_ca, *nats_tls_cert, *nats_tls_key;
    /* How many shard streams hold the conversations' logs (1 to 1024),
     * fixed for a cluster: the first node records it there, a node asking
     * for another count is refused. 0 = what the cluster recorded, or 16
     * on a new cluster. */
    unsigned nats_shards;
} pl_options;

/* The library's version, e.g. "0.1.0". */
const char *pl_version(void);
/* One line describing an error code returned by a pl_ function. */
const char *pl_strerror(int err);

/* Start an instance: open the store in the data directory (creating it,
 * locking it against other processes, replaying its journal), then start
 * the worker loops and the conversation service (each conversation opens
 * on first use). On failure, `err` (if not NULL) gets one line saying
 * why: e.g. that another process has the directory. */
int pl_open(const pl_options *o, pl_instance **out, char *err, size_t errlen);
/* Number of worker loops the instance runs. */
int pl_workers(const pl_instance *p);
/* Number of conversations in its store. */
size_t pl_conversations(pl_instance *p);
/* The kind of store it opened: "pool", "local" or "nats". */
const char *pl_store_kind(const pl_instance *p);
/* Stop cleanly and free everything (HTTP servers started on it too):
 * appends in flight are answered, callbacks end. Blocking; NULL is
 * ignored. */
void pl_close(pl_instance *p);

/* ---- conversations -------------------------------------------------------- */

typedef struct pl_conv pl_conv; /* a handle: the conversation's own actors run on */

typedef enum pl_status {
    PL_IDLE = 0,
    PL_RUNNING,
    PL_PAUSED,
    PL_WAITING_FOR_CONFIRMATION,
    PL_FINISHED,
    PL_ERROR,
    PL_STUCK,
    PL_DELETING,
} pl_status;

/* "idle", "running", ... */
const char *pl_status_name(pl_status s);

typedef struct pl_conv_options {
    /* A UUID, dashed or as 32 hex digits; NULL: a new random one. */
    const char *id;
    /* A JSON object of the conversation's info as the OpenHands API shows
     * it (title, tags, agent...); NULL: {}. id and created_at are set. */
    const char *meta_json;
    /* The compliance policy: 0 reject (violations are refused, the
     * default), 1 observe (appended, and recorded as ComplianceViolation). */
    int observe;
    /* The stuck detector: off, or its thresholds (0: the default of each:
     * 4 repeated action/observation pairs, 3 action errors, 3 monologue
     * messages, 6 alternations). */
    int stuck_off;
    unsigned stuck_action_observation, stuck_action_error, stuck_monologue, stuck_alternating;
    /* The conversation that owns this one (a UUID), fixed for life; NULL:
     * top-level. It must exist and work in the same workspace (equal
     * workspace.working_dir in both infos, or none in either). Deleting a
     * parent leaves its children, naming it still. */
    const char *parent_id;
    /* Host this agent (pl_options.agents): its process answers the user's
     * messages while the conversation runs. NULL: the agent meta_json
     * names (an {"kind": "ACPAgent", "acp_command": [NAME]}), or the
     * default agent if it names none, or no agent. */
    const char *agent;
    /* Its secrets, a JSON object {NAME: "value"} (or {"value": ...}): its
     * hosted agent gets them as environment variables, and their values
     * are replaced by <secret-hidden> in what the agent says. Kept in
     * memory only (never stored): set them again after a restart. NULL:
     * none. A bad object is PL_EINVAL. */
    const char *secrets_json;
} pl_conv_options;

/* Create a conversation (o may be NULL: defaults) and get a handle.
 * PL_EEXIST if the id is taken (nothing changed); PL_ENOENT if the parent
 * does not exist; PL_EINVAL for a bad id, parent (itself, or another
 * workspace's) or meta_json. Blocking (the info is written durably). */
int pl_conv_create(pl_instance *p, const pl_conv_options *o, pl_conv **out);
/* A handle on an existing conversation: PL_ENOENT if there is none. */
int pl_conv_open(pl_instance *p, const char *id, pl_conv **out);
/* Give a handle back (the conversation goes on). NULL is ignored. */
void pl_conv_release(pl_conv *c);
/* The conversation's id, dashed (valid as long as the handle). */
const char *pl_conv_id(const pl_conv *c);

typedef struct pl_id {
    char s[37]; /* dashed UUID */
} pl_id;
/* Every conversation's id (*ids malloc'd: free() it). */
int pl_conv_list(pl_instance *p, pl_id **ids, size_t *n);
/* The conversations created with c as their parent, in id order (*ids
 * malloc'd: free() it). */
int pl_conv_children(pl_conv *c, pl_id **ids, size_t *n);

typedef struct pl_info {
    char id[37];
    pl_status status;
    uint64_t events;           /* durable events in its log */
    size_t pending_tool_calls; /* tool calls without a result yet */
    char updated_at[40];       /* its last event's timestamp ("" if none) */
    char parent_id[37];        /* its parent's id ("" if top-level) */
    char *meta_json;           /* its stored info (malloc'd) */
} pl_info;
/* What the conversation is now. Blocking. pl_info_clear frees it. */
int pl_conv_info(pl_conv *c, pl_info *out);
void pl_info_clear(pl_info *i);
/* Delete the conversation and its files, once what was accepted is
 * durable; what waits (held, deferred) is refused. Blocking. The handle
 * stays valid (every later request is answered PL_NOT_FOUND). */
int pl_conv_delete(pl_conv *c);
/* Add secrets to the conversation's (pl_conv_options.secrets_json; later
 * names win). Its hosted agent's environment gets them when its process
 * next starts; masking uses them from the agent's next turn on. PL_EINVAL
 * for a bad object, PL_ENOENT for a deleted conversation. Any thread. */
int pl_conv_set_secrets(pl_conv *c, const char *secrets_json);

/* ---- appends -------------------------------------------------------------- */

/* Called once per request, on a parley thread (when the request came from
 * a parley actor's handler, on that actor's loop), with the verdict, valid
 * during the call. */
typedef void (*pl_verdict_fn)(void *ctx, const pl_verdict *v);

/* Append one event (a JSON object in the OpenHands shape) or an array of
 * them, all or nothing. The conversation validates it, orders it (the
 * compliance gate: a result waits for its action, a user message for the
 * pending tool calls...), makes it durable and only then answers: cb gets
 * COMMITTED (the events and their indexes), DUPLICATE (the same event was
 * there: an idempotent retry), DEFERRED, REJECTED (the rule, the pending
 * calls), INVALID, BUSY or FAILED. 0: cb will run exactly once; an error:
 * it never will, and nothing was appended. */
int pl_append(pl_conv *c, const char *json, size_t len, pl_verdict_fn cb, void *ctx);

typedef enum pl_control_op { PL_RUN = 1, PL_PAUSE, PL_INTERRUPT } pl_control_op;
/* Run (status running), pause (a PauseEvent, paused) or interrupt (an
 * InterruptEvent, paused). cb gets DONE once durable, or CONFLICT when the
 * status does not allow it ("already running"). As pl_append otherwise. */
int pl_control(pl_conv *c, pl_control_op what, pl_verdict_fn cb, void *ctx);
/* Reject what waits for confirmation, as a server's respond_to_confirmation
 * with accept false: a UserRejectObservation of the user's saying reason
 * (NULL: "User rejected the action."; cut at 1 KiB) answers each pending
 * tool call, and a conversation waiting for confirmation goes idle. cb
 * gets DONE once durable (also when nothing was pending). As pl_append
 * otherwise. */
int pl_reject(pl_conv *c, const char *reason, pl_verdict_fn cb, void *ctx);

/* ---- reads: blocking ------------------------------------------------------- */

typedef struct pl_event {
    uint64_t index;   /* its place in the log, from 0 */
    const char *json; /* the stored bytes (not NUL-terminated) */
    size_t len;
} pl_event;

typedef struct pl_page pl_page;
/* Events in the log. */
int pl_count(pl_conv *c, uint64_t *n);
/* Up to max (1..1000) events from index first (fewer at the end, none
 * past it); the cost does not depend on where first is. */
int pl_read(pl_conv *c, uint64_t first, unsigned max, pl_page **out);
size_t pl_page_len(const pl_page *p);
/* Event i of the page (valid while the page is). */
pl_event pl_page_event(const pl_page *p, size_t i);
void pl_page_free(pl_page *p);
/* The index of the event with this id; PL_ENOENT if there is none. */
int pl_find(pl_conv *c, const char *event_id, uint64_t *index);

/* ---- subscriptions ---------------------------------------------------------- */

typedef struct pl_sub pl_sub;
typedef struct pl_sub_callbacks {
    /* Every event from the index asked, once, in log order, after it is
     * durable (the stored bytes). */
    void (*event)(void *ctx, const pl_event *e);
    /* Optional: the callbacks were slower than the conversation, so the
     * subscription fell behind; it goes on from the log (nothing is lost,
     * nothing repeated) from event `next`. */
    void (*lagging)(void *ctx, uint64_t next);
    /* Optional: no more calls will come: PL_ENOENT (the conversation was
     * deleted), PL_ECLOSED (the instance is closing). Not after
     * pl_unsubscribe. */
    void (*ended)(void *ctx, int why);
} pl_sub_callbacks;

/* Subscribe from index `from` (0: the whole log; what is past the end
 * comes as it is appended). Callbacks run on parley's callback thread, one
 * at a time, never on the threads that run conversations: a slow callback
 * delays only subscriptions. cb is copied. */
int pl_subscribe(pl_conv *c, uint64_t from, const pl_sub_callbacks *cb, void *ctx, pl_sub **out);
/* End it: once this returns, no callback of it runs (it waits for one
 * that is running, unless called from a callback). Handles (pl_sub,
 * pl_conv, pl_actor) may be given back after pl_close too. */
void pl_unsubscribe(pl_sub *s);

/* ---- your own actors ------------------------------------------------------- */

/* An actor lives on one parley loop for its whole life and handles its
 * messages one at a time, in order (per sender), so its state needs no
 * locks. Handlers must not block (they share the loop with
 * conversations): send yourself a message from a callback instead. */
typedef struct pl_actor pl_actor;

enum {
    /* A request of yours could not be answered: arg is its kind, status
     * says why (PL_ECLOSED, PL_ETIMEDOUT...). */
    PL_KIND_ERROR = -1,
    PL_KIND_MAX = 1000000, /* your kinds are 0..PL_KIND_MAX */
};

typedef struct pl_msg {
    int kind; /* yours, or PL_KIND_ERROR */
    int status;
    uint64_t arg;
    const void *data; /* a copy of what was sent, or NULL (valid during handle) */
    size_t len;
    void *req_; /* parley's: what pl_reply answers */
} pl_msg;

typedef struct pl_behaviour {
    const char *name; /* for logs */
    /* Fresh state from arg (at every start and restart): 0, or a negative
     * error (a failure). NULL: the state is arg. */
    int (*init)(pl_actor *self, void *arg, void **state);
    /* 0 to go on, PL_EXIT to exit normally, negative to fail (the
     * supervisor decides). */
    int (*handle)(pl_actor *self, void *state, const pl_msg *m);
    /* Free the state (after exit, failure, or before a restart). May be
     * NULL. */
    void (*stop)(pl_actor *self, void *state);
} pl_behaviour;

enum { PL_EXIT = 1 }; /* a handler's result: exit normally */

/* How a supervisor treats a child's exit (OTP restart types). */
typedef enum pl_restart {
    PL_TEMPORARY = 0, /* never restarted */
    PL_TRANSIENT,     /* restarted after a failure */
    PL_PERMANENT,     /* always restarted */
} pl_restart;

typedef struct pl_spawn_options {
    const pl_behaviour *beh; /* copied */
    void *arg;               /* handed to init at every (re)start; yours */
    pl_actor *parent;        /* a supervisor (pl_sup_spawn); NULL: none */
    pl_restart restart;
    unsigned mailbox_cap; /* 0: unbounded; else pl_send beyond it is PL_EFULL */
} pl_spawn_options;

/* Start an actor; *out (if not NULL) is a reference: pl_actor_release it. */
int pl_spawn(pl_instance *p, const pl_spawn_options *o, pl_actor **out);
void pl_actor_release(pl_actor *a);

typedef enum pl_strategy {
    PL_ONE_FOR_ONE = 0, /* restart the child that exited */
    PL_ONE_FOR_ALL,     /* restart them all */
    PL_REST_FOR_ONE,    /* restart it and those started after it */
} pl_strategy;

typedef struct pl_sup_options {
    pl_strategy strategy;
    unsigned intensity;           /* restarts allowed... 0: 1 */
    unsigned long long period_ms; /* ...within this window; 0: 5000. Past it, the
                                     supervisor stops its children and fails itself */
    pl_actor *parent;             /* NULL: none */
    pl_restart restart;
} pl_sup_options;

/* Start a supervisor; its children are spawned with parent = it. */
int pl_sup_spawn(pl_instance *p, const pl_sup_options *o, pl_actor **out);

/* Attach an actor to a conversation's supervision tree, after the
 * conversation and its stuck detector (rest_for_one): if the conversation
 * restarts, so does the actor; if the actor fails, only it restarts (its
 * restarts count toward the tree's intensity, pl_options.sup_intensity).
 * o->parent is ignored. */
int pl_conv_attach(pl_conv *c, const pl_spawn_options *o, pl_actor **out);

/* Send a message (data copied). PL_ECLOSED, PL_EFULL: not sent. */
int pl_send(pl_actor *to, int kind, uint64_t arg, const void *data, size_t len);
/* A request: reply_to gets exactly one answer (pl_reply, or PL_KIND_ERROR). */
int pl_ask(pl_actor *to, int kind, uint64_t arg, const void *data, size_t len, pl_actor *reply_to);
/* Answer a request, from its handler. */
int pl_reply(const pl_msg *req, int kind, uint64_t arg, const void *data, size_t len);
/* After after_ms, and then every repeat_ms (0: once), self gets a message
 * of this kind: an id (> 0) for pl_timer_stop, or 0 if it could not. From
 * self's handlers only. */
uint64_t pl_timer_start(pl_actor *self, uint64_t after_ms, uint64_t repeat_ms, int kind,
                        uint64_t arg);
int pl_timer_stop(pl_actor *self, uint64_t id);

/* ---- the HTTP server (the OpenHands agent-server API) ---------------------- */

typedef struct pl_http pl_http;
typedef struct pl_http_options {
    const char *host;            /* default "127.0.0.1" */
    int port;                    /* 0: any free port */
    const char *api_key;         /* NULL or "": no key needed */
    const char *const *api_keys; /* more keys, any of which will do */
    size_t napi_keys;
    const char *tls_cert; /* both set: HTTPS (PEM files) */
    const char *tls_key;
    /* limits: 0 = the defaults (parley serve --help) */
    size_t max_header, max_body;
    unsigned max_connections;
    unsigned long long header_timeout_ms, idle_timeout_ms;
    unsigned long long ws_ping_ms, ws_auth_timeout_ms, ws_stall_ms;
    int ws_ping_off;
    size_t ws_queue_bytes, ws_message_bytes;
} pl_http_options;

/* Serve the instance's conversations over HTTP and WebSocket. On failure
 * err says why in one line. */
int pl_http_start(pl_instance *p, const pl_http_options *o, pl_http **out, char *err,
                  size_t errlen);
/* "http://127.0.0.1:8000" (https with TLS), with the port actually bound. */
const char *pl_http_url(const pl_http *h);
/* Stop accepting, let requests in flight be answered (at most grace_ms),
 * close the connections. pl_close frees it. */
void pl_http_stop(pl_http *h, unsigned long long grace_ms);

#ifdef __cplusplus
}
#endif

#endif
