/*
 * follow.h - a follower's local copy of one conversation's log, and what
 * it must fetch to make that copy equal the server's. Pure: frames and
 * pages in, requests out; the follower actor (issue 7) does the I/O.
 *
 * The copy holds events 0..count-1, dense, in log order, each id once.
 * Live frames carry their index (parley's envelope=index): the next one is
 * appended; one already held is a duplicate (its id must match); one past
 * the end is held aside (up to FL_AHEAD_MAX) and the hole before it is what
 * to fetch. Without indexes (a server without the extension) a frame cannot
 * be placed: the follower takes one with an id not held as a sign that the
 * server has more (fl_server_count) and fetches it, and loss shows when the
 * server's count (GET .../events/count) is more than the copy has. A last
 * page (no next_page_id) says exactly how many events the server had.
 *
 * Fetching is REST paging with the API's inclusive cursor: a repair starts
 * at the last event held (its id is checked: a server whose log does not
 * hold our last event where we hold it has diverged), and goes on from the
 * next_page_id each page gives, FL_PAGE new events a page. So repairing k
 * missing events costs at most ceil(k / FL_PAGE) + 1 requests, never a scan
 * of the whole history.
 */
#ifndef FOLLOW_H
#define FOLLOW_H

#include "runtime/buf.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum {
    FL_PAGE = 100,        /* events per REST page (the API's limit) */
    FL_AHEAD_MAX = 10000, /* live frames held past a hole */
};

typedef enum fl_result {
    FL_ADDED = 0,
    FL_DUPLICATE,
    FL_AHEAD,    /* past a hole: held (or dropped when too many are), the hole is to fetch */
    FL_DIVERGED, /* the server's log disagrees with the copy: start again from scratch */
    FL_NOMEM,
} fl_result;

typedef struct fl fl;

fl *fl_new(void);
/* A copy of the log's tail: its first event will be index base (the
 * follower puts the last events there with fl_live, in order). Events
 * before base are neither kept nor checked. */
fl *fl_new_at(uint64_t base);
void fl_free(fl *f);

/* The index of the first event held: 0, or a tail copy's base. */
uint64_t fl_first(const fl *f);

/* The index after the last event held (the events held: fl_first to it). */
uint64_t fl_count(const fl *f);
/* Event i (fl_first <= i < fl_count): its id and bytes (borrowed). */
const char *fl_id(const fl *f, uint64_t i);
const rt_buf *fl_bytes(const fl *f, uint64_t i);

/* A live frame with its index; bytes are referenced, id copied. */
fl_result fl_live(fl *f, uint64_t index, const char *id, rt_buf *bytes);
/* A live frame without an index. */
fl_result fl_live_unindexed(fl *f, const char *id, rt_buf *bytes);
/* The server says it has n events (the events count, or the index of a
 * frame seen): the copy wants at least that many. */
void fl_server_count(fl *f, uint64_t n);
/* Ask once from the last event held (or from the start), whatever the
 * copy knows: how a resumed copy learns what it missed, at the cost of one
 * request when nothing was. */
void fl_probe(fl *f);
/* Is an event of this id in the copy? */
bool fl_has(const fl *f, const char *id);

/* The next page to ask for: GET .../events/search?limit=LIMIT&page_id=
 * CURSOR (no page_id when cursor is ""); its first item is event `first`.
 * False when the copy has every event known to exist. */
typedef struct fl_fetch {
    char cursor[256];
    uint32_t limit;
    uint64_t first;
} fl_fetch;
bool fl_want(const fl *f, fl_fetch *out);

/* The page that answered `asked`: its items' ids and bytes in order (bytes
 * referenced), and its next_page_id (NULL at the end of the log). FL_ADDED,
 * or FL_DIVERGED when an item is not what the copy holds at its place. */
fl_result fl_page(fl *f, const fl_fetch *asked, const char *const *ids, rt_buf *const *bytes,
                  size_t n, const char *next_page_id);

#endif
