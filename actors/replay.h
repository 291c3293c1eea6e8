/*
 * replay.h - a conversation played offline, the way the live actors play
 * it: the sequencer decides (sequencer.h), the units it makes become
 * "durable" in order, and every event that does is fed to the stuck rules
 * (stuck.h), whose findings and nudges go back to the sequencer, exactly
 * as the stuck detector actor sends them to a live conversation. What is
 * "in the log" is kept as prints and keys (seq_print), not as event
 * bodies: memory is what the gate needs, not the conversation.
 *
 * Order. A live conversation hands every unit a request causes to the
 * store at once; the detector hears of each event once it is durable and
 * answers with a message, which the conversation handles after the units
 * already handed over. So here: after each call, every unit made is
 * "handed over"; then they become durable one by one, oldest first, the
 * detector's answer after each is handled at once, and what that makes
 * joins the end of the line. With a producer that waits until everything
 * settled before its next event (as `parley lint` assumes, and the live
 * side of the equivalence test does), the log, the verdicts and the
 * findings are the ones a live conversation gives.
 *
 * `parley lint` is this plus reading input and reporting; nothing of the
 * ordering rules lives in it.
 */
#ifndef REPLAY_H
#define REPLAY_H

#include "actors/sequencer.h"
#include "actors/stuck.h"

typedef struct replay_opts {
    seq_opts seq;
    stuck_thresholds stuck; /* zeros: the defaults */
    bool stuck_off;         /* the conversation's stuck_detection: false */
} replay_opts;

typedef struct replay_hooks {
    void *ctx;
    /* Every decision (sequencer.h: seq_decided_fn). */
    seq_decided_fn decided;
    /* After an event became durable (index), what the stuck rules say, and
     * whether the sequencer acted on a finding (the status went stuck). */
    void (*stuck)(void *ctx, uint64_t index, const stuck_verdict *v, bool acted);
    /* A producer's answer (the verdict is borrowed). */
    void (*answered)(void *ctx, void *token, const seq_verdict *v);
    /* A unit became durable: its events got indexes first..first+n-1. */
    void (*durable)(void *ctx, const seq_unit *u, uint64_t first);
} replay_hooks;

typedef struct replay replay;

replay *replay_new(const replay_opts *o, const replay_hooks *h);
void replay_free(replay *r);

/* Offer an event (taken); token names it in decisions and answers. Then
 * everything it causes happens, until nothing moves. */
void replay_offer(replay *r, ev *e, void *token);
/* The same for an array, all or nothing (the events taken). */
void replay_offer_array(replay *r, ev *evs, size_t n, void *token);
/* The conversation restarts: held events are refused (their producers get
 * 503 and retry), and recovery runs as after a crash. */
void replay_restart(replay *r);
/* The end of the input: everything that waits expires. */
void replay_end(replay *r);

sequencer *replay_seq(replay *r);
/* The token of the committed event with this id, if there is one. */
bool replay_token_of(const replay *r, const char *id, void **token);
/* Memory the log's tables hold. */
size_t replay_memory(const replay *r);

#endif
