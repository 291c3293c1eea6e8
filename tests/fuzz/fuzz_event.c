/*
 * fuzz_event.c - libFuzzer target for what any producer controls: the
 * events it posts, read by the event schema (ev_parse), written as the
 * canonical bytes the log stores (ev_serialize), and judged by the
 * sequencer and the stuck rules as a live conversation judges them,
 * played offline (replay.h).
 *
 * Input: the first byte picks the options (stuck detection on or off); the
 * rest is lines, each an event's JSON text, or "R": the conversation
 * restarts (replay_restart).
 *
 * Invariants:
 *  - an event the schema refuses is refused in one line saying why;
 *  - the canonical bytes of an accepted (stamped) event are accepted
 *    again, and written again byte for byte (the form is a fixed point);
 *  - every event offered gets exactly one answer by the end of the input
 *    (runtime/actor.h's rule for requests, here for producers).
 */
#include "actors/event.h"
#include "actors/replay.h"
#include "runtime/buf.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

enum { EVENTS_MAX = 256 };

typedef struct answers {
    unsigned char n[EVENTS_MAX + 1]; /* per token (1-based): answers so far */
} answers;

static void on_answer(void *ctx, void *token, const seq_verdict *v)
{
    (void)v;
    answers *a = ctx;
    uintptr_t k = (uintptr_t)token;
    CHECK(k >= 1 && k <= EVENTS_MAX);
    CHECK(a->n[k] < 255);
    a->n[k]++;
}

/* The canonical bytes of e, read again, are written again the same. */
static void fixed_point(const ev *e)
{
    rt_buf *b = ev_serialize(e);
    CHECK(b != NULL);
    ev again;
    char err[256] = "";
    if (ev_parse((const char *)b->data, b->len, &again, err, sizeof(err)) != 0) {
        fprintf(stderr, "fuzz_event: canonical bytes refused (%s): %.*s\n", err,
                (int)(b->len > 400 ? 400 : b->len), (const char *)b->data);
        abort();
    }
    rt_buf *b2 = ev_serialize(&again);
    CHECK(b2 != NULL);
    if (b2->len != b->len || memcmp(b2->data, b->data, b->len) != 0) {
        fprintf(stderr, "fuzz_event: canonical bytes not a fixed point:\n%.*s\n%.*s\n",
                (int)b->len, (const char *)b->data, (int)b2->len, (const char *)b2->data);
        abort();
    }
    rt_buf_unref(b2);
    ev_free(&again);
    rt_buf_unref(b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > 64 * 1024)
        return 0;
    static answers a;
    memset(&a, 0, sizeof(a));
    replay_opts ro = {.seq = {.hold_timeout_ms = 3600000, .defer_timeout_ms = 3600000},
                      .stuck_off = (data[0] & 1) != 0};
    replay_hooks h = {.ctx = &a, .answered = on_answer};
    replay *rp = replay_new(&ro, &h);
    CHECK(rp != NULL);
    uintptr_t offered = 0;
    const char *p = (const char *)data + 1, *end = (const char *)data + size;
    while (p < end && offered < EVENTS_MAX) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t len = nl != NULL ? (size_t)(nl - p) : (size_t)(end - p);
        if (len == 1 && p[0] == 'R') {
            replay_restart(rp);
        } else if (len > 0) {
            ev e;
            char err[256] = "";
            if (ev_parse(p, len, &e, err, sizeof(err)) != 0) {
                fuzz_line(err, sizeof(err));
            } else if (ev_stamp(&e, NULL) != 0) {
                ev_free(&e);
            } else {
                fixed_point(&e);
                replay_offer(rp, &e, (void *)++offered);
            }
        }
        p += len + 1;
    }
    replay_end(rp);
    for (uintptr_t k = 1; k <= offered; k++)
        if (a.n[k] != 1) {
            fprintf(stderr, "fuzz_event: event %zu of %zu answered %d times\n", (size_t)k,
                    (size_t)offered, a.n[k]);
            abort();
        }
    replay_free(rp);
    return 0;
}
