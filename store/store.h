/*
 * store.h - the store: the conversations under a data directory, their
 * logs (log.h), and the committer that makes appends durable.
 *
 * Behind this interface is a backend (backend.h), chosen by the location
 * given to st_store_open: local:DIR is the local store described here
 * (a directory per conversation); pool:DIR the pool (pool_impl.h: every
 * conversation in shared segment files); a plain DIR is the store already
 * there, or a new pool; nats://host:port[,host:port...] a JetStream
 * cluster (nats_log.h), when built with libnats. The layers above see the
 * same calls and contracts whichever it is, and nothing of the files'
 * format.
 *
 *   <dir>/lock                        one process per data directory
 *   <dir>/conversations/<32 hex>/     meta.json, parent (a child's: its
 *                                     parent's 32 hex), then the log's files
 *   <dir>/journal/<seq>.wal           `full` appends whose segments may not be
 *                                     on disk yet
 *   <dir>/workspaces/<32 hex>/        a hosted agent's working directory (made
 *                                     when first asked for, removed with its
 *                                     conversation)
 *   <dir>/<name>.json, .jsonl         the layers' own files (st_store_put_file)
 *
 * Durability, one policy per store:
 *   full          an append is acknowledged once durable. Everything pending
 *                 when the committer wakes is written to its conversation's
 *                 segment and to the one journal file, and one fdatasync of
 *                 the journal covers it all: group commit across
 *                 conversations and loops. When the journal rotates, a
 *                 background syncfs flushes the segments and only then is the
 *                 old journal deleted. Opening the store replays the journal.
 *   interval=MS   acknowledged once written; segments written are
 *                 fdatasync'ed every MS (a crash loses at most that).
 *   none          acknowledged once written; flushed on close only.
 *
 * Opening the store reads each conversation's meta.json (and parent) only:
 * its start-up time grows with the number of conversations, not events. A
 * log is opened on first use and closed again after idle_ttl_ms unused.
 *
 * All file I/O of appends happens on the committer thread; the calling loop
 * never waits for the disk. Opening a log (st_conv_log) and reading it
 * (log.h) are blocking calls: loop code runs them in the thread pool.
 */
#ifndef ST_STORE_H
#define ST_STORE_H

#include "log.h"

#include "runtime/buf.h"
#include "runtime/metrics.h"
#include "runtime/uuid.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum { ST_FULL = 0, ST_INTERVAL, ST_NONE } st_durability;

typedef struct st_opts {
    const char *dir; /* the location: [local:|pool:]DIR, or nats://host:port[,...] */
    st_durability durability;
    uint64_t interval_ms;        /* ST_INTERVAL: default 1000 */
    uint64_t segment_bytes;      /* default 64 MiB; the pool's shared ones 16 MiB */
    uint64_t journal_bytes;      /* rotate past this; default 64 MiB */
    uint64_t checkpoint_records; /* checkpoint the active segment every N; default 65536 */
    uint64_t idle_ttl_ms;        /* close a log unused this long; default 20 min */
    /* Past this many open logs, logs nobody holds close at once (not after
     * their TTL): descriptors stay bounded however many conversations are
     * touched. 0: a quarter of the open-files limit (at least 64). */
    uint64_t max_open_logs;
    /* A nats:// location only (the rest is ignored there but max_open_logs):
     * this node's name in logs and take-over records (NULL: "<hostname>-
     * <pid>"); the local directory of hosted agents' workspaces (NULL:
     * "parley-data"); the credentials file and TLS files cnats is given. */
    const char *node;
    const char *workspaces;
    const char *nats_creds, *nats_tls_ca, *nats_tls_cert, *nats_tls_key;
    unsigned nats_shards; /* shard streams (nats_conn.h); 0: the cluster's, or 16 */
} st_opts;

/* "full", "none", or "interval=DURATION" ("interval=250ms", "interval=2s",
 * bare numbers are milliseconds). 0 or -EINVAL. */
int st_parse_durability(const char *s, st_durability *d, uint64_t *interval_ms);
const char *st_durability_name(st_durability d);

typedef struct st_store st_store;
typedef struct st_conv st_conv;

/* Lock the directory (creating it), load the catalog, replay the journal.
 * On failure, `err` (if given) holds one line saying why: -ENOTSUP "the
 * NATS store is not built" for a nats:// location without libnats. */
int st_store_open(const st_opts *o, st_store **out, char *err, size_t errlen);
/* The backend open: "local", "pool" or "nats". */
const char *st_store_kind(const st_store *s);
/* Finish pending appends, flush and close every log, unlock. No handle
 * may be held any more. */
void st_store_close(st_store *s);

/* ---- conversations: any thread --------------------------------------- */

/* Create with its meta (JSON bytes, stored as given) and, if parent is not
 * NULL, its parent conversation, fixed for life. -EEXIST if the id is
 * taken (*out is then the existing one, still a held reference; nothing
 * else is checked); -ELOOP if parent is id itself; -ENOENT if there is no
 * conversation parent. Blocking: it returns once the creation is durable;
 * a create of an id whose creation is under way waits for that one's
 * outcome (then -EEXIST with it, or, if it failed, creates). */
int st_conv_create(st_store *s, const rt_uuid *id, const rt_uuid *parent, rt_buf *meta,
                   st_conv **out);
/* A held reference; -ENOENT if unknown. */
int st_conv_get(st_store *s, const rt_uuid *id, st_conv **out);
void st_conv_release(st_conv *c);
const rt_uuid *st_conv_id(const st_conv *c);
/* The parent it was created with: false for a top-level conversation. The
 * parent may have been deleted since (children are not). */
bool st_conv_parent(const st_conv *c, rt_uuid *parent);
/* The current meta; a reference the caller gives back (rt_buf_unref). */
rt_buf *st_conv_meta(st_conv *c);
/* Replace the meta durably (temp file, fsync, rename). */
int st_conv_set_meta(st_conv *c, rt_buf *meta);
/* The conversation's log, opened on first use (blocking); valid while c is
 * held. `rep` (may be NULL) describes what opening found. */
int st_conv_log(st_conv *c, st_log **log, st_open_report *rep);
/* st_conv_log, only if opening costs no wait for another machine (the
 * local store's always: its files are this machine's; a cluster node's
 * once the log is open and loaded). Else -EWOULDBLOCK: loop code then
 * opens it in the thread pool (conv_read.h). */
int st_conv_log_now(st_conv *c, st_log **log);

/* The working directory of conversation id's hosted agent (made, with its
 * parents, if missing), as an absolute path in out. 0 or -errno. */
int st_workspace(st_store *s, const rt_uuid *id, char *out, size_t cap);

size_t st_store_count(st_store *s);
/* Logs open now, and the bound past which unheld ones close at once. */
size_t st_store_open_logs(st_store *s);
size_t st_store_max_open_logs(const st_store *s);
/* The largest event an append can store: its bytes, whatever its id and
 * key. The local store's record bound (256 MiB); a cluster's max_payload
 * less a record's headers (a little under 1 MB by default). st_append
 * refuses a larger one with -EMSGSIZE. Any thread; no I/O. */
size_t st_store_max_event(const st_store *s);
/* A snapshot of every conversation id (malloc'd; the caller frees). */
int st_store_list(st_store *s, rt_uuid **ids, size_t *n);
/* The conversations whose parent is id (existing or not), in id order
 * (*ids malloc'd; the caller frees). O(children), not O(conversations). */
int st_store_children(st_store *s, const rt_uuid *id, rt_uuid **ids, size_t *n);

/* A store error (a negative errno it returned) in a few words, for a
 * client's answer: strerror's, or what a cluster's means ("NATS
 * unreachable (nats://...)"). Returns buf. Any thread; no I/O. */
const char *st_store_strerror(const st_store *s, int err, char *buf, size_t cap);

/* ---- the store's own small files ------------------------------------------ */

/* Files the layers above keep beside the conversations (what lists show of
 * every conversation, written at a clean close): `name` is a plain file
 * name ending in ".json" or ".jsonl". Put writes it atomically and
 * durably; take reads it and removes it durably, so that it is used once
 * and never again after what it describes has changed: -ENOENT if there
 * is none. Blocking. */
int st_store_put_file(st_store *s, const char *name, const void *data, size_t len);
int st_store_take_file(st_store *s, const char *name, char **data, size_t *len);

/* ---- the committer: appends and deletes --------------------------------- */

/* Runs on the committer thread when the append is done: status 0 and the
 * index of its first event, or a negative errno (nothing was appended).
 * Appends are committed in groups, and an I/O error fails the whole group,
 * other conversations' appends included: all of them report it, none is
 * visible, and later appends start from the same place. It must be quick
 * and must not block; posting a message is the usual thing. */
typedef void (*st_done_fn)(void *ctx, int status, uint64_t first);

/* Append events to c's log, in order, all or nothing. The ids are copied,
 * the payloads referenced; c stays held until done has run. Appends to one
 * conversation complete in the order they were made. -ESHUTDOWN once the
 * store is closing (then done never runs). */
int st_append(st_conv *c, const st_item *items, size_t n, st_done_fn done, void *ctx);
/* st_append for a writer that decided the events on the log's first
 * `first` events (st_log_check): they are appended only if the log then
 * holds exactly that many, else done gets -ESTALE and nothing is
 * appended. The local stores have one writer, which makes it hold; a
 * cluster checks it (another node may have appended). */
int st_append_at(st_conv *c, uint64_t first, const st_item *items, size_t n, st_done_fn done,
                 void *ctx);
/* Write `data` as the file `name` in the conversation's directory,
 * atomically, after the appends made before this call (so a checkpoint
 * written here never covers less than it says); durably, or (durable
 * false, for what can be rebuilt) without syncs: a power cut may leave it
 * old or empty. Names are plain
 * file names ending in ".json" (the log's own files are refused). done's
 * `first` is unused. */
int st_conv_put_file(st_conv *c, const char *name, rt_buf *data, bool durable, st_done_fn done,
                     void *ctx);
/* Read such a file (blocking): -ENOENT if there is none. The caller frees
 * *data. */
int st_conv_get_file(st_conv *c, const char *name, char **data, size_t *len);

/* Remove the conversation and its files, after the appends made before this
 * call; consumes the caller's reference. Others who still hold it get
 * -ENOENT from then on; it is freed when the last lets go. done's `first`
 * is unused. */
int st_conv_delete(st_conv *c, st_done_fn done, void *ctx);

/* ---- several nodes (a store shared by nodes: nats://) --------------------- */

/* Every conversation has one writer at a time, its owner node: the node
 * whose records are the last of its log (the log fences every other one,
 * nats_log.h). A node is alive while its lease (a key that it renews, with
 * a time to live) is there. An append that a node receives for a
 * conversation owned by another live node is forwarded to that node and
 * answered with its verdict; one whose owner is gone (or none) is made
 * here: the node takes the log over. Stores of one node (local, pool) say
 * every append is made here. */

/* Whether other nodes may write the store's logs. Any thread; no I/O. */
bool st_store_shared(const st_store *s);
/* Whether this node is conversation id's writer now (its last append or
 * take-over was the log's last record as far as it knows): a hint that
 * its appends need no routing (the log fences it if it is wrong). Any
 * thread; no I/O. */
bool st_conv_writes_here(st_store *s, const rt_uuid *id);

/* What lists show of a conversation, as its writer last published it:
 * status (the layer above's code: opaque here), events, findings, the
 * last event's timestamp. */
typedef struct st_summary {
    uint32_t status;
    uint64_t count;
    uint64_t violations, stuck;
    char last_event[40]; /* "" if none */
} st_summary;
/* The conversation's writer says what lists should show of it, each time
 * that changes: a store shared by nodes publishes it to the others (at
 * once when the status changes, else at most once a second; in the
 * background: no wait), one of one node ignores it; so does a node that
 * is not its writer. Any thread; no waiting. */
void st_conv_note_summary(st_conv *c, const st_summary *sum);
/* The summary conversation id's writer last published, as this node knows
 * it (within about a second of the writer's note): 0, or -ENOENT if there
 * is none (a store of one node, or none published yet). Any thread; no
 * I/O. */
int st_conv_summary(st_store *s, const rt_uuid *id, st_summary *out);

typedef struct st_route {
    bool forward;   /* to the owner, alive; else: append here */
    char owner[33]; /* the owner's token (forward) */
    char node[64];  /* its name, for messages */
} st_route;
/* Where appends to conversation id go: 0, -ENOENT (no such conversation),
 * or a cluster error (err: one line). Blocking (a read of the log's last
 * record at the leader, and of the owner's lease). */
int st_route_of(st_store *s, const rt_uuid *id, st_route *out, char *err, size_t errlen);

/* A request forwarded to a conversation's owner: the HTTP request as a
 * node received it, which the owner serves as its own (its routes, its
 * checks, its answer). The store carries it and knows nothing of HTTP. */
typedef struct st_fwd_req {
    const char *method; /* "POST", "PATCH", "DELETE", ... */
    const char *target; /* the path and the query, as sent */
    const void *body;   /* NULL (len 0): none */
    size_t len;
} st_fwd_req;
/* At most this many bytes of a body are forwarded (less than a NATS
 * max_payload of 1 MB); a larger one is refused before it is sent. */
#define ST_FWD_BODY_MAX (1000u * 1000u)
/* Room for an answer's header lines. */
enum { ST_FWD_HEADERS_MAX = 512, ST_FWD_CTYPE_MAX = 96 };
typedef struct st_fwd_answer {
    int status;                       /* the owner's HTTP status */
    rt_buf *body;                     /* its body (a reference; NULL: none) */
    char ctype[ST_FWD_CTYPE_MAX];     /* its Content-Type; "": the default */
    char headers[ST_FWD_HEADERS_MAX]; /* its other header lines, "Name: v\r\n" each */
} st_fwd_answer;
/* Send a request for conversation id to its owner (route) and wait up to
 * timeout_ms for its answer: 0 with *out, or -ETIMEDOUT, -EHOSTUNREACH
 * (nobody listens for that node), -EMSGSIZE, a cluster error; err says
 * why in one line. Blocking. */
int st_forward(st_store *s, const st_route *to, const rt_uuid *id, const st_fwd_req *req,
               uint64_t timeout_ms, st_fwd_answer *out, char *err, size_t errlen);

/* A forwarded request this node serves: answered once with st_fwd_reply
 * (any thread), which frees it. */
typedef struct st_fwd st_fwd;
/* Called on a thread of the store's (not a loop) for each request other
 * nodes forward here, in the order they arrive; must not block. req is
 * borrowed for the call (its body too: copy what is kept). */
typedef void (*st_fwd_fn)(void *ctx, st_fwd *f, const rt_uuid *id, const st_fwd_req *req);
/* Serve forwarded requests with fn from now on; fn NULL: no more (returns
 * once no call of the old fn runs; requests arriving later are answered
 * 503). 0 or an error; a store of one node ignores it. */
int st_store_serve(st_store *s, st_fwd_fn fn, void *ctx);
/* Answer a forwarded request: status, body (may be NULL), Content-Type
 * (NULL: the default) and other header lines ("Name: v\r\n"...; NULL:
 * none; what does not fit ST_FWD_HEADERS_MAX is dropped). */
void st_fwd_reply(st_fwd *f, int status, const void *body, size_t len, const char *ctype,
                  const char *headers);

/* Follow a conversation's log as any node writes it: fn(ctx, count, mine)
 * is called on a thread of the store's (not a loop), in the order they
 * were stored, for records stored after the call: count is how many
 * events the log holds with that record, mine whether this node wrote
 * it. Notices may be lost (a reconnection): count says how far the log
 * is, so a gap is seen at the next one. -ENOTSUP for a store of one node.
 * Any thread; no waiting. */
typedef struct st_follow st_follow;
typedef void (*st_follow_fn)(void *ctx, uint64_t count, bool mine);
int st_conv_follow(st_conv *c, st_follow_fn fn, void *ctx, st_follow **out);
/* No call of fn starts after this returns (one under way may finish). */
void st_follow_stop(st_follow *f);

/* ---- figures ------------------------------------------------------------ */

/* Every fdatasync of the store, any instance. */
extern rt_hist st_fsync_seconds;
/* Every record appended to a JetStream log, from publish to its
 * acknowledgement (retries included): what an append waits for in NATS
 * mode, where there is no fdatasync. */
extern rt_hist st_nats_append_seconds;
/* Requests to a cluster made on a parley loop thread: each holds up the
 * loop's conversations for a round trip. 0 unless a path that should run
 * in the thread pool or on a worker does not (issue 22). */
extern _Atomic uint64_t st_nats_loop_requests;
/* The pool's space: bytes of live conversations written again so that the
 * segments before them could go (pool_carry.c), and bytes of segments
 * removed. */
extern _Atomic uint64_t st_pool_carried_bytes, st_pool_removed_bytes;
/* The store's figures, as Prometheus text. */
void st_metrics_render(rt_text *t);

#endif
