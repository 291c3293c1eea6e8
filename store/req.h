/*
 * req.h - a request to a store's committer (an append, a creation, a
 * conversation's file, a deletion, a new meta), as every backend that
 * commits in groups queues them, and a waiter for one's outcome.
 *
 * A request owns a reference to each of its items' payloads and copies
 * their ids and keys after itself: the caller's items may go as soon as
 * the request is made. `conv` is the backend's conversation handle (held
 * by the request until it is answered).
 */
#ifndef ST_REQ_H
#define ST_REQ_H

#include "store.h"

#include <pthread.h>

/* REQ_COPY and REQ_ADOPT: the pool's carry of a large conversation in
 * several groups (pool_carry.c). */
enum { REQ_APPEND, REQ_CREATE, REQ_DELETE, REQ_FILE, REQ_META, REQ_CARRY, REQ_COPY, REQ_ADOPT };

typedef struct st_req st_req;
struct st_req {
    st_req *next;
    char name[64]; /* REQ_FILE: the file; the data is items[0].payload */
    st_req *gnext; /* the next request of the same conversation in the group */
    int kind;
    bool durable;  /* REQ_FILE: synced (else st_write_file_replace) */
    bool alone;    /* the pool's committer: in a group of its own */
    st_conv *conv; /* held */
    size_t n;
    st_item *items; /* ids and keys copied after the struct */
    st_done_fn done;
    void *ctx;
    int status;
    uint64_t first;
    size_t rec0; /* the pool's committer: its first record in the group */
    uint64_t expect; /* REQ_CARRY, REQ_ADOPT: its conversation's stp_carry_print when read */
    void *adopt;     /* REQ_ADOPT: the pool's stp_adopt */
};

/* An append of items[0..n) (checked as st_append says: -EINVAL), or a
 * conversation's file (a name st_conv_file_name_ok accepts): NULL and *err
 * set on failure. */
st_req *st_req_append(const st_item *items, size_t n, int *err);
st_req *st_req_file(const char *name, rt_buf *data, bool durable, int *err);
/* A request of one item of another kind: id and key (may be NULL) copied,
 * the payload (may be NULL) referenced. */
st_req *st_req_one(int kind, const char *id, const void *key, uint32_t keylen, rt_buf *payload);
/* Give back the payloads and the request. */
void st_req_free(st_req *r);

/* The committer's queue: any thread pushes, the committer takes it all;
 * and one request set aside, for a group of its own. One conversation's
 * pushes may be held back meanwhile, in order (the pool's carry of a large
 * conversation: pool_copy.c). */
typedef struct st_reqq {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    st_req *head, *tail;
    st_req *aside;
    const st_conv *held; /* its pushes wait in held_head..held_tail */
    st_req *held_head, *held_tail;
    bool stop;
} st_reqq;
void st_reqq_init(st_reqq *q);
void st_reqq_destroy(st_reqq *q);
/* Queue r and wake the committer; -ESHUTDOWN once stopping. */
int st_reqq_push(st_reqq *q, st_req *r);
/* Set r aside and wake the committer; -EBUSY if one is already, -ESHUTDOWN
 * once stopping. */
int st_reqq_put_aside(st_reqq *q, st_req *r);
/* Hold conv's pushes from now on (not what is set aside) until
 * st_reqq_release; -EBUSY while another's are held. */
int st_reqq_hold(st_reqq *q, const st_conv *conv);
/* Queue what was held, in order, after what is queued. Once stopping the
 * held requests are not queued but returned (a list by `next`, NULL if
 * none), for the caller to answer. */
st_req *st_reqq_release(st_reqq *q);
/* The committer, q->mu held: wait for a push, a stop, or ms to pass. */
void st_reqq_wait(st_reqq *q, uint64_t ms);
/* Ask the committer to stop once the queue is empty. */
void st_reqq_stop(st_reqq *q);

/* Waiting on another thread for a request's done: st_waiter_done is its
 * done function, st_waiter_wait returns the status. */
typedef struct st_waiter {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool done;
    int status;
    uint64_t first;
} st_waiter;
void st_waiter_init(st_waiter *w);
void st_waiter_done(void *ctx, int status, uint64_t first);
int st_waiter_wait(st_waiter *w); /* also destroys it */

#endif
