/* req.c - building, freeing and waiting for committer requests (req.h). */
#include "req.h"

#include "backend.h"
#include "record.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

st_req *st_req_append(const st_item *items, size_t n, int *err)
{
    *err = -EINVAL;
    if (n == 0)
        return NULL;
    size_t keys = 0;
    for (size_t i = 0; i < n; i++) {
        if (items[i].idlen == 0 || items[i].idlen > ST_ID_MAX || items[i].keylen > ST_KEY_MAX ||
            items[i].payload == NULL)
            return NULL;
        keys += items[i].idlen + items[i].keylen;
    }
    *err = -ENOMEM;
    st_req *r = calloc(1, sizeof(*r) + n * sizeof(st_item) + keys);
    if (r == NULL)
        return NULL;
    r->kind = REQ_APPEND;
    r->items = (st_item *)(r + 1);
    uint8_t *kb = (uint8_t *)(r->items + n); /* the ids and keys, copied */
    for (size_t i = 0; i < n; i++) {
        r->items[i] = items[i];
        memcpy(kb, items[i].id, items[i].idlen);
        r->items[i].id = kb;
        kb += items[i].idlen;
        if (items[i].keylen > 0) {
            memcpy(kb, items[i].key, items[i].keylen);
            r->items[i].key = kb;
            kb += items[i].keylen;
        }
        rt_buf_ref(items[i].payload);
    }
    r->n = n;
    *err = 0;
    return r;
}

st_req *st_req_one(int kind, const char *id, const void *key, uint32_t keylen, rt_buf *payload)
{
    size_t idlen = strlen(id);
    st_req *r = calloc(1, sizeof(*r) + sizeof(st_item) + idlen + keylen);
    if (r == NULL)
        return NULL;
    r->kind = kind;
    r->items = (st_item *)(r + 1);
    uint8_t *kb = (uint8_t *)(r->items + 1);
    memcpy(kb, id, idlen);
    r->items[0].id = kb;
    r->items[0].idlen = (uint32_t)idlen;
    if (keylen > 0) {
        memcpy(kb + idlen, key, keylen);
        r->items[0].key = kb + idlen;
        r->items[0].keylen = keylen;
    }
    r->items[0].payload = payload != NULL ? rt_buf_ref(payload) : NULL;
    r->n = 1;
    return r;
}

st_req *st_req_file(const char *name, rt_buf *data, bool durable, int *err)
{
    *err = -EINVAL;
    if (data == NULL || !st_conv_file_name_ok(name))
        return NULL;
    *err = -ENOMEM;
    st_req *r = st_req_one(REQ_FILE, name, NULL, 0, data);
    if (r == NULL)
        return NULL;
    r->durable = durable;
    snprintf(r->name, sizeof(r->name), "%s", name);
    *err = 0;
    return r;
}

void st_req_free(st_req *r)
{
    for (size_t i = 0; i < r->n; i++)
        rt_buf_unref(r->items[i].payload);
    free(r);
}

void st_reqq_init(st_reqq *q)
{
    pthread_mutex_init(&q->mu, NULL);
    pthread_cond_init(&q->cv, NULL);
    q->head = q->tail = q->aside = NULL;
    q->held = NULL;
    q->held_head = q->held_tail = NULL;
    q->stop = false;
}

void st_reqq_destroy(st_reqq *q)
{
    pthread_mutex_destroy(&q->mu);
    pthread_cond_destroy(&q->cv);
}

/* Put head..tail (linked) at the end of the list *h..*t. */
static void chain(st_req **h, st_req **t, st_req *head, st_req *tail)
{
    if (*t != NULL)
        (*t)->next = head;
    else
        *h = head;
    *t = tail;
}

int st_reqq_push(st_reqq *q, st_req *r)
{
    pthread_mutex_lock(&q->mu);
    if (q->stop) {
        pthread_mutex_unlock(&q->mu);
        return -ESHUTDOWN;
    }
    r->next = NULL;
    if (q->held != NULL && r->conv == q->held) {
        chain(&q->held_head, &q->held_tail, r, r);
    } else {
        chain(&q->head, &q->tail, r, r);
        pthread_cond_signal(&q->cv);
    }
    pthread_mutex_unlock(&q->mu);
    return 0;
}

int st_reqq_hold(st_reqq *q, const st_conv *conv)
{
    pthread_mutex_lock(&q->mu);
    int e = q->held != NULL ? -EBUSY : 0;
    if (e == 0)
        q->held = conv;
    pthread_mutex_unlock(&q->mu);
    return e;
}

st_req *st_reqq_release(st_reqq *q)
{
    pthread_mutex_lock(&q->mu);
    st_req *head = q->held_head;
    if (head != NULL && !q->stop) {
        chain(&q->head, &q->tail, head, q->held_tail);
        pthread_cond_signal(&q->cv);
        head = NULL;
    }
    q->held = NULL;
    q->held_head = q->held_tail = NULL;
    pthread_mutex_unlock(&q->mu);
    return head;
}

int st_reqq_put_aside(st_reqq *q, st_req *r)
{
    pthread_mutex_lock(&q->mu);
    int e = q->stop ? -ESHUTDOWN : q->aside != NULL ? -EBUSY : 0;
    if (e == 0) {
        r->next = NULL;
        q->aside = r;
        pthread_cond_signal(&q->cv);
    }
    pthread_mutex_unlock(&q->mu);
    return e;
}

void st_reqq_wait(st_reqq *q, uint64_t ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t ns = (uint64_t)ts.tv_nsec + ms * 1000000;
    ts.tv_sec += (time_t)(ns / 1000000000);
    ts.tv_nsec = (long)(ns % 1000000000);
    pthread_cond_timedwait(&q->cv, &q->mu, &ts);
}

void st_reqq_stop(st_reqq *q)
{
    pthread_mutex_lock(&q->mu);
    q->stop = true;
    pthread_cond_signal(&q->cv);
    pthread_mutex_unlock(&q->mu);
}

void st_waiter_init(st_waiter *w)
{
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    w->done = false;
    w->status = 0;
    w->first = 0;
}

void st_waiter_done(void *ctx, int status, uint64_t first)
{
    st_waiter *w = ctx;
    pthread_mutex_lock(&w->mu);
    w->status = status;
    w->first = first;
    w->done = true;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

int st_waiter_wait(st_waiter *w)
{
    pthread_mutex_lock(&w->mu);
    while (!w->done)
        pthread_cond_wait(&w->cv, &w->mu);
    pthread_mutex_unlock(&w->mu);
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
    return w->status;
}
