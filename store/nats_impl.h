/*
 * nats_impl.h - what the files of the JetStream store share: the
 * connection's and a log's state, cnats' answers as errno values, and the
 * record format's header names (nats_log.h describes the format).
 */
#ifndef ST_NATS_IMPL_H
#define ST_NATS_IMPL_H

#include "nats_log.h"

#include <nats/nats.h>
#include <pthread.h>
#include <stdarg.h>

#define STN_H_SLOT    "Parley-Slot"
#define STN_H_INDEX   "Parley-Index"
#define STN_H_COUNT   "Parley-Count"
#define STN_H_LENS    "Parley-Lens"
#define STN_H_EPOCH   "Parley-Epoch"
#define STN_H_WRITER  "Parley-Writer"
#define STN_H_PREV    "Parley-Prev"
#define STN_H_ID      "Parley-Id"
#define STN_H_KEY     "Parley-Key"
#define STN_H_KIND    "Parley-Kind"
#define STN_H_BATCH   "Parley-Batch"
#define STN_H_OWNER   "Parley-Owner"
#define STN_TAKE_OVER "take-over"

/* Reply inboxes (nats_replies.c): take one for a request's answers, send
 * the requests with stn_replies_subject(r, i) as their reply subjects,
 * read with stn_replies_next (answers to earlier uses dropped; *i says
 * which request it answers), give it back. stn_replies_free destroys them
 * all, once the connection is closed. */
typedef struct stn_replies stn_replies;
natsStatus stn_replies_take(st_nats *n, stn_replies **out);
void stn_replies_give(st_nats *n, stn_replies *r);
void stn_replies_subject(const stn_replies *r, size_t i, char *out, size_t cap);
natsStatus stn_replies_next(stn_replies *r, int64_t timeout_ms, natsMsg **m, size_t *i);
void stn_replies_free(st_nats *n);

/* Subscriptions given up while the connection lives (nats_subs.c):
 * stn_sub_retire unsubscribes one (stn_watch_retire: a KV watcher's) and
 * destroys it only once the reading thread is past it (libnats 3.4.1's
 * race, nats_subs.c says why); stn_subs_sweep destroys those it is past;
 * stn_subs_free all, once the connection is closed. */
void stn_sub_retire(st_nats *n, natsSubscription *sub);
void stn_watch_retire(st_nats *n, kvWatcher *w);
void stn_subs_sweep(st_nats *n);
void stn_subs_free(st_nats *n);

/* A walk back through the chain gives up past this many records: an open
 * page and a closed one, with room for many take-overs. A variable only
 * so that tests reach it with short logs. */
#define STN_WALK_MAX 10000
extern int stn_walk_max;

/* The writer keeps this many page entries it could not store (the bucket
 * out of reach as their pages closed) and stores them after the next
 * entry it can; readers rebuild any other by a walk. */
#define STN_OWED 8
/* Tests only: this many of the next page entries' puts fail. */
extern int stn_fail_page_puts;

struct st_nats {
    natsConnection *nc;
    jsCtx *js;
    kvStore *pages;
    unsigned shards;
    int replicas;
    int64_t request_ms, deadline_ms, max_payload;
    char node[64];
    char token[33];    /* 32 hex, random per process: this node's lease and forward subject */
    char servers[256]; /* for messages, cut if long */
    pthread_mutex_t mu;
    unsigned char *ready;        /* per shard: its stream was checked or made */
    struct stn_replies *replies; /* reply inboxes not in use (nats_replies.c), under mu */
    struct stn_retired *retired; /* subscriptions given up (nats_subs.c), under mu */
};

/* A page of the page index (an entry of parley_pages): the stream
 * sequences of its events' records, and hashes of their ids and keys (0:
 * no key), for st_nats_log_find. */
typedef struct stn_page {
    uint64_t seq[ST_NATS_PAGE];
    uint32_t idh[ST_NATS_PAGE], keyh[ST_NATS_PAGE];
} stn_page;
#define STN_ENTRY_BYTES (ST_NATS_PAGE * 16)

/* Hashes to event indexes (open addressing, duplicates kept: equal hashes
 * are told apart by reading the event). */
typedef struct stn_table {
    struct stn_slot {
        uint32_t h;
        uint64_t idx1; /* index + 1; 0: empty */
    } * v;
    size_t cap, used;
} stn_table;

struct st_nats_log {
    st_nats *n;
    rt_uuid id;
    char hex[33];
    unsigned shard;
    char subject[64], stream[32], direct[64];
    char err[320];
    int cause; /* behind the last "outcome unknown" (-EIO): the cluster's error */
    /* the writer, after a take-over */
    bool owner, fenced;
    uint64_t epoch;
    char writer[33];
    uint64_t next_slot, next_index, last_seq;
    /* the open page: events page_no*100 .. +page_fill-1 */
    uint64_t page_no;
    uint32_t page_fill;
    bool page_known;
    stn_page page;
    /* closed pages whose entries are owed, oldest first (page_store) */
    struct stn_owed {
        uint64_t page;
        stn_page pg;
    } * owed;
    uint32_t nowed;
    /* st_nats_log_find's index of events [0, covered) */
    stn_table ids, keys;
    uint64_t covered;
};

/* The events a log holds whose last record is e: an append's batch split
 * over several records counts only once its last record is there. */
uint64_t stn_visible(const st_nats_event *e);

/* Sets l->err (printf-style) and returns code. */
int stn_fail(st_nats_log *l, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
int stn_failv(char *err, size_t errlen, int code, const char *fmt, va_list ap);
/* cnats' status (and JetStream error code) as a negative errno. */
int stn_errno(natsStatus s, jsErrCode jerr);
/* The words for such an error: "NATS unreachable", "NATS timed out", ... */
const char *stn_what(int code);
/* The cnats text of the last error on this thread. */
const char *stn_last_error(natsStatus s);
bool stn_retryable(int code);
int64_t stn_now_ms(void);
/* Wait on cv (mu held) for ms at most (a default, CLOCK_REALTIME cv). */
void stn_timedwait(pthread_cond_t *cv, pthread_mutex_t *mu, int64_t ms);
/* Called before every call that waits for the cluster's answer (a
 * request, a publish with its ack): one made on a parley loop thread is
 * counted in st_nats_loop_requests, since it holds up every conversation
 * of that loop for a round trip or more (issue 22: it must stay 0). */
void stn_waits(const char *what);
/* Sleep before retry number `attempt` (0, 1, ...): 20 ms doubling up to
 * 500 ms, never past `until` (ms). A pause between retries of a failed
 * request, not a way to wait for something. */
void stn_backoff(int attempt, int64_t until);
/* The pause before retry number `attempt`: first, doubling, at most cap. */
int64_t stn_backoff_ms(int attempt, int64_t first, int64_t cap);

/* Bind KV bucket `bucket`, or make it (R as the shard streams, history 1). */
int stn_bind_bucket(st_nats *n, const char *bucket, const char *about, kvStore **kv, char *err,
                    size_t errlen);
/* The same with a time to live for every key (ms; 0: none). */
int stn_bind_bucket_ttl(st_nats *n, const char *bucket, const char *about, int64_t ttl_ms,
                        kvStore **kv, char *err, size_t errlen);
/* Check the shard's stream, or make it (once per st_nats). */
int stn_ensure_stream(st_nats *n, unsigned shard, char *err, size_t errlen);

/* A record's headers into ev (its data and pointers into m). -EBADMSG if
 * one is missing or malformed. seq: the record's stream sequence. */
int stn_parse(st_nats_log *l, natsMsg *m, uint64_t seq, st_nats_event *ev);
/* Event `index` of record rec (parsed from m) into ev. */
int stn_event(st_nats_log *l, natsMsg *m, const st_nats_event *rec, uint64_t index,
              st_nats_event *ev);
/* The last record, from the stream leader; -ENOENT if there is none. */
int stn_get_last(st_nats_log *l, natsMsg **m, st_nats_event *ev);
/* The record at stream sequence seq: from any replica, or from the leader
 * if the replica that answered does not have it yet. */
int stn_get_seq(st_nats_log *l, uint64_t seq, natsMsg **m, st_nats_event *ev);
/* A closed page's entry: -ENOENT if there is none (yet). */
int stn_get_page(st_nats_log *l, uint64_t page, stn_page *pg);
/* Store the entry of closed page `page`. */
int stn_put_page(st_nats_log *l, uint64_t page, const stn_page *pg);
/* The events of page `page` that exist: *have of them, *closed if the page
 * is full. From the writer's memory, the entry, or a walk back from the
 * last record (which writes a missing entry again). */
int stn_page_get(st_nats_log *l, uint64_t page, stn_page *pg, uint32_t *have, bool *closed);
/* Walk back from record `from` (parsed from m, which may be NULL if from
 * is not an event record) noting events lo <= index < hi into pg[] (lo a
 * multiple of ST_NATS_PAGE; room for the pages up to hi), until a record
 * before lo or the first record. */
int stn_collect(st_nats_log *l, natsMsg *m, const st_nats_event *from, uint64_t lo, uint64_t hi,
                stn_page *pg);
/* Note event `index` of record rec (parsed from m) in pg at its place. */
int stn_note(st_nats_log *l, natsMsg *m, const st_nats_event *rec, uint64_t index, uint64_t lo,
             stn_page *pg);

uint32_t stn_hash(const void *p, size_t len); /* never 0 */
int stn_table_put(stn_table *t, uint32_t h, uint64_t index);
void stn_table_free(stn_table *t);
/* fn for each index whose hash is h, until it returns non-zero (returned). */
int stn_table_each(const stn_table *t, uint32_t h, int (*fn)(void *ctx, uint64_t index), void *ctx);
/* Event `index` into the find index, if it is the next one it lacks. */
void stn_index_add(st_nats_log *l, uint64_t index, uint32_t idh, uint32_t keyh);
/* Index what was appended since the last find (requests to the cluster). */
int stn_index_load(st_nats_log *l);
void stn_index_free(st_nats_log *l);

#endif
