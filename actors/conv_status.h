/*
 * conv_status.h - a conversation's status, its transitions (spec §2.4),
 * its compliance policy, the controls a client may ask for, and the
 * findings its log records. Pure.
 */
#ifndef CONV_STATUS_H
#define CONV_STATUS_H

#include <stdbool.h>
#include <stdint.h>

typedef enum conv_policy {
    CONV_REJECT = 0, /* default: violations are refused */
    CONV_OBSERVE,    /* violations are appended and recorded */
} conv_policy;

typedef enum conv_status {
    CONV_IDLE = 0,
    CONV_RUNNING,
    CONV_PAUSED,
    CONV_WAITING_FOR_CONFIRMATION,
    CONV_FINISHED,
    CONV_ERROR,
    CONV_STUCK,
    CONV_DELETING,
} conv_status;

struct ev;

const char *conv_status_name(conv_status s);
int conv_status_parse(const char *s); /* -1 if unknown */
/* How an accepted event moves the status, if it does: -1 if not. */
int conv_status_of(const struct ev *e);
/* May the status go from `from` to `to` (spec §2.4)? */
bool conv_transition_ok(conv_status from, conv_status to);

/* The codes of the ConversationErrorEvents a conversation records about
 * itself: a violation appended in observe mode, a stuck finding. */
#define CONV_CODE_VIOLATION "ComplianceViolation"
#define CONV_CODE_STUCK     "StuckPatternDetected"

/* What a log holds of them: counted from the events themselves (whoever
 * appended them), so the log alone gives the same counts after a restart. */
typedef struct conv_findings {
    uint64_t violations; /* ComplianceViolation */
    uint64_t stuck;      /* StuckPatternDetected */
} conv_findings;

/* Which of them e is: 0 neither, else CONV_FINDING_*. */
enum { CONV_FINDING_VIOLATION = 1, CONV_FINDING_STUCK = 2 };
int conv_finding_of(const struct ev *e);
/* Count a finding (conv_finding_of) into f. */
void conv_findings_add(conv_findings *f, int finding);

typedef enum conv_control {
    CONV_RUN = 1,      /* status -> running */
    CONV_PAUSE,        /* PauseEvent, status -> paused */
    CONV_INTERRUPT,    /* InterruptEvent, status -> paused */
    CONV_REFUSE_CALLS, /* the user rejects what waits for confirmation: a
                       UserRejectObservation for each pending call (buf:
                       the reason), status waiting -> idle */
} conv_control;

#endif
