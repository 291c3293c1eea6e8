/*
 * support_store.h - helpers for the store's tests: temp directories,
 * events with predictable ids and bodies, and file surgery (cut, flip).
 */
#ifndef SUPPORT_STORE_H
#define SUPPORT_STORE_H

#include "runtime/uuid.h"
#include "store/log.h"

#include <stddef.h>
#include <stdint.h>

/* A fresh directory under $TMPDIR (or /tmp); removed by tst_rmdir. */
char *tst_mkdtemp(void);
void tst_rmdir(const char *dir); /* rm -rf */
/* cp -a src dst (dst must not exist). */
void tst_copydir(const char *src, const char *dst);

/* Event k of a test log: id "ev-<k>", a JSON body whose size varies with k
 * (up to about `maxlen` bytes). */
void tst_event_id(uint64_t k, char *id, size_t cap);
rt_buf *tst_event_body(uint64_t k, size_t maxlen);

/* Write, sync and publish events [from, from + n) in one batch; 0 or the
 * error of the first step that failed. */
int tst_append(st_log *l, uint64_t from, size_t n, size_t maxlen);
/* Check that the log holds exactly events [0, count) as tst_append wrote
 * them: reads in pages of `page` and looks each id up. Returns the number
 * of mismatches. */
int tst_verify(st_log *l, uint64_t count, uint32_t page, size_t maxlen);

/* The path of the newest segment file of the log in dir. */
void tst_last_segment(const char *dir, char *out, size_t cap);
uint64_t tst_file_size(const char *path);
void tst_truncate(const char *path, uint64_t len);
void tst_flip(const char *path, uint64_t off);

/* ---- events of several conversations ------------------------------------ */

/* Conversation k of a store test: a fixed id, so that another process (or
 * a reopen) finds the same conversation. */
void tst_conv_id(unsigned k, rt_uuid *out);
/* Event i of conversation k: id "c<k>-<i>" and a body that is a function of
 * (k, i) alone, so that whoever reads it back can regenerate it. Sizes run
 * from ~48 bytes to `maxlen`: mostly tiny, a third up to 4 KiB, a few near
 * maxlen. These helpers never call ck_assert: a forked child may use them. */
void tst_cevent_id(unsigned k, uint64_t i, char *id, size_t cap);
rt_buf *tst_cevent_body(unsigned k, uint64_t i, size_t maxlen);

/* Items for events [from, from + n) of conversation k (NULL v if out of
 * memory); tst_items_free gives the payloads back. */
typedef struct tst_items {
    size_t n;
    st_item *v;
    char (*ids)[32];
} tst_items;
void tst_items_make(tst_items *t, unsigned k, uint64_t from, size_t n, size_t maxlen);
void tst_items_free(tst_items *t);

/* Check that l's events [0, n) are conversation k's, byte for byte, each
 * found by its id at its index. Returns the number of mismatches; the first
 * is described in `why` (may be NULL). */
int tst_cverify(st_log *l, unsigned k, uint64_t n, size_t maxlen, char *why, size_t whycap);

#endif
