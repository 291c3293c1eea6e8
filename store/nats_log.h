/*
 * nats_log.h - one conversation's append-only log on a JetStream cluster
 * (nats_conn.h): the backend that the store interface calls in `--store nats`
 * mode. Independent of the local store's files and structs.
 *
 * Records. A record is one message on the conversation's subject holding
 * one or more consecutive events (an append's batch: stored whole or not at
 * all), or a take-over. Its headers:
 *   Nats-Msg-Id    "<32 hex>:<slot>"      de-duplication, see the fence
 *   Parley-Slot    its position among all the conversation's records
 *   Parley-Index   the dense index (0, 1, 2, ...) of its first event; a
 *                  take-over record's is the number of events before it
 *   Parley-Count   how many events it holds (0: a take-over)
 *   Parley-Epoch   the writer's term (1, 2, ...)
 *   Parley-Writer  32 hex, random per term: who wrote it
 *   Parley-Prev    the stream sequence of the record before it (0: none),
 *                  so the records form a chain that is walked back
 *   Parley-Id      each event's id, one value per event, in order
 *   Parley-Key     "<position> <key>" for each event with a second key
 *   Parley-Lens    with several events: their lengths ("12,400,33"); the
 *                  payload is their bytes one after the other (a single
 *                  event's payload is just its bytes)
 *   Parley-Kind    "take-over" on take-over records
 *   Parley-Batch   "<first> <total>" on each record of an append too large
 *                  for one record (more than ST_NATS_BATCH_MAX events, or
 *                  max_payload bytes): the index of its first event and
 *                  how many it has. Such an append is visible only once its
 *                  last record is stored: a log whose last record is an
 *                  earlier part ends before the batch (stn_visible), and the
 *                  next take-over starts from there, so the parts already
 *                  written are left behind in the chain, and readers
 *                  walking back skip them (a record's events count only
 *                  below the index where the record after it starts).
 * Events have dense indexes of their own: take-over records occupy slots
 * but no index, and readers never see them.
 *
 * One writer, fenced by the log. A writer appends only after taking over:
 * it reads the last record from the stream leader and appends a take-over
 * record at the next slot with the next epoch. Every append expects the
 * subject's last stream sequence to be the writer's own last record
 * (ExpectLastSubjectSeq; ExpectNoMessage for slot 0), so the take-over makes
 * every older writer's next append fail: it is fenced (-ESTALE) and never
 * appends again. nats-server before 2.9.21 checks the expected sequence on
 * the leader before replication and not again when applying, so two
 * writers racing can both pass it; the Nats-Msg-Id "<conversation>:<slot>"
 * makes the second of two records for one slot a duplicate, which the
 * server does not store (within the de-duplication window, >= 10 min, far
 * longer than any race). So a slot holds at most one record, ever.
 *
 * Unknown outcomes. An append whose answer was lost (timeout, leader
 * change) is sent again, with the same Nats-Msg-Id and expectation; a
 * duplicate answer, or "wrong last sequence" (10071), is resolved by
 * reading the records back from the leader: the record at the slot is the
 * writer's (the append landed) or another's (fenced).
 *
 * Dense paging. When a page of 100 events closes, the writer stores the
 * stream sequences of the page's events' records, and hashes of their ids
 * and keys, in the bucket parley_pages, key "<32 hex>.<page>". Reading a closed page is one bucket
 * read and a direct get per record, all sent at once, answered by any
 * replica (one that lags is asked again at the leader). The open page is in the writer's memory, or
 * walked back from the last record (one round trip per record). An entry a
 * crash left unwritten is rebuilt from the chain by the next take-over or
 * reader: the log is the truth, entries are derived from it.
 *
 * Threads: a st_nats_log is used by one thread at a time (calls are
 * blocking: worker threads only, see nats_conn.h). Several logs of one
 * conversation, on one node or several, may be open at once; only the
 * writer of the latest take-over can append.
 *
 * Errors: those of nats_conn.h, and -ESTALE (fenced: another writer took over),
 * -EPERM (append without a take-over), -EMSGSIZE (larger than the
 * cluster's max_payload), -EINVAL (an id or key that is not a header
 * value), -EBADMSG (a record or page entry that is not what it must be).
 * st_nats_log_error says why in one line.
 */
#ifndef ST_NATS_LOG_H
#define ST_NATS_LOG_H

#include "nats_conn.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct st_nats_log st_nats_log;

/* A handle on conversation id's log (no request yet). */
int st_nats_log_open(st_nats *n, const rt_uuid *id, st_nats_log **out);
void st_nats_log_close(st_nats_log *l);
/* One line about the last failure of a call on l. */
const char *st_nats_log_error(const st_nats_log *l);

/* The number of events, read from the stream leader. */
int st_nats_log_count(st_nats_log *l, uint64_t *count);

/* ---- the writer ---------------------------------------------------------- */

/* Become the writer: append a take-over record after the last record, with
 * the next epoch (*epoch, may be NULL). -ESTALE if another writer appended
 * or took over in the meantime (l is not the writer; call again to try
 * once more). Two round trips (three past the first page: the last closed
 * page's entry is checked), and a walk back when a crash left that entry
 * out (it is written again). */
int st_nats_log_take_over(st_nats_log *l, uint64_t *epoch);
/* The writer's epoch, 0 if not the writer; and whether it was fenced. */
uint64_t st_nats_log_epoch(const st_nats_log *l);
bool st_nats_log_fenced(const st_nats_log *l);

typedef struct st_nats_item {
    const char *id; /* 1..255 bytes, printable ASCII, no edge spaces */
    uint32_t idlen;
    const char *key; /* optional (keylen 0), as id */
    uint32_t keylen;
    const void *data; /* the event's bytes (JSON) */
    size_t len;
} st_nats_item;

/* Up to this many events in one record (and within max_payload). */
#define ST_NATS_BATCH_MAX 100

/* Append events in order, all or nothing: *first is the index of the
 * first. A batch that fits in one record (at most ST_NATS_BATCH_MAX events,
 * max_payload bytes with headers) is one round trip; a larger one is
 * several records, one after the other, visible once the last is stored
 * (Parley-Batch). *stored is how many events went into records: on a
 * failure with *stored > 0 none of them is visible, and l is no longer the
 * writer (take over again: that leaves the parts behind). */
int st_nats_log_append(st_nats_log *l, const st_nats_item *items, size_t n, uint64_t *first,
                       size_t *stored);

/* ---- readers ------------------------------------------------------------- */

/* An event, or (in st_nats_log_walk) a record: then index is its first
 * event's, count how many it holds (0 for a take-over), id the first id,
 * data the whole payload. slot, seq, prev, epoch and writer are the
 * record's. The pointers stay valid while the page (or the walk's
 * callback) lasts. */
typedef struct st_nats_event {
    uint64_t index, slot, epoch;
    uint64_t seq, prev; /* stream sequences: its record's, and the one before */
    uint32_t count;
    bool take_over;
    uint64_t batch_first, batch_total; /* Parley-Batch, else 0 0 */
    const char *writer;                /* 32 hex */
    const char *id, *key;
    uint32_t idlen, keylen;
    const void *data;
    size_t len;
} st_nats_event;

typedef struct st_nats_page {
    uint32_t n;
    uint32_t nmsgs;
    void **msgs; /* the records the events point into, owned by the page */
    st_nats_event ev[];
} st_nats_page;

#define ST_NATS_READ_MAX 1000

/* Up to max (<= ST_NATS_READ_MAX) events from index first on; fewer at the
 * end, n = 0 past it. About two round trips per closed page of 100. The
 * writer reads its open page from memory: if it was fenced without knowing
 * yet, it sees the prefix it wrote, as a lagging reader would. */
int st_nats_log_read(st_nats_log *l, uint64_t first, uint32_t max, st_nats_page **out);
void st_nats_page_free(st_nats_page *p);

/* The index of the first event with this id (or, _key, this second key);
 * -ENOENT if none. An index of hashes in memory (16-32 bytes per event)
 * answers; a match is confirmed by reading the event. The writer indexes
 * its appends as it makes them; a first find elsewhere loads the index
 * (one bucket read per 100 events), later ones what was appended since
 * (one read of the last record, and the new events' pages). */
int st_nats_log_find(st_nats_log *l, const void *id, size_t idlen, uint64_t *index);
int st_nats_log_find_key(st_nats_log *l, const void *key, size_t keylen, uint64_t *index);
/* Heap bytes the handle holds (its find index), for reports. */
size_t st_nats_log_memory(const st_nats_log *l);

/* Every record, take-over records included, newest first, from the last
 * one (read at the leader) back through the chain until fn returns
 * non-zero (which is returned) or the first record was seen (0). For
 * audits: a chain of N records costs N round trips. */
typedef int (*st_nats_walk_fn)(void *ctx, const st_nats_event *r);
int st_nats_log_walk(st_nats_log *l, st_nats_walk_fn fn, void *ctx);

/* The subject and stream of the log (for tools and tests). */
const char *st_nats_log_subject(const st_nats_log *l);
const char *st_nats_log_stream(const st_nats_log *l);

/* ---- faults ------------------------------------------------------------- */

/* Tests set this: called on every answer the server gives to a record
 * published (acknowledged first time or as a duplicate, or refused as not
 * following the log's last, which a resend of a stored record can be);
 * returning true drops it, as a lost answer would, so the append is sent
 * again until the deadline. */
extern bool (*st_nats_drop_ack)(const st_nats_event *sent);

#endif
