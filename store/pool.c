/*
 * pool.c - the pool backend: conversations that share segment files.
 * Location `pool:DIR`. Not the default yet (see README, "Store").
 *
 *   DIR/lock                one process per data directory
 *   DIR/pool/<seq>.seg      shared segments: a file header (magic, seq),
 *                           then tagged records (record.h, the tag is the
 *                           conversation's id, the CRC seeded with
 *                           st_journal_seed(seq), so that nothing from
 *                           another file or an older use ever validates)
 *   DIR/pool/spare          the next segment made ahead, zeros (pool_spare.c)
 *   DIR/workspaces/<hex>/   hosted agents' directories (dirfiles.h)
 *   DIR/<name>.json(l)      the store's own files (dirfiles.h)
 *
 * Why: a conversation of the local backend is a directory with a meta file,
 * segments and checkpoints, and a `full` append is written twice (journal
 * and segment). Making those files is most of a creation's cost, their
 * descriptors bound how many conversations are in use, and the second
 * write is a pwritev per conversation per group. Here the segments ARE the
 * journal: a group commit is one pwritev of every record of every
 * conversation, one fdatasync under `full`, and nothing else; there is no
 * file per conversation at all.
 *
 * Records: an event (its dense index), or a catalog record at a reserved
 * index (pool_impl.h): CREATE (parent, meta), META, FILE (a conversation's
 * named file), DELETE. Every group ends with a COMMIT record (tag zero,
 * payload: the group's start offset; key: how much of the segment was
 * durable then, which tells a hole a crash left in unsynced groups from
 * corruption, pool_scan.c). A group never spans segments (a
 * segment rolls only between groups, past st_opts.segment_bytes), so the
 * unit of recovery is the group: records after the last COMMIT are a group
 * a crash interrupted, never acknowledged, and are cut off whole. A group
 * that fails (ENOSPC, EIO on its write or its fdatasync) is cut back off
 * the file (truncate, then fdatasync) before anything of it is published;
 * the next append lands at the same index. If even the cut fails, the
 * store refuses appends until reopened (a replay could otherwise show a
 * group reported as failed).
 *
 * Durability: `full` syncs every group; `interval=MS` syncs what was
 * written every MS; `none` on close only. A group holding a catalog record
 * (create, meta, a durable file, delete) is synced under every policy:
 * those calls are durable when they return, as store.h says. Under the
 * last two a segment rolls without a sync (pool_seg.c): the sealing thread
 * syncs it, and every sync syncs such segments first, so what is durable
 * is always a prefix of what was written; an open that finds such a
 * segment short ends the log there (pool_scan.c).
 *
 * The catalog is in memory: per conversation its id, parent, event count,
 * where its latest meta and files are (seq, offset, length), and a compact
 * list of runs (segment, first index) telling which segments hold its
 * events; the meta bytes only while it is held or its log open (else one
 * pread). Each roll (and the close) writes a checkpoint of it as of the
 * sealed segment's end (pool_ckpt.c); opening the store loads the newest
 * valid one and scans only the segments after it (pool_scan.c), or every
 * segment if there is none; it seals the last segment (its torn tail cut),
 * and the first group begins a new one.
 *
 *   DIR/pool/<seq>.idx      a sealed segment's record index (pool_idx.c)
 *   DIR/pool/<seq>.ckpt     the catalog as of that segment's end (newest two)
 *
 * A conversation's log (pool_log.c) opens from the record indexes of the
 * segments of its runs (pool_seg.c): the active one's in memory, the
 * sealed ones' mapped from their files (pool_idx.c, written by
 * pool_seal.c's thread): the records' offsets and sizes (8 bytes per
 * event) and the id table. Pages coalesce records that are near
 * each other in one segment into one pread; otherwise one pread each: O(the
 * page), wherever it is. Segment descriptors come from a small cache shared
 * by every log: descriptors do not grow with conversations.
 *
 * Deletion is a durable DELETE record; the id can be created again after
 * it (a recovery applies records in order, so the old incarnation's events
 * never join the new one). Space comes back from the oldest end: a
 * checkpoint covers the segments from the oldest CREATE of a conversation
 * still there, and once it is written the segments before it (deleted
 * conversations' records only) are removed (pool_seg.c). So that one old
 * conversation that lives does not keep every segment written since, the
 * live conversations created in the oldest segments are carried: written
 * again at the end, when that frees at least twice what it writes
 * (pool_carry.c).
 *
 * Blocking calls: create, set_meta, get_file, meta when not cached, the
 * log's open and readers (pread). Appends, put_file and delete queue to
 * the committer thread, which does all writes.
 */
#include "pool_impl.h"

#include "backend.h"
#include "dirfiles.h"
#include "io.h"
#include "runtime/log.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

void stp_path(const stp_store *s, uint32_t seq, const char *ext, char *out, size_t cap)
{
    snprintf(out, cap, "%s/%020" PRIu32 ".%s", s->pool_dir, seq, ext);
}

static int make_dir(const char *path, char *err, size_t errlen)
{
    if (mkdir(path, 0755) == 0 || errno == EEXIST)
        return 0;
    int e = errno;
    snprintf(err, errlen, "cannot create %s: %s", path, strerror(e));
    return -e;
}

static void store_free(stp_store *s)
{
    stp_spare_stop(s); /* before the lock goes: they write in DIR/pool */
    stp_seal_stop(s);
    stp_catalog_free(s);
    stp_segs_free(s);
    stp_fds_close(s);
    if (s->act_fd >= 0)
        close(s->act_fd);
    if (s->lock_fd >= 0)
        close(s->lock_fd);
    for (size_t i = 0; i < 64; i++)
        pthread_mutex_destroy(&s->locks[i]);
    pthread_mutex_destroy(&s->cat_mu);
    pthread_cond_destroy(&s->created_cv);
    pthread_mutex_destroy(&s->seg_mu);
    pthread_mutex_destroy(&s->lazy_mu);
    pthread_mutex_destroy(&s->fd_mu);
    pthread_mutex_destroy(&s->sp_mu);
    pthread_cond_destroy(&s->sp_cv);
    pthread_mutex_destroy(&s->idx_mu);
    pthread_mutex_destroy(&s->sl_mu);
    pthread_mutex_destroy(&s->carry_mu);
    pthread_cond_destroy(&s->sl_cv);
    st_reqq_destroy(&s->q);
    pthread_mutex_destroy(&s->logs_mu);
    free(s->dir);
    free(s->pool_dir);
    free(s);
}

static int pool_open(const st_opts *o, st_store **out, char *err, size_t errlen)
{
    char scratch[256];
    if (err == NULL) {
        err = scratch;
        errlen = sizeof(scratch);
    }
    err[0] = '\0';
    stp_store *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return -ENOMEM;
    s->be = &st_pool_backend;
    s->o = *o;
    if (s->o.interval_ms == 0)
        s->o.interval_ms = 1000;
    /* 16 MiB: the active segment's index is in memory (44 B a record)
     * until it is sealed; a quarter of the local store's 64 MiB is a
     * quarter of that memory, and rolls cost no sync under none/interval */
    if (s->o.segment_bytes == 0)
        s->o.segment_bytes = s->o.journal_bytes ? s->o.journal_bytes : (uint64_t)16 << 20;
    if (s->o.segment_bytes > (uint64_t)1 << 30)
        s->o.segment_bytes = (uint64_t)1 << 30; /* offsets are 32-bit: room for a last group,
                                                   past twice that at most (roll_due) */
    if (s->o.idle_ttl_ms == 0)
        s->o.idle_ttl_ms = 20 * 60 * 1000;
    if (s->o.max_open_logs == 0) {
        struct rlimit rl;
        uint64_t files = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY
                             ? (uint64_t)rl.rlim_cur
                             : 1024;
        s->o.max_open_logs = files / 4 > 64 ? files / 4 : 64;
    }
    s->lock_fd = s->act_fd = -1;
    pthread_mutex_init(&s->cat_mu, NULL);
    pthread_cond_init(&s->created_cv, NULL);
    for (size_t i = 0; i < 64; i++)
        pthread_mutex_init(&s->locks[i], NULL);
    pthread_mutex_init(&s->seg_mu, NULL);
    pthread_mutex_init(&s->lazy_mu, NULL);
    pthread_mutex_init(&s->fd_mu, NULL);
    pthread_mutex_init(&s->sp_mu, NULL);
    pthread_cond_init(&s->sp_cv, NULL);
    pthread_mutex_init(&s->idx_mu, NULL);
    pthread_mutex_init(&s->sl_mu, NULL);
    pthread_mutex_init(&s->carry_mu, NULL);
    s->carry_seen = UINT64_MAX; /* the first round looks */
    pthread_cond_init(&s->sl_cv, NULL);
    st_reqq_init(&s->q);
    pthread_mutex_init(&s->logs_mu, NULL);
    s->dir = strdup(o->dir);
    size_t n = s->dir != NULL ? strlen(s->dir) + 6 : 0;
    s->pool_dir = n > 0 ? malloc(n) : NULL;
    s->nbuckets = 1024;
    s->buckets = calloc(s->nbuckets, sizeof(*s->buckets));
    s->kids = calloc(s->nbuckets, sizeof(*s->kids));
    int r = s->pool_dir != NULL && s->buckets != NULL && s->kids != NULL ? 0 : -ENOMEM;
    if (r == 0) {
        snprintf(s->pool_dir, n, "%s/pool", s->dir);
        r = make_dir(s->dir, err, errlen);
    }
    char pid[32];
    if (r == 0 && (r = st_lock_dir(s->dir, false, &s->lock_fd, pid, sizeof(pid))) < 0) {
        if (r == -EBUSY)
            snprintf(err, errlen, "data directory %s is in use by another process%s%s%s", s->dir,
                     *pid ? " (pid " : "", pid, *pid ? ")" : "");
        else
            snprintf(err, errlen, "cannot lock %s/lock: %s", s->dir, strerror(-r));
    }
    if (r == 0)
        r = make_dir(s->pool_dir, err, errlen);
    if (r == 0)
        r = st_fsync_dir(s->dir);
    if (r == 0 && (r = stp_spare_start(s)) < 0)
        snprintf(err, errlen, "cannot start the spare segment's thread: %s", strerror(-r));
    if (r == 0 && (r = stp_seal_start(s)) < 0)
        snprintf(err, errlen, "cannot start the sealing thread: %s", strerror(-r));
    if (r == 0)
        r = stp_recover(s, err, errlen);
    /* for the log line: once the committer runs, a carry may make a segment */
    uint32_t act = s->act.seq;
    size_t count = s->count;
    if (r == 0 && (r = stp_committer_start(s)) < 0)
        snprintf(err, errlen, "cannot start the committer: %s", strerror(-r));
    if (r < 0) {
        if (err[0] == '\0')
            snprintf(err, errlen, "cannot open the store in %s: %s", o->dir, strerror(-r));
        store_free(s);
        return r;
    }
    rt_log(RT_LOG_INFO, "store",
           "opened pool dir=%s conversations=%zu segment=%" PRIu32 " durability=%s", s->dir,
           count, act, st_durability_name(s->o.durability));
    *out = (st_store *)s;
    return 0;
}

static void pool_close(st_store *st)
{
    stp_store *s = (stp_store *)st;
    stp_committer_stop(s); /* answers everything queued, closes the logs */
    int r = stp_sync_written(s);
    if (r < 0)
        rt_log(RT_LOG_ERROR, "store", "closing: the last segments' flush failed: %s", strerror(-r));
    /* the last segment sealed as a roll would: the next open scans nothing */
    uint32_t seq = s->act.seq;
    uint8_t *b;
    size_t len;
    if (r == 0 && !s->broken && s->act_size == ST_FILE_HDR) {
        /* nothing in it and nothing names it: gone, so that the next open
         * has nothing to scan (it makes the same seq anew) */
        char path[4096];
        stp_path(s, seq, "seg", path, sizeof(path));
        if (unlink(path) == 0)
            st_fsync_dir(s->pool_dir);
    } else if (r == 0 && !s->broken && !s->no_ckpt) {
        /* a spare's zeros after the last group go (unsynced: should a
         * power cut bring them back, they are no record) */
        if (s->act_alloc > s->act_size && st_truncate(s->act_fd, s->act_size) == 0)
            s->act_alloc = s->act_size;
        stp_seal_active(s);
        if (stp_ckpt_snapshot(s, seq, &b, &len) == 0)
            stp_seal_ckpt(s, seq, b, len);
    }
    store_free(s); /* writes what is queued first */
}

static int pool_workspace(st_store *s, const rt_uuid *id, char *out, size_t cap)
{
    return st_dir_workspace(((stp_store *)s)->dir, id, out, cap);
}

static size_t pool_open_logs(st_store *s)
{
    return atomic_load(&((stp_store *)s)->open_logs);
}

static size_t pool_max_open_logs(const st_store *s)
{
    return (size_t)((const stp_store *)s)->o.max_open_logs;
}

static size_t pool_max_event(const st_store *s)
{
    (void)s;
    return ST_PAYLOAD_MAX; /* a record's (record.h), as in the local store */
}

static int pool_put_file(st_store *s, const char *name, const void *data, size_t len)
{
    return st_dir_put_file(((stp_store *)s)->dir, name, data, len);
}

static int pool_take_file(st_store *s, const char *name, char **data, size_t *len)
{
    return st_dir_take_file(((stp_store *)s)->dir, name, data, len);
}

const st_backend st_pool_backend = {
    .name = "pool",
    .open = pool_open,
    .close = pool_close,
    .workspace = pool_workspace,
    .count = stp_count,
    .open_logs = pool_open_logs,
    .max_open_logs = pool_max_open_logs,
    .max_event = pool_max_event,
    .list = stp_list,
    .children = stp_children,
    .put_file = pool_put_file,
    .take_file = pool_take_file,
    .conv_create = stp_create,
    .conv_get = stp_get,
    .conv_release = stp_release,
    .conv_id = stp_id,
    .conv_parent = stp_parent,
    .conv_meta = stp_meta,
    .conv_set_meta = stp_set_meta,
    .conv_log = stp_conv_log,
    .append = stp_append,
    .conv_put_file = stp_put_file,
    .conv_get_file = stp_get_file,
    .conv_delete = stp_delete,
    .log_count = stp_log_count,
    .log_read = stp_log_read,
    .log_find = stp_log_find,
    .log_find_key = stp_log_find_key,
    .log_read_now = stp_log_read,
    .log_find_now = stp_log_find,
    .log_memory = stp_log_memory,
    .log_read_only = stp_log_read_only,
};
