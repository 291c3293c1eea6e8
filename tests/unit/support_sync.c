/*
 * support_sync.c - counters, the event log and failure notes for the tests.
 *
 * Waits use CLOCK_MONOTONIC so that a clock step cannot shorten or stretch a
 * deadline.
 */
#include "support_sync.h"

#include <errno.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void deadline_from_now(struct timespec *ts, long ms)
{
    clock_gettime(CLOCK_MONOTONIC, ts);
    ts->tv_sec += ms / 1000;
    ts->tv_nsec += (ms % 1000) * 1000000L;
    if (ts->tv_nsec >= 1000000000L) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000L;
    }
}

static void cond_init_monotonic(pthread_cond_t *cv)
{
    pthread_condattr_t a;
    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    pthread_cond_init(cv, &a);
    pthread_condattr_destroy(&a);
}

void ts_counter_init(ts_counter *c)
{
    pthread_mutex_init(&c->mu, NULL);
    cond_init_monotonic(&c->cv);
    c->n = 0;
}

void ts_counter_destroy(ts_counter *c)
{
    pthread_cond_destroy(&c->cv);
    pthread_mutex_destroy(&c->mu);
}

long ts_counter_add(ts_counter *c, long d)
{
    pthread_mutex_lock(&c->mu);
    long n = c->n += d;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    return n;
}

long ts_counter_get(ts_counter *c)
{
    pthread_mutex_lock(&c->mu);
    long n = c->n;
    pthread_mutex_unlock(&c->mu);
    return n;
}

bool ts_counter_wait(ts_counter *c, long target)
{
    return ts_counter_wait_ms(c, target, TS_DEADLINE_MS);
}

bool ts_counter_wait_ms(ts_counter *c, long target, long ms)
{
    struct timespec dl;
    deadline_from_now(&dl, ms);
    pthread_mutex_lock(&c->mu);
    int rc = 0;
    while (c->n < target && rc != ETIMEDOUT)
        rc = pthread_cond_timedwait(&c->cv, &c->mu, &dl);
    bool ok = c->n >= target;
    pthread_mutex_unlock(&c->mu);
    return ok;
}

bool ts_wait_atomic(const _Atomic long *v, long target)
{
    struct timespec dl, now;
    deadline_from_now(&dl, TS_DEADLINE_MS);
    while (atomic_load(v) < target) {
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (now.tv_sec > dl.tv_sec || (now.tv_sec == dl.tv_sec && now.tv_nsec > dl.tv_nsec))
            return false;
        sched_yield();
    }
    return true;
}

/* ------------------------------------------------------------ event log --- */

static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_once_t once;
    char **v;
    size_t len, cap;
    char first_failure[512];
    bool failed;
} g = {.mu = PTHREAD_MUTEX_INITIALIZER, .once = PTHREAD_ONCE_INIT};

static void log_init_cv(void)
{
    cond_init_monotonic(&g.cv);
}

static void log_lock(void)
{
    pthread_once(&g.once, log_init_cv);
    pthread_mutex_lock(&g.mu);
}

void ts_log(const char *fmt, ...)
{
    char line[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    char *copy = strdup(line);
    if (copy == NULL)
        abort();

    log_lock();
    if (g.len == g.cap) {
        size_t cap = g.cap ? 2 * g.cap : 64;
        char **v = realloc(g.v, cap * sizeof *v);
        if (v == NULL)
            abort();
        g.v = v;
        g.cap = cap;
    }
    g.v[g.len++] = copy;
    pthread_cond_broadcast(&g.cv);
    pthread_mutex_unlock(&g.mu);
}

size_t ts_log_len(void)
{
    log_lock();
    size_t n = g.len;
    pthread_mutex_unlock(&g.mu);
    return n;
}

static size_t count_locked(const char *entry)
{
    size_t n = 0;
    for (size_t i = 0; i < g.len; i++)
        n += strcmp(g.v[i], entry) == 0;
    return n;
}

size_t ts_log_count(const char *entry)
{
    log_lock();
    size_t n = count_locked(entry);
    pthread_mutex_unlock(&g.mu);
    return n;
}

bool ts_log_wait(const char *entry, size_t n)
{
    struct timespec dl;
    deadline_from_now(&dl, TS_DEADLINE_MS);
    log_lock();
    int rc = 0;
    while (count_locked(entry) < n && rc != ETIMEDOUT)
        rc = pthread_cond_timedwait(&g.cv, &g.mu, &dl);
    bool ok = count_locked(entry) >= n;
    pthread_mutex_unlock(&g.mu);
    return ok;
}

bool ts_log_wait_len(size_t n)
{
    struct timespec dl;
    deadline_from_now(&dl, TS_DEADLINE_MS);
    log_lock();
    int rc = 0;
    while (g.len < n && rc != ETIMEDOUT)
        rc = pthread_cond_timedwait(&g.cv, &g.mu, &dl);
    bool ok = g.len >= n;
    pthread_mutex_unlock(&g.mu);
    return ok;
}

static char *join(size_t from, const char *prefix)
{
    log_lock();
    size_t size = 1, plen = strlen(prefix);
    for (size_t i = from; i < g.len; i++)
        size += strlen(g.v[i]) + 2;
    char *s = malloc(size);
    if (s == NULL)
        abort();
    s[0] = '\0';
    for (size_t i = from; i < g.len; i++) {
        if (strncmp(g.v[i], prefix, plen) != 0)
            continue;
        if (s[0] != '\0')
            strcat(s, ", ");
        strcat(s, g.v[i]);
    }
    pthread_mutex_unlock(&g.mu);
    return s;
}

char *ts_log_join(size_t from)
{
    return join(from, "");
}

char *ts_log_join_prefix(const char *prefix)
{
    return join(0, prefix);
}

long ts_log_index(const char *entry, size_t n)
{
    long at = -1;
    log_lock();
    for (size_t i = 0, seen = 0; i < g.len; i++) {
        if (strcmp(g.v[i], entry) == 0 && ++seen == n) {
            at = (long)i;
            break;
        }
    }
    pthread_mutex_unlock(&g.mu);
    return at;
}

/* ------------------------------------------------------------- failures --- */

void ts_note_failure(const char *file, int line, const char *fmt, ...)
{
    char what[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);

    log_lock();
    if (!g.failed) {
        snprintf(g.first_failure, sizeof g.first_failure, "%s:%d: %s", file, line, what);
        g.failed = true;
    }
    pthread_mutex_unlock(&g.mu);
}

const char *ts_first_failure(void)
{
    /* The text is written once, before `failed` is set under the lock, and
     * never again; so reading it after this returns needs no lock. */
    log_lock();
    const char *s = g.failed ? g.first_failure : NULL;
    pthread_mutex_unlock(&g.mu);
    return s;
}

void ts_reset(void)
{
    log_lock();
    for (size_t i = 0; i < g.len; i++)
        free(g.v[i]);
    free(g.v);
    g.v = NULL;
    g.len = g.cap = 0;
    g.failed = false;
    g.first_failure[0] = '\0';
    pthread_mutex_unlock(&g.mu);
}

int ts_run_suite(Suite *s)
{
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
