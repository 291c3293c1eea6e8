/*
 * buf.h - immutable, reference-counted byte buffers shared across threads.
 *
 * An event is serialized once into an rt_buf; the same bytes are then stored,
 * served over REST and framed for every subscriber, each holder keeping its
 * own reference. A buffer is writable only by its creator, before it is
 * shared (sent, stored or ref'd); after that nobody writes to it.
 *
 * Ownership: every function that returns an rt_buf * returns one reference
 * owned by the caller; rt_buf_unref gives one back. A buffer passed to a call
 * that "takes" it (rt_send on success) transfers the caller's reference.
 */
#ifndef RT_BUF_H
#define RT_BUF_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

typedef void (*rt_buf_dtor)(void *data, void *ctx);

typedef struct rt_buf {
    _Atomic uint32_t refs;
    uint32_t _pad;
    size_t len;
    uint8_t *data;
    rt_buf_dtor dtor; /* NULL when the bytes live inline, after this header */
    void *ctx;
} rt_buf;

/* A buffer of `len` uninitialized bytes (write them via rt_buf_wdata). */
rt_buf *rt_buf_new(size_t len);
/* A buffer holding a copy of `len` bytes at `data`. */
rt_buf *rt_buf_copy(const void *data, size_t len);
/* A buffer over memory the caller hands over: dtor(data, ctx) runs when the
 * last reference goes. dtor may be NULL for static memory. */
rt_buf *rt_buf_wrap(void *data, size_t len, rt_buf_dtor dtor, void *ctx);

/* A buffer over malloc'd memory it takes: freed with free(). NULL (and
 * data freed) when out of memory. */
rt_buf *rt_buf_take(void *data, size_t len);
rt_buf *rt_buf_ref(rt_buf *b);
void rt_buf_unref(rt_buf *b); /* NULL is ignored */

/* Bytes gathered for a peer (TLS records, WebSocket frames) and handed
 * over whole, as one buffer, when the connection writes. Zero it to start. */
typedef struct rt_outbox {
    uint8_t *p;
    size_t len, cap;
} rt_outbox;

/* Room for n more bytes at the end, to fill now (all of them): NULL, and
 * nothing changed, when out of memory. Reserve a frame at once, so that a
 * failure never leaves half of one. */
uint8_t *rt_outbox_reserve(rt_outbox *o, size_t n);
/* Hand what is gathered over as one buffer (*out = NULL when empty) and
 * start empty again. -ENOMEM leaves the bytes where they are. */
int rt_outbox_take(rt_outbox *o, rt_buf **out);
void rt_outbox_free(rt_outbox *o);

static inline const uint8_t *rt_buf_data(const rt_buf *b)
{
    return b->data;
}
static inline uint8_t *rt_buf_wdata(rt_buf *b)
{
    return b->data;
}
static inline size_t rt_buf_len(const rt_buf *b)
{
    return b->len;
}

#endif
