/*
 * err.c - descriptions of the runtime's error codes, and of the other
 * modules' through the describers they register.
 *
 * The ranges are an array that only grows: a registration fills the next
 * slot under a mutex, then publishes the new count (release), so rt_strerror
 * reads the count (acquire) and the slots below it without a lock.
 */
#include "err.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

typedef struct err_range {
    int lo, hi;
    rt_err_describer *fn;
} err_range;

static err_range ranges[RT_ERR_RANGES_MAX];
static atomic_size_t nranges;
static pthread_mutex_t ranges_mu = PTHREAD_MUTEX_INITIALIZER;

/* Under ranges_mu. */
static int add_range(int lo, int hi, rt_err_describer *fn)
{
    size_t n = atomic_load_explicit(&nranges, memory_order_relaxed);
    for (size_t i = 0; i < n; i++) {
        const err_range *g = &ranges[i];
        if (g->lo == lo && g->hi == hi && g->fn == fn)
            return 0; /* a second start-up path of the same module */
        if (lo <= g->hi && g->lo <= hi)
            return RT_EINVAL;
    }
    if (n == RT_ERR_RANGES_MAX)
        return RT_EFULL;
    ranges[n] = (err_range){lo, hi, fn};
    atomic_store_explicit(&nranges, n + 1, memory_order_release);
    return 0;
}

int rt_err_register(int lo, int hi, rt_err_describer *fn)
{
    if (fn == NULL || lo > hi || hi > RT_ERR_MODULE_FIRST)
        return RT_EINVAL;
    pthread_mutex_lock(&ranges_mu);
    int r = add_range(lo, hi, fn);
    pthread_mutex_unlock(&ranges_mu);
    return r;
}

static const char *registered(int err)
{
    size_t n = atomic_load_explicit(&nranges, memory_order_acquire);
    for (size_t i = 0; i < n; i++) {
        if (err >= ranges[i].lo && err <= ranges[i].hi) {
            const char *d = ranges[i].fn(err);
            return d != NULL ? d : "unknown error";
        }
    }
    return "unknown error";
}

const char *rt_strerror(int err)
{
    switch (err) {
    case RT_OK:
        return "ok";
    case RT_EINVAL:
        return "invalid argument";
    case RT_ENOMEM:
        return "out of memory";
    case RT_ECLOSED:
        return "actor or runtime is stopped";
    case RT_EFULL:
        return "mailbox is full";
    case RT_ETIMEDOUT:
        return "timed out waiting for a reply";
    case RT_ENOREPLY:
        return "request was handled without a reply";
    case RT_EFAIL:
        return "handler failed";
    case RT_EASSERT:
        return "assertion failed in handler";
    case RT_ETHREAD:
        return "not allowed from this thread";
    default:
        return err < 0 && err > -1000 ? strerror(-err) : registered(err);
    }
}

void rt_say(char *err, size_t errlen, const char *fmt, ...)
{
    if (err == NULL || errlen == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}
