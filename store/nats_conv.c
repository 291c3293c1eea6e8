/*
 * nats_conv.c - the JetStream backend's appends, a conversation's files and
 * its deletion (nats_store.h).
 *
 * st_append and the other calls that store.h runs "after the appends made
 * before" queue a job on the conversation and return; a small pool of
 * workers runs the jobs, each conversation's in order and on one worker at
 * a time, with the blocking calls of nats_log.h (never on a loop), and calls
 * `done` from there, as the local committer does. A worker's first append
 * to a conversation takes its log over; a writer fenced by another one
 * (-ESTALE) is dropped, so the next append takes over again.
 */
#include "nats_store.h"

#include "runtime/log.h"
#include "dirfiles.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static stn_conv *C(st_conv *c)
{
    return (stn_conv *)(void *)c;
}

static void job_free(stn_job *j)
{
    for (size_t i = 0; i < j->n; i++)
        rt_buf_unref(j->payloads[i]);
    rt_buf_unref(j->data);
    free(j);
}

void stn_queue_locked(stn_store *s, stn_conv *c, stn_job *j)
{
    pthread_mutex_lock(&c->mu);
    j->next = NULL;
    if (c->jtail != NULL)
        c->jtail->next = j;
    else
        c->jhead = j;
    c->jtail = j;
    bool run = !c->scheduled;
    c->scheduled = true;
    pthread_mutex_unlock(&c->mu);
    if (run) {
        c->rnext = NULL;
        if (s->rtail != NULL)
            s->rtail->rnext = c;
        else
            s->rhead = c;
        s->rtail = c;
        pthread_cond_signal(&s->cv);
    }
}

/* Queue j on c (holding c for it) unless the store is closing (s->mu). */
static int submit_locked(stn_conv *c, stn_job *j, bool hold)
{
    if (c->s->stop)
        return -ESHUTDOWN;
    if (hold)
        c->refs++;
    stn_queue_locked(c->s, c, j);
    return 0;
}

static int submit(stn_conv *c, stn_job *j, bool hold)
{
    pthread_mutex_lock(&c->s->mu);
    int r = submit_locked(c, j, hold);
    pthread_mutex_unlock(&c->s->mu);
    return r;
}

static void drop_writer(stn_conv *c)
{
    atomic_store(&c->writing, false);
    st_nats_log_close(c->writer);
    c->writer = NULL;
}

static int take_over(stn_conv *c)
{
    atomic_store(&c->term, atomic_load(&c->s->lease_term)); /* the term it began in */
    int r = st_nats_log_open(c->s->n, &c->lid, &c->writer);
    if (r == 0 && (r = st_nats_log_take_over(c->writer, NULL)) < 0)
        rt_log(RT_LOG_ERROR, "store", "nats: cannot take conversation %s over: %s", c->hex,
               st_nats_log_error(c->writer));
    if (r < 0) {
        drop_writer(c);
        return r;
    }
    /* reads answered from memory before this were of the log it loaded:
     * if another node appended since, the conversation decided on an old
     * log, and starts again from the log (memory is loaded again) */
    r = stn_tail_claim(c, c->writer->next_index);
    atomic_store(&c->written, c->writer->next_index);
    atomic_store(&c->writing, true);
    if (r < 0)
        rt_log(RT_LOG_WARN, "store",
               "nats: conversation %s grew on another node since it was read "
               "here: the append is refused, the log read again",
               c->hex);
    return r;
}

static int run_append(stn_conv *c, stn_job *j, uint64_t *first)
{
    if (c->writer == NULL) {
        int r = take_over(c);
        if (r < 0)
            return r;
    }
    if (j->at != STN_ANYWHERE && j->at != c->writer->next_index) {
        /* decided on another log than this one (st_append_at): the writer
         * stays, the conversation reads the log again */
        rt_log(RT_LOG_WARN, "store",
               "nats: an append to %s decided at index %llu is refused: the log holds %llu", c->hex,
               (unsigned long long)j->at, (unsigned long long)c->writer->next_index);
        return -ESTALE;
    }
    size_t stored = 0;
    int r = st_nats_log_append(c->writer, j->items, j->n, first, &stored);
    if (r == 0) {
        stn_tail_push(c, *first, j);
        atomic_store(&c->written, *first + j->n);
        return 0;
    }
    rt_log(RT_LOG_ERROR, "store", "nats: append to %s: %s%s", c->hex, st_nats_log_error(c->writer),
           stored > 0 ? " (parts of it were stored: left behind)" : "");
    /* an outcome unknown because the cluster did not answer is said as
     * that (the conversation reads the log again either way): its client
     * is told the cluster is unavailable, and retries */
    int said = r == -EIO && stn_retryable(c->writer->cause) ? c->writer->cause : r;
    if (r == -ESTALE || stored > 0 || st_nats_log_epoch(c->writer) == 0) {
        drop_writer(c); /* fenced, parts left behind, or unsure: take over again */
        stn_tail_forget(c);
    }
    return said;
}

/* Delete key, keeping the first failure in *first: the other keys are
 * deleted all the same. */
static void delete_key(kvStore *kv, const char *key, int *first)
{
    int r = stn_kv_delete(kv, key);
    if (r < 0 && *first == 0)
        *first = r;
}

/* The tombstone first: from then on this incarnation is gone everywhere
 * (a creation of the id makes the next one, nats_store.h). */
static int run_delete(stn_conv *c)
{
    stn_store *s = c->s;
    char key[80], gen[24];
    snprintf(key, sizeof key, "d.%s", c->hex);
    snprintf(gen, sizeof gen, "%llu", (unsigned long long)c->gen);
    int r = stn_kv_put(s->convs, key, gen, strlen(gen), NULL);
    if (r == 0) { /* a get from now on finds neither the entry nor this handle */
        stn_catalog_apply(s, key, kvOp_Put, gen, strlen(gen), 0);
        atomic_store(&c->gone, true);
        drop_writer(c);
        if (c->gen == 0)
            snprintf(key, sizeof key, "c.%s", c->hex);
        else
            snprintf(key, sizeof key, "c.%s.%s", c->hex, gen);
        r = stn_kv_delete(s->convs, key);
    }
    int first = 0;
    if (r == 0) {
        snprintf(key, sizeof key, "m.%s", c->hex);
        delete_key(s->convs, key, &first);
        snprintf(key, sizeof key, "s.%s", c->hex);
        delete_key(s->convs, key, &first);
        snprintf(key, sizeof key, "%s.>", c->lhex);
        r = stn_kv_purge(s->n, STN_FILES, key);
        st_dir_remove_workspace(s->workspaces, &c->id); /* this node's; another's stays */
    }
    return r < 0 ? r : first;
}

static void run(stn_conv *c, stn_job *j)
{
    uint64_t first = 0;
    int r = 0;
    if (stn_writer_stale(c))
        drop_writer(c); /* the next append takes the log over again */
    if (j->kind == STN_PROBE) /* releases its follow, gone or not */
        stn_follow_probe(c, j->ctx);
    else if (atomic_load(&c->gone))
        r = -ENOENT;
    else if (j->kind == STN_APPEND)
        r = run_append(c, j, &first);
    else if (j->kind == STN_SUMMARY)
        r = stn_summary_run(c);
    else if (j->kind == STN_CLAIM)
        r = c->writer == NULL ? take_over(c) : 0;
    else if (j->kind == STN_FILE) {
        char key[120];
        snprintf(key, sizeof key, "%s.%s", c->lhex, j->name);
        r = stn_kv_put(c->s->files, key, rt_buf_data(j->data), rt_buf_len(j->data), NULL);
    } else {
        r = run_delete(c);
    }
    j->done(j->ctx, r, first);
    job_free(j);
    stn_conv_release((st_conv *)(void *)c);
}

static void *worker_main(void *arg)
{
    stn_store *s = arg;
    pthread_setname_np(pthread_self(), "parley-nats");
    pthread_mutex_lock(&s->mu);
    for (;;) {
        for (;;) { /* jobs, and summaries once due */
            int64_t next = stn_summary_due(s);
            if (s->rhead != NULL || s->stop)
                break;
            if (next == INT64_MAX)
                pthread_cond_wait(&s->cv, &s->mu);
            else
                stn_timedwait(&s->cv, &s->mu, next - stn_now_ms());
        }
        stn_conv *c = s->rhead;
        if (c == NULL)
            break; /* stopping, and nothing left */
        s->rhead = c->rnext;
        if (s->rhead == NULL)
            s->rtail = NULL;
        c->refs++; /* the worker's: c outlives its last job's release */
        pthread_mutex_unlock(&s->mu);
        for (;;) {
            pthread_mutex_lock(&c->mu);
            stn_job *j = c->jhead;
            if (j != NULL) {
                c->jhead = j->next;
                if (c->jhead == NULL)
                    c->jtail = NULL;
            } else {
                c->scheduled = false;
            }
            pthread_mutex_unlock(&c->mu);
            if (j == NULL)
                break;
            run(c, j);
        }
        stn_conv_release((st_conv *)(void *)c);
        pthread_mutex_lock(&s->mu);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

int stn_workers_start(stn_store *s)
{
    for (; s->nworkers < STN_WORKERS; s->nworkers++) {
        int r = -pthread_create(&s->workers[s->nworkers], NULL, worker_main, s);
        if (r < 0) {
            stn_workers_stop(s);
            return r;
        }
    }
    return 0;
}

void stn_workers_stop(stn_store *s)
{
    pthread_mutex_lock(&s->mu);
    s->stop = true;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    for (int i = 0; i < s->nworkers; i++)
        pthread_join(s->workers[i], NULL);
    s->nworkers = 0;
}

/* ---- the calls ----------------------------------------------------------- */

static void nothing(void *ctx, int status, uint64_t first)
{
    (void)ctx;
    (void)status;
    (void)first;
}

/* A job of this kind, answered with done(ctx, ...); NULL if out of memory. */
static stn_job *job_new(stn_kind kind, st_done_fn done, void *ctx)
{
    stn_job *j = calloc(1, sizeof(*j));
    if (j != NULL)
        *j = (stn_job){.kind = kind, .done = done, .ctx = ctx};
    return j;
}

int stn_submit_plain_locked(stn_conv *c, stn_kind kind, void *ctx)
{
    stn_job *j = job_new(kind, nothing, ctx);
    if (j == NULL)
        return -ENOMEM;
    int r = submit_locked(c, j, true);
    if (r < 0)
        job_free(j);
    return r;
}

typedef struct claim_wait {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool done;
    int r;
} claim_wait;

static void claimed(void *ctx, int status, uint64_t first)
{
    (void)first;
    claim_wait *w = ctx;
    pthread_mutex_lock(&w->mu);
    w->done = true;
    w->r = status;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

int stn_claim(st_conv *gc)
{
    stn_conv *c = C(gc);
    stn_job *j = calloc(1, sizeof(*j));
    if (j == NULL)
        return -ENOMEM;
    claim_wait w = {.done = false};
    pthread_mutex_init(&w.mu, NULL);
    pthread_cond_init(&w.cv, NULL);
    j->kind = STN_CLAIM;
    j->done = claimed;
    j->ctx = &w;
    int r = submit(c, j, true);
    if (r < 0) {
        job_free(j);
    } else {
        pthread_mutex_lock(&w.mu);
        while (!w.done)
            pthread_cond_wait(&w.cv, &w.mu);
        pthread_mutex_unlock(&w.mu);
        r = w.r;
    }
    pthread_mutex_destroy(&w.mu);
    pthread_cond_destroy(&w.cv);
    return r;
}

int stn_append(st_conv *gc, const st_item *items, size_t n, st_done_fn done, void *ctx)
{
    return stn_append_at(gc, STN_ANYWHERE, items, n, done, ctx);
}

int stn_append_at(st_conv *gc, uint64_t at, const st_item *items, size_t n, st_done_fn done,
                  void *ctx)
{
    stn_conv *c = C(gc);
    if (n == 0 || done == NULL)
        return -EINVAL;
    if (atomic_load(&c->gone))
        return -ENOENT;
    size_t keys = 0;
    for (size_t i = 0; i < n; i++) {
        if (items[i].idlen == 0 || items[i].idlen > 255 || items[i].keylen > 255 ||
            items[i].payload == NULL)
            return -EINVAL;
        if (rt_buf_len(items[i].payload) > st_nats_max_event(c->s->n))
            return -EMSGSIZE; /* one record (nats_log.h); many events are split */
        keys += items[i].idlen + items[i].keylen;
    }
    stn_job *j = calloc(1, sizeof(*j) + n * (sizeof(st_nats_item) + sizeof(rt_buf *)) + keys);
    if (j == NULL)
        return -ENOMEM;
    j->kind = STN_APPEND;
    j->done = done;
    j->ctx = ctx;
    j->at = at;
    j->items = (st_nats_item *)(j + 1);
    j->payloads = (rt_buf **)(j->items + n);
    char *kb = (char *)(j->payloads + n); /* the ids and keys, copied */
    for (size_t i = 0; i < n; i++) {
        j->payloads[i] = rt_buf_ref(items[i].payload);
        st_nats_item *it = &j->items[i];
        memcpy(kb, items[i].id, items[i].idlen);
        it->id = kb;
        it->idlen = items[i].idlen;
        kb += items[i].idlen;
        if (items[i].keylen > 0) {
            memcpy(kb, items[i].key, items[i].keylen);
            it->key = kb;
            it->keylen = items[i].keylen;
            kb += items[i].keylen;
        }
        it->data = rt_buf_data(items[i].payload);
        it->len = rt_buf_len(items[i].payload);
    }
    j->n = n;
    int r = submit(c, j, true);
    if (r < 0)
        job_free(j);
    return r;
}

int stn_conv_put_file(st_conv *gc, const char *name, rt_buf *data, bool durable, st_done_fn done,
                      void *ctx)
{
    (void)durable; /* every KV write is replicated before it is acknowledged */
    stn_conv *c = C(gc);
    if (done == NULL || data == NULL || !st_conv_file_name_ok(name))
        return -EINVAL;
    if (atomic_load(&c->gone))
        return -ENOENT;
    stn_job *j = job_new(STN_FILE, done, ctx);
    if (j == NULL)
        return -ENOMEM;
    snprintf(j->name, sizeof j->name, "%s", name);
    j->data = rt_buf_ref(data);
    int r = submit(c, j, true);
    if (r < 0)
        job_free(j);
    return r;
}

int stn_conv_get_file(st_conv *gc, const char *name, char **data, size_t *len)
{
    stn_conv *c = C(gc);
    if (!st_conv_file_name_ok(name))
        return -EINVAL;
    char key[120];
    snprintf(key, sizeof key, "%s.%s", c->lhex, name);
    return stn_kv_get(c->s, STN_FILES, key, data, len);
}

int stn_conv_delete(st_conv *gc, st_done_fn done, void *ctx)
{
    if (done == NULL)
        return -EINVAL;
    stn_job *j = job_new(STN_DELETE, done, ctx);
    if (j == NULL)
        return -ENOMEM;
    int r = submit(C(gc), j, false); /* takes over the caller's reference */
    if (r < 0)
        free(j);
    return r;
}
