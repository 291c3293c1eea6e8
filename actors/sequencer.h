/*
 * sequencer.h - a conversation's ordering rules, in one place: which
 * offered event goes into the log, when, in what order, and what the
 * conversation appends of its own. Pure logic: no I/O, no loop, no clock
 * of its own (the caller says what time it is), so the live conversation
 * actor, array appends and `parley lint` all drive this one module, and a
 * test can drive it too.
 *
 * It owns:
 * - the compliance gate's state (gate.h) as it will be once everything
 *   accepted is durable ("live"), and as it is in the log ("committed",
 *   what checkpoints describe);
 * - the status and its transitions (spec §2.4), live and committed;
 * - the events waiting: held for their parent (bounded in count and
 *   time, in memory: their producer waits) and deferred until no tool
 *   call is pending (bounded, durable: the driver saves them, see gen);
 * - the policy (reject, or observe: commit and record the violation);
 * - the events the conversation makes itself: status updates, stuck
 *   findings, nudges, observed violations, expired deferrals, recovery
 *   after a crash mid-run, pause and interrupt.
 *
 * How a driver uses it. Offer events (seq_offer, seq_offer_array), apply
 * controls, findings and expiry; after each call, take the units that are
 * ready (seq_take: one per request, or per event of its own, in log
 * order) and hand them to the log, and take the answers for producers who
 * wait (seq_answer). When a unit is durable, seq_durable moves the
 * committed state on and gives it back, to publish and answer. Every
 * accepted event is in exactly one unit; units become durable in the
 * order they were made.
 *
 * Who waits is an opaque token the driver gives with an offer (NULL:
 * nobody). A token is answered exactly once: through seq_answer, or as
 * the token of a unit (once durable), or in a unit's echoes (a retry,
 * answered when what came before it is durable).
 *
 * What the sequencer asks about the durable log goes through seq_log; it
 * knows the events accepted but not yet durable itself. Retries are
 * compared by print (seq_print_of): the same event again is an idempotent
 * retry, other content under its id a duplicate_event_id.
 */
#ifndef SEQUENCER_H
#define SEQUENCER_H

#include "actors/conv_status.h"
#include "actors/event.h"
#include "actors/gate.h"
#include "actors/stuck.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* An event as a producer offers it: valid (event.h) and storable (ids
 * within the store's key sizes, a kind that is stored). The value `at` of
 * a document (a reference taken on success), or a jansson value (read
 * again, ev_from_json); -EINVAL and one line in err otherwise. */
int seq_event_at(rt_jdoc *d, uint32_t at, ev *out, char *err, size_t errlen);
int seq_event(json_t *obj, ev *out, char *err, size_t errlen);

/* ---- verdicts ------------------------------------------------------------ */

typedef enum seq_kind {
    SEQ_ACCEPTED = 0, /* it joins a unit (answered once durable) */
    SEQ_DUPLICATE,    /* the same event is there already: an idempotent retry */
    SEQ_DEFERRED,     /* kept (durably) until no tool call is pending */
    SEQ_HELD,         /* waiting for its parent */
    SEQ_REJECTED,     /* a rule refused it */
    SEQ_INVALID,      /* not allowed now (a status it cannot move to) */
    SEQ_CONFLICT,     /* a control the status does not allow */
    SEQ_BUSY,         /* a bound was reached: retry later */
    SEQ_FAILED,       /* out of memory */
    SEQ_DONE,         /* a control that had nothing to do */
} seq_kind;

/* Where an event came from, for whoever reports decisions. */
typedef enum seq_was {
    SEQ_NEW = 0,      /* offered by a producer */
    SEQ_WAS_HELD,     /* offered again once its parent came */
    SEQ_WAS_DEFERRED, /* offered again once no call was pending */
    SEQ_OWN,          /* made by the conversation */
} seq_was;

typedef struct seq_verdict {
    seq_kind kind;
    gate_rule rule;       /* REJECTED; and ACCEPTED in observe mode (the rule observed) */
    char *detail;         /* one line, or NULL (ACCEPTED without violation, HELD...) */
    char *event_id;       /* REJECTED: the refused event's id (NULL if it had none) */
    json_t *pending;      /* REJECTED: the pending tool call ids then (array) */
    json_t *ids;          /* DUPLICATE, DEFERRED: the events' ids (array) */
    unsigned retry_after; /* BUSY: seconds, 0 if unsaid */
    uint64_t gen;         /* DEFERRED: the deferred set that holds it (seq_deferred_gen) */
} seq_verdict;

void seq_verdict_clear(seq_verdict *v);

/* ---- units: what goes into the log together ------------------------------ */

typedef struct seq_item {
    ev e;          /* stamped; slim (no tree) once taken, with seq_opts.slim */
    rt_buf *bytes; /* its stored form, made once */
    char key[256]; /* "a:<call>" / "o:<call>" (gate_key), for the log's index */
    uint32_t keylen;
    int8_t status;   /* conv_status_of(e), made at acceptance */
    uint8_t finding; /* conv_finding_of(e), likewise */
    rt_buf *note;    /* with seq_opts.slim: its stuck_note, made when taken */
} seq_item;

typedef struct seq_echo { /* a retry of events, answered with this unit */
    struct seq_echo *next;
    void *token;
    json_t *ids;
} seq_echo;

typedef struct seq_unit {
    struct seq_unit *next;
    void *token;   /* who waits for it (NULL: nobody) */
    bool success;  /* a control: answered with success, not with the events */
    size_t n, cap; /* items */
    seq_item *items;
    json_t *posted;   /* an array that mixed retries with new events: every id
                         as posted (NULL otherwise) */
    seq_echo *echoes; /* retries waiting for this unit */
} seq_unit;

void seq_unit_free(seq_unit *u);

/* ---- the sequencer ------------------------------------------------------- */

typedef struct seq_opts {
    conv_policy policy;
    uint32_t defer_max;        /* deferred messages at a time; 0: 64 */
    uint32_t hold_max;         /* held events at a time; 0: 64 */
    uint64_t defer_timeout_ms; /* wall clock; 0: 10 minutes */
    uint64_t hold_timeout_ms;  /* monotonic; 0: 5 seconds */
    bool measure;              /* time the gate (seq_gate_ns) */
    /* Units taken (seq_take) keep their events slim (ev_slim) and each
     * event's stuck_note (seq_item.note), made then: the trees go when the
     * store is handed the bytes, not when the group is durable. Whoever
     * reads items' trees after seq_take (replay) leaves it off. */
    bool slim;
} seq_opts;

/* A retry's comparison: digests of an event's canonical bytes without
 * timestamp and parent_id, and of its timestamp. */
typedef struct seq_print {
    uint8_t rest[16], ts[16];
    uint8_t ts_state; /* 0 absent, 1 null (never, now: refused), 2 a value */
} seq_print;

/* 0, or -ENOMEM (-EINVAL for a slim event). */
int seq_print_of(const ev *e, seq_print *out);

/* The durable log, as the sequencer asks about it. */
typedef struct seq_log {
    void *ctx;
    /* Is an event with this id in the log? 1 yes (and, if print is not
     * NULL, *print is its print), 0 no, -1 yes but unreadable (then it
     * counts as other content). */
    int (*find)(void *ctx, const char *id, seq_print *print);
    /* Was a record written with this key (gate_key)? */
    bool (*has_key)(void *ctx, const char *key, size_t len);
} seq_log;

/* Every decision, as it is made, for whoever reports or counts them:
 * index is the event's future place in the log (ACCEPTED); tag names the
 * event: the token it was offered with (for a deferred message offered
 * again, the token it first came with, answered long ago: a name only),
 * NULL for the conversation's own. */
typedef void (*seq_decided_fn)(void *ctx, const ev *e, const seq_verdict *v, seq_was was,
                               uint64_t index, void *tag);

typedef struct sequencer sequencer;

/* A sequencer for a conversation whose log holds `count` events, in the
 * state `g` (taken; NULL: empty) and `status`. NULL if out of memory. */
sequencer *seq_new(const seq_opts *o, const seq_log *log, gate *g, conv_status status,
                   uint64_t count);
void seq_free(sequencer *s);
/* Tell every decision to fn (NULL: nobody). */
void seq_on_decided(sequencer *s, seq_decided_fn fn, void *ctx);

/* The time, for deadlines of holds (monotonic) and deferrals (wall). */
void seq_set_time(sequencer *s, uint64_t mono_ms, uint64_t wall_ms);

/* A deferred message a restart interrupted (from the driver's saved set). */
int seq_restore_deferred(sequencer *s, json_t *event, uint64_t deadline, const char *after);

/* Offer one event (taken) from a producer; token waits for the answer. */
void seq_offer(sequencer *s, ev *e, void *token);
/* An array, all or nothing (the events taken, the array freed by the
 * caller): every event checked against the state the earlier ones leave;
 * one that is refused, or would have to wait, refuses the whole array. */
void seq_offer_array(sequencer *s, ev *evs, size_t n, void *token);
/* run / pause / interrupt: answered with success once its events are
 * durable (a unit with success set), or at once. */
void seq_control(sequencer *s, conv_control what, void *token);
/* The user rejects the pending calls (confirmation mode, as upstream's
 * reject_pending_actions): a UserRejectObservation with `reason` for each,
 * and a conversation waiting for confirmation goes back to idle. Answered
 * with success once durable (at once if there was nothing to do). */
void seq_reject(sequencer *s, const char *reason, void *token);
/* The stuck detector found a rule: StuckPatternDetected, status stuck. */
void seq_stuck(sequencer *s, stuck_rule rule);
/* The stuck detector asks for a nudge: an environment message. */
void seq_nudge(sequencer *s, const char *text);
/* Expire the holds and deferrals past their deadline (all: every one). */
void seq_expire(sequencer *s, bool all);
/* The conversation was opened (its state rebuilt from the log): a run that
 * was going on when its process died is over (status error), and the
 * tools it was running will not answer (an AgentErrorEvent for each
 * pending call); deferred messages restored with no call pending go in. */
void seq_recover(sequencer *s);
/* Answer every held event BUSY (why), and (stopping) every later one. */
void seq_refuse_holds(sequencer *s, const char *why, bool stopping);

/* The next unit ready for the log (in order), or NULL. It stays the
 * sequencer's until seq_durable gives it back. */
seq_unit *seq_take(sequencer *s);
/* The oldest unit taken is durable: the committed state moves on; the
 * unit is the caller's now (seq_unit_free). NULL if none was taken. */
seq_unit *seq_durable(sequencer *s);
/* The oldest unit not durable, which never will be (the driver stops):
 * the caller's now, to answer its waiters. NULL when none is left. */
seq_unit *seq_abandon(sequencer *s);
/* The next answer for a token: true and *token, *v set (v is the
 * caller's: seq_verdict_clear), or false. */
bool seq_answer(sequencer *s, void **token, seq_verdict *v);

/* Event e, at index seq_count, is durable in the log: another node wrote
 * it (a store shared by nodes). Both states move on as if this sequencer
 * had made it. Only while nothing is in flight, held, deferred or being
 * checked: false (and nothing changed) otherwise. */
bool seq_adopt(sequencer *s, const ev *e);

/* ---- rest ---------------------------------------------------------------- */

/* Nothing in flight or waiting: the live state is the durable one, and an
 * idle conversation keeps only that (seq_rest). Before anything is offered
 * again, seq_wake: 0, or -ENOMEM (then it still rests, and nothing may be
 * offered). Both are no-ops when they do not apply. */
void seq_rest(sequencer *s);
int seq_wake(sequencer *s);

/* ---- what it knows ------------------------------------------------------- */

conv_status seq_status(const sequencer *s);           /* live */
conv_status seq_status_committed(const sequencer *s); /* durable */
const gate *seq_gate(const sequencer *s);             /* live */
const gate *seq_gate_committed(const sequencer *s);   /* durable: for checkpoints */
uint64_t seq_count(const sequencer *s);               /* durable events */
/* The findings in the durable log (conv_status.h): counted as units
 * become durable, from what the driver says the log held when it was
 * opened (seq_set_findings; a new sequencer starts from none). */
conv_findings seq_findings(const sequencer *s);
void seq_set_findings(sequencer *s, conv_findings f);
bool seq_inflight(const sequencer *s); /* units not durable yet */
/* The index of the first event of u, just taken (seq_take). */
uint64_t seq_unit_first(const sequencer *s, const seq_unit *u);
bool seq_waiting(const sequencer *s); /* holds or deferrals */
size_t seq_held(const sequencer *s);
size_t seq_deferred(const sequencer *s);
/* Changes whenever the deferred set does: save it when it moved (the
 * answers to deferrals wait until the set of their gen is durable). */
uint64_t seq_deferred_gen(const sequencer *s);
/* The deferred set, as the driver saves it:
 * [{"event": {...}, "deadline": wall ms, "after": head or null}]. */
json_t *seq_deferred_json(const sequencer *s);
/* The tag a deferred message came with (NULL if none is deferred with
 * this id, or it came back from a save). */
bool seq_deferred_tag(const sequencer *s, const char *id, void **tag);
uint64_t seq_gate_ns(const sequencer *s);

#endif
