/*
 * store_impl.h - the inside of st_store and st_conv, shared by store.c
 * (open, close, the flusher thread), catalog.c (conversations), journal.c
 * and commit.c (the committer thread).
 */
#ifndef ST_STORE_IMPL_H
#define ST_STORE_IMPL_H

#include "req.h"
#include "store.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <sys/uio.h>

struct st_conv {
    const struct st_backend *be; /* &st_local_backend (backend.h) */
    st_store *s;
    rt_uuid id;
    char *dir;
    _Atomic int refs;   /* holders; the catalog itself holds none */
    pthread_mutex_t mu; /* guards log (opening, idle close) and meta */
    st_log *log;
    rt_buf *meta;
    _Atomic uint64_t used; /* ms, monotonic: last release */
    _Atomic bool gone;     /* deleted: out of the catalog, files going */
    bool creating;         /* catalog lock: its creation is not durable yet:
                            * invisible but to the id check of a create */
    /* The idle list (store idle_mu), in the order of last release: the
     * conversations nobody held last, whose logs may be open. */
    struct st_conv *inext, *iprev;
    bool in_idle;
    st_conv *next;   /* hash chain (catalog lock) */
    bool has_parent; /* set at creation, never changed */
    rt_uuid parent;
    st_conv *knext; /* chain of the children hashed by parent id (catalog lock) */
    uint64_t batch; /* committer: the last group that wrote to it */
    st_req *gfirst; /* committer: that group's requests for it, in order */
    st_req *glast;
    bool dirty; /* committer: written since the last interval sync */
};

typedef struct st_journal {
    /* the syncer: runs the journal's fdatasync while the committer writes
     * the segments of the same group */
    pthread_t syncer;
    pthread_mutex_t sy_mu;
    pthread_cond_t sy_cv;
    int sy_state; /* 0 idle, 1 asked, 2 done, 3 stop */
    int sy_result;
    int fd;        /* -1: none open */
    uint64_t seq;  /* its number; never reused, not even across restarts */
    uint32_t seed; /* its records' CRC seed */
    uint64_t size; /* bytes written */
    bool broken;   /* a failed group could not be taken back: no more appends */
} st_journal;

struct st_store {
    const struct st_backend *be; /* &st_local_backend (backend.h) */
    st_opts o;
    char *dir, *conv_dir, *journal_dir;
    int lock_fd, dir_fd;
    int conv_dir_fd; /* kept open: syncing it needs no descriptor when they run out */
    /* catalog */
    pthread_mutex_t cat_mu;
    pthread_cond_t created_cv; /* a creation finished (creating went false) */
    st_conv **buckets;         /* by id */
    st_conv **kids;            /* the conversations with a parent, by the parent's id */
    size_t nbuckets, count, ncreating;
    char **unfinished; /* at load: directories whose meta.json is unfinished */
    size_t nunfinished;
    /* committer */
    pthread_t committer;
    st_reqq q;
    st_journal j; /* committer-owned */
    /* flusher: syncs and deletes rotated journals, closes idle logs */
    pthread_t flusher;
    pthread_mutex_t f_mu;
    pthread_cond_t f_cv;
    uint64_t f_rotated; /* journals below this seq may go once flushed */
    bool f_stop;
    /* open logs: past max_open_logs, the flusher closes unheld ones now */
    _Atomic size_t open_logs;
    _Atomic bool f_pressure;
    pthread_mutex_t idle_mu; /* the idle list: closing costs what closes, not a scan */
    st_conv *idle_head, *idle_tail;
    /* no log opens past this: what is left of the open-files limit is the
     * store's own (journals, directories) and the server's (sockets) */
    size_t hard_open_logs;
};

/* The local backend's functions (local.c puts them in its table): those of
 * store.h with an stl_ prefix, on its own handles. */
int stl_store_open(const st_opts *o, st_store **out, char *err, size_t errlen);
void stl_store_close(st_store *s);
int stl_workspace(st_store *s, const rt_uuid *id, char *out, size_t cap);
size_t stl_store_count(st_store *s);
size_t stl_store_open_logs(st_store *s);
size_t stl_store_max_open_logs(const st_store *s);
size_t stl_store_max_event(const st_store *s);
int stl_store_list(st_store *s, rt_uuid **ids, size_t *n);
int stl_store_children(st_store *s, const rt_uuid *id, rt_uuid **ids, size_t *n);
int stl_store_put_file(st_store *s, const char *name, const void *data, size_t len);
int stl_store_take_file(st_store *s, const char *name, char **data, size_t *len);
int stl_conv_create(st_store *s, const rt_uuid *id, const rt_uuid *parent, rt_buf *meta,
                    st_conv **out);
int stl_conv_get(st_store *s, const rt_uuid *id, st_conv **out);
void stl_conv_release(st_conv *c);
const rt_uuid *stl_conv_id(const st_conv *c);
bool stl_conv_parent(const st_conv *c, rt_uuid *parent);
rt_buf *stl_conv_meta(st_conv *c);
int stl_conv_set_meta(st_conv *c, rt_buf *meta);
int stl_conv_log(st_conv *c, st_log **log, st_open_report *rep);
/* Close c's log and open it again from its files (journal.c, after
 * stl_log_cut_damage). */
int stl_conv_reopen_log(st_conv *c, st_log **log);
int stl_append(st_conv *c, const st_item *items, size_t n, st_done_fn done, void *ctx);
int stl_conv_put_file(st_conv *c, const char *name, rt_buf *data, bool durable, st_done_fn done,
                      void *ctx);
int stl_conv_get_file(st_conv *c, const char *name, char **data, size_t *len);
int stl_conv_delete(st_conv *c, st_done_fn done, void *ctx);

/* catalog.c */
int st_catalog_load(st_store *s, char *err, size_t errlen);
/* Close every log (flushing it) and free the catalog; the first flush error. */
int st_catalog_free(st_store *s);
/* Close the logs nobody holds that were released ttl ago or more, oldest
 * first; or (crowded) as many as it takes to be under 3/4 of the bound. */
void st_catalog_close_idle(st_store *s, uint64_t now, uint64_t ttl, bool crowded);
int st_conv_remove_files(st_conv *c);
/* The journal record of a creation: its index, id ("create", key: the
 * parent's 32 hex digits or none, payload: the meta). */
#define ST_CREATE_INDEX UINT64_MAX
#define ST_CREATE_ID    "create"
/* Make conversation c's directory (meta.json, parent) and put it in
 * place; durable: synced (else the journal's CREATE record stands for it
 * until the next flush). Replay: over an existing directory, whose
 * meta.json a crash left unfinished. */
int st_conv_make_files(st_conv *c, bool durable);
/* Take back what st_conv_make_files made (a creation whose group failed). */
void st_conv_unmake_files(st_conv *c);
/* Journal replay: a CREATE record of conversation id; a conversation the
 * catalog has is left as it is. */
int st_catalog_replay_create(st_store *s, const rt_uuid *id, const uint8_t *parent_hex,
                             size_t parent_len, const uint8_t *meta, size_t len, bool *made);
/* After replay: what a creation a crash interrupted left (a directory
 * whose meta.json is unfinished, never acknowledged) goes. */
void st_catalog_sweep(st_store *s);

/* journal.c */
int st_journal_open_next(st_store *s);
int st_journal_append(st_store *s, const struct iovec *iov, int n);
int st_journal_sync(st_store *s);
/* The same in two halves: begin it on the syncer thread, then wait for it. */
void st_journal_sync_begin(st_store *s);
int st_journal_sync_end(st_store *s);
int st_journal_syncer_start(st_store *s);
void st_journal_syncer_stop(st_store *s);
int st_journal_undo(st_store *s, uint64_t size);
/* Retire every journal below seq `upto` (all if UINT64_MAX): keep a few as
 * spares for reuse, delete the rest. Only once their segments are synced. */
int st_journal_retire(st_store *s, uint64_t upto);
int st_journal_replay(st_store *s, char *err, size_t errlen);

/* commit.c */
/* Queue c's creation (ST_FULL): a CREATE record in the journal's next
 * group commit, its files written while that group syncs. */
int st_commit_create(st_conv *c, st_done_fn done, void *ctx);
int st_committer_start(st_store *s);
void st_committer_stop(st_store *s);

#endif
