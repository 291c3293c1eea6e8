/*
 * tbuf.c - per-thread scratch buffers (tbuf.h).
 */
#include "runtime/tbuf.h"

#include <stdlib.h>

static pthread_mutex_t keys_mu = PTHREAD_MUTEX_INITIALIZER;

void *rt_tbuf_get(rt_tbuf *b)
{
    if (!atomic_load_explicit(&b->ready, memory_order_acquire)) {
        pthread_mutex_lock(&keys_mu);
        int made = atomic_load_explicit(&b->ready, memory_order_relaxed) ||
                   pthread_key_create(&b->key, free) == 0;
        if (made)
            atomic_store_explicit(&b->ready, 1, memory_order_release);
        pthread_mutex_unlock(&keys_mu);
        if (!made)
            return NULL;
    }
    void *p = pthread_getspecific(b->key);
    if (p == NULL && (p = malloc(b->size)) != NULL && pthread_setspecific(b->key, p) != 0) {
        free(p);
        p = NULL;
    }
    return p;
}
