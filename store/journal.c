/*
 * journal.c - the journal of `full` durability: one append-only file at a
 * time, `<seq>.wal`, holding tagged records (record.h: the conversation id,
 * then the same fields as in a segment). The committer appends a whole
 * group commit to it and fdatasyncs it once; the segments are flushed later.
 *
 * Journal files are recycled. Once retired (its segments flushed), a file
 * becomes a spare, `<n>.free` (two are kept, also across restarts), and the
 * next rotation reuses it: overwriting allocated blocks spares fdatasync the
 * file-size update and costs about half as much as growing a new file (and,
 * unlike zero-filling ahead, no extra writes). Old records left in a reused
 * file never validate, because journal records seed their CRC with their
 * file's sequence number.
 *
 * Replay, when the store opens: every record of every journal file, in
 * order, whose conversation still exists and whose index is the next one of
 * its log, is written into the log; records already there are skipped. A
 * CREATE record (a creation, ST_CREATE_INDEX) makes a conversation the
 * catalog does not have (its files, synced), before its events come. A
 * journal file ends at its first invalid record (the group commit a crash
 * interrupted, never acknowledged, or leftovers of the file's previous use).
 * A log whose open found a hole (read-only: a crash before its segments
 * were synced) is cut at the hole once the replay holds the event it lacks
 * (stl_log_cut_damage: later segments go too), opened again, and the
 * replay writes the rest.
 * The logs are then synced and checkpointed, and only then are the journal
 * files retired.
 */
#include "store_impl.h"

#include "io.h"
#include "log_impl.h"
#include "record.h"
#include "runtime/log.h"
#include "runtime/uuid.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define ST_JNL_MAGIC "PLJNL\0\0\1"

enum { SPARES = 2 };

static void jpath(const st_store *s, uint64_t n, const char *ext, char *out, size_t cap)
{
    snprintf(out, cap, "%s/%020" PRIu64 ".%s", s->journal_dir, n, ext);
}

static int list_files(const st_store *s, const char *ext, uint64_t **out, size_t *n)
{
    return st_list_numbered(s->journal_dir, ext, out, n);
}

/* A spare to reuse as `path`, renamed into place; -ENOENT if none. */
static int take_spare(st_store *s, const char *path)
{
    uint64_t *spares;
    size_t n;
    int r = list_files(s, "free", &spares, &n);
    if (r < 0)
        return r;
    r = -ENOENT;
    if (n > 0) {
        char from[4096];
        jpath(s, spares[0], "free", from, sizeof(from));
        r = rename(from, path) == 0 ? 0 : -errno;
    }
    free(spares);
    return r;
}

int st_journal_open_next(st_store *s)
{
    char path[4096];
    uint64_t seq = s->j.seq + 1;
    jpath(s, seq, "wal", path, sizeof(path));
    bool reused = take_spare(s, path) == 0;
    int fd;
    int r = st_log_file_make(s->journal_dir, path, ST_JNL_MAGIC, seq, reused, true, &fd);
    if (r < 0)
        return r;
    if (s->j.fd >= 0)
        close(s->j.fd);
    s->j.fd = fd;
    s->j.seq = seq;
    s->j.seed = st_journal_seed(seq);
    s->j.size = ST_FILE_HDR;
    return 0;
}

int st_journal_append(st_store *s, const struct iovec *iov, int n)
{
    uint64_t total = 0;
    for (int i = 0; i < n; i++)
        total += iov[i].iov_len;
    uint64_t at = s->j.size;
    /* counted before the write: a short write leaves valid records too, and
     * the undo must reach them */
    s->j.size += total;
    int r = st_write_all(s->j.fd, iov, n, (off_t)at);
    if (r < 0)
        st_journal_undo(s, at);
    return r;
}

int st_journal_sync(st_store *s)
{
    return st_datasync(s->j.fd);
}

static void *syncer_main(void *arg)
{
    st_store *s = arg;
    pthread_setname_np(pthread_self(), "parley-sync");
    pthread_mutex_lock(&s->j.sy_mu);
    for (;;) {
        while (s->j.sy_state != 1 && s->j.sy_state != 3)
            pthread_cond_wait(&s->j.sy_cv, &s->j.sy_mu);
        if (s->j.sy_state == 3)
            break;
        int fd = s->j.fd;
        pthread_mutex_unlock(&s->j.sy_mu);
        int r = st_datasync(fd);
        pthread_mutex_lock(&s->j.sy_mu);
        s->j.sy_result = r;
        s->j.sy_state = 2;
        pthread_cond_broadcast(&s->j.sy_cv);
    }
    pthread_mutex_unlock(&s->j.sy_mu);
    return NULL;
}

int st_journal_syncer_start(st_store *s)
{
    pthread_mutex_init(&s->j.sy_mu, NULL);
    pthread_cond_init(&s->j.sy_cv, NULL);
    s->j.sy_state = 0;
    return -pthread_create(&s->j.syncer, NULL, syncer_main, s);
}

void st_journal_syncer_stop(st_store *s)
{
    pthread_mutex_lock(&s->j.sy_mu);
    s->j.sy_state = 3;
    pthread_cond_broadcast(&s->j.sy_cv);
    pthread_mutex_unlock(&s->j.sy_mu);
    pthread_join(s->j.syncer, NULL);
    pthread_mutex_destroy(&s->j.sy_mu);
    pthread_cond_destroy(&s->j.sy_cv);
}

void st_journal_sync_begin(st_store *s)
{
    pthread_mutex_lock(&s->j.sy_mu);
    s->j.sy_state = 1;
    pthread_cond_broadcast(&s->j.sy_cv);
    pthread_mutex_unlock(&s->j.sy_mu);
}

int st_journal_sync_end(st_store *s)
{
    pthread_mutex_lock(&s->j.sy_mu);
    while (s->j.sy_state != 2)
        pthread_cond_wait(&s->j.sy_cv, &s->j.sy_mu);
    s->j.sy_state = 0;
    int r = s->j.sy_result;
    pthread_mutex_unlock(&s->j.sy_mu);
    return r;
}

/* Forget the records from `size` on (a group that failed), durably. They
 * are overwritten with zeros, not cut off: in a reused file, or after
 * shorter new records, they would still be there to validate. If that
 * cannot be made durable, the journal might replay a group reported as
 * failed, so the store stops taking appends (it says so) until reopened. */
int st_journal_undo(st_store *s, uint64_t size)
{
    static const uint8_t zeros[64 << 10];
    int r = 0;
    for (uint64_t at = size; r == 0 && at < s->j.size; at += sizeof(zeros)) {
        uint64_t k = s->j.size - at < sizeof(zeros) ? s->j.size - at : sizeof(zeros);
        struct iovec iov = {(void *)zeros, (size_t)k};
        r = st_write_all(s->j.fd, &iov, 1, (off_t)at);
    }
    if (r < 0) /* a shorter file is the other way to lose them */
        r = st_truncate(s->j.fd, size);
    if (r == 0)
        r = st_datasync(s->j.fd);
    s->j.size = size;
    if (r < 0 && !s->j.broken) {
        s->j.broken = true;
        rt_log(RT_LOG_ERROR, "store",
               "cannot take back a failed group commit from the journal (%s): refusing "
               "appends until the store is reopened",
               strerror(-r));
    }
    return r;
}

int st_journal_retire(st_store *s, uint64_t upto)
{
    uint64_t *seqs, *spares;
    size_t n, nspares;
    int r = list_files(s, "wal", &seqs, &n);
    if (r < 0)
        return r;
    if ((r = list_files(s, "free", &spares, &nspares)) < 0) {
        free(seqs);
        return r;
    }
    free(spares);
    size_t done = 0;
    for (size_t i = 0; i < n && seqs[i] < upto; i++, done++) {
        char path[4096], spare[4096];
        jpath(s, seqs[i], "wal", path, sizeof(path));
        jpath(s, seqs[i], "free", spare, sizeof(spare));
        int e = nspares < SPARES && rename(path, spare) == 0 ? 0 : unlink(path) == 0 ? 0 : errno;
        if (e == 0 && nspares < SPARES)
            nspares++;
        else if (e != 0 && e != ENOENT && r == 0)
            r = -e;
    }
    free(seqs);
    if (done > 0 && r == 0)
        r = st_fsync_dir(s->journal_dir);
    return r;
}

/* ---------------------------------------------------------------- replay --- */

typedef struct replay {
    st_store *s;
    st_conv **touched;
    size_t ntouched, cap;
    uint64_t applied, skipped, unknown, gaps, created;
} replay;

static int touch(replay *rp, st_conv *c)
{
    for (size_t i = 0; i < rp->ntouched; i++)
        if (rp->touched[i] == c) {
            stl_conv_release(c); /* held already */
            return 0;
        }
    if (rp->ntouched == rp->cap) {
        size_t cap = rp->cap ? 2 * rp->cap : 16;
        st_conv **t = realloc(rp->touched, cap * sizeof(*t));
        if (t == NULL)
            return -ENOMEM;
        rp->touched = t;
        rp->cap = cap;
    }
    rp->touched[rp->ntouched++] = c;
    return 0;
}

static int apply(replay *rp, const st_rec *rec)
{
    rt_uuid id;
    memcpy(id.b, rec->tag, sizeof(id.b));
    if (rec->index == ST_CREATE_INDEX) {
        bool made = false;
        int r = rec->idlen == strlen(ST_CREATE_ID) && memcmp(rec->id, ST_CREATE_ID, rec->idlen) == 0
                    ? st_catalog_replay_create(rp->s, &id, rec->key, rec->keylen, rec->payload,
                                               rec->len, &made)
                    : 0;
        rp->created += made;
        return r;
    }
    st_conv *c;
    if (stl_conv_get(rp->s, &id, &c) != 0) {
        rp->unknown++; /* deleted since */
        return 0;
    }
    int r = touch(rp, c);
    st_log *l;
    if (r == 0)
        r = stl_conv_log(c, &l, NULL);
    if (r < 0)
        return r;
    uint64_t count = st_log_count(l);
    if (rec->index < count) {
        rp->skipped++;
        return 0;
    }
    if (rec->index == count && stl_log_read_only(l)) {
        r = stl_log_cut_damage(l);
        if (r == 0)
            r = stl_conv_reopen_log(c, &l);
        if (r == 0 && (stl_log_read_only(l) || st_log_count(l) != count))
            r = -EROFS; /* cannot be: the files were cut after event count - 1 */
    }
    if (r < 0) {
        char hex[33];
        rt_uuid_hex(&id, hex);
        rt_log(RT_LOG_ERROR, "store",
               "journal: event %" PRIu64 " of conversation %s cannot be written again: its "
               "log is corrupt before it (%s)",
               rec->index, hex, strerror(-r));
        return r;
    }
    if (rec->index > count) {
        rp->gaps++; /* cannot happen unless files were lost: say so */
        return 0;
    }
    rt_buf *payload = rt_buf_wrap((void *)rec->payload, rec->len, NULL, NULL);
    if (payload == NULL)
        return -ENOMEM;
    st_item it = {.id = rec->id,
                  .idlen = rec->idlen,
                  .key = rec->key,
                  .keylen = rec->keylen,
                  .payload = payload};
    uint64_t first;
    r = st_log_write(l, &it, 1, &first);
    rt_buf_unref(payload);
    if (r == 0) {
        st_log_publish(l);
        rp->applied++;
    }
    return r;
}

static int replay_file(replay *rp, uint64_t seq)
{
    char path[4096];
    jpath(rp->s, seq, "wal", path, sizeof(path));
    char *data;
    size_t len;
    int r = st_read_file(path, SIZE_MAX / 2, &data, &len);
    if (r < 0)
        return r;
    const uint8_t *p = (const uint8_t *)data;
    uint64_t got;
    size_t at = ST_FILE_HDR;
    uint32_t seed = st_journal_seed(seq);
    if (len < ST_FILE_HDR || !st_file_header_ok(p, ST_JNL_MAGIC, &got) || got != seq)
        at = len; /* its creation was interrupted: nothing in it was acknowledged */
    while (r == 0 && at < len) {
        st_rec rec;
        if (st_rec_decode(p + at, len - at, true, seed, &rec) != ST_REC_OK)
            break; /* an unfinished commit, or leftovers of the file's last use */
        r = apply(rp, &rec);
        at += rec.size;
    }
    free(data);
    return r;
}

int st_journal_replay(st_store *s, char *err, size_t errlen)
{
    uint64_t *seqs;
    size_t n;
    int r = list_files(s, "wal", &seqs, &n);
    if (r < 0) {
        snprintf(err, errlen, "cannot list %s: %s", s->journal_dir, strerror(-r));
        return r;
    }
    /* numbers continue past every file, spares too: a reused file must never
     * get the number (and so the CRC seed) it had before */
    uint64_t *spares;
    size_t nspares;
    if (r == 0 && (r = list_files(s, "free", &spares, &nspares)) == 0) {
        s->j.seq = nspares > 0 ? spares[nspares - 1] : 0;
        free(spares);
    }
    if (n > 0 && seqs[n - 1] > s->j.seq)
        s->j.seq = seqs[n - 1];
    replay rp = {.s = s};
    for (size_t i = 0; r == 0 && i < n; i++)
        r = replay_file(&rp, seqs[i]);
    /* the journal goes only once what it held is in synced segments */
    for (size_t i = 0; i < rp.ntouched; i++) {
        st_log *l;
        if (r == 0 && (r = stl_conv_log(rp.touched[i], &l, NULL)) == 0 && (r = st_log_sync(l)) == 0)
            r = st_log_checkpoint(l);
        stl_conv_release(rp.touched[i]);
    }
    free(rp.touched);
    free(seqs);
    if (r == 0)
        r = st_journal_retire(s, UINT64_MAX);
    if (r < 0) {
        snprintf(err, errlen, "journal replay failed: %s", strerror(-r));
        return r;
    }
    if (n > 0)
        rt_log(rp.gaps ? RT_LOG_ERROR : RT_LOG_INFO, "store",
               "journal replayed files=%zu applied=%" PRIu64 " already_there=%" PRIu64
               " deleted_conversations=%" PRIu64 " gaps=%" PRIu64 " created=%" PRIu64,
               n, rp.applied, rp.skipped, rp.unknown, rp.gaps, rp.created);
    return 0;
}
