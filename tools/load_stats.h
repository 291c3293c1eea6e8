/*
 * load_stats.h - the pure parts of `parley load`: latency histograms and
 * their percentiles, each subscriber's order check, the set of acked
 * indexes, errors counted by kind, the send-time marker in event texts,
 * and the numbers read out of frames, acks and /proc files. No I/O, no
 * allocation on the per-frame paths; tested in tests/unit/test_load.c.
 * (And one system call: the load client's own CPU time, which parley load
 * and bench_redis both report.)
 */
#ifndef PARLEY_LOAD_STATS_H
#define PARLEY_LOAD_STATS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Latencies in ns, log-linear: exact below 128 ns, then 64 steps per
 * power of two (under 1.6 % error), up to 2^47 ns (39 hours). */
enum { LOAD_HIST_BUCKETS = 42 * 64 };
typedef struct load_hist {
    uint64_t n, max;
    uint64_t b[LOAD_HIST_BUCKETS];
} load_hist;

void load_hist_add(load_hist *h, uint64_t ns);
void load_hist_merge(load_hist *into, const load_hist *h);
/* The value at fraction p (0.5: the median) of the samples, the middle of
 * its bucket, never above the largest; 0 when there are none. */
uint64_t load_hist_pct(const load_hist *h, double p);

/* One subscriber's indexes: each must be the one after the last. */
typedef struct load_seq {
    int64_t first, next; /* -1 before the first index */
    uint64_t gaps, repeats;
} load_seq;
#define LOAD_SEQ_INIT                                                                              \
    {                                                                                              \
        -1, -1, 0, 0                                                                               \
    }
enum { LOAD_SEQ_OK = 0, LOAD_SEQ_GAP = 1, LOAD_SEQ_REPEAT = 2 };
int load_seq_see(load_seq *s, int64_t index);

/* A set of indexes (the acked ones of a conversation), a bit each. */
typedef struct load_bits {
    uint64_t *w;
    size_t nw;
} load_bits;
enum { LOAD_BITS_MAX = 1 << 30 }; /* indexes beyond are not kept */
/* 0 newly added, 1 already there, -1 out of memory or range. */
int load_bits_add(load_bits *b, int64_t index);
/* Add from's indexes to into's: how many were there already (-1 if out
 * of memory). */
int64_t load_bits_merge(load_bits *into, const load_bits *from);
void load_bits_free(load_bits *b);

/* Errors by kind ("http_503", "ws_close_1013", ...): a few kinds, each
 * counted. Kinds past LOAD_ERR_KINDS are counted as "other". */
enum { LOAD_ERR_KINDS = 32, LOAD_ERR_NAME = 32 };
typedef struct load_errs {
    int n;
    char name[LOAD_ERR_KINDS][LOAD_ERR_NAME];
    uint64_t count[LOAD_ERR_KINDS];
} load_errs;
/* Count one more; the count before it (0: the kind's first). */
uint64_t load_errs_add(load_errs *e, const char *kind, uint64_t n);
uint64_t load_errs_get(const load_errs *e, const char *kind);
uint64_t load_errs_total(const load_errs *e);
void load_errs_merge(load_errs *into, const load_errs *from);

/* The send time in an event's text: "@t=" and 19 digits of ns, at the end
 * of the text, found from the end of a frame without a JSON parse. */
#define LOAD_MARK     "@t="
#define LOAD_MARK_LEN 22
void load_mark_put(char *at, uint64_t ns); /* LOAD_MARK_LEN bytes, no NUL */
/* The last marker's time in p[0, n), or 0 when there is none. */
uint64_t load_mark_find(const uint8_t *p, size_t n);

/* N of a frame that starts {"index": N (spaces allowed), or -1. */
int64_t load_frame_index(const uint8_t *p, size_t n);

/* The next "index": N in an append's answer ({"events": [{"id", "index"},
 * ...]}), from *p on: true with *index, *p past it; false when no more. */
bool load_ack_next(const char **p, const char *end, int64_t *index);

/* From /proc/PID/stat's text: utime + stime in clock ticks; -1 if
 * malformed. From /proc/PID/status's: the value of "key:" in kB, -1 if
 * missing. */
int load_proc_ticks(const char *stat, uint64_t *ticks);
long load_proc_kib(const char *status, const char *key);

/* This process's CPU time so far, user and system, in seconds (getrusage). */
double load_self_cpu_s(void);

#endif
