/*
 * store.c - opening and closing a store, its durability option, and the
 * flusher thread, which retires rotated journals (one syncfs, then they
 * become spares or go) and closes logs left idle past their TTL.
 */
#include "store_impl.h"

#include "backend.h"
#include "dirfiles.h"
#include "io.h"
#include "record.h"
#include "runtime/err.h"
#include "runtime/log.h"
#include "runtime/units.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <sys/resource.h>
#include <unistd.h>

static uint64_t clock_ms(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

uint64_t st_now_ms(void)
{
    return clock_ms(CLOCK_MONOTONIC);
}

uint64_t st_coarse_ms(void)
{
    return clock_ms(CLOCK_MONOTONIC_COARSE);
}

int st_parse_durability(const char *s, st_durability *d, uint64_t *interval_ms)
{
    if (s == NULL)
        return -EINVAL;
    if (strcmp(s, "full") == 0) {
        *d = ST_FULL;
        return 0;
    }
    if (strcmp(s, "none") == 0) {
        *d = ST_NONE;
        return 0;
    }
    uint64_t ms;
    if (strncmp(s, "interval=", 9) == 0 && rt_parse_duration_ms(s + 9, 1, &ms) == 0 && ms > 0 &&
        ms <= 3600000) {
        *d = ST_INTERVAL;
        *interval_ms = ms;
        return 0;
    }
    return -EINVAL;
}

const char *st_durability_name(st_durability d)
{
    return d == ST_FULL ? "full" : d == ST_INTERVAL ? "interval" : "none";
}

static void *flusher_main(void *arg)
{
    st_store *s = arg;
    pthread_setname_np(pthread_self(), "parley-flush");
    uint64_t done = 0, last_sweep = st_now_ms();
    pthread_mutex_lock(&s->f_mu);
    while (!s->f_stop) {
        uint64_t upto = s->f_rotated;
        if (upto > done) {
            pthread_mutex_unlock(&s->f_mu);
            /* everything written before the rotation, into any segment,
             * becomes durable; the journals before it are then not needed */
            int r = st_syncfs(s->dir_fd);
            if (r == 0)
                r = st_journal_retire(s, upto);
            if (r < 0)
                rt_log(RT_LOG_ERROR, "store", "cannot retire old journals: %s", strerror(-r));
            else
                done = upto;
            pthread_mutex_lock(&s->f_mu);
            continue;
        }
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += 1;
        if (!atomic_load(&s->f_pressure)) /* asked while closing: at once */
            pthread_cond_timedwait(&s->f_cv, &s->f_mu, &ts);
        pthread_mutex_unlock(&s->f_mu);
        uint64_t now = st_now_ms();
        if (atomic_exchange(&s->f_pressure, false)) {
            st_catalog_close_idle(s, now, 0, true); /* too many open */
        } else if (now - last_sweep >= 1000) {
            st_catalog_close_idle(s, now, s->o.idle_ttl_ms, false);
            last_sweep = now;
        }
        pthread_mutex_lock(&s->f_mu);
    }
    pthread_mutex_unlock(&s->f_mu);
    return NULL;
}

static int lock_store(st_store *s, char *err, size_t errlen)
{
    char pid[32];
    int r = st_lock_dir(s->dir, false, &s->lock_fd, pid, sizeof(pid));
    if (r == -EBUSY)
        snprintf(err, errlen, "data directory %s is in use by another process%s%s%s", s->dir,
                 *pid ? " (pid " : "", pid, *pid ? ")" : "");
    else if (r < 0)
        snprintf(err, errlen, "cannot lock %s/lock: %s", s->dir, strerror(-r));
    return r;
}

static int make_dir(const char *path, char *err, size_t errlen)
{
    if (mkdir(path, 0755) == 0 || errno == EEXIST)
        return 0;
    snprintf(err, errlen, "cannot create %s: %s", path, strerror(errno));
    return -errno;
}

static char *join(const char *a, const char *b)
{
    size_t n = strlen(a) + strlen(b) + 2;
    char *p = malloc(n);
    if (p != NULL)
        snprintf(p, n, "%s/%s", a, b);
    return p;
}

int stl_store_open(const st_opts *o, st_store **out, char *err, size_t errlen)
{
    char scratch[256];
    if (err == NULL) {
        err = scratch;
        errlen = sizeof(scratch);
    }
    err[0] = '\0';
    if (o == NULL || o->dir == NULL)
        return -EINVAL;
    st_store *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return -ENOMEM;
    s->be = &st_local_backend;
    s->o = *o;
    if (s->o.interval_ms == 0)
        s->o.interval_ms = 1000;
    if (s->o.journal_bytes == 0)
        s->o.journal_bytes = (uint64_t)64 << 20;
    if (s->o.checkpoint_records == 0)
        s->o.checkpoint_records = 65536;
    if (s->o.idle_ttl_ms == 0)
        s->o.idle_ttl_ms = 20 * 60 * 1000;
    struct rlimit rl;
    uint64_t files = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY
                         ? (uint64_t)rl.rlim_cur
                         : 1024;
    if (s->o.max_open_logs == 0)
        s->o.max_open_logs = files / 4 > 64 ? files / 4 : 64;
    uint64_t spare = files / 8 > 64 ? files / 8 : 64;
    s->hard_open_logs = files > 2 * spare ? (size_t)(files - spare) : (size_t)files / 2;
    s->lock_fd = s->dir_fd = s->conv_dir_fd = s->j.fd = -1;
    pthread_mutex_init(&s->cat_mu, NULL);
    pthread_cond_init(&s->created_cv, NULL);
    pthread_mutex_init(&s->idle_mu, NULL);
    st_reqq_init(&s->q);
    pthread_mutex_init(&s->f_mu, NULL);
    pthread_cond_init(&s->f_cv, NULL);
    s->dir = strdup(o->dir);
    s->conv_dir = join(o->dir, "conversations");
    s->journal_dir = join(o->dir, "journal");
    int r = s->dir && s->conv_dir && s->journal_dir ? 0 : -ENOMEM;
    if (r == 0)
        r = make_dir(s->dir, err, errlen);
    if (r == 0)
        r = lock_store(s, err, errlen);
    if (r == 0)
        r = make_dir(s->conv_dir, err, errlen);
    if (r == 0)
        r = make_dir(s->journal_dir, err, errlen);
    if (r == 0 && (s->dir_fd = open(s->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
        r = -errno;
    if (r == 0 && (s->conv_dir_fd = open(s->conv_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
        r = -errno;
    if (r == 0)
        r = st_fsync_dir(s->dir); /* the subdirectories just made */
    if (r == 0)
        r = st_catalog_load(s, err, errlen);
    if (r == 0)
        r = st_journal_replay(s, err, errlen);
    if (r == 0)
        st_catalog_sweep(s);
    if (r == 0 && (r = st_committer_start(s)) < 0)
        snprintf(err, errlen, "cannot start the committer: %s", strerror(-r));
    if (r == 0 && (r = -pthread_create(&s->flusher, NULL, flusher_main, s)) < 0) {
        st_committer_stop(s);
        snprintf(err, errlen, "cannot start the flusher: %s", strerror(-r));
    }
    if (r < 0) {
        if (err[0] == '\0')
            snprintf(err, errlen, "cannot open the store in %s: %s", o->dir, strerror(-r));
        st_catalog_free(s);
        if (s->dir_fd >= 0)
            close(s->dir_fd);
        close(s->conv_dir_fd);
        if (s->conv_dir_fd >= 0)
            close(s->conv_dir_fd);
        if (s->lock_fd >= 0)
            close(s->lock_fd);
        free(s->dir);
        free(s->conv_dir);
        free(s->journal_dir);
        free(s);
        return r;
    }
    rt_log(RT_LOG_INFO, "store", "opened dir=%s conversations=%zu durability=%s", s->dir, s->count,
           st_durability_name(s->o.durability));
    *out = s;
    return 0;
}

int stl_workspace(st_store *s, const rt_uuid *id, char *out, size_t cap)
{
    return st_dir_workspace(s->dir, id, out, cap);
}

void stl_store_close(st_store *s)
{
    if (s == NULL)
        return;
    st_committer_stop(s);
    pthread_mutex_lock(&s->f_mu);
    s->f_stop = true;
    pthread_cond_signal(&s->f_cv);
    pthread_mutex_unlock(&s->f_mu);
    pthread_join(s->flusher, NULL);
    /* closing a log checkpoints it (and, unless journaled, syncs it); under
     * `full` one syncfs then flushes what journaled logs wrote, and the
     * journal is moot, unless a flush failed: then it stays, to be
     * replayed at the next open */
    int r = st_catalog_free(s);
    if (r == 0 && s->o.durability == ST_FULL)
        r = st_syncfs(s->dir_fd);
    if (r == 0)
        r = st_journal_retire(s, UINT64_MAX);
    if (r < 0)
        rt_log(RT_LOG_ERROR, "store", "closing: journal kept for replay: %s", strerror(-r));
    close(s->dir_fd);
    close(s->lock_fd);
    pthread_mutex_destroy(&s->cat_mu);
    pthread_cond_destroy(&s->created_cv);
    pthread_mutex_destroy(&s->idle_mu);
    st_reqq_destroy(&s->q);
    pthread_mutex_destroy(&s->f_mu);
    pthread_cond_destroy(&s->f_cv);
    free(s->dir);
    free(s->conv_dir);
    free(s->journal_dir);
    free(s);
}

size_t stl_store_open_logs(st_store *s)
{
    return atomic_load(&s->open_logs);
}

size_t stl_store_max_open_logs(const st_store *s)
{
    return (size_t)s->o.max_open_logs;
}

size_t stl_store_max_event(const st_store *s)
{
    (void)s;
    return ST_PAYLOAD_MAX; /* a record's (record.h) */
}

/* ---- the store's own small files ----------------------------------------- */

int stl_store_put_file(st_store *s, const char *name, const void *data, size_t len)
{
    return st_dir_put_file(s->dir, name, data, len);
}

int stl_store_take_file(st_store *s, const char *name, char **data, size_t *len)
{
    return st_dir_take_file(s->dir, name, data, len);
}
