/*
 * support_conv.h - driving real conversations from tests: a store, a
 * runtime and the conversations service in a temp directory, requests sent
 * with rt_call and their answers collected, restarts that close everything
 * and reopen it from disk.
 */
#ifndef SUPPORT_CONV_H
#define SUPPORT_CONV_H

#include "actors/conversation.h"
#include "support_sync.h"

#include <jansson.h>

/* The id of the conversation tc_start creates (32 hex digits). */
#define TC_CONV_ID "5ca1ab1e0000400080000000000000aa"

typedef struct tc_env {
    char *dir;
    st_durability durability;
    conv_opts o;
    st_store *store;
    rt_runtime *rt;
    convs *svc;
    rt_uuid id;
    rt_actor *conv;
    const char *meta; /* the conversation's info at creation; NULL: "{}" */
} tc_env;

/* A request's answer, filled on a loop thread. */
typedef struct tc_slot {
    bool done;
    int code;   /* the CONV_RESULT outcome, or the negative error of an
                   RT_KIND_ERROR answer */
    char *body; /* malloc'd */
} tc_slot;

/* Open the store (in a new temp dir when dir is NULL), the runtime (2
 * loops) and the service, and create (or find) conversation `id`. */
void tc_start(tc_env *e, const char *dir, const conv_opts *o, st_durability d);
/* Close everything (runtime, service, store); the directory stays. */
void tc_stop(tc_env *e);
/* tc_stop then tc_start on the same directory. */
void tc_restart(tc_env *e);
/* tc_stop and remove the directory. */
void tc_finish(tc_env *e);

/* Send a request; the answer lands in a new slot (freed by tc_slot_free). */
tc_slot *tc_request(tc_env *e, uint32_t kind, uint64_t arg, const char *body);
bool tc_wait(tc_slot *s);
/* Has the answer come (now)? */
bool tc_done(tc_slot *s);
void tc_slot_free(tc_slot *s);
/* Request and wait: the outcome; *body (if not NULL) gets the malloc'd body. */
int tc_call(tc_env *e, uint32_t kind, uint64_t arg, const char *body, char **out);

/* Every event of the conversation's log, as parsed JSON (an array). */
json_t *tc_log(tc_env *e);

/* ---- answers ------------------------------------------------------------ */

/* Parsed JSON text; fails the test if it is not JSON. */
json_t *tc_json(const char *text);
/* CONV_APPEND of `body`: the outcome, and (if out is not NULL) the parsed
 * answer, which the caller decrefs. */
int tc_append(tc_env *e, const char *body, json_t **out);
/* CONV_SYNC, which must be answered 200: everything accepted is durable and
 * every subscriber (the stuck detector too) has handled it. */
void tc_sync(tc_env *e);
/* CONV_STATUS: the status name (into `status`) and the pending calls. */
void tc_status(tc_env *e, char *status, size_t cap, int *pending);
/* CONV_STATUS: the violations and stuck findings its log records. */
void tc_findings(tc_env *e, uint64_t *violations, uint64_t *stuck);

/* ---- events as producers send them (malloc'd JSON text) ------------------ */

/* printf into a malloc'd string. */
char *tc_fmt(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* A MessageEvent from `source` ("user", "agent", "environment", "hook"). */
char *tc_ev_msg(const char *id, const char *source, const char *text);
/* An ActionEvent of the terminal tool running `command`. */
char *tc_ev_action(const char *id, const char *call, const char *response, const char *command);
/* Its ObservationEvent, AgentErrorEvent and UserRejectObservation. */
char *tc_ev_obs(const char *id, const char *call, const char *action_id, const char *output);
char *tc_ev_agent_error(const char *id, const char *call, const char *error);
char *tc_ev_reject(const char *id, const char *call, const char *action_id);
/* A ConversationStateUpdateEvent from the agent: key, and the value as
 * JSON text. */
char *tc_ev_state(const char *id, const char *key, const char *value_json);
/* `body` with member `key` set to `value_json` (consumes body). */
char *tc_ev_with(char *body, const char *key, const char *value_json);
/* A JSON array of the given event texts (NULL-terminated; not consumed). */
char *tc_ev_array(const char *first, ...);

/* ---- subscribers ---------------------------------------------------------- */

/* A test actor subscribed to the conversation: it records each CONV_EVENT
 * (index and bytes) and answers CONV_SYNC, at once, or, when `slow`, only
 * once tc_sub_release says so. tc_subscribe returns once the subscription is
 * answered. Free it after tc_stop (the actor lives as long as the runtime). */
typedef struct tc_sub tc_sub;
tc_sub *tc_subscribe(tc_env *e, uint64_t tail, bool slow);
/* The conversation's event count the subscription was answered with. */
uint64_t tc_sub_count_at_subscribe(tc_sub *s);
/* Wait until at least n events arrived; false on deadline. */
bool tc_sub_wait(tc_sub *s, size_t n);
size_t tc_sub_len(tc_sub *s);
/* Event i (in arrival order): its index, and the event (a new reference). */
uint64_t tc_sub_index(tc_sub *s, size_t i);
json_t *tc_sub_event(tc_sub *s, size_t i);
/* Syncs the subscriber was asked for (answered or not), and waiting until
 * there were at least n (false on deadline). */
size_t tc_sub_syncs(tc_sub *s);
bool tc_sub_wait_syncs(tc_sub *s, size_t n);
/* A slow subscriber answers the syncs it holds, and every later one. */
void tc_sub_release(tc_sub *s);
/* The subscriber leaves (CONV_UNSUBSCRIBE); returns once that is answered. */
void tc_sub_leave(tc_sub *s);
void tc_sub_free(tc_sub *s);

#endif
