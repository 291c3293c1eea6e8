/*
 * log.h - one conversation's append-only event log, in the local format.
 *
 * Its readers (count, read, find, find_key, memory, read_only, and the
 * pages) are also those of the log of a conversation of any store backend
 * (st_conv_log, backend.h); opening and writing are the local format's.
 *
 * A directory holds segment files `<first index>.seg` (a 16-byte header,
 * then framed records, see record.h), each with a checkpoint `<first>.idx`
 * (the offsets and id hashes of its records), and a `lock` file. Segments
 * roll at a size bound; a sealed segment is fdatasync'ed and gets its final
 * checkpoint before the next one is created, so only the active segment
 * can ever have a torn tail.
 *
 * Opening rebuilds the in-memory index (index.h: 4 bytes per event for the
 * offsets, ~11 for the ids and as much per optional key; no event bodies) from the checkpoints,
 * scanning only the records after the last one. A torn or corrupt tail is cut back to the last
 * valid record and reported; a bad record followed by valid ones (corruption in the middle) is
 * reported with its place and the log opens read-only, with the valid prefix readable: nothing is
 * silently lost.
 *
 * Threads: any number of readers (count, read, find) on any threads, with
 * no locks, see the published prefix. One writer at a time (the store's
 * committer, or recovery) writes records, makes them durable as its policy
 * says, then publishes or rolls them back.
 *
 * Errors are negative errno values: -EBUSY (another process holds the log),
 * -EROFS (read-only log), -ENOENT (unknown id), -EBADMSG (a record fails
 * its checksum on read), -ENOSPC / -EIO from the disk.
 */
#ifndef ST_LOG_H
#define ST_LOG_H

#include "runtime/buf.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct st_log st_log;

typedef struct st_log_opts {
    uint64_t segment_bytes; /* roll the active segment past this; 0: 64 MiB */
    bool read_only;         /* shared lock, no repairs, no writes */
    /* The store's: its own lock covers the log (no `lock` file, no
     * descriptor for it), and, journaled, a journal holds what is written
     * until the store flushes the file system, so a new segment is made
     * without syncs of its own (a crash that loses it loses nothing the
     * journal's replay does not write again). */
    bool store_locked;
    bool journaled;
} st_log_opts;

typedef struct st_open_report {
    uint64_t count;           /* events in the log */
    uint64_t scanned;         /* records read because no checkpoint covered them */
    uint64_t truncated_bytes; /* a torn or corrupt tail that was cut */
    bool corrupt;             /* a bad record before valid ones: opened read-only */
    char detail[512];         /* one line saying what was repaired or found, or "" */
} st_open_report;

/* Open (creating if needed, unless read-only) the log in `dir`. `rep` may
 * be NULL. -EBUSY if another process has it open for writing. */
int st_log_open(const char *dir, const st_log_opts *o, st_log **out, st_open_report *rep);
/* Flush, checkpoint and unlock. No reader may still be using the log.
 * Returns the flush's error, if it failed: then what was written since the
 * last sync may not be on disk. */
int st_log_close(st_log *l);

/* ---- readers: any thread ---------------------------------------------- */

/* Published events, 0..count-1. A cluster node that does not write the
 * log reads the count at the stream leader and brings its memory up to it
 * (blocking), so that st_log_check answers for those events. */
uint64_t st_log_count(const st_log *l);

/* An event of a page: its JSON at bytes->data + off, its id at id_off. */
typedef struct st_event_ref {
    uint64_t index;
    uint32_t off, len;
    uint32_t id_off, id_len;
} st_event_ref;

typedef struct st_page {
    rt_buf *bytes; /* one reference, owned by the page */
    uint32_t n;
    st_event_ref ev[];
} st_page;

/* Up to `max` events from index `first` on (fewer at the end; n = 0 past
 * it). Cost: one read per segment touched, independent of the position. */
int st_log_read(st_log *l, uint64_t first, uint32_t max, st_page **out);
void st_page_free(st_page *p);
/* The index of the first event with this id; -ENOENT if none. */
int st_log_find(st_log *l, const void *id, size_t idlen, uint64_t *index);
/* The index of the first event written with this key; -ENOENT if none.
 * Costs an in-memory probe, and one small read only for a likely match. */
int st_log_find_key(st_log *l, const void *key, size_t keylen, uint64_t *index);
/* st_log_read, st_log_find and st_log_find_key, only if answering costs no wait for another
 * machine: the local store's always do (its reads are of files it has
 * open); a cluster's when the node holds what is asked in memory. Else
 * -EWOULDBLOCK: loop code then reads in the thread pool (conv_read.h). */
int st_log_read_now(st_log *l, uint64_t first, uint32_t max, st_page **out);
int st_log_find_now(st_log *l, const void *id, size_t idlen, uint64_t *index);
int st_log_find_key_now(st_log *l, const void *key, size_t keylen, uint64_t *index);
/* May those ever say -EWOULDBLOCK (a cluster's log)? If not, loop code
 * need not ask them first. */
bool st_log_may_wait(const st_log *l);
/* st_log_find_now and st_log_find_key_now for what a writer decides (the
 * conversation's sequencer), which knows the events [0, upto): answered
 * from memory whenever it holds those, even once the node learnt that the
 * log grew past them (a cluster node that does not write it). Any event
 * found is the log's; one missed would be past upto, and an append
 * decided on that answer is refused unless the log then holds exactly
 * upto events (st_append_at), so no decision made on an older log is
 * stored. -EWOULDBLOCK if memory cannot say: the caller's checks are
 * asked in the thread pool first (actors/conv_confirm.c). */
int st_log_check(st_log *l, const void *id, size_t idlen, uint64_t upto, uint64_t *index);
int st_log_check_key(st_log *l, const void *key, size_t keylen, uint64_t upto, uint64_t *index);
/* Heap bytes the log holds (index, tables, buffers), for reports. */
size_t st_log_memory(const st_log *l);
bool st_log_read_only(const st_log *l);

/* ---- the writer: one thread at a time ----------------------------------- */

typedef struct st_item {
    const void *id;
    uint32_t idlen;  /* 1..255 */
    const void *key; /* an optional second lookup key (st_log_find_key) */
    uint32_t keylen; /* 0..255; 0: none */
    rt_buf *payload;
} st_item;

/* The index the next written event will get. */
uint64_t st_log_next(const st_log *l);
/* Write records for `n` events after everything written so far; *first is
 * the index of the first. Not visible to readers until published. On
 * failure nothing of this call remains in the files. */
int st_log_write(st_log *l, const st_item *items, size_t n, uint64_t *first);
/* fdatasync what was written since the last sync. */
int st_log_sync(st_log *l);
/* Make every written record visible to readers. */
void st_log_publish(st_log *l);
/* Forget records written but not published: the files are cut back. */
int st_log_rollback(st_log *l);
/* Save the active segment's checkpoint, so that a reopen need not rescan. */
int st_log_checkpoint(st_log *l);
/* Records written since the last checkpoint of the active segment. */
uint64_t st_log_unchecked(const st_log *l);

#endif
