/*
 * pool_impl.h - the inside of the pool backend (pool.c says what it is):
 * shared by pool.c (open, close, the table), pool_catalog.c (the
 * conversations), pool_commit.c (the committer), pool_seg.c (segment
 * files, their descriptors and record indexes), pool_idx.c (a sealed
 * segment's index file), pool_ckpt.c (the catalog's checkpoint),
 * pool_seal.c (the thread that writes both), pool_scan.c (recovery at
 * open), pool_log.c (a conversation's log and its readers), pool_carry.c
 * and pool_copy.c (carrying live conversations forward).
 */
#ifndef ST_POOL_IMPL_H
#define ST_POOL_IMPL_H

#include "index.h"
#include "record.h"
#include "req.h"
#include "store.h"

#include <pthread.h>
#include <stdatomic.h>

/* A segment's header: this magic and a u64 whose low half is the
 * segment's seq; its high half, where the segment before ends if that one
 * was not yet durable when this one began (a lazy roll, pool_seg.c), else
 * 0. */
#define STP_SEG_MAGIC "PLPOOL\0\1"

/* Reserved record indexes: catalog records and group commit markers. An
 * event's index is below 2^32 - 1 (the id table's bound). */
#define STP_IDX_CREATE UINT64_MAX       /* key: the parent's 32 hex; payload: meta */
#define STP_IDX_META   (UINT64_MAX - 1) /* payload: the new meta */
#define STP_IDX_FILE   (UINT64_MAX - 2) /* id: the file's name; payload: its data */
#define STP_IDX_DELETE (UINT64_MAX - 3)
/* A group's end. Tag zero; payload: u64 the group's start; key: u64 how
 * many bytes of the segment were durable when it was written (everything
 * before the group, if the group itself is synced); older files have no
 * key, and then it is the group's start. */
#define STP_IDX_COMMIT (UINT64_MAX - 4)
/* A carry in several groups (pool_carry.c), under a tag of its own: COPY
 * begins it (key: the conversation's id, 32 hex, then its parent's if it
 * has one; payload: its meta), the copy's events, META and files follow,
 * and ADOPT ends it: from there on the copy is the conversation, and its
 * records carry the copy's tag. */
#define STP_IDX_COPY   (UINT64_MAX - 5)
#define STP_IDX_ADOPT  (UINT64_MAX - 6)
#define STP_IDX_LOWEST STP_IDX_ADOPT /* of the reserved ones */
#define STP_EVENT_MAX  0xfffffffeull

/* Where a record's payload is. */
typedef struct stp_loc {
    uint32_t seq, off, len;
} stp_loc;

/* A conversation's events [first, next run's first) are in segment seq. */
typedef struct stp_run {
    uint32_t seq, first;
} stp_run;
typedef struct stp_runs { /* never changed once published: replaced whole */
    uint32_t n;
    stp_run r[];
} stp_runs;

typedef struct stp_file {
    struct stp_file *next;
    stp_loc at;
    char name[];
} stp_file;

typedef struct stp_store stp_store;
typedef struct stp_log stp_log;

typedef struct stp_conv {
    const struct st_backend *be; /* &st_pool_backend */
    stp_store *s;
    struct stp_conv *next, *knext; /* by id, by parent id (cat_mu) */
    rt_uuid id, parent;
    rt_uuid tag;      /* its records': its id, or since a carry in several groups
                         the copy's (the committer changes it, c's lock held) */
    _Atomic int refs; /* the catalog's while listed, and each holder's: 1 is idle */
    _Atomic bool gone;
    bool has_parent; /* set at creation, never changed */
    bool creating;   /* cat_mu: not durable yet, invisible */
    bool broken;     /* corruption in its records: read-only, its valid prefix */
    bool gdel;       /* committer: deleted in group ggen */
    /* the conversation's lock (stp_lock) guards what follows */
    uint32_t count;       /* events written and published */
    uint32_t create_seq;  /* the segment of its CREATE record (0: not durable yet): no
                             segment from this one on is dropped while it lives */
    uint32_t gpend, ggen; /* committer: events planned in group ggen */
    stp_loc meta_at;
    rt_buf *meta; /* cached while held or its log is open */
    stp_file *files;
    stp_runs *_Atomic runs;
    stp_log *log;
    _Atomic uint64_t used; /* ms: last release */
    /* seg_mu: its last record in the active segment's index, if act_seq is
     * that segment's (each record links to the one before: stp_act_each) */
    uint32_t act_seq, act_last;
} stp_conv;

/* One record of a segment, as its index keeps it. */
typedef struct stp_ent {
    rt_uuid id;
    uint64_t index;
    uint32_t off, size;   /* the whole record */
    uint32_t hash, khash; /* high halves of the id's and the key's hash (0: no key) */
} stp_ent;

/* Where a segment's record index is (pool_idx.c). */
enum {
    STP_IDX_HEAP,   /* e: malloc'd (the active segment, or sealed and not yet in its file) */
    STP_IDX_MAPPED, /* e: in `map`, its .idx file mapped read-only */
    STP_IDX_LAZY,   /* sealed and covered by the checkpoint: mapped at first use */
};

/* A segment's record index: the active one's in write order, a sealed
 * one's sorted by (id, offset). */
typedef struct stp_segidx {
    uint32_t seq;
    bool sorted;
    uint8_t state; /* STP_IDX_* */
    uint64_t end;  /* sealed: where its last group ends */
    stp_ent *e;
    size_t n, cap;
    void *map;
    size_t maplen;
} stp_segidx;

/* The bounded cache of segment descriptors, shared by all logs. */
enum { STP_FDS = 16 };
typedef struct stp_fdslot {
    uint32_t seq; /* 0: empty */
    int fd;
    int refs;
    uint64_t tick;
} stp_fdslot;

struct stp_store {
    const struct st_backend *be; /* &st_pool_backend */
    st_opts o;
    char *dir, *pool_dir;
    int lock_fd;
    /* catalog */
    pthread_mutex_t cat_mu;
    pthread_cond_t created_cv;
    stp_conv **buckets, **kids;
    size_t nbuckets, count, ncreating;
    pthread_mutex_t locks[64]; /* a conversation's lock: by its id */
    /* segments: the active one is the committer's; its index and the
     * sealed ones' are read by log opens under seg_mu */
    pthread_mutex_t seg_mu;
    stp_segidx act;
    uint32_t *act_prev; /* per act entry: its conversation's previous one */
    size_t act_prev_cap;
    stp_segidx *sealed; /* by seq, ascending */
    size_t nsealed, sealed_cap;
    int act_fd;
    uint64_t act_size;
    uint64_t act_alloc; /* its file's size: zeros from act_size up to there */
    uint64_t act_synced; /* its bytes known durable: [0, act_synced); the rest
                          * up to act_size written since (interval, none) */
    /* sealed segments that may not be durable yet: lazy_lo..lazy_hi (none
     * if lazy_lo is 0); synced by stp_sync_sealed */
    pthread_mutex_t lazy_mu;
    uint32_t lazy_lo, lazy_hi;
    /* segments made without a sync of their name (a lazy roll's), and how
     * many of them the last sync of the pool's directory covers (lazy_mu) */
    uint64_t names_made, names_synced;
    uint32_t open_prev_end; /* the first segment's prev_end: where the last one
                               the open scanned ends (it may not be durable) */
    bool broken;            /* a failed group could not be cut back */
    pthread_mutex_t fd_mu;
    stp_fdslot fds[STP_FDS];
    uint64_t fd_tick;
    uint32_t fd_floor; /* segments below it are dropped: their descriptors close */
    /* the spare segment (pool_spare.c), under sp_mu */
    pthread_t sp_thread;
    pthread_mutex_t sp_mu;
    pthread_cond_t sp_cv;
    bool sp_started, sp_ready, sp_want, sp_stop;
    bool sp_late;     /* a roll came before the spare was ready: no pacing */
    uint64_t sp_fill; /* the active segment's bytes, as the committer last said */
    uint64_t sp_due;  /* the fill the spare's next chunk waits for (0: none) */
    /* committer */
    pthread_t committer;
    st_reqq q;
    /* open logs (logs_mu), closed when idle by the committer */
    pthread_mutex_t logs_mu;
    stp_log *logs;
    _Atomic size_t open_logs;
    char corrupt[512]; /* what the open found corrupt, or "" */
    /* sealed indexes and checkpoints (pool_seal.c), under sl_mu */
    pthread_mutex_t idx_mu; /* one lazy index load at a time */
    pthread_t sl_thread;
    pthread_mutex_t sl_mu;
    pthread_cond_t sl_cv;
    bool sl_started, sl_stop, sl_ckpt_busy;
    uint64_t ckpt_since, ckpt_every; /* the committer's: bytes rolled since the last one */
    uint32_t *sl_seqs;               /* indexes to write */
    size_t sl_n, sl_cap;
    uint8_t *sl_ckpt; /* a checkpoint to write, or NULL */
    size_t sl_ckpt_len;
    uint32_t sl_ckpt_seq;
    bool no_ckpt; /* the catalog in memory may differ from the records: no checkpoint */
    pthread_mutex_t carry_mu;  /* one carry round at a time (pool_carry.c) */
    _Atomic bool carry_paused; /* tests: the sealing thread carries nothing */
    _Atomic uint64_t deletes;  /* conversations deleted since the open */
    uint64_t carry_seen;       /* carry_mu: deletes when a round last found nothing */
    /* a carry in several groups is under way: no checkpoint at rolls (one
     * would name neither the copy begun nor, once adopted, the copy) */
    _Atomic bool copying;
};

/* A carry's last group in several (REQ_ADOPT, r->adopt): the copy, and
 * what the committer makes ready before it writes (so that applying it,
 * once durable, cannot fail). */
typedef struct stp_adopt {
    stp_conv *h;           /* the copy: a conversation outside the catalog */
    uint32_t nev;          /* the group's events: [r->first, r->first + nev) */
    uint32_t nfiles;       /* then META, the files, ADOPT */
    stp_runs *runs;        /* the conversation's, adopted */
    struct stp_view *view; /* its open log's, adopted */
} stp_adopt;

/* Where an open log's events are: per event its record's offset and size
 * in its segment, and the runs that name the segments. Readers take the
 * log's view once and read everything from it; a carry (pool_carry.c)
 * publishes a new one whole, and the one it supersedes stays while a read
 * may hold it (stp_log_release). Appends fill the current one (below the
 * published count). */
typedef struct stp_view {
    st_offsets off, size;
    rt_uuid tag;            /* of the records it names */
    stp_runs *_Atomic runs; /* the conversation's, while this view is current */
    struct stp_view *next;  /* superseded ones */
} stp_view;

struct stp_log {
    const struct st_backend *be; /* &st_pool_backend */
    stp_conv *c;
    stp_log *lnext, *lprev; /* the store's open logs */
    _Atomic uint64_t count; /* published events */
    stp_view *_Atomic view; /* the committer's to replace */
    stp_view *old;          /* superseded views */
    _Atomic size_t old_bytes;
    _Atomic uint32_t readers; /* reads in progress (pool_log.c, view_take) */
    st_idtab ids;
    st_retired *retired; /* runs superseded while open */
};

/* pool.c */
extern const struct st_backend st_pool_backend;
void stp_path(const stp_store *s, uint32_t seq, const char *ext, char *out, size_t cap);

/* pool_catalog.c */
pthread_mutex_t *stp_lock(stp_conv *c);
stp_conv *stp_lookup(stp_store *s, const rt_uuid *id); /* cat_mu held */
stp_conv *stp_conv_new(stp_store *s, const rt_uuid *id);
int stp_insert(stp_store *s, stp_conv *c);  /* cat_mu held */
void stp_unlink(stp_store *s, stp_conv *c); /* cat_mu held */
void stp_conv_free(stp_conv *c);
void stp_catalog_free(stp_store *s);
int stp_set_file(stp_conv *c, const char *name, size_t len, stp_loc at); /* lock held */
/* Note that event `index` is in segment seq (lock held; retires into the
 * open log, if any). */
int stp_note_run(stp_conv *c, uint32_t seq, uint32_t index);
/* Out of the catalog and gone (the committer, or the scan), dropping the
 * catalog's reference: freed now if nobody else holds it. */
void stp_remove(stp_store *s, stp_conv *c);
int stp_create(st_store *s, const rt_uuid *id, const rt_uuid *parent, rt_buf *meta, st_conv **out);
int stp_get(st_store *s, const rt_uuid *id, st_conv **out);
void stp_release(st_conv *c);
/* The payload at `at` read back: a malloc'd copy, NUL-terminated. */
int stp_read_at(stp_store *s, stp_loc at, char **data);
/* Drop a reference without it counting as a use (stp_release stamps the
 * conversation used, which keeps its log from closing idle): a carry's
 * look. The last one frees. */
void stp_unref(stp_conv *c);
const rt_uuid *stp_id(const st_conv *c);
bool stp_parent(const st_conv *c, rt_uuid *parent);
rt_buf *stp_meta(st_conv *c);
int stp_set_meta(st_conv *c, rt_buf *meta);
int stp_get_file(st_conv *c, const char *name, char **data, size_t *len);
size_t stp_count(st_store *s);
int stp_list(st_store *s, rt_uuid **ids, size_t *n);
int stp_children(st_store *s, const rt_uuid *id, rt_uuid **ids, size_t *n);

/* pool_seg.c */
int stp_seg_create(stp_store *s, uint32_t seq);
/* Seal the active segment (its index, in write order, queued for the
 * sealing thread, which sorts it) and begin the next. Under `full` it is
 * durable already; else it is synced before the next begins,
 * or, lazily, by whichever comes first: the sealing thread (before its
 * index and checkpoint), a group that syncs, the interval's sync, the
 * close (stp_sync_sealed). The next segment's header says where a lazy
 * one ends, so that an open can tell a segment a crash left short. */
int stp_seg_roll(stp_store *s);
/* The segment c's CREATE is in once durable (else 0): no segment from
 * this one on goes while c lives. On the committer, which writes what it
 * reads, or under c's lock. */
uint32_t stp_created_in(const stp_conv *c);
/* The oldest segment a checkpoint of the catalog now must keep (cat_mu
 * held, on the committer): the lowest stp_created_in, at most `seq`.
 * Every record of a conversation is at or after its CREATE, so the
 * segments before hold only deleted conversations' records. */
uint32_t stp_keep_from(stp_store *s, uint32_t seq);
/* Remove the sealed segments before `first` (files, indexes, descriptors),
 * once a checkpoint that starts at `first` is durable: on the sealing
 * thread. In ascending order, so that a crash halfway leaves a contiguous
 * run of segments, which an open scans correctly (records of conversations
 * whose CREATE is gone are of deleted ones, and are passed over). */
void stp_seg_drop_before(stp_store *s, uint32_t first);
/* Remove segment seq's file and its index file: the bytes it had. */
uint64_t stp_seg_remove(stp_store *s, uint32_t seq);
/* Make sealed segments up to seq durable that may not be yet (their
 * fdatasync, in order), then the names of segments made since the last
 * sync of the directory (stp_sync_names); 0 or the first failure's -errno. */
int stp_sync_sealed(stp_store *s, uint32_t upto);
/* A lazy roll makes the next segment without a sync (under load the
 * sealing thread's sync of the last one is in the disk's queue, and a sync
 * of the committer's waited behind it: tens of ms a roll). Every sync of
 * a segment is followed by this one of the directory, before anyone is
 * told it is durable: the names of the segments made since, durable. A
 * crash before leaves the last made segment short, with a header of
 * zeros, or not there: nothing in it or after it was synced, and the open
 * ends the log at its predecessor's first damage (pool_scan.c). */
int stp_sync_names(stp_store *s);
/* Whether every segment made so far is named durably. */
bool stp_names_synced(stp_store *s);
/* Segments lo..hi may not be durable (the scan at open reads what a kill
 * left in the page cache). */
void stp_lazy_add(stp_store *s, uint32_t lo, uint32_t hi);
/* An index in memory (entries, act_prev) is an anonymous mapping, not
 * malloc's: it grows in place (mremap) and goes back to the system whole
 * when freed. From an arena, each sealed segment's index (megabytes) left
 * its pages behind in the committer's arena. Room for `need` elements of
 * `elem` bytes in *p (capacity *cap, doubled): 0 or -ENOMEM, unchanged. */
int stp_ents_grow(void **p, size_t *cap, size_t need, size_t elem);
void stp_ents_free(void *p, size_t cap, size_t elem);
int stp_idx_push(stp_segidx *x, const stp_ent *e);
void stp_idx_sort(stp_segidx *x);
/* Call fn for each record of conversation id in segment seq, in write
 * order, until it returns non-zero (returned); seg_mu held. */
int stp_idx_each(stp_store *s, uint32_t seq, const rt_uuid *id,
                 int (*fn)(void *ctx, const stp_ent *e), void *ctx);
/* The same for conversation c's records in the active segment, following
 * their links (O(its records), not O(the segment's)); seg_mu held. */
int stp_act_each(stp_store *s, const stp_conv *c, int (*fn)(void *ctx, const stp_ent *e),
                 void *ctx);
#define STP_NONE UINT32_MAX
/* A sealed segment's index (seg_mu held): to fill at open. */
stp_segidx *stp_sealed_add(stp_store *s, uint32_t seq);
/* Sealed segment seq's index, or NULL (seg_mu held). */
stp_segidx *stp_sealed_of(stp_store *s, uint32_t seq);
/* The active segment, sealed (its index queued for its file);
 * at close. */
void stp_seal_active(stp_store *s);
void stp_fds_close(stp_store *s);
int stp_pread(stp_store *s, uint32_t seq, void *buf, size_t n, uint64_t off);
void stp_segs_free(stp_store *s);

/* pool_idx.c: a sealed segment's index file, DIR/pool/<seq>.idx: a
 * header (magic, seq, entries, the segment's end), the entries as
 * stp_ent is laid out (little-endian), a CRC-32C of all before it. */
#define STP_IDX_MAGIC "PLPIDX\0\1"
enum { STP_IDX_HDR = 32, STP_ENT_BYTES = 40 };
size_t stp_idx_file_size(size_t n);
/* Pure: the file's bytes into out (stp_idx_file_size(n) of them). */
void stp_idx_encode(uint8_t *out, uint32_t seq, uint64_t end, const stp_ent *e, size_t n);
/* Pure: 0 if p is a whole index of segment seq ending at `end`, with *n
 * entries at p + STP_IDX_HDR; else -EBADMSG and why. */
int stp_idx_check(const uint8_t *p, size_t len, uint32_t seq, uint64_t end, size_t *n,
                  const char **why);
/* Write segment seq's index file (temp, fsync, rename, directory fsync). */
int stp_idx_write(stp_store *s, uint32_t seq, uint64_t end, const stp_ent *e, size_t n);
/* Map segment seq's index file into x (its seq and end set): 0, or -errno
 * and why it was not taken. */
int stp_idx_map(stp_store *s, stp_segidx *x, char *why, size_t whylen);
/* x's entries from a scan of its segment (x->end: where the scan ended). */
int stp_idx_rebuild(stp_store *s, stp_segidx *x);
/* Make sealed segment seq's index usable (mapped, or rebuilt by a scan,
 * which is reported in detail and the log); seg_mu not held. */
int stp_idx_ensure(stp_store *s, uint32_t seq, char *detail, size_t cap);
void stp_idx_unmap(stp_segidx *x);
/* Drop a mapped index's pages from this process (they stay cached). */
void stp_idx_dontneed(stp_store *s, uint32_t seq);

/* pool_ckpt.c: the catalog's checkpoint, DIR/pool/<seq>.ckpt: the
 * conversations as of the end of segment seq. */
#define STP_CKPT_MAGIC    "PLCKPT\0\3" /* with a conversation's tag, if not its id */
#define STP_CKPT_MAGIC_V2 "PLCKPT\0\2" /* read: no tags */
#define STP_CKPT_MAGIC_V1 "PLCKPT\0\1" /* read: create_seq taken as the first segment */
typedef struct stp_ckpt {
    uint32_t first, seq; /* covers segments [first, seq] */
    uint64_t *ends;      /* ends[k]: where segment first + k's last group ends */
    char corrupt[512];
} stp_ckpt;
/* Pure: encode h and conversations v[0..n) into a malloc'd buffer. */
int stp_ckpt_encode(const stp_ckpt *h, stp_conv *const *v, size_t n, uint8_t **out, size_t *len);
/* Pure: check and decode; every conversation (made with stp_conv_new(s))
 * goes to add, which owns it. h->ends is malloc'd. 0 or -EBADMSG/-ENOMEM. */
int stp_ckpt_decode(const uint8_t *p, size_t len, stp_ckpt *h, stp_store *s,
                    int (*add)(void *ctx, stp_conv *c), void *ctx);
/* The catalog now, as of the end of sealed segment seq (the committer, or
 * the open): a malloc'd checkpoint. */
int stp_ckpt_snapshot(stp_store *s, uint32_t seq, uint8_t **out, size_t *len);
/* Open: the newest valid checkpoint into the catalog, its segments
 * registered as sealed (lazy); *covered: its seq, 0 if none. */
int stp_ckpt_load(stp_store *s, const uint64_t *seqs, size_t n, uint32_t *covered);
/* Remove checkpoints older than the newest two. */
void stp_ckpt_prune(stp_store *s);

/* pool_seal.c: the thread that writes sealed indexes and checkpoints */
int stp_seal_start(stp_store *s);
/* Write everything queued, then stop. */
void stp_seal_stop(stp_store *s);
/* Queue: write sealed segment seq's index (in memory) to its file, then
 * use the file. */
void stp_seal_idx(stp_store *s, uint32_t seq);
/* Queue a checkpoint (takes buf), replacing one not yet written. */
void stp_seal_ckpt(stp_store *s, uint32_t seq, uint8_t *buf, size_t len);
/* The committer: a roll's checkpoint, unless one is still being written,
 * or the rolls since the last one wrote less than 8 times its size: a
 * checkpoint holds every conversation (about 80 B each), and at 16 MiB
 * segments a catalog of 100,000 would otherwise rewrite half as much as
 * the appends. An open after a crash scans what came after it. */
void stp_seal_roll_ckpt(stp_store *s, uint32_t seq);

/* pool_spare.c: the next segment's file, made ahead */
int stp_spare_start(stp_store *s);
void stp_spare_stop(stp_store *s);
/* Ask for a spare, or tell how far the active segment is written (the
 * committer, after each group once the active segment is a quarter full). */
void stp_spare_want(stp_store *s, uint64_t fill);
/* Pure: the active segment's fill at which the spare's bytes from `at` on
 * may be written, so that its zeros go out in step with the appends and
 * the spare is whole when the active segment is 7/8 full. */
uint64_t stp_spare_due(uint64_t segment_bytes, uint64_t at);
/* The spare as segment seq's file (header written, renamed, synced):
 * -ENOENT if none is ready, another error if taking it failed. */
int stp_spare_take(stp_store *s, uint32_t seq, int *fd);
/* Write zeros over [from, to) of fd (a plain pwrite, not the I/O table's). */
int stp_zero(int fd, uint64_t from, uint64_t to);

/* pool_scan.c: pure: the records of a segment's bytes, by group. */
typedef struct stp_scan_cb {
    void *ctx;
    /* A record of a committed group, in order; 0 or -errno (stops). */
    int (*record)(void *ctx, const st_rec *r, uint64_t off);
    /* A bad record at off with valid ones after it; tag: its conversation,
     * if its header still says (may be NULL). */
    void (*corrupt)(void *ctx, uint64_t off, const uint8_t *tag);
    /* the first bad record ends the scan, as a torn tail does */
    bool stop_at_damage;
    /* the log's last segment: damage in its last group (no later group
     * committed after it) is a torn tail, a sync a crash interrupted */
    bool last;
} stp_scan_cb;
typedef struct stp_scan_res {
    uint64_t end;     /* the end of the last committed group: the rest is a torn tail */
    uint64_t corrupt; /* bad records with valid ones after them */
} stp_scan_res;
int stp_scan_buf(const uint8_t *p, size_t len, uint32_t seed, const stp_scan_cb *cb,
                 stp_scan_res *res);
/* A record's index entry. */
stp_ent stp_ent_of(const st_rec *r, uint64_t off);
/* Read segment seq's file and check its header (-EBADMSG if not ours). */
int stp_seg_read(stp_store *s, uint32_t seq, char **data, size_t *len);
/* Segment seq's header, checked: 0 and where a lazy predecessor ends (0:
 * it was durable when seq began); 1 if the file is unfinished (shorter
 * than a header, or zeros where it goes: never synced); else -errno or
 * -EBADMSG. */
int stp_seg_prev_end(stp_store *s, uint32_t seq, uint32_t *prev_end);
/* Open: the newest usable checkpoint, then every segment after it (all of
 * them without one) into the catalog, the last one's torn tail cut. */
int stp_recover(stp_store *s, char *err, size_t errlen);

/* pool_commit.c */
int stp_committer_start(stp_store *s);
void stp_committer_stop(stp_store *s);
int stp_submit(stp_conv *c, st_req *r, st_done_fn done, void *ctx);
/* Queue the requests held back (st_reqq_hold), or, once the store is
 * closing, answer them -ESHUTDOWN. */
void stp_release_held(stp_store *s);
/* What was written, durable (committer thread, or the close after it):
 * lazily sealed segments, then the active one if dirty. */
int stp_sync_written(stp_store *s);
/* Whether the active segment has bytes written since its last sync. */
static inline bool stp_act_dirty(const stp_store *s)
{
    return s->act_synced < s->act_size;
}
int stp_append(st_conv *c, const st_item *items, size_t n, st_done_fn done, void *ctx);
int stp_put_file(st_conv *c, const char *name, rt_buf *data, bool durable, st_done_fn done,
                 void *ctx);
int stp_delete(st_conv *c, st_done_fn done, void *ctx);
void stp_close_idle(stp_store *s, uint64_t now, uint64_t ttl, bool crowded);

/* Where the payload of item `it`, written as record e of the active
 * segment, is. */
static inline stp_loc stp_payload_at(const stp_store *s, const stp_ent *e, const st_item *it)
{
    uint32_t len = it->payload != NULL ? (uint32_t)rt_buf_len(it->payload) : 0;
    return (stp_loc){s->act.seq, e->off + e->size - len, len};
}

/* pool_carry.c */
/* What a carry reads of a conversation under its lock. */
typedef struct stp_snap {
    rt_uuid tag; /* its records' */
    uint32_t count;
    stp_runs *runs;
    stp_loc meta_at;
    bool has_parent;
    rt_uuid parent;
    size_t nfiles;
    stp_file **files; /* copies */
    uint64_t mark;
} stp_snap;
/* A conversation's event records, from its indexes (stp_conv_each). */
typedef struct stp_found {
    stp_ent *e;
    uint32_t *seq;
    size_t n, cap, scap;
    uint64_t base;        /* the first event wanted */
    uint64_t bytes, most; /* their records' bytes; past `most`, the rest is left */
} stp_found;
/* stp_found_one over c's event records [0, count) in `runs` (their
 * sealed indexes made usable first): stp_conv_each's result. */
int stp_found_walk(stp_store *s, stp_conv *c, const stp_runs *runs, uint64_t count, stp_found *f);
/* 1 if c is not to be carried now (gone, read-only, not durable yet). */
int stp_snap_take(stp_conv *c, stp_snap *p);
void stp_snap_free(stp_snap *p);
/* stp_conv_each's fn: records from f->base on, in order (-EBADMSG: a
 * hole), until they pass f->most bytes (1). */
int stp_found_one(void *ctx, uint32_t seq, const stp_ent *e);
/* The events f found as items it[0..f->n), read and checked (their
 * payloads held). */
int stp_read_found(stp_store *s, const stp_snap *p, const stp_found *f, st_item *it);
/* The bytes at `at` (a payload) as a buffer. */
int stp_read_payload(stp_store *s, stp_loc at, rt_buf **out);
/* A round's bound: a quarter segment. */
uint64_t stp_carry_round_bytes(const stp_store *s);
/* One round of carrying: the conversations that keep the oldest segments,
 * while it pays (pool_carry.c says when); on the sealing thread after a
 * checkpoint, or any thread (tests). Blocks on the committer. */
void stp_carry(stp_store *s);
/* The committer: what a carry request found of c (its meta's and files'
 * places), to tell whether they moved since. */
uint64_t stp_carry_print(const stp_conv *c);
/* The committer: the record index of a carry's item i. */
uint64_t stp_carry_index(const st_req *r, size_t i);
/* The committer, the carry's group durable (c's lock held): c's runs,
 * meta, files and open log name the copy (records e); if that cannot be
 * (no memory, a log's views), r's status says so and the old records stay. */
void stp_carry_apply(stp_store *s, stp_conv *c, st_req *r, const stp_ent *e);
/* The committer, a carry's last group durable and its open log's view
 * replaced (c's lock held): c's records are the copy's: its runs (the old
 * ones retired into its log, or freed), the segment it begins in, its
 * tag, and its meta and files at items meta and [files, files_end) of r
 * (records e). */
void stp_carry_take(stp_store *s, stp_conv *c, stp_runs *runs, uint32_t create_seq,
                    const rt_uuid *tag, const st_req *r, const stp_ent *e, size_t meta,
                    size_t files, size_t files_end);

/* pool_copy.c */
/* A carry in several groups reads its last group up to STP_ADOPT_TRIES
 * times, the conversation's new requests held back for the last
 * STP_HELD_TRIES of them. */
enum { STP_ADOPT_TRIES = 8, STP_HELD_TRIES = 2 };
/* Carry x alone, in several groups: 0, 2 if it changed or went meanwhile
 * (the next round), or -errno. */
int stp_carry_big(stp_store *s, stp_conv *x);
/* Tests: called on the carrying thread between the groups of a carry in
 * several (where 0: a group of its events is durable; 1: its last group
 * is read and about to be submitted). */
extern void (*stp_carry_hook)(stp_store *s, int where);
/* The committer: the record index of a REQ_ADOPT's item i: its events,
 * META, its files, ADOPT. */
uint64_t stp_adopt_index(const st_req *r, size_t i);
/* The committer, r's records planned (entries e) and not yet written: the
 * runs and the open log's view x takes once r is durable. 0, or -ENOMEM,
 * -EBUSY (the log's superseded views hold too much): r is not written. */
int stp_adopt_prepare(stp_store *s, stp_conv *x, st_req *r, const stp_ent *e);
/* The committer, r durable (x's lock held): x is the copy now. */
void stp_adopt_apply(stp_store *s, stp_conv *x, st_req *r, const stp_ent *e);

/* pool_log.c */
/* fn for each event record of c's runs, [0, count), in index order, with
 * its segment (seg_mu held; sealed indexes ensured first). */
int stp_conv_each(stp_store *s, const stp_conv *c, const stp_runs *runs, uint64_t count,
                  int (*fn)(void *ctx, uint32_t seq, const stp_ent *e), void *ctx);
int stp_conv_log(st_conv *c, st_log **log, st_open_report *rep);
/* Add events [from, to) of an open log, then publish them (lock held). */
int stp_log_add(stp_log *l, const stp_ent *e, size_t n);
/* A carry (c's lock held): the log's events [0, n) are now records e, in
 * segments `runs` (which the conversation takes too): a new view. 0,
 * -ENOMEM, or -EBUSY if the views it superseded already hold too much. */
int stp_log_move(stp_log *l, const stp_ent *e, size_t n, stp_runs *runs);
/* stp_log_move in steps, for a carry in several groups: a view of n
 * events in `runs` under `tag` (-EBUSY as above, -ENOMEM), its events
 * set one by one, then put in place (c's lock held), or freed. */
int stp_log_view_new(stp_log *l, uint64_t n, stp_runs *runs, const rt_uuid *tag, stp_view **out);
int stp_log_view_set(stp_view *v, const stp_ent *e);
void stp_log_view_put(stp_log *l, stp_view *v);
void stp_log_view_free(stp_view *v);
/* The committer, after it superseded a view or runs (c's lock held): if
 * no read is in progress, free the superseded ones (no later read can
 * reach them). */
void stp_log_release(stp_log *l);
void stp_log_publish(stp_log *l, uint64_t count);
void stp_log_free(stp_log *l);
uint64_t stp_log_count(const st_log *l);
int stp_log_read(st_log *l, uint64_t first, uint32_t max, st_page **out);
int stp_log_find(st_log *l, const void *id, size_t idlen, uint64_t *index);
int stp_log_find_key(st_log *l, const void *key, size_t keylen, uint64_t *index);
size_t stp_log_memory(const st_log *l);
bool stp_log_read_only(const st_log *l);

#endif
