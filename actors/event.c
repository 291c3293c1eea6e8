/*
 * event.c - what an event is, apart from its schema (event_schema.c) and
 * its bytes (event_json.c): the kind and source names, the kind families
 * the log and the gate ask about, stamping, and the timestamp format.
 *
 * Kind names are the bare upstream class names; the qualified names are
 * "<python module>.<class>" as the agent-server's `kind` search filter
 * builds them (event_service.py), with the modules the classes are defined
 * in at upstream 611629e6 (openhands-sdk/openhands/sdk/event/..., and
 * openhands-agent-server/openhands/agent_server/models.py for
 * ServerErrorEvent).
 *
 * Timestamps are what Python's datetime.now().isoformat() gives: naive
 * local time, microseconds, and no fraction at all when they are zero.
 * The REST filters compare timestamps as strings, so the format is part of
 * the wire contract, not cosmetics.
 */
#include "actors/event.h"

#include "runtime/json.h"
#include "runtime/uuid.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const struct {
    const char *name;
    const char *qualified;
} KINDS[EV_KIND_COUNT] = {
#define SDK "openhands.sdk.event."
    [EV_MESSAGE] = {"MessageEvent", SDK "llm_convertible.message.MessageEvent"},
    [EV_ACTION] = {"ActionEvent", SDK "llm_convertible.action.ActionEvent"},
    [EV_OBSERVATION] = {"ObservationEvent", SDK "llm_convertible.observation.ObservationEvent"},
    [EV_USER_REJECT] = {"UserRejectObservation",
                        SDK "llm_convertible.observation.UserRejectObservation"},
    [EV_AGENT_ERROR] = {"AgentErrorEvent", SDK "llm_convertible.observation.AgentErrorEvent"},
    [EV_SYSTEM_PROMPT] = {"SystemPromptEvent", SDK "llm_convertible.system.SystemPromptEvent"},
    [EV_PAUSE] = {"PauseEvent", SDK "user_action.PauseEvent"},
    [EV_INTERRUPT] = {"InterruptEvent", SDK "user_action.InterruptEvent"},
    [EV_CONDENSATION] = {"Condensation", SDK "condenser.Condensation"},
    [EV_CONDENSATION_REQUEST] = {"CondensationRequest", SDK "condenser.CondensationRequest"},
    [EV_CONDENSATION_SUMMARY] = {"CondensationSummaryEvent",
                                 SDK "condenser.CondensationSummaryEvent"},
    [EV_STATE_UPDATE] = {"ConversationStateUpdateEvent",
                         SDK "conversation_state.ConversationStateUpdateEvent"},
    [EV_CONVERSATION_ERROR] = {"ConversationErrorEvent",
                               SDK "conversation_error.ConversationErrorEvent"},
    [EV_HOOK_EXECUTION] = {"HookExecutionEvent", SDK "hook_execution.HookExecutionEvent"},
    [EV_LLM_COMPLETION_LOG] = {"LLMCompletionLogEvent",
                               SDK "llm_completion_log.LLMCompletionLogEvent"},
    [EV_STREAMING_DELTA] = {"StreamingDeltaEvent", SDK "streaming_delta.StreamingDeltaEvent"},
    [EV_TOKEN] = {"TokenEvent", SDK "token.TokenEvent"},
    [EV_ACP_TOOL_CALL] = {"ACPToolCallEvent", SDK "acp_tool_call.ACPToolCallEvent"},
    [EV_SERVER_ERROR] = {"ServerErrorEvent", "openhands.agent_server.models.ServerErrorEvent"},
#undef SDK
};

static const char *const SOURCE_NAMES[] = {
    [EV_SRC_AGENT] = "agent",
    [EV_SRC_USER] = "user",
    [EV_SRC_ENVIRONMENT] = "environment",
    [EV_SRC_HOOK] = "hook",
};

const char *ev_kind_name(ev_kind k)
{
    return k > EV_INVALID && k < EV_KIND_COUNT ? KINDS[k].name : NULL;
}

const char *ev_kind_qualified(ev_kind k)
{
    return k > EV_INVALID && k < EV_KIND_COUNT ? KINDS[k].qualified : NULL;
}

ev_kind ev_kind_from_name(const char *s)
{
    if (s == NULL)
        return EV_INVALID;
    for (int k = EV_INVALID + 1; k < EV_KIND_COUNT; k++)
        if (strcmp(s, KINDS[k].name) == 0)
            return (ev_kind)k;
    return EV_INVALID;
}

const char *ev_source_name(ev_source s)
{
    return s > EV_SRC_NONE && s <= EV_SRC_HOOK ? SOURCE_NAMES[s] : NULL;
}

bool ev_kind_transient(ev_kind k)
{
    return k == EV_CONDENSATION_SUMMARY || k == EV_STREAMING_DELTA || k == EV_SERVER_ERROR;
}

bool ev_observation_like(const ev *e)
{
    return e != NULL &&
           (e->kind == EV_OBSERVATION || e->kind == EV_AGENT_ERROR || e->kind == EV_USER_REJECT);
}

bool ev_llm_convertible(const ev *e)
{
    return e != NULL && (e->kind == EV_MESSAGE || e->kind == EV_ACTION || ev_observation_like(e));
}

void ev_free(ev *e)
{
    if (e == NULL)
        return;
    rt_jdoc_unref(e->doc);
    free(e->own);
    memset(e, 0, sizeof(*e));
}

/* Copy e's strings into one new block of its own, the ones given in
 * `with` (id, timestamp, parent_id: NULL keeps e's) in place of e's. Every
 * string e points to stays valid meanwhile: the old block goes last. */
static int own_fields(ev *e, const char *const with[3])
{
    const char **f[] = {&e->id,           &e->timestamp, &e->parent_id, &e->tool_call_id,
                        &e->llm_response_id, &e->tool_name, &e->state_key};
    enum { NF = sizeof(f) / sizeof(f[0]) };
    const char *src[NF];
    size_t len[NF], total = 0;
    for (size_t i = 0; i < NF; i++) {
        src[i] = i < 3 && with != NULL && with[i] != NULL ? with[i] : *f[i];
        total += len[i] = src[i] != NULL ? strlen(src[i]) + 1 : 0;
    }
    char *own = malloc(total ? total : 1), *p = own;
    if (own == NULL)
        return -ENOMEM;
    for (size_t i = 0; i < NF; i++) {
        if (src[i] == NULL)
            continue;
        memcpy(p, src[i], len[i]);
        *f[i] = p;
        p += len[i];
    }
    free(e->own);
    e->own = own;
    return 0;
}

int ev_slim(ev *e)
{
    int r = own_fields(e, NULL);
    if (r == 0) {
        rt_jdoc_unref(e->doc);
        e->doc = NULL;
    }
    return r;
}

const char *ev_string(const ev *e, const char *key)
{
    return e->doc != NULL ? rt_jdoc_str(e->doc, rt_jdoc_get(e->doc, e->at, key)) : NULL;
}

json_t *ev_json(const ev *e)
{
    rt_text w = {0};
    json_t *j = ev_write(&w, e, false) == 0 && !w.failed
                    ? rt_json_read(w.p, w.len, JSON_ALLOW_NUL, NULL)
                    : NULL;
    free(w.p);
    return j;
}

/* v in exactly `width` decimal digits, zero-padded (v < 10^width). */
static char *put_digits(char *p, unsigned long v, int width)
{
    for (int i = width - 1; i >= 0; i--) {
        p[i] = (char)('0' + v % 10);
        v /= 10;
    }
    return p + width;
}

/* "YYYY-MM-DDTHH:MM:SS" of a second in local time into out (20 bytes);
 * false for a year out of 0..9999, which no clock gives. Every event is
 * stamped: the digits by hand (printf costs ten times more), and the last
 * second's text kept per thread, since localtime_r (its time zone lock and
 * conversion, ~470 instructions) was most of a stamp's cost. The zone's
 * offset (`timezone`, which tzset sets) is part of what is kept. */
static bool format_second(long long sec, char out[20])
{
    static _Thread_local long long last = LLONG_MIN;
    static _Thread_local long last_zone;
    static _Thread_local char text[20];
    if (sec != last || timezone != last_zone) {
        time_t t = (time_t)sec;
        struct tm tm;
        if (localtime_r(&t, &tm) == NULL || tm.tm_year + 1900 < 0 || tm.tm_year + 1900 > 9999)
            return false;
        char *p = text;
        p = put_digits(p, (unsigned long)tm.tm_year + 1900, 4);
        *p++ = '-';
        p = put_digits(p, (unsigned long)tm.tm_mon + 1, 2);
        *p++ = '-';
        p = put_digits(p, (unsigned long)tm.tm_mday, 2);
        *p++ = 'T';
        p = put_digits(p, (unsigned long)tm.tm_hour, 2);
        *p++ = ':';
        p = put_digits(p, (unsigned long)tm.tm_min, 2);
        *p++ = ':';
        p = put_digits(p, (unsigned long)tm.tm_sec, 2);
        *p = '\0';
        last = sec;
        last_zone = timezone;
    }
    memcpy(out, text, sizeof(text));
    return true;
}

void ev_format_timestamp(long long sec, long usec, char out[32])
{
    /* Callers hand over whatever their clock gave; carry so that the
     * fraction is always 0..999999. */
    sec += usec / 1000000;
    usec %= 1000000;
    if (usec < 0) {
        usec += 1000000;
        sec--;
    }
    if (!format_second(sec, out)) { /* printf copes */
        time_t t = (time_t)sec;
        struct tm tm;
        if (localtime_r(&t, &tm) == NULL) {
            snprintf(out, 32, "1970-01-01T00:00:00");
            return;
        }
        int n = snprintf(out, 32, "%04d-%02d-%02dT%02d:%02d:%02d", tm.tm_year + 1900, tm.tm_mon + 1,
                         tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec);
        if (usec != 0 && n > 0 && n < 32)
            snprintf(out + n, 32 - (size_t)n, ".%06ld", usec);
        return;
    }
    if (usec != 0) {
        out[19] = '.';
        put_digits(out + 20, (unsigned long)usec, 6);
        out[26] = '\0';
    }
}

int ev_set_parent(ev *e, const char *parent_id)
{
    if (parent_id == NULL) {
        e->parent_id = NULL;
        return 0;
    }
    return own_fields(e, (const char *const[3]){NULL, NULL, parent_id});
}

json_t *ev_user_message(const char *role, json_t *content)
{
    return json_pack("{s:s, s:{s:s, s:O}, s:s}", "source", "user", "llm_message", "role", role,
                     "content", content, "kind", "MessageEvent");
}

void ev_now_timestamp(char out[32])
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ev_format_timestamp((long long)ts.tv_sec, ts.tv_nsec / 1000, out);
}

int ev_stamp(ev *e, const char *head)
{
    if (e == NULL || e->doc == NULL)
        return -EINVAL;
    char id[37] = "", ts[32] = "";
    if (e->id == NULL) {
        rt_uuid u;
        int rc = rt_uuid_v4(&u);
        if (rc != 0)
            return rc;
        rt_uuid_dashed(&u, id);
    }
    if (e->timestamp == NULL)
        ev_now_timestamp(ts);
    const char *parent = e->parent_id == NULL ? head : NULL;
    if (id[0] == '\0' && ts[0] == '\0' && parent == NULL)
        return 0;
    return own_fields(e, (const char *const[3]){id[0] ? id : NULL, ts[0] ? ts : NULL, parent});
}
