/*
 * nats_conn.h - a connection to a NATS JetStream cluster that holds
 * conversations' logs (nats_log.h), for `--store nats://...`.
 *
 * The cluster holds a fixed set of shard streams PARLEY_EV_<k> (k < shards),
 * created on first use: R3 when the cluster has three servers or more, file
 * storage, AllowDirect (any replica answers reads by sequence), DenyDelete
 * and DenyPurge (a log is append-only there too), a de-duplication window
 * of at least 10 minutes (the fence against nats-server 2.9's
 * compare-and-set race, see nats_log.h). A conversation's events are the
 * subject `parley.ev.<k>.<32 hex id>`: a stream takes its subjects by
 * wildcard tokens only, so the shard is a token of the subject. The KV
 * bucket `parley_pages` maps a closed page of 100 events to their stream
 * sequences. Why this design, and what nats-server 2.9.10 does and does not
 * promise: spec/nats-jetstream.md.
 *
 * Every call here and in nats_log.h is blocking (requests to the cluster,
 * bounded by request_ms each and deadline_ms with retries) and must run on
 * a worker thread, never on a libuv loop: cnats' request/reply calls made
 * on a loop thread hang until their timeout. A st_nats is shared by any
 * number of threads.
 *
 * Errors are negative errno values with one line in `err` saying why:
 * -ENOTCONN "NATS unreachable: ...", -ETIMEDOUT "NATS timed out: ...",
 * -EAGAIN (JetStream not ready: no leader yet), -EINVAL (bad options),
 * -EIO (an answer of the cluster that was not expected).
 */
#ifndef ST_NATS_CONN_H
#define ST_NATS_CONN_H

#include "runtime/uuid.h"

#include <stddef.h>
#include <stdint.h>

typedef struct st_nats st_nats;

typedef struct st_nats_opts {
    /* "nats://host:port,host:port,...", or without the scheme: required */
    const char *servers;
    const char *node; /* this node's name, in take-over records; NULL: "parley" */
    /* NULL or files: a credentials file (JWT and NKey seed), the CA that
     * signs the servers' certificates (TLS then required), this client's
     * certificate chain and key (both or neither) */
    const char *creds, *tls_ca, *tls_cert, *tls_key;
    /* shard streams; fixed for a deployment: the first node records the
     * count in the page bucket, a node giving another is refused. 0: the
     * recorded count, or 16 on a new cluster */
    unsigned shards;
    int replicas;         /* 0: 3 when the cluster has >= 3 servers, else 1 */
    uint64_t request_ms;  /* one request's timeout; 0: 2000 */
    uint64_t deadline_ms; /* one operation, with its retries; 0: 15000 */
} st_nats_opts;

#define ST_NATS_SHARDS_MAX 1024
#define ST_NATS_PAGE       100              /* events per page of the page index */
#define ST_NATS_DUPLICATES (10 * 60 * 1000) /* ms: the de-duplication window */
#define ST_NATS_STREAM     "PARLEY_EV_"
#define ST_NATS_LIVE       "parley.live." /* + "<shard>.<32 hex>": records republished */
#define ST_NATS_PAGES      "parley_pages"

/* Connect to the servers (all of them are given to the client, which
 * reconnects to any), and bind or create the page bucket. */
int st_nats_open(const st_nats_opts *o, st_nats **out, char *err, size_t errlen);
/* Close the connection, keeping what was bound to it for st_nats_close:
 * every call on it fails from now on, with NATS_CONNECTION_CLOSED. */
void st_nats_disconnect(st_nats *n);
/* Close the connection and free it. No log of it may be open any more. */
void st_nats_close(st_nats *n);

/* The shard of a conversation: a hash of its id, modulo shards. */
unsigned st_nats_shard(const st_nats *n, const rt_uuid *id);
/* How many shard streams the cluster has (agreed at open). */
unsigned st_nats_shards(const st_nats *n);
/* The largest message the cluster accepts (its max_payload), headers
 * included. */
int64_t st_nats_max_payload(const st_nats *n);
/* The largest event a record holds (nats_log.h): max_payload less the
 * headers of a record with an id and a key of the longest. */
size_t st_nats_max_event(const st_nats *n);
/* The replicas the shard streams are made with. */
int st_nats_replicas(const st_nats *n);

#endif
