/*
 * pl_wait.c - a verdict of the public API waited for: the commands that
 * drive an in-process instance from their own thread (`parley import
 * --data`, `parley acp --data`) ask and block until it answers.
 */
#include "cli.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

typedef struct waiter {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool done;
    pl_outcome outcome;
    char detail[1024];
} waiter;

static void verdict(void *ctx, const pl_verdict *v)
{
    waiter *w = ctx;
    pthread_mutex_lock(&w->mu);
    w->outcome = v->outcome;
    const char *head =
        v->outcome == PL_REJECTED && v->rule != NULL ? v->rule : pl_outcome_name(v->outcome);
    snprintf(w->detail, sizeof(w->detail), "%s%s%s", head, v->detail[0] ? ": " : "", v->detail);
    w->done = true;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

static void waiter_init(waiter *w)
{
    *w = (waiter){.done = false};
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
}

/* The verdict of what was asked (e: how the asking went), w cleared. */
static int waiter_wait(waiter *w, int e, char *why, size_t n)
{
    if (e == 0) {
        pthread_mutex_lock(&w->mu);
        while (!w->done)
            pthread_cond_wait(&w->cv, &w->mu);
        pthread_mutex_unlock(&w->mu);
        snprintf(why, n, "%s", w->detail);
    } else {
        snprintf(why, n, "%s", pl_strerror(e));
    }
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
    return e == 0 ? (int)w->outcome : -1;
}

int cli_pl_wait(pl_conv *c, const char *json, size_t len, pl_control_op op, char *why, size_t n)
{
    waiter w;
    waiter_init(&w);
    int e = json != NULL ? pl_append(c, json, len, verdict, &w) : pl_control(c, op, verdict, &w);
    return waiter_wait(&w, e, why, n);
}

int cli_pl_reject(pl_conv *c, const char *reason, char *why, size_t n)
{
    waiter w;
    waiter_init(&w);
    return waiter_wait(&w, pl_reject(c, reason, verdict, &w), why, n);
}
