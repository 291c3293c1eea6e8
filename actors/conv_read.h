/*
 * conv_read.h - reading a conversation's log: the one way every reader
 * (REST, WebSocket streams, the public API, the conversation actor's own
 * open) opens it, pages it and finds events in it, with one mapping of
 * what can go wrong to an outcome (parley.h) and a one-line detail:
 *   NOT_FOUND  no such conversation (or it was deleted)
 *   BUSY       out of open files (or another bound): retry later
 *   FAILED     the log cannot be read (corrupt, I/O error)
 * Opening and reading are blocking I/O: code off the loops calls them as
 * they are. Loop code opens a log only once its conversation's actor has
 * (then it costs nothing) and reads through the _soon calls: answered at
 * once when the store answers without waiting for another machine
 * (st_log_read_now: the local store's files, a cluster node's memory),
 * else read in libuv's thread pool and handed to the asking actor as a
 * message, so a slow cluster never holds up a loop (issue 22).
 */
#ifndef CONV_READ_H
#define CONV_READ_H

#include "parley.h"
#include "runtime/actor.h"
#include "runtime/uuid.h"
#include "store/store.h"

typedef struct conv_reader {
    st_store *store;
    st_conv *sc; /* held */
    st_log *log; /* valid while sc is held */
} conv_reader;

/* 0, or -1 with *why and one line in detail (rep, if not NULL, says what
 * opening the log found). */
int conv_read_open(st_store *s, const rt_uuid *id, conv_reader *out, st_open_report *rep,
                   pl_outcome *why, char *detail, size_t cap);
void conv_read_close(conv_reader *r);

uint64_t conv_read_count(const conv_reader *r);
/* Up to max events from index first (st_log_read): 0, or -1 with *why
 * and detail. */
int conv_read_page(const conv_reader *r, uint64_t first, uint32_t max, st_page **out,
                   pl_outcome *why, char *detail, size_t cap);
/* The index of the event with this id: 0, or -ENOENT. */
int conv_read_find(const conv_reader *r, const char *id, size_t len, uint64_t *index);

/* ---- from a loop ------------------------------------------------------ */

/* A read done in the thread pool, as its message brings it (the message's
 * buf owns it and the page: the receiver uses them while it handles the
 * message, and takes references to what it keeps). */
typedef struct conv_read_answer {
    int err;        /* 0, or -1 with why and detail; a find also -ENOENT (no such event) */
    st_page *page;  /* a page read */
    uint64_t index; /* a find's */
    pl_outcome why;
    char detail[200];
} conv_read_answer;

/* conv_read_page from loop code (self's handler): 0 with *out, answered
 * now; 1: read in the thread pool, and self gets a message `kind` (with
 * rt_notify) whose answer conv_read_answer_of gives; -1 with *why and
 * detail. */
int conv_read_page_soon(const conv_reader *r, rt_actor *self, uint32_t kind, uint64_t first,
                        uint32_t max, st_page **out, pl_outcome *why, char *detail, size_t cap);
/* conv_read_find the same way: 0 with *index, or -ENOENT, answered now;
 * 1: the answer comes as message `kind`; -ENOMEM or -ESHUTDOWN: neither. */
int conv_read_find_soon(const conv_reader *r, rt_actor *self, uint32_t kind, const char *id,
                        size_t len, uint64_t *index);
/* conv_read_open from loop code: 0 with *out open, when opening costs no
 * wait for another machine (st_conv_log_now); 1 if it would (nothing is
 * open: open it in the thread pool, conv_read_find_pool); -1 with *why
 * and detail. */
int conv_read_open_now(st_store *s, const rt_uuid *id, conv_reader *out, pl_outcome *why,
                       char *detail, size_t cap);
/* Open conversation id's log and find the event with this id in the
 * thread pool: self gets message `kind` as conv_read_find_soon's. 1, or
 * -ENOMEM or -ESHUTDOWN. */
int conv_read_find_pool(st_store *s, const rt_uuid *id, rt_actor *self, uint32_t kind,
                        const char *key, size_t len);
/* The answer a message of such a kind carries (NULL if none: out of memory). */
const conv_read_answer *conv_read_answer_of(const rt_msg *m);

#endif
