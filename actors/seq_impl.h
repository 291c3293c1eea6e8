/*
 * seq_impl.h - the inside of the sequencer (sequencer.h), shared by the
 * files that make it up:
 *   sequencer.c    its state, the way in for every event (offer, settle),
 *                  arrays, and what the gate asks
 *   seq_verdict.c  verdicts and the one-line details they carry; prints
 *   seq_own.c      the events the conversation makes itself, and expiry
 *   seq_out.c      what drivers take out of it, and what it knows
 */
#ifndef SEQ_IMPL_H
#define SEQ_IMPL_H

#include "actors/sequencer.h"

typedef struct held {
    struct held *next;
    ev e;
    void *token;
    uint64_t deadline; /* monotonic ms */
} held;

typedef struct deferred {
    struct deferred *next;
    ev e;              /* stamped with id and timestamp, not yet with a parent */
    uint64_t deadline; /* wall-clock ms: it survives restarts */
    char *after;       /* the head when it was deferred (NULL: none) */
    uint64_t gen;      /* the deferred set that first held it */
    void *tag;         /* the token it came with (answered already: a name only) */
} deferred;

typedef struct answer {
    struct answer *next;
    void *token;
    seq_verdict v;
} answer;

struct sequencer {
    seq_opts o;
    seq_log log;
    seq_decided_fn decided;
    void *decided_ctx;
    gate *g;  /* live: everything accepted */
    gate *gc; /* committed: everything durable */
    conv_status status, status_c;
    conv_findings findings_c; /* in the durable log */
    uint64_t count;           /* durable events */
    uint64_t accepted;        /* durable, plus those in units */
    held *holds;
    size_t nholds;
    deferred *defs;
    size_t ndefs;
    uint64_t gen;
    bool stopping;
    seq_unit *ready, *ready_tail; /* made, not taken */
    seq_unit *taken, *taken_tail; /* taken, not durable */
    seq_unit *tentative;          /* an array being checked */
    answer *answers, *answers_tail;
    uint64_t mono, wall;
    uint64_t gate_ns;
    void *tag; /* the tag of the event being decided */
};

/* sequencer.c */
void seq__offer(sequencer *s, ev *e, void *token, seq_was was, void *tag);
void seq__settle(sequencer *s);
deferred *seq__deferred_find(const sequencer *s, const char *id);
/* e alone, in a unit of its own that token waits for (success: answered
 * as a control); v is how the decision is told. */
void seq__accept_alone(sequencer *s, ev *e, void *token, bool success, seq_was was,
                       const seq_verdict *v);
void seq__accept_state(sequencer *s, gate *g, const ev *e);
char *seq__strdup(const char *s);

/* seq_verdict.c */
void seq__decide(sequencer *s, const ev *e, const seq_verdict *v, seq_was was, uint64_t index);
/* Hand v (taken) to whoever waits (nobody: it is dropped). */
void seq__answer(sequencer *s, void *token, seq_verdict *v);
/* Decide e as kind with a one-line detail, and answer its token. */
void seq__refuse(sequencer *s, const ev *e, void *token, seq_was was, seq_kind kind,
                 unsigned retry_after, const char *f, ...) __attribute__((format(printf, 7, 8)));
/* Decide e rejected by rule r (extra: more to say), and answer its token. */
void seq__reject(sequencer *s, const ev *e, void *token, seq_was was, gate_rule r,
                 const char *extra);
/* One line saying why rule r refuses e, in the live state. */
void seq__rule_detail(const sequencer *s, gate_rule r, const ev *e, char *out, size_t cap);
char *seq__fmt(const char *f, ...) __attribute__((format(printf, 1, 2)));
/* Does an offered event's print match a kept one's? */
bool seq__same_print(const seq_print *p, const seq_print *k);

/* seq_own.c */
int seq__make(json_t *obj, ev *out);
/* Offer an event of the conversation's own (obj taken; nobody waits). */
void seq__offer_own(sequencer *s, json_t *obj);
json_t *seq__status_event(conv_status st);
void seq__set_status(sequencer *s, conv_status st);
void seq__back_to_idle(sequencer *s);
void seq__record_violation(sequencer *s, const char *text);

#endif
