/*
 * backend.h - what a store backend provides, and how the calls of store.h
 * and log.h reach it.
 *
 * A backend is a const table of functions: the local one (local.c: the
 * files of store.h, the logs of log.h) and, built with libnats, the
 * JetStream one, and the pool (pool.c: conversations sharing segment
 * files). st_store_open picks it by the form of the location (a
 * directory, pool:DIR, or nats://host:port[,host:port...]); every other call of
 * store.h and the readers of log.h are one indirect call through the table
 * of the handle they are given (backend.c), so nothing above store/ knows
 * which backend it talks to.
 *
 * Every handle a backend gives out (st_store, st_conv, st_log) begins with
 * a pointer to its table, as SQLite's files begin with their methods. The
 * handles are opaque above store/, and a backend only looks inside its
 * own: struct st_store, st_conv and st_log are the local backend's; another
 * backend's handles are structs of its own, converted to these pointer
 * types when handed out and back when received.
 */
#ifndef ST_BACKEND_H
#define ST_BACKEND_H

#include "store.h"

typedef struct st_backend {
    const char *name;
    /* Its readers may wait for another machine: the _now ones may say
     * -EWOULDBLOCK (st_log_may_wait). */
    bool readers_wait;
    int (*open)(const st_opts *o, st_store **out, char *err, size_t errlen);
    void (*close)(st_store *s);
    int (*workspace)(st_store *s, const rt_uuid *id, char *out, size_t cap);
    size_t (*count)(st_store *s);
    size_t (*open_logs)(st_store *s);
    size_t (*max_open_logs)(const st_store *s);
    size_t (*max_event)(const st_store *s);
    int (*list)(st_store *s, rt_uuid **ids, size_t *n);
    int (*children)(st_store *s, const rt_uuid *id, rt_uuid **ids, size_t *n);
    int (*put_file)(st_store *s, const char *name, const void *data, size_t len);
    int (*take_file)(st_store *s, const char *name, char **data, size_t *len);
    /* Optional (NULL: strerror): an error of this store in a few words. */
    const char *(*strerror)(const st_store *s, int err, char *buf, size_t cap);

    int (*conv_create)(st_store *s, const rt_uuid *id, const rt_uuid *parent, rt_buf *meta,
                       st_conv **out);
    int (*conv_get)(st_store *s, const rt_uuid *id, st_conv **out);
    void (*conv_release)(st_conv *c);
    const rt_uuid *(*conv_id)(const st_conv *c);
    bool (*conv_parent)(const st_conv *c, rt_uuid *parent);
    rt_buf *(*conv_meta)(st_conv *c);
    int (*conv_set_meta)(st_conv *c, rt_buf *meta);
    int (*conv_log)(st_conv *c, st_log **log, st_open_report *rep);
    /* Optional (NULL: conv_log, whose opening waits for no other machine). */
    int (*conv_log_now)(st_conv *c, st_log **log);
    int (*append)(st_conv *c, const st_item *items, size_t n, st_done_fn done, void *ctx);
    /* Optional (NULL: append; one writer makes the index always hold). */
    int (*append_at)(st_conv *c, uint64_t first, const st_item *items, size_t n, st_done_fn done,
                     void *ctx);
    int (*conv_put_file)(st_conv *c, const char *name, rt_buf *data, bool durable, st_done_fn done,
                         void *ctx);
    int (*conv_get_file)(st_conv *c, const char *name, char **data, size_t *len);
    int (*conv_delete)(st_conv *c, st_done_fn done, void *ctx);

    uint64_t (*log_count)(const st_log *l);
    int (*log_read)(st_log *l, uint64_t first, uint32_t max, st_page **out);
    int (*log_find)(st_log *l, const void *id, size_t idlen, uint64_t *index);
    int (*log_find_key)(st_log *l, const void *key, size_t keylen, uint64_t *index);
    int (*log_read_now)(st_log *l, uint64_t first, uint32_t max, st_page **out);
    int (*log_find_now)(st_log *l, const void *id, size_t idlen, uint64_t *index);
    /* Optional (NULL: log_find_key, which waits for no other machine). */
    int (*log_find_key_now)(st_log *l, const void *key, size_t keylen, uint64_t *index);
    /* Optional (NULL: log_find_now and log_find_key_now, whatever upto). */
    int (*log_check)(st_log *l, bool key, const void *v, size_t len, uint64_t upto,
                     uint64_t *index);
    size_t (*log_memory)(const st_log *l);
    bool (*log_read_only)(const st_log *l);

    /* Optional, all or none (NULL: one node, every append is made here). */
    bool (*writes_here)(st_store *s, const rt_uuid *id);
    int (*route)(st_store *s, const rt_uuid *id, st_route *out, char *err, size_t errlen);
    int (*forward)(st_store *s, const st_route *to, const rt_uuid *id, const st_fwd_req *req,
                   uint64_t timeout_ms, st_fwd_answer *out, char *err, size_t errlen);
    int (*serve)(st_store *s, st_fwd_fn fn, void *ctx);
    int (*follow)(st_conv *c, st_follow_fn fn, void *ctx, st_follow **out);
    void (*follow_stop)(st_follow *f);
    /* Optional (NULL: none published; a note is ignored). */
    void (*note_summary)(st_conv *c, const st_summary *sum);
    int (*summary)(st_store *s, const rt_uuid *id, st_summary *out);
} st_backend;

/* The names of the store's own files (st_store_put_file): plain, lower
 * case, ending in ".json" or ".jsonl"; and of a conversation's
 * (st_conv_put_file): the same ending in ".json", but "meta.json". */
bool st_store_file_name_ok(const char *name);
bool st_conv_file_name_ok(const char *name);

/* The backends' clocks, in ms (store.c). st_coarse_ms is the monotonic
 * clock at the last tick (4 ms here): never ahead of st_now_ms, and a
 * third of its cost, for stamps taken at every append and compared with
 * time-to-lives of seconds. */
uint64_t st_now_ms(void);
uint64_t st_coarse_ms(void);

/* The table of a handle of any backend: its first member. */
#define ST_BACKEND(h) (*(const st_backend *const *)(const void *)(h))

extern const st_backend st_local_backend;
extern const st_backend st_pool_backend; /* pool:DIR, pool.c */
#ifdef PARLEY_HAVE_NATS
extern const st_backend st_nats_backend;
#endif

#endif
