/*
 * acp_host.c - a hosted agent's actor, the conversation's side (acp_host.h):
 * following the log, the prompts it owes, turns and the statuses they end
 * in. The process's side is acp_host_proc.c.
 */
#include "acp_host_impl.h"

#include "runtime/json.h"
#include "runtime/log.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void acp_prompt_free(acp_prompt *q)
{
    if (q == NULL)
        return;
    free(q->event_id);
    json_decref(q->blocks);
    free(q);
}

static void queue_clear(acp_host *h)
{
    while (h->qhead != NULL) {
        acp_prompt *q = h->qhead;
        h->qhead = q->next;
        acp_prompt_free(q);
    }
    h->qtail = NULL;
}

static void queue_push(acp_host *h, acp_prompt *q, bool front)
{
    if (front) {
        q->next = h->qhead;
        h->qhead = q;
        if (h->qtail == NULL)
            h->qtail = q;
        return;
    }
    q->next = NULL;
    if (h->qtail != NULL)
        h->qtail->next = q;
    else
        h->qhead = q;
    h->qtail = q;
}

static acp_prompt *prompt_of(json_t *e)
{
    json_t *blocks = acp_prompt_of(e);
    acp_prompt *q = blocks != NULL ? calloc(1, sizeof(*q)) : NULL;
    const char *id = json_string_value(json_object_get(e, "id"));
    if (q == NULL || (q->event_id = strdup(id != NULL ? id : "")) == NULL) {
        free(q);
        json_decref(blocks);
        return NULL;
    }
    q->blocks = blocks;
    const char *src = json_string_value(json_object_get(e, "source"));
    q->nudge = src != NULL && strcmp(src, "environment") == 0;
    return q;
}

/* ---- appending -------------------------------------------------------------- */

static void append_one(acp_host *h, json_t *e)
{
    rt_buf *b = rt_json_buf(json_incref(e));
    if (b == NULL || rt_ask(h->conv, CONV_APPEND, 0, b, h->self) < 0) {
        rt_buf_unref(b);
        rt_log(RT_LOG_ERROR, "agent", "%s: cannot append the agent's events", h->agent);
        return;
    }
    h->inflight++;
}

void acp_append(acp_host *h, json_t *events)
{
    acp_mask(events, (const char *const *)h->secrets, h->nsecrets);
    if (json_is_array(events)) {
        size_t i;
        json_t *e;
        json_array_foreach(events, i, e)
        {
            append_one(h, e);
        }
    } else if (events != NULL) {
        append_one(h, events);
    }
    json_decref(events);
}

void acp_line_done(acp_host *h)
{
    if (h->inflight <= ACP_INFLIGHT)
        rt_proc_ack(h->proc, 1);
    else
        h->unacked++;
}

/* An append was answered: lines held back go on. */
static void answered(acp_host *h)
{
    if (h->inflight > 0)
        h->inflight--;
    while (h->unacked > 0 && h->inflight <= ACP_INFLIGHT) {
        h->unacked--;
        rt_proc_ack(h->proc, 1);
    }
}

static json_t *status_event(const char *status)
{
    return json_pack("{s:s, s:s, s:s, s:s}", "kind", "ConversationStateUpdateEvent", "source",
                     "environment", "key", "execution_status", "value", status);
}

/* Ask for a status the log does not have yet, if it may move there. */
static void set_status(acp_host *h, conv_status to)
{
    if (h->status == to || !conv_transition_ok(h->status, to))
        return;
    acp_append(h, status_event(conv_status_name(to)));
}

void acp_fail(acp_host *h, const char *code, const char *detail)
{
    rt_log(RT_LOG_WARN, "agent", "%s: %s: %s", h->agent, code, detail);
    acp_append(h, json_pack("{s:s, s:s, s:s, s:s}", "kind", "ConversationErrorEvent", "source",
                            "agent", "code", code, "detail", detail));
    set_status(h, CONV_ERROR);
}

/* ---- secrets ------------------------------------------------------------------- */

void acp_secrets_clear(acp_host *h)
{
    for (size_t i = 0; i < h->nsecrets; i++) {
        free(h->secrets[i]);
        free(h->secret_env[i]);
    }
    free(h->secrets);
    free(h->secret_env);
    h->secrets = h->secret_env = NULL;
    h->nsecrets = 0;
}

static int longer_first(const void *a, const void *b)
{
    size_t la = strlen(*(char *const *)a), lb = strlen(*(char *const *)b);
    return la < lb ? 1 : la > lb ? -1 : 0;
}

void acp_secrets_load(acp_host *h)
{
    acp_secrets_clear(h);
    json_t *all = convs_secrets(h->ctx->svc, &h->ctx->id);
    size_t n = json_object_size(all);
    if (n == 0 || (h->secrets = calloc(n + 1, sizeof(char *))) == NULL ||
        (h->secret_env = calloc(n + 1, sizeof(char *))) == NULL) {
        free(h->secrets);
        h->secrets = NULL;
        json_decref(all);
        return;
    }
    const char *k;
    json_t *v;
    json_object_foreach(all, k, v)
    {
        size_t len = strlen(k) + 1 + json_string_length(v) + 1;
        char *kv = malloc(len), *val = strdup(json_string_value(v));
        if (kv == NULL || val == NULL) {
            free(kv);
            free(val);
            continue;
        }
        snprintf(kv, len, "%s=%s", k, json_string_value(v));
        h->secret_env[h->nsecrets] = kv;
        h->secrets[h->nsecrets++] = val;
    }
    json_decref(all);
    /* a value inside a longer one must not cut that one in two */
    qsort(h->secrets, h->nsecrets, sizeof(char *), longer_first);
}

/* ---- turns --------------------------------------------------------------------- */

static void start_turn(acp_host *h)
{
    acp_prompt *q = h->qhead;
    h->qhead = q->next;
    if (h->qhead == NULL)
        h->qtail = NULL;
    q->next = NULL;
    char resp[37];
    rt_uuid u;
    rt_uuid_v4(&u);
    rt_uuid_dashed(&u, resp);
    h->turn = acp_turn_new(resp, NULL, NULL, NULL);
    h->rejected = false;
    if (h->turn == NULL) {
        acp_prompt_free(q);
        acp_fail(h, "AgentError", "out of memory");
        return;
    }
    h->turn_msg = q;
    h->cancel_sent = h->refused = h->turn_over = false;
    acp_secrets_load(h); /* those set since the last turn are masked too */
    h->req_prompt =
        acp_request(h, "session/prompt",
                    json_pack("{s:s, s:O}", "sessionId", h->session_id, "prompt", q->blocks));
}

void acp_end_turn(acp_host *h, const char *stop_reason, const char *code, const char *detail)
{
    if (h->turn == NULL)
        return;
    if (h->perm_id != NULL)
        acp_answer_permission(h, "cancelled");
    const char *why = NULL, *status = NULL;
    if (code == NULL && h->refused) {
        code = "AgentBrokeToolCallRules";
        detail = h->refusal;
    }
    if (code == NULL)
        status = acp_stop_status(stop_reason, &why);
    json_t *out = json_array();
    acp_turn_end(h->turn,
                 detail != NULL ? detail
                 : why != NULL  ? why
                 : stop_reason != NULL && strcmp(stop_reason, "cancelled") == 0
                     ? "the turn was cancelled"
                     : "the agent ended its turn without a result for this call",
                 out);
    acp_append(h, out);
    acp_turn_free(h->turn);
    h->turn = NULL;
    h->turn_over = false;
    bool rejected = h->rejected;
    h->rejected = false;
    acp_prompt_free(h->turn_msg);
    h->turn_msg = NULL;
    h->req_prompt = 0;
    if (code != NULL)
        acp_fail(h, code, detail);
    else if (status != NULL && strcmp(status, "error") == 0)
        acp_fail(h, "AgentStopped", why);
    else if (status != NULL && h->qhead == NULL && h->status == CONV_RUNNING)
        set_status(h, CONV_FINISHED); /* with more to answer, it runs on */
    else if (status != NULL && h->qhead == NULL &&
             (h->status == CONV_IDLE || (h->status == CONV_WAITING_FOR_CONFIRMATION && rejected))) {
        /* a rejection made it idle (or will: its idle is in the log after
         * the rejection we heard, before anything we append now) and the
         * agent ended its turn before we said it runs on (acp_advance waits
         * while a turn is over): what the other order gives, running then
         * finished */
        acp_append(h, status_event(conv_status_name(CONV_RUNNING)));
        acp_append(h, status_event(conv_status_name(CONV_FINISHED)));
    }
    acp_advance(h);
}

/* ---- the log ----------------------------------------------------------------------- */

static const char *str(json_t *o, const char *k)
{
    return json_string_value(json_object_get(o, k));
}

static bool from_agent(json_t *e)
{
    const char *s = str(e, "source");
    return s != NULL && strcmp(s, "agent") == 0;
}

/* The status an event sets, or -1. */
static int status_set(json_t *e)
{
    const char *k = str(e, "kind"), *key = str(e, "key");
    if (k == NULL || strcmp(k, "ConversationStateUpdateEvent") != 0 || key == NULL ||
        strcmp(key, "execution_status") != 0)
        return -1;
    return conv_status_parse(str(e, "value"));
}

/* What the log's last events (before we subscribed) say we owe: the
 * messages after the agent's last word. */
static void take_tail(acp_host *h)
{
    size_t i;
    json_t *e;
    json_array_foreach(h->tail, i, e)
    {
        acp_prompt *q = prompt_of(e);
        if (q != NULL)
            queue_push(h, q, false);
        else if (from_agent(e))
            queue_clear(h);
    }
    json_decref(h->tail);
    h->tail = NULL;
}

/* Whether a confirmation policy has the user confirm the agent's calls:
 * parley rates no risk, so under ConfirmRisky every call is of unknown
 * risk, confirmed unless confirm_unknown is false. */
static bool confirms(json_t *policy)
{
    const char *kind = str(policy, "kind");
    if (kind == NULL || strcmp(kind, "NeverConfirm") == 0)
        return false;
    return strcmp(kind, "ConfirmRisky") != 0 ||
           !json_is_false(json_object_get(policy, "confirm_unknown"));
}

/* A durable event, live. */
static void on_live(acp_host *h, json_t *e)
{
    const char *key = str(e, "key");
    if (key != NULL && strcmp(key, "confirmation_policy") == 0 &&
        strcmp(str(e, "kind") != NULL ? str(e, "kind") : "", "ConversationStateUpdateEvent") == 0) {
        h->confirm = confirms(json_object_get(e, "value"));
        return;
    }
    int st = status_set(e);
    if (st >= 0) {
        h->run_edge = st == CONV_RUNNING && h->status != CONV_RUNNING;
        h->status = (conv_status)st;
        if (st == CONV_WAITING_FOR_CONFIRMATION && h->perm_asked)
            h->perm_waiting = true; /* from now on, a run is the user's yes */
        return;
    }
    const char *kind = str(e, "kind");
    if (kind != NULL && strcmp(kind, "UserRejectObservation") == 0 && h->perm_call != NULL &&
        str(e, "tool_call_id") != NULL && strcmp(str(e, "tool_call_id"), h->perm_call) == 0) {
        if (h->turn != NULL) /* the call is answered: its later updates are moot */
            acp_turn_close_call(h->turn, h->perm_call);
        h->rejected = h->turn != NULL;
        acp_answer_permission(h, "reject");
        return;
    }
    acp_prompt *q = prompt_of(e);
    if (q == NULL)
        return;
    const char *src = str(e, "source");
    if (h->turn != NULL && src != NULL && strcmp(src, "environment") == 0 && !h->cancel_sent) {
        /* a nudge: the agent is repeating itself; stop it, say it next */
        queue_push(h, q, true);
        h->cancel_sent = true;
        acp_send(
            h, rpc_notification("session/cancel", json_pack("{s:s}", "sessionId", h->session_id)));
        return;
    }
    queue_push(h, q, false);
}

static void on_event(acp_host *h, rt_msg *m)
{
    if (m->arg < h->next_index || m->buf == NULL)
        return;
    h->next_index = m->arg + 1;
    json_t *e = rt_json_read((const char *)rt_buf_data(m->buf), rt_buf_len(m->buf), 0, NULL);
    if (e == NULL)
        return;
    if (h->sub_pending) {
        json_array_append_new(h->tail, e);
        return;
    }
    h->last_activity = conv_mono_ms();
    on_live(h, e);
    json_decref(e);
    acp_advance(h);
}

/* ---- deciding what to do next ------------------------------------------------------------ */

void acp_advance(acp_host *h)
{
    if (h->sub_pending)
        return;
    if (h->turn != NULL) {
        if (h->turn_over) /* the agent is done; its last events are on their way */
            return;
        if (h->perm_id != NULL && h->perm_waiting && h->status == CONV_RUNNING) {
            acp_answer_permission(h, "allow"); /* the user accepted: a run */
        } else if ((h->status == CONV_PAUSED || h->status == CONV_STUCK ||
                    h->status == CONV_ERROR || h->status == CONV_DELETING) &&
                   !h->cancel_sent) {
            if (h->perm_id != NULL)
                acp_answer_permission(h, "cancelled");
            h->cancel_sent = true;
            acp_send(h, rpc_notification("session/cancel",
                                         json_pack("{s:s}", "sessionId", h->session_id)));
        } else if (h->status == CONV_IDLE) {
            set_status(h, CONV_RUNNING); /* a rejection answered a call: the turn goes on */
        }
        return;
    }
    /* Between turns, decide only on a log that holds all we appended: a
     * status we asked for and have not seen yet (its reply follows its
     * echo) must not be taken for the old one. */
    if (h->inflight > 0)
        return;
    bool edge = h->run_edge;
    h->run_edge = false;
    if (h->status == CONV_FINISHED && h->qhead != NULL && h->qhead->nudge) {
        /* the detector found the last turn repeating itself only after it
         * ended: its nudge is the agent's next prompt all the same */
        set_status(h, CONV_RUNNING);
        return;
    }
    if (h->status != CONV_RUNNING)
        return;
    if (h->qhead == NULL) {
        if (edge) /* told to run with nothing to answer */
            set_status(h, CONV_FINISHED);
        return;
    }
    if (h->spec == NULL) {
        char why[200];
        snprintf(why, sizeof(why), "no agent named '%.64s' is registered on this server", h->agent);
        queue_clear(h);
        acp_fail(h, "AgentNotRegistered", why);
        return;
    }
    if (h->proc == NULL) {
        if (!h->respawn_wait && acp_spawn(h) < 0)
            queue_clear(h); /* said why; a new message tries again */
        return;
    }
    if (h->pstate == ACP_P_READY)
        start_turn(h);
}

/* ---- the actor ------------------------------------------------------------------------------ */

/* Its agent, confirmation policy and ACP session, from the stored info. */
static void read_meta(acp_host *h)
{
    st_conv *sc;
    if (st_conv_get(h->ctx->svc->store, &h->ctx->id, &sc) != 0)
        return;
    rt_buf *mb = st_conv_meta(sc);
    st_conv_release(sc);
    json_t *m = rt_json_read((const char *)rt_buf_data(mb), rt_buf_len(mb), 0, NULL);
    rt_buf_unref(mb);
    json_t *agent = json_object_get(m, "agent");
    const char *name = json_string_value(json_array_get(json_object_get(agent, "acp_command"), 0));
    snprintf(h->agent, sizeof(h->agent), "%s", name != NULL ? name : "");
    h->spec = acp_registry_find(h->ctx->svc->o.agents, h->agent);
    h->confirm = confirms(json_object_get(m, "confirmation_policy"));
    const char *sid = str(m, "acp_session_id");
    h->session_id = sid != NULL ? strdup(sid) : NULL;
    const char *wd = str(json_object_get(m, "workspace"), "working_dir");
    if (h->ctx->svc->o.agents_in_working_dir && wd != NULL && wd[0] == '/')
        h->working_dir = strdup(wd);
    json_decref(m);
}

static int host_init(rt_actor *self, void *arg, void **state)
{
    conv_ctx *ctx = arg;
    acp_host *h = calloc(1, sizeof(*h));
    if (h == NULL || (h->tail = json_array()) == NULL) {
        free(h);
        return RT_ENOMEM;
    }
    h->ctx = ctx;
    h->self = self;
    h->conv = rt_actor_ref(ctx->conv);
    h->next_req = 1;
    h->sub_pending = true;
    h->last_activity = conv_mono_ms();
    read_meta(h);
    uint64_t idle = ctx->svc->o.idle_close_ms;
    if (idle != UINT64_MAX)
        rt_timer_start(self, idle, idle, ACP_IDLE, 0);
    int r = rt_ask(h->conv, CONV_SUBSCRIBE, STUCK_WINDOW, NULL, self);
    if (r < 0) {
        rt_actor_unref(h->conv);
        json_decref(h->tail);
        free(h->session_id);
        free(h->working_dir);
        free(h);
        return r;
    }
    *state = h;
    return 0;
}

static void on_result(acp_host *h, rt_msg *m)
{
    const conv_reply *cr = conv_reply_of(m);
    if (cr == NULL)
        return;
    if (h->sub_pending && cr->v.outcome == PL_DONE) {
        h->sub_pending = false;
        h->status = cr->status;
        take_tail(h);
        acp_advance(h);
        return;
    }
    if (cr->v.outcome == PL_DONE) /* a change of the stored info */
        return;
    answered(h);
    if (cr->v.outcome == PL_REJECTED && h->turn != NULL && !h->refused) {
        /* refused: the turn goes no further */
        h->refused = true;
        snprintf(h->refusal, sizeof(h->refusal), "the agent's event was refused (%s%s%s): %s",
                 pl_outcome_name(cr->v.outcome), cr->v.rule != NULL ? ", " : "",
                 cr->v.rule != NULL ? cr->v.rule : "", cr->v.detail != NULL ? cr->v.detail : "");
        if (!h->cancel_sent && !h->turn_over) {
            h->cancel_sent = true;
            acp_send(h, rpc_notification("session/cancel",
                                         json_pack("{s:s}", "sessionId", h->session_id)));
        }
    } else if (cr->v.outcome != PL_REJECTED && cr->v.outcome != PL_COMMITTED &&
               cr->v.outcome != PL_DUPLICATE && cr->v.outcome != PL_DEFERRED &&
               cr->v.outcome != PL_INVALID) {
        /* INVALID is a status the log had moved past meanwhile; BUSY or
         * FAILED, the conversation could not take it: not the agent's
         * doing, so the turn goes on */
        rt_log(RT_LOG_WARN, "agent", "%s: an event was not appended (%s): %s", h->agent,
               pl_outcome_name(cr->v.outcome), cr->v.detail != NULL ? cr->v.detail : "");
    }
    if (h->inflight > 0)
        return;
    /* all we said is answered */
    if (h->turn != NULL && h->turn_over)
        acp_end_turn(h, h->stop_reason, NULL, NULL);
    else if (h->turn == NULL)
        acp_advance(h);
}

static void on_idle(acp_host *h)
{
    uint64_t ttl = h->ctx->svc->o.idle_close_ms;
    if (h->proc == NULL || h->turn != NULL || h->qhead != NULL ||
        conv_mono_ms() - h->last_activity < ttl)
        return;
    rt_log(RT_LOG_INFO, "agent", "%s: idle, stopping its process", h->agent);
    acp_close_proc(h);
}

static int host_handle(rt_actor *self, void *state, rt_msg *m)
{
    acp_host *h = state;
    switch (m->kind) {
    case CONV_EVENT:
        on_event(h, m);
        break;
    case CONV_SYNC:
        rt_reply(m, CONV_SYNC_DONE, 0, m->arg, NULL);
        break;
    case CONV_RESULT:
        on_result(h, m);
        break;
    case RT_KIND_ERROR:
        if (m->arg == CONV_SUBSCRIBE)
            return m->status; /* start again */
        answered(h);
        break;
    case ACP_LINE:
        acp_on_line(h, m);
        break;
    case ACP_EXIT:
        acp_on_exit(h, m);
        break;
    case ACP_FS_DONE:
        acp_on_fs_done(h, m);
        break;
    case ACP_RESPAWN:
        h->respawn_wait = false;
        acp_advance(h);
        break;
    case ACP_IDLE:
        on_idle(h);
        break;
    default:
        break;
    }
    (void)self;
    return 0;
}

static void host_stop(rt_actor *self, void *state)
{
    acp_host *h = state;
    if (h->turn != NULL) { /* the calls it leaves open are answered */
        json_t *out = json_array();
        acp_turn_end(h->turn, "the agent was stopped", out);
        if (json_array_size(out) > 0) {
            rt_buf *b = rt_json_buf(json_incref(out));
            if (b != NULL && rt_send(h->conv, CONV_APPEND, 0, b) < 0)
                rt_buf_unref(b);
        }
        json_decref(out);
        acp_turn_free(h->turn);
        acp_prompt_free(h->turn_msg);
    }
    acp_close_proc(h);
    rt_ask(h->conv, CONV_UNSUBSCRIBE, 0, NULL, self);
    rt_actor_unref(h->conv);
    queue_clear(h);
    json_decref(h->tail);
    json_decref(h->perm_id);
    json_decref(h->perm_options);
    free(h->perm_call);
    free(h->session_id);
    free(h->working_dir);
    acp_secrets_clear(h);
    free(h);
}

const rt_behaviour acp_host_behaviour = {
    .name = "acp-host",
    .init = host_init,
    .handle = host_handle,
    .stop = host_stop,
};
