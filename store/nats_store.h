/*
 * nats_store.h - the inside of the JetStream backend (backend.h), shared by
 * nats_store.c (opening, the catalog, meta, the store's files), nats_conv.c
 * (the append workers, a conversation's files, deletion) and nats_rlog.c
 * (the readers' log handle).
 *
 * The catalog is the KV bucket parley_convs:
 *   c.<32 hex>             the conversation: "<parent's 32 hex or ->\n<meta>",
 *                          made with kvStore_Create (race-safe on 2.9.10: it
 *                          expects no message, not a sequence), never changed
 *   c.<32 hex>.<gen>       the same, for incarnation gen >= 1 of an id that
 *                          was deleted before (a new key: created as safely)
 *   m.<32 hex>             its meta, once replaced (else the c. entry's)
 *   d.<32 hex>             "<gen>": incarnations up to gen are deleted. Their
 *                          logs stay (the streams deny deletes): incarnation
 *                          gen >= 1 logs under an id derived from the id and
 *                          gen (stn_log_id), and keeps its files under it.
 *   s.<32 hex>             what lists show of it, as its writer last noted
 *                          (nats_summary.c): "1 <gen> <status> <count>
 *                          <violations> <stuck> <last event's time or ->";
 *                          a node that does not know the key (or the
 *                          version, the first field) ignores it
 * and parley_files holds the small files: "<log's 32 hex>.<name>" a
 * conversation's, "s.<name>" the store's.
 *
 * st_opts' durability and segment sizes do not apply: an acknowledgement
 * means stored on a majority of the replicas (spec/nats-jetstream.md says
 * what that is worth on nats-server 2.9). Hosted agents' workspaces are
 * this node's, under st_opts.workspaces (dirfiles.h).
 *
 * The node keeps a copy of the catalog in memory (nats_catalog.c), fed by a
 * watch of the bucket: st_conv_get, counting and listing never ask the
 * cluster (loop threads call them). A conversation another node created is
 * known here once the watch brings it (milliseconds, not a promise).
 *
 * One handle per conversation per store, held by reference (s->mu). Its
 * appends, file writes and deletion are jobs run in order by the worker
 * pool, one worker at a time per conversation: the first append takes the
 * log over (nats_log.h) and later ones write as that writer.
 */
#ifndef ST_NATS_STORE_H
#define ST_NATS_STORE_H

#include "backend.h"
#include "nats_impl.h"

#include <stdatomic.h>

#define STN_CONVS "parley_convs"
#define STN_FILES "parley_files"
/* Threads running conversations' jobs, one conversation at a time each;
 * an append waits for its ack there, so this is the appends a node has in
 * flight: 4 held one node to 2,100 events/s (bench/cluster.py), 16 give
 * 3,500-4,000 (64 no more: the cluster's CPU is the limit then). */
#define STN_WORKERS 16

typedef struct stn_store stn_store;
typedef struct stn_conv stn_conv;

typedef enum { STN_APPEND, STN_FILE, STN_DELETE, STN_CLAIM, STN_PROBE, STN_SUMMARY } stn_kind;
#define STN_ANYWHERE UINT64_MAX

typedef struct stn_job {
    struct stn_job *next;
    stn_kind kind;
    st_done_fn done;
    void *ctx;
    char name[64];       /* STN_FILE */
    rt_buf *data;        /* STN_FILE: a reference */
    uint64_t at;         /* STN_APPEND: its first index (STN_ANYWHERE: not checked) */
    size_t n;            /* STN_APPEND: items, ids and keys copied */
    st_nats_item *items; /* their data point into payloads */
    rt_buf **payloads;   /* references */
} stn_job;

/* An event of a log's tail in memory (nats_tail.c). */
typedef struct stn_tail_ev {
    rt_buf *payload; /* a reference */
    char *id;        /* the id, then the key: one allocation */
    uint32_t idlen, keylen;
} stn_tail_ev;

/* Events kept in memory per conversation, and their bytes (the last of
 * them is kept whatever its size). At least a page of a WebSocket's catch-up
 * and the stuck detector's window. */
#define STN_TAIL_MAX   256
#define STN_TAIL_BYTES (1u << 20)
/* Events older than the tail that a find confirmed by reading them (in
 * the thread pool): kept so that the loop's finds of them, and its reads
 * of one of them, answer from memory (nats_tail.c). The last one is kept
 * whatever its size. */
#define STN_OLD_MAX   128
#define STN_OLD_BYTES (1u << 20)

typedef struct stn_old_ev {
    uint64_t index;
    stn_tail_ev e;
} stn_old_ev;

/* What st_conv_log hands out: a reader's log of the conversation. */
typedef struct stn_log {
    const st_backend *be;
    stn_conv *c;
    pthread_mutex_t mu; /* a st_nats_log is used by one thread at a time */
    st_nats_log *nl;
    _Atomic uint64_t known; /* the last count read */
    /* nats_tail.c: the tail and an index of every id and key, in memory
     * (tmu: never held across a request to the cluster) */
    pthread_mutex_t tmu;
    stn_tail_ev *ring; /* STN_TAIL_MAX (made on first use): event i at [i % STN_TAIL_MAX] */
    uint64_t lo, hi;   /* the events [lo, hi) are in ring */
    size_t bytes;
    stn_table ids, keys; /* hashes of events [0, covered) */
    uint64_t covered;
    /* the log was loaded: [0, covered) is the whole log as this node knows
     * it, writer or not (a count read since that says more: not whole) */
    bool loaded;
    /* times memory was forgotten: a load begun before the last one read an
     * older log than the one that made memory forget, and keeps nothing */
    uint64_t forgets;
    /* confirmed events older than the tail: old[k % STN_OLD_MAX] for
     * old_lo <= k < old_hi, oldest first (made on first use) */
    stn_old_ev *old;
    uint64_t old_lo, old_hi;
    size_t old_bytes;
} stn_log;

struct stn_conv {
    const st_backend *be;
    stn_store *s;
    rt_uuid id;
    char hex[33];
    uint64_t gen; /* its incarnation */
    rt_uuid lid;  /* its log's (and files') id: stn_log_id */
    char lhex[33];
    bool has_parent;
    rt_uuid parent;
    int refs; /* s->mu */
    _Atomic bool gone;
    pthread_mutex_t mu; /* meta, log, the jobs: taken after s->mu, never before */
    rt_buf *meta;
    stn_log *log;
    stn_job *jhead, *jtail;
    bool scheduled;       /* in the run queue or being run */
    stn_conv *rnext;      /* s->mu: the run queue */
    st_nats_log *writer;  /* the worker running its jobs only */
    _Atomic bool writing; /* writer is live: written is the count */
    _Atomic uint64_t written;
    _Atomic uint64_t term; /* the lease's term its writer took the log over in */
    /* nats_summary.c (s->mu): the summary to publish */
    st_summary sum;
    bool sum_new; /* noted since the last publication began */
    bool sum_any; /* one was published: sum_status at sum_last (ms) */
    uint32_t sum_status;
    int sum_sched; /* 0: none; 1: on s->dhead at sum_due (ms); 2: a job */
    int64_t sum_last, sum_due;
    stn_conv *dnext;
};

/* A conversation as the catalog knows it (s->mu). */
typedef struct stn_entry {
    struct stn_entry *next; /* the hash chain */
    rt_uuid id;
    bool live; /* an incarnation exists: gen */
    bool has_parent;
    uint64_t gen, del1; /* del1: incarnations below it are deleted */
    rt_uuid parent;
    uint64_t crev, mrev; /* revisions of its c. entry and of its meta */
    rt_buf *meta;
    rt_uuid *kids; /* its live children, unordered */
    uint32_t nkids, kcap;
    stn_conv *open; /* the handle held on this node, if any */
    bool has_sum;   /* sum: its s. entry, of incarnation sgen, at srev */
    uint64_t sgen, srev;
    st_summary sum;
} stn_entry;

#define STN_CATALOG_LOAD_MS 120000
#define STN_WATCH_POLL_MS   200 /* the watch looks whether the store closes */

struct stn_store {
    const st_backend *be;
    st_opts o;
    char workspaces[4096]; /* hosted agents' directories (dirfiles.h) */
    st_nats *n;
    kvStore *convs, *files;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    /* the catalog (s->mu): entries by id, how many live */
    stn_entry **buckets;
    size_t nbuckets, nentries, count;
    /* its watch (wmu, wcv) */
    pthread_mutex_t wmu;
    pthread_cond_t wcv;
    pthread_t wthread;
    bool wstarted, wstop, synced;
    bool wclosed; /* the connection is closed: the watcher may go (see stn_catalog_stop) */
    char werr[256];
    _Atomic size_t nlogs; /* no lock: st_conv_log holds c->mu, and s->mu comes first */
    stn_conv *rhead, *rtail;
    bool stop;
    stn_conv *dhead; /* summaries to publish later (nats_summary.c), none before dnext */
    int64_t dnext;
    /* nats_owner.c: this node's lease (renewed by hthread), and the
     * requests other nodes forward here (fmu) */
    bool owner_init;
    bool split; /* PARLEY_NATS_SPLIT=1 (tests): never forward */
    /* the lease's continuity (stn_writes): when the put that last renewed
     * it began (stn_now_ms), and how many renewals came too late */
    _Atomic int64_t lease_ms;
    _Atomic uint64_t lease_term;
    uint64_t reconnects;       /* the connection's, as the lease's thread last saw */
    struct st_follow *follows; /* this node's follows (s->mu) */
    kvStore *nodes;
    pthread_t hthread;
    bool hstarted, hstop;
    pthread_mutex_t hmu, fmu;
    pthread_cond_t hcv, fcv;
    natsSubscription *fsub;
    st_fwd_fn fwd_fn;
    void *fwd_ctx;
    int fwd_running;    /* calls of fwd_fn under way */
    _Atomic int fwd_in; /* forwarded requests not answered yet */
    int nworkers;
    pthread_t workers[STN_WORKERS];
};

/* nats_store.c */
void stn_conv_release(st_conv *c);
/* A KV get (data NULL: whether it exists): 0, -ENOENT, or an error; the
 * caller frees *data, which is NUL-terminated. rev (may be NULL): its
 * revision. */
int stn_kv_get(stn_store *s, const char *bucket, const char *key, char **data, size_t *len);
int stn_kv_get_rev(stn_store *s, const char *bucket, const char *key, char **data, size_t *len,
                   uint64_t *rev);
int stn_kv_put(kvStore *kv, const char *key, const void *data, size_t len, uint64_t *rev);
int stn_kv_delete(kvStore *kv, const char *key);
/* Remove every value of bucket whose key matches filter (wildcards as in
 * subjects: "lhex.>") in one purge of the bucket's stream. No watcher
 * (nats_catalog.c says why those are delicate to stop), no key left, not
 * even a delete marker. */
int stn_kv_purge(st_nats *n, const char *bucket, const char *filter);

/* The id incarnation gen of conversation id logs under: id itself for 0. */
void stn_log_id(const rt_uuid *id, uint64_t gen, rt_uuid *out);

/* nats_catalog.c: the node's copy of the catalog */
int stn_catalog_start(stn_store *s, char *err, size_t errlen);
/* Stops the watch and disconnects the node: for closing only. */
void stn_catalog_stop(stn_store *s);
void stn_catalog_free(stn_store *s);
/* s->mu held */
stn_entry *stn_catalog_find(stn_store *s, const rt_uuid *id);
/* Apply what the catalog's key now holds (op: put, delete or purge; rev:
 * its revision), as the watch saw it or this node wrote it. */
void stn_catalog_apply(stn_store *s, const char *key, kvOperation op, const void *v, size_t len,
                       uint64_t rev);
int stn_catalog_list(stn_store *s, rt_uuid **ids, size_t *n);
int stn_catalog_children(stn_store *s, const rt_uuid *id, rt_uuid **ids, size_t *n);

/* nats_conv.c */
int stn_workers_start(stn_store *s);
/* Run every job queued, then stop the workers. */
void stn_workers_stop(stn_store *s);
int stn_append(st_conv *c, const st_item *items, size_t n, st_done_fn done, void *ctx);
int stn_append_at(st_conv *c, uint64_t first, const st_item *items, size_t n, st_done_fn done,
                  void *ctx);
/* Take the log over (a job, in order with the others; blocking until it
 * ran: 0 or its error), so that the node that creates a conversation owns
 * it from the start: the other nodes forward to it rather than racing it
 * for the first append. */
int stn_claim(st_conv *c);
int stn_conv_put_file(st_conv *c, const char *name, rt_buf *data, bool durable, st_done_fn done,
                      void *ctx);
int stn_conv_get_file(st_conv *c, const char *name, char **data, size_t *len);
int stn_conv_delete(st_conv *c, st_done_fn done, void *ctx);

/* nats_summary.c: the writer's summaries in the catalog (st_conv_note_summary) */
#define STN_SUMMARY_MS 1000 /* at most one publication a second, but of a status */
void stn_note_summary(st_conv *c, const st_summary *sum);
int stn_summary(st_store *s, const rt_uuid *id, st_summary *out);
/* Queue the publications that are due (s->mu held; all of them once the
 * store stops): the time of the next one (ms), INT64_MAX if none. */
int64_t stn_summary_due(stn_store *s);
/* The worker's job: publish the latest summary. */
int stn_summary_run(stn_conv *c);
/* An s. entry into e (s->mu held): false if it is not one. */
bool stn_summary_apply(stn_entry *e, kvOperation op, const void *v, size_t len, uint64_t rev);

/* nats_tail.c: what a node's reads answer from memory */
/* At the first st_conv_log (blocking): index every event, keep the last.
 * Again after a failure; a no-op once loaded. 0 or an error. */
int stn_tail_load(stn_log *l);
/* Tests set this: called by a load between its reads of the cluster and
 * keeping what they gave, where another thread may make memory forget
 * (atomic: loads run on other threads while a test sets it). */
typedef void (*stn_loading_fn)(stn_log *l);
extern _Atomic stn_loading_fn stn_tail_loading;
/* Bring memory up to the log's first count events, read by a node that
 * does not write it (blocking): the events it lacks, up to
 * STN_CATCH_UP_MAX, else the index loaded again from the page entries.
 * What the conversation decides on is then answered from memory. */
#define STN_CATCH_UP_MAX 10000
int stn_tail_catch_up(stn_log *l, uint64_t count);
/* Is it loaded (no request: what st_conv_log_now asks)? */
bool stn_tail_loaded(stn_log *l);
/* The events memory answers for: the writer's count, or, before this node
 * writes, the count it loaded. */
uint64_t stn_tail_count(stn_log *l);
/* This node's writer took the log over at count `next` (worker, before it
 * writes): -ESTALE if the log grew past what memory loaded (another node
 * appended; reads made from memory were of an older log), after loading
 * memory again. */
int stn_tail_claim(stn_conv *c, uint64_t next);
/* The log may hold what memory does not (an append's outcome unknown, a
 * writer fenced): the next st_conv_log loads it again (worker). */
void stn_tail_forget(stn_conv *c);
/* The writer stored job j's events from index first on (worker). */
void stn_tail_push(stn_conv *c, uint64_t first, const stn_job *j);
/* 1 with *out (or a negative errno) if memory answers, 0 if the cluster
 * must. */
int stn_tail_read(stn_log *l, uint64_t first, uint32_t max, st_page **out);
/* 0 or -ENOENT if memory answers, -EAGAIN if the cluster must: memory
 * answers if it holds the log's events [0, upto), or, for upto STN_WHOLE,
 * the whole log (as this node writes or last read it). A match older than
 * the tail, unless memory kept it from an earlier check, is confirmed by
 * reading it (wait: then it is kept), or is -EAGAIN. */
#define STN_WHOLE UINT64_MAX
int stn_tail_find(stn_log *l, bool key, const void *v, size_t len, bool wait, uint64_t upto,
                  uint64_t *index);
size_t stn_tail_memory(stn_log *l);
void stn_tail_free(stn_log *l);

/* nats_owner.c: several nodes (store.h) */
int stn_owner_start(stn_store *s, char *err, size_t errlen);
void stn_owner_stop(stn_store *s);
/* After the connection closed (no callback of cnats runs any more). */
void stn_owner_free(stn_store *s);
/* Does this node write c, its memory being the whole log? Only while the
 * lease has held since its writer took the log over (any thread). */
bool stn_writes(stn_conv *c);
/* A writer that stn_writes no longer trusts (worker): it takes the log
 * over again before its next append. */
bool stn_writer_stale(stn_conv *c);
bool stn_writes_here(st_store *s, const rt_uuid *id);
int stn_route(st_store *s, const rt_uuid *id, st_route *out, char *err, size_t errlen);
int stn_forward(st_store *s, const st_route *to, const rt_uuid *id, const st_fwd_req *req,
                uint64_t timeout_ms, st_fwd_answer *out, char *err, size_t errlen);
int stn_serve(st_store *s, st_fwd_fn fn, void *ctx);
int stn_follow(st_conv *c, st_follow_fn fn, void *ctx, st_follow **out);
/* A worker's job for a new follow (STN_PROBE, ctx): the log's count now,
 * as a first notice, unless this node writes it; then the job's hold of
 * the follow goes. */
void stn_follow_probe(stn_conv *c, void *follow);
/* Queue a job of this kind with ctx, done doing nothing (s->mu held). */
int stn_submit_plain_locked(stn_conv *c, stn_kind kind, void *ctx);
/* A probe of every follow of this node (its log's count, as a notice):
 * records another node stored while this node trusted its memory, or
 * while its connection was down, are not lost to its subscribers. */
void stn_follows_probe(stn_store *s);
/* Queue job j on c, whose hold it takes (s->mu held; even when stopping). */
void stn_queue_locked(stn_store *s, stn_conv *c, stn_job *j);
void stn_follow_stop(st_follow *f);

/* nats_rlog.c */
typedef struct stn_ref {
    uint64_t index;
    const void *data;
    size_t len;
    const char *id;
    uint32_t idlen;
} stn_ref;
/* Events as a page of log.h (copied). */
int stn_page_of(const stn_ref *v, uint32_t n, st_page **out);
int stn_conv_log(st_conv *c, st_log **log, st_open_report *rep);
void stn_log_free(stn_log *l);
uint64_t stn_log_count(const st_log *l);
int stn_log_read(st_log *l, uint64_t first, uint32_t max, st_page **out);
int stn_log_find(st_log *l, const void *id, size_t idlen, uint64_t *index);
int stn_log_find_key(st_log *l, const void *key, size_t keylen, uint64_t *index);
int stn_log_read_now(st_log *l, uint64_t first, uint32_t max, st_page **out);
int stn_log_find_now(st_log *l, const void *id, size_t idlen, uint64_t *index);
int stn_log_find_key_now(st_log *l, const void *key, size_t keylen, uint64_t *index);
int stn_log_check(st_log *l, bool key, const void *v, size_t len, uint64_t upto, uint64_t *index);
int stn_conv_log_now(st_conv *c, st_log **log);
size_t stn_log_memory(const st_log *l);
bool stn_log_read_only(const st_log *l);

#endif
