/*
 * stuck.h - the stuck detector's rules (spec/checks.md §1), pure.
 *
 * Feed it every committed event, in log order; after each, ask it. It keeps
 * only the scan window, the last 20 events of the conversation (state
 * updates are not part of it: they are not nodes of the conversation
 * tree), as fingerprints: kind, source, a 64-bit hash of the id and one of
 * the fields each kind is compared on (§1.5: ids, timestamps and tool-call
 * ids ignored), plus the little the nudge text needs. Memory is bounded
 * (about 600 bytes), whatever the length of the conversation or of its
 * events, and small for a short one.
 *
 * The rules are checked in the upstream order, first hit wins:
 * repeating_action_observation, repeating_action_error, monologue,
 * alternating_action_observation. Before them, the one-time action-error
 * nudge: when the streak of identical actions answered by errors equals the
 * threshold exactly and the newest error has not been nudged about yet, the
 * answer is "nudge" (and not "stuck") this time.
 */
#ifndef STUCK_H
#define STUCK_H

#include "actors/event.h"

#include <stdbool.h>

enum { STUCK_WINDOW = 20 };

typedef struct stuck_thresholds {
    int action_observation;  /* default 4 */
    int action_error;        /* default 3 */
    int monologue;           /* default 3 */
    int alternating_pattern; /* default 6 */
} stuck_thresholds;

typedef enum stuck_rule {
    STUCK_NONE = 0,
    STUCK_REPEATING_ACTION_OBSERVATION,
    STUCK_REPEATING_ACTION_ERROR,
    STUCK_MONOLOGUE,
    STUCK_ALTERNATING_ACTION_OBSERVATION,
} stuck_rule;

typedef struct stuck_verdict {
    stuck_rule rule; /* STUCK_NONE unless stuck */
    bool nudge;      /* the action-error nudge is due (then rule is STUCK_NONE) */
    /* when nudge: the text of the environment message to append, naming the
     * tool, the error and the threshold */
    char nudge_text[1024];
} stuck_verdict;

typedef struct stuck stuck;

/* What the detector keeps of one event: fixed size, no pointers, so that
 * whoever holds the parsed event computes it once and can pass it on as
 * bytes (a fingerprint of the compared fields, one of the id, and for an
 * action its tool name, for an agent error its error text, cut). */
typedef struct stuck_note {
    uint64_t hash, id_hash;
    uint8_t kind, source;
    bool solo;      /* fingerprinting failed: equal to nothing */
    bool counts;    /* false for events outside the window (state updates...) */
    char text[640]; /* tool name (actions) or error text (agent errors) */
} stuck_note;

/* NULL thresholds: the defaults. Any value < 1 is replaced by its default. */
stuck *stuck_new(const stuck_thresholds *t);
void stuck_free(stuck *s);
void stuck_defaults(stuck_thresholds *t);

/* A committed event, in log order. */
void stuck_feed(stuck *s, const ev *e);
/* The same in two steps: the note of an event, then feeding it. */
void stuck_note_of(const ev *e, stuck_note *n);
/* The same in a new buffer (what a conversation sends its detector); NULL
 * if out of memory. */
rt_buf *stuck_note_new(const ev *e);
void stuck_feed_note(stuck *s, const stuck_note *n);
/* What the detector says now. Asking for a nudge remembers it: asking
 * again without new events gives no second nudge. */
void stuck_check(stuck *s, stuck_verdict *v);

/* "repeating_action_observation", ... ; "" for STUCK_NONE. */
const char *stuck_rule_name(stuck_rule r);

#endif
