/*
 * log_impl.h - the inside of st_log, shared by log.c (open, recovery,
 * close), log_read.c (readers) and log_write.c (the writer).
 */
#ifndef ST_LOG_IMPL_H
#define ST_LOG_IMPL_H

#include "index.h"
#include "log.h"
#include "record.h"
#include "crc32c.h"

#include <stdatomic.h>

#define ST_SEG_MAGIC "PLSEG\0\0\1"
#define ST_IDX_MAGIC "PLIDX\0\0\2"

typedef struct st_seg {
    uint64_t first; /* index of its first record */
    int fd;
    _Atomic uint64_t end; /* published bytes; final once sealed */
} st_seg;

typedef struct st_segs {
    size_t n;
    st_seg *seg[]; /* by first index; the last is the active one */
} st_segs;

struct st_log {
    const struct st_backend *be; /* &st_local_backend (backend.h) */
    char *dir;
    int lock_fd;
    bool read_only;
    bool damaged;      /* read-only for a bad record with valid ones after it
                          (stl_log_cut_damage) */
    bool journaled;    /* st_log_opts.journaled */
    uint64_t segment_bytes;
    _Atomic uint64_t count; /* published events */
    st_segs *_Atomic segs;  /* published segments */
    st_retired *retired;    /* superseded segs arrays */
    st_offsets offsets;     /* record start, per index, within its segment */
    st_idtab ids;
    /* the writer's */
    uint64_t wcount;     /* written events (>= count) */
    uint64_t wend;       /* write position in the active segment */
    bool dirty;          /* written since the last sync */
    uint32_t *act_hash;  /* id hash (high half) per record of the active segment */
    uint32_t *act_khash; /* key hash (high half | 1), or 0: no key */
    uint64_t act_cap;
    uint64_t ckpt_count; /* active-segment records its checkpoint covers */
};

/* The readers of log.h with an stl_ prefix: the local backend's (local.c). */
uint64_t stl_log_count(const st_log *l);
int stl_log_read(st_log *l, uint64_t first, uint32_t max, st_page **out);
int stl_log_find(st_log *l, const void *id, size_t idlen, uint64_t *index);
int stl_log_find_key(st_log *l, const void *key, size_t keylen, uint64_t *index);
size_t stl_log_memory(const st_log *l);
bool stl_log_read_only(const st_log *l);

/* The journal's replay (journal.c) has the event the log needs next, and
 * the log is read-only for a bad record with valid ones after it: under
 * `full` segments are synced only when the journal rotates, so the damage
 * is in what was not synced yet (a crash left pages of it unwritten), and
 * the journal holds every event from there on. The files are cut there,
 * as a torn tail is: the segments after the damaged one removed (the last
 * first), then the damaged one truncated after its last good record. The
 * log must then be opened again (stl_conv_reopen_log), and the replay
 * writes the rest. 0, -EROFS if the log is read-only for another reason,
 * or -errno. */
int stl_log_cut_damage(st_log *l);

/* Path of a log file, e.g. "<dir>/00000000000000000042.seg". */
void st_log_path(const st_log *l, uint64_t first, const char *ext, char *out, size_t cap);
st_seg *st_log_active(const st_log *l);
/* Create the segment that starts at `first`, durably, and publish it. */
int st_log_new_segment(st_log *l, uint64_t first);
/* Binary search: the segment holding index i (which must exist), or its
 * position in the array. */
st_seg *st_segs_find(const st_segs *s, uint64_t i);
size_t st_segs_pos(const st_segs *s, uint64_t i);
/* The id table keeps ids and keys apart by hashing keys differently. */
uint64_t st_key_hash(const void *key, size_t len);
/* The high half of a key's hash as checkpoints keep it: never 0, which
 * means "no key". */
uint32_t st_key_hash_hi(const void *key, size_t len);
/* Remember the hashes of active-segment record `index` (writer). */
int st_log_note_hash(st_log *l, uint64_t index, uint32_t hash_hi, uint32_t khash_hi);
/* Write a segment's checkpoint for its records [seg->first, upto). */
/* durable false: for a journaled log's checkpoint (load_idx checks it) */
int st_log_write_idx(st_log *l, const st_seg *seg, uint64_t upto, uint64_t covered, bool durable);

#endif
