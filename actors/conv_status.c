/* conv_status.c - statuses, their transitions and the findings a log
 * records (conv_status.h). */
#include "actors/conv_status.h"

#include "actors/event.h"

#include <string.h>

/* ------------------------------------------------------------- status --- */

static const char *const status_names[] = {
    [CONV_IDLE] = "idle",         [CONV_RUNNING] = "running",
    [CONV_PAUSED] = "paused",     [CONV_WAITING_FOR_CONFIRMATION] = "waiting_for_confirmation",
    [CONV_FINISHED] = "finished", [CONV_ERROR] = "error",
    [CONV_STUCK] = "stuck",       [CONV_DELETING] = "deleting",
};

const char *conv_status_name(conv_status s)
{
    return s <= CONV_DELETING ? status_names[s] : "idle";
}

int conv_status_parse(const char *s)
{
    for (int i = 0; s != NULL && i <= CONV_DELETING; i++)
        if (strcmp(s, status_names[i]) == 0)
            return i;
    return -1;
}

int conv_status_of(const ev *e)
{
    if (e->kind != EV_STATE_UPDATE || e->state_key == NULL ||
        strcmp(e->state_key, "execution_status") != 0)
        return -1;
    return conv_status_parse(ev_string(e, "value"));
}

int conv_finding_of(const ev *e)
{
    if (e->kind != EV_CONVERSATION_ERROR)
        return 0;
    const char *code = ev_string(e, "code");
    if (code != NULL && strcmp(code, CONV_CODE_VIOLATION) == 0)
        return CONV_FINDING_VIOLATION;
    if (code != NULL && strcmp(code, CONV_CODE_STUCK) == 0)
        return CONV_FINDING_STUCK;
    return 0;
}

void conv_findings_add(conv_findings *f, int finding)
{
    if (finding == CONV_FINDING_VIOLATION)
        f->violations++;
    else if (finding == CONV_FINDING_STUCK)
        f->stuck++;
}

/* Spec §2.4. A run starts from idle, paused, error, stuck (and finished: a
 * Stop hook can send a finishing run back to running); only a run finishes
 * or waits for confirmation; paused from idle, running or waiting for
 * confirmation (the spec pauses only idle or running conversations, but
 * an interrupt, which also ends paused, must be able to end a wait for
 * confirmation, and both take this one transition); a user
 * message brings finished or stuck back to idle, and a confirmation's
 * rejection brings waiting back to idle; anything can fail or be deleted,
 * and nothing comes back from deleting. */
bool conv_transition_ok(conv_status from, conv_status to)
{
    if (from == to)
        return true;
    if (from == CONV_DELETING)
        return false;
    switch (to) {
    case CONV_RUNNING:
        return from != CONV_RUNNING;
    case CONV_FINISHED:
    case CONV_WAITING_FOR_CONFIRMATION:
        return from == CONV_RUNNING;
    case CONV_PAUSED:
        return from == CONV_IDLE || from == CONV_RUNNING || from == CONV_WAITING_FOR_CONFIRMATION;
    case CONV_IDLE:
        return from == CONV_FINISHED || from == CONV_STUCK ||
               from == CONV_WAITING_FOR_CONFIRMATION || from == CONV_PAUSED || from == CONV_ERROR;
    case CONV_STUCK:
        return from == CONV_RUNNING || from == CONV_IDLE || from == CONV_WAITING_FOR_CONFIRMATION;
    case CONV_ERROR:
    case CONV_DELETING:
        return true;
    }
    return false;
}
