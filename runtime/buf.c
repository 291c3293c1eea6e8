/*
 * buf.c - reference-counted byte buffers. Small and large buffers are one
 * allocation (header + bytes); wrapped buffers point at foreign memory.
 */
#include "buf.h"

#include "grow.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static rt_buf *buf_alloc(size_t len)
{
    if (len > SIZE_MAX - sizeof(rt_buf))
        return NULL;
    rt_buf *b = malloc(sizeof(rt_buf) + len);
    if (b == NULL)
        return NULL;
    atomic_init(&b->refs, 1);
    b->_pad = 0;
    b->len = len;
    b->data = (uint8_t *)(b + 1);
    b->dtor = NULL;
    b->ctx = NULL;
    return b;
}

rt_buf *rt_buf_new(size_t len)
{
    return buf_alloc(len);
}

rt_buf *rt_buf_copy(const void *data, size_t len)
{
    rt_buf *b = buf_alloc(len);
    if (b != NULL && len > 0)
        memcpy(b->data, data, len);
    return b;
}

rt_buf *rt_buf_wrap(void *data, size_t len, rt_buf_dtor dtor, void *ctx)
{
    rt_buf *b = malloc(sizeof(rt_buf));
    if (b == NULL)
        return NULL;
    atomic_init(&b->refs, 1);
    b->_pad = 0;
    b->len = len;
    b->data = data;
    b->dtor = dtor;
    b->ctx = ctx;
    return b;
}

rt_buf *rt_buf_ref(rt_buf *b)
{
    atomic_fetch_add_explicit(&b->refs, 1, memory_order_relaxed);
    return b;
}

void rt_buf_unref(rt_buf *b)
{
    if (b == NULL)
        return;
    /* release: our writes to the bytes happen-before the free; acquire on the
     * last drop so the freeing thread sees everyone's. */
    if (atomic_fetch_sub_explicit(&b->refs, 1, memory_order_acq_rel) != 1)
        return;
    if (b->dtor != NULL)
        b->dtor(b->data, b->ctx);
    free(b);
}

static void free_dtor(void *data, void *ctx)
{
    (void)ctx;
    free(data);
}

rt_buf *rt_buf_take(void *data, size_t len)
{
    rt_buf *b = rt_buf_wrap(data, len, free_dtor, NULL);
    if (b == NULL)
        free(data);
    return b;
}

uint8_t *rt_outbox_reserve(rt_outbox *o, size_t n)
{
    if (n > SIZE_MAX - o->len || rt_grow((void **)&o->p, &o->cap, o->len + n, 1, 4096) != 0)
        return NULL;
    uint8_t *at = o->p + o->len;
    o->len += n;
    return at;
}

int rt_outbox_take(rt_outbox *o, rt_buf **out)
{
    *out = NULL;
    if (o->len == 0)
        return 0;
    rt_buf *b = rt_buf_wrap(o->p, o->len, free_dtor, NULL);
    if (b == NULL)
        return -ENOMEM;
    *o = (rt_outbox){0};
    *out = b;
    return 0;
}

void rt_outbox_free(rt_outbox *o)
{
    free(o->p);
    *o = (rt_outbox){0};
}
