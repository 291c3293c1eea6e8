/*
 * support_sync.h - waiting without sleeping, for the runtime's unit tests.
 *
 * Tests never sleep to synchronize: a thread that must wait for another
 * (the test thread for a handler, a handler for the test thread) waits on a
 * counter under a mutex and condition variable, with a deadline. A missed
 * deadline fails the test instead of hanging it, and the deadline is generous
 * (slow sanitizer builds on a 2-core machine) because it only matters when
 * something is already wrong.
 *
 * Handlers run on loop threads, where a failing ck_assert would exit the
 * process from under the runtime; they report with TS_CHECK instead, and the
 * test thread turns the first report into a failure with ts_assert_clean.
 *
 * Each Check test runs in its own process, so the event log and the error
 * record are process-wide singletons; ts_reset clears them for the
 * CK_FORK=no case.
 */
#ifndef SUPPORT_SYNC_H
#define SUPPORT_SYNC_H

#include <check.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define TS_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define TS_SANITIZED 1
#endif
#endif
#ifndef TS_SANITIZED
#define TS_SANITIZED 0
#endif

/* Stress sizes: the full count normally, a smaller one under sanitizers,
 * where every atomic and allocation costs several times more. */
#define TS_SCALE(full, reduced) (TS_SANITIZED ? (reduced) : (full))

/* How long any single wait may take before the test is declared stuck. */
#define TS_DEADLINE_MS TS_SCALE(20000, 60000)

/* A counter that threads bump and others wait on. With a target of 1 it is
 * also a gate: handlers wait for it, the test opens it with ts_counter_add. */
typedef struct ts_counter {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    long n;
} ts_counter;

void ts_counter_init(ts_counter *c);
void ts_counter_destroy(ts_counter *c);
/* Adds d and wakes every waiter; returns the new value. */
long ts_counter_add(ts_counter *c, long d);
long ts_counter_get(ts_counter *c);
/* Waits until the value is at least `target`; false if the deadline passed. */
bool ts_counter_wait(ts_counter *c, long target);
/* The same with a deadline of its own, for waits bound by something slower
 * than the code under test (a Raft election in nats-server). */
bool ts_counter_wait_ms(ts_counter *c, long target, long ms);

/* Spins (yielding) until *v >= target; false on deadline. For progress
 * counters bumped on hot paths, where a mutex per bump would distort what
 * is being measured. */
bool ts_wait_atomic(const _Atomic long *v, long target);

/* ck_assert for hot loops: every passing ck_assert records a mark point,
 * which in fork mode is a write to the parent process, and thousands of
 * those per test cost seconds and serialize the very races under test. */
#define ts_require(cond, ...)                                                                      \
    do {                                                                                           \
        if (!(cond))                                                                               \
            ck_abort_msg(__VA_ARGS__);                                                             \
    } while (0)

/* The event log: entries such as "init A" or "stop B" appended from any
 * thread, in the order they happened. */
void ts_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
size_t ts_log_len(void);
/* How many entries equal `entry`. */
size_t ts_log_count(const char *entry);
/* Waits until `entry` has been logged at least n times; false on deadline. */
bool ts_log_wait(const char *entry, size_t n);
/* Waits until the log has at least n entries; false on deadline. */
bool ts_log_wait_len(size_t n);
/* Entries [from, len) joined with ", ", for comparing with an expected
 * sequence; the caller frees it. */
char *ts_log_join(size_t from);
/* The entries that start with `prefix`, joined the same way: one actor's
 * view, when actors on different loops log concurrently. */
char *ts_log_join_prefix(const char *prefix);
#define ts_assert_log_prefix(prefix, expected)                                                     \
    do {                                                                                           \
        char *got_ = ts_log_join_prefix(prefix);                                                   \
        ck_assert_msg(strcmp(got_, (expected)) == 0, "log of %s is \"%s\", expected \"%s\"",       \
                      (prefix), got_, (expected));                                                 \
        free(got_);                                                                                \
    } while (0)
/* Fails the test unless the entries from `from` on are exactly `expected`
 * (", "-separated). */
#define ts_assert_log(from, expected)                                                              \
    do {                                                                                           \
        char *got_ = ts_log_join(from);                                                            \
        ck_assert_msg(strcmp(got_, (expected)) == 0, "log is \"%s\", expected \"%s\"", got_,       \
                      (expected));                                                                 \
        free(got_);                                                                                \
    } while (0)
/* Index of the n-th (1-based) occurrence of entry, or -1. */
long ts_log_index(const char *entry, size_t n);

/* Records a failed expectation seen on a thread that must not call
 * ck_assert (only the first one is kept, with its location). */
#define TS_CHECK(cond) ((cond) ? (void)0 : ts_note_failure(__FILE__, __LINE__, "%s", #cond))
#define TS_CHECK_MSG(cond, ...)                                                                    \
    ((cond) ? (void)0 : ts_note_failure(__FILE__, __LINE__, __VA_ARGS__))
void ts_note_failure(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The first recorded failure, or NULL. */
const char *ts_first_failure(void);
#define ts_assert_clean()                                                                          \
    ck_assert_msg(ts_first_failure() == NULL, "on a loop thread: %s", ts_first_failure())

/* Clears the event log and the failure record. */
void ts_reset(void);

/* Run a suite in Check's fork mode (each test in its own process) and
 * return main's exit status: non-zero when any test failed. */
int ts_run_suite(Suite *s);

#endif
