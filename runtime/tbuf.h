/*
 * tbuf.h - per-thread scratch buffers: allocated on a thread's first use,
 * freed when the thread ends.
 *
 * Not `static __thread` arrays: glibc zeroes a thread's whole static TLS
 * block when it starts the thread, so 64 KiB of such scratch is 64 KiB of
 * resident memory in every thread of the process (and of a program that
 * embeds parley), whether the thread ever uses it or not.
 */
#ifndef RT_TBUF_H
#define RT_TBUF_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>

typedef struct rt_tbuf {
    size_t size;
    _Atomic int ready; /* key made */
    pthread_key_t key;
} rt_tbuf;

#define RT_TBUF_INIT(bytes)                                                                        \
    {                                                                                              \
        .size = (bytes)                                                                            \
    }

/* This thread's buffer of b->size bytes (uninitialized at first), or NULL
 * when out of memory. */
void *rt_tbuf_get(rt_tbuf *b);

#endif
