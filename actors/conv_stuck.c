/*
 * conv_stuck.c - a conversation's stuck detector: a subscriber that feeds
 * each durable event to the rules (stuck.h) and tells the conversation
 * what they find. It subscribes with the last 20 events, so it starts (and
 * restarts) with its window full, never reading the whole log (those it
 * only feeds: what they showed was told before); and it gets
 * each event as its note, made by the conversation from the event it has
 * parsed already, so it never parses one itself. A finding is told once
 * while it holds, and again after a state update (the status it changed
 * may have moved back).
 */
#include "conv_impl.h"

#include "runtime/log.h"

#include "runtime/json.h"

#include <stdlib.h>
#include <string.h>

typedef struct detector {
    conv_ctx *ctx;
    stuck *rules;
    rt_actor *conv;
    bool off;  /* stuck_detection: false */
    bool live; /* the subscription is answered: what comes now is new */
    /* the finding last told, while it holds: a monologue that goes on
     * would find it again at every message (a message to the conversation
     * and a turn of it, each doing nothing) */
    stuck_rule told;
} detector;

/* The conversation's own settings, from its stored info (as upstream's
 * start request carries them): "stuck_detection" (default true) and
 * "stuck_detection_thresholds" (any subset of the four). */
static bool settings(const conv_ctx *ctx, stuck_thresholds *t)
{
    stuck_defaults(t);
    st_conv *sc;
    if (st_conv_get(ctx->svc->store, &ctx->id, &sc) != 0)
        return true;
    rt_buf *meta = st_conv_meta(sc);
    st_conv_release(sc);
    json_t *m = rt_json_read((const char *)rt_buf_data(meta), rt_buf_len(meta), 0, NULL);
    rt_buf_unref(meta);
    bool on = !json_is_false(json_object_get(m, "stuck_detection"));
    json_t *th = json_object_get(m, "stuck_detection_thresholds");
    static const char *const names[] = {"action_observation", "action_error", "monologue",
                                        "alternating_pattern"};
    int *fields[] = {&t->action_observation, &t->action_error, &t->monologue,
                     &t->alternating_pattern};
    for (int i = 0; i < 4; i++) {
        json_t *v = json_object_get(th, names[i]);
        if (json_is_integer(v) && json_integer_value(v) >= 1 && json_integer_value(v) <= 1000)
            *fields[i] = (int)json_integer_value(v);
    }
    json_decref(m);
    return on;
}

static int stuck_init(rt_actor *self, void *arg, void **state)
{
    conv_ctx *ctx = arg;
    detector *d = calloc(1, sizeof(*d));
    stuck_thresholds t;
    bool on = settings(ctx, &t);
    if (d == NULL || (d->rules = stuck_new(&t)) == NULL) {
        free(d);
        return RT_ENOMEM;
    }
    d->off = !on;
    d->ctx = ctx;
    /* started after its conversation, which may have retired its tree at
     * rest meanwhile: then it waits, idle, to be stopped with the tree */
    d->conv = convs_running(ctx);
    if (d->conv == NULL) {
        d->off = true;
        *state = d;
        return 0;
    }
    int r = rt_ask(d->conv, CONV_SUBSCRIBE, STUCK_WINDOW | CONV_SUB_NOTES, NULL, self);
    if (r < 0) {
        stuck_free(d->rules);
        rt_actor_unref(d->conv);
        free(d);
        return r;
    }
    *state = d;
    return 0;
}

static int stuck_handle(rt_actor *self, void *state, rt_msg *m)
{
    (void)self;
    detector *d = state;
    if (m->kind == RT_KIND_ERROR)
        return m->status;     /* the subscription failed: start again */
    if (m->kind == CONV_SYNC) /* what came before is handled (and told) */
        return rt_reply(m, CONV_SYNC_DONE, 0, m->arg, NULL) < 0 ? 0 : 0;
    if (m->kind == CONV_RESULT) { /* the subscription's answer, after the replay */
        d->live = true;
        return 0;
    }
    if (m->kind != CONV_NOTE || m->buf == NULL || d->off ||
        rt_buf_len(m->buf) != sizeof(stuck_note))
        return 0;
    const stuck_note *n = (const stuck_note *)rt_buf_data(m->buf);
    stuck_feed_note(d->rules, n);
    if (!n->counts)
        d->told = STUCK_NONE; /* a state update: the status may have moved, tell again */
    /* the replayed events only fill the window: what they showed was told
     * by the detector before this one (a restart must not nudge or find
     * it again) */
    if (!d->live)
        return 0;
    stuck_verdict v;
    stuck_check(d->rules, &v);
    if (v.nudge) {
        rt_buf *text = rt_buf_copy(v.nudge_text, strlen(v.nudge_text));
        if (text != NULL && rt_send(d->conv, CONV_NUDGE, 0, text) < 0)
            rt_buf_unref(text);
    } else if (v.rule != STUCK_NONE && v.rule != d->told) {
        if (rt_send(d->conv, CONV_STUCK_FOUND, v.rule, NULL) < 0)
            return 0; /* told at the next event */
    }
    d->told = v.rule;
    return 0;
}

static void stuck_stop(rt_actor *self, void *state)
{
    detector *d = state;
    if (d->conv != NULL)
        rt_ask(d->conv, CONV_UNSUBSCRIBE, 0, NULL, self);
    rt_actor_unref(d->conv);
    stuck_free(d->rules);
    free(d);
}

const rt_behaviour conv_stuck_behaviour = {
    .name = "stuck-detector",
    .init = stuck_init,
    .handle = stuck_handle,
    .stop = stuck_stop,
};
