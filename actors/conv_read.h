/*
 * conv_read.h - reading a conversation's log: the one way every reader
 * (REST, WebSocket streams, the public API, the conversation actor's own
 * open) opens it, pages it and finds events in it, with one mapping of
 * what can go wrong to an outcome (parley.h) and a one-line detail:
 *   NOT_FOUND  no such conversation (or it was deleted)
 *   BUSY       out of open files (or another bound): retry later
 *   FAILED     the log cannot be read (corrupt, I/O error)
 * Opening and reading are blocking file I/O: loop code runs them in the
 * thread pool (unless the log is open already, which costs nothing).
 */
#ifndef CONV_READ_H
#define CONV_READ_H

#include "parley.h"
#include "runtime/uuid.h"
#include "store/store.h"

typedef struct conv_reader {
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

#endif
