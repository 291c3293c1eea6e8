/*
 * acp_host_impl.h - the inside of a hosted agent's actor, shared by
 * acp_host.c (the conversation side: the log, the queue of prompts, turns,
 * statuses) and acp_host_proc.c (the process side: starting it, JSON-RPC,
 * the client methods it may call, and what happens when it misbehaves or
 * dies).
 */
#ifndef ACP_HOST_IMPL_H
#define ACP_HOST_IMPL_H

#include "acp_host.h"
#include "acp_map.h"
#include "acp_registry.h"
#include "acp_rpc.h"
#include "conv_impl.h"
#include "runtime/proc.h"

#include <jansson.h>
#include <limits.h>

enum {
    ACP_RESTARTS = 3,           /* restarts allowed... */
    ACP_RESTART_WINDOW = 60000, /* ...in this many ms */
    ACP_BACKOFF_MS = 100,       /* the first restart's delay, doubled each time */
    ACP_FS_MAX = 8 << 20,       /* bytes fs/... reads or writes at most */
    ACP_INFLIGHT = 64,          /* appends in flight past which the agent's lines wait */
    ACP_FS_INFLIGHT = 4,        /* fs/... operations of one agent at once */
    ACP_STDIN_MAX = 64 << 20,   /* bytes waiting for the agent to read: past this while it
                                   writes on, it is stopped */
};

typedef struct acp_prompt {
    struct acp_prompt *next;
    char *event_id; /* the message it comes from */
    bool nudge;     /* the stuck detector's (an environment message) */
    json_t *blocks; /* the ContentBlocks */
} acp_prompt;

typedef enum acp_pstate {
    ACP_P_NONE = 0, /* no process */
    ACP_P_INIT,     /* initialize sent */
    ACP_P_SESSION,  /* session/new or session/load sent */
    ACP_P_READY,
} acp_pstate;

typedef struct acp_host {
    conv_ctx *ctx;
    rt_actor *self, *conv;
    char agent[80];             /* the name its conversation asked for */
    const acp_agent_spec *spec; /* NULL: no such agent registered */
    bool confirm;               /* a confirmation policy other than NeverConfirm */
    char *session_id;           /* the ACP session, kept across processes */
    char workspace[PATH_MAX];
    char *working_dir; /* its info's workspace.working_dir, if the instance
                          lets agents work there (agents_in_working_dir) */
    /* the log as it reached us */
    bool sub_pending;    /* the subscription's answer has not come yet */
    json_t *tail;        /* events before that answer: the log's last few */
    uint64_t next_index; /* events below this were seen */
    conv_status status;  /* as the log says */
    bool run_edge;       /* the log just said running */
    acp_prompt *qhead, *qtail;
    /* the process */
    rt_proc *proc;
    uint64_t proc_id;
    acp_pstate pstate;
    int64_t next_req, req_init, req_session, req_prompt;
    bool can_load, loading;
    uint32_t inflight;    /* appends not answered yet */
    uint32_t unacked;     /* lines handled but not acknowledged: too many appends in flight */
    uint32_t fs_inflight; /* fs/... operations not answered yet */
    uint64_t restarts[ACP_RESTARTS + 1];
    unsigned nrestarts;
    bool respawn_wait;
    uint64_t last_activity; /* ms, monotonic */
    /* the turn */
    acp_turn *turn;
    acp_prompt *turn_msg;
    bool cancel_sent, refused;
    bool rejected;        /* the user rejected a call of this turn */
    bool turn_over;       /* the agent answered the prompt; its events are in flight */
    char stop_reason[32]; /* ...and the stop reason it gave */
    char refusal[512];
    /* a permission the agent asked for */
    json_t *perm_id;      /* the request's id, or NULL */
    char *perm_call;      /* its toolCallId */
    json_t *perm_options; /* its options */
    bool perm_asked;      /* the conversation was asked to wait for the user */
    bool perm_waiting;    /* ...and the log says it waits */
    char **secrets;       /* values masked in what the agent says, longest first */
    char **secret_env;    /* NAME=value, for its environment */
    size_t nsecrets;
} acp_host;

/* acp_host.c */
/* Something changed: prompt, cancel, answer, start the process... */
void acp_advance(acp_host *h);
/* Append events (taken: an array, or one object) through the conversation,
 * one request each, so that the gate judges each on its own. */
void acp_append(acp_host *h, json_t *events);
/* A line of the process's is handled: acknowledged now, or once the
 * appends in flight are few enough (the process waits meanwhile). */
void acp_line_done(acp_host *h);
/* A ConversationErrorEvent, and the status error (if allowed). */
void acp_fail(acp_host *h, const char *code, const char *detail);
/* The turn is over: its events, the status its stop reason says. error:
 * the turn failed (code, detail); stop_reason otherwise. */
void acp_end_turn(acp_host *h, const char *stop_reason, const char *code, const char *detail);
void acp_prompt_free(acp_prompt *q);
/* The conversation's secrets as they are now (convs_secrets), or none. */
void acp_secrets_load(acp_host *h);
void acp_secrets_clear(acp_host *h);

/* acp_host_proc.c */
int acp_spawn(acp_host *h);
void acp_send(acp_host *h, rt_buf *line);
int64_t acp_request(acp_host *h, const char *method, json_t *params);
void acp_on_line(acp_host *h, rt_msg *m);
void acp_on_exit(acp_host *h, rt_msg *m);
void acp_on_fs_done(acp_host *h, rt_msg *m);
/* Stop the process now: it broke the protocol (code, why). */
void acp_misbehaved(acp_host *h, const char *code, const char *why);
/* Let the process go (the stop sequence runs on its own). */
void acp_close_proc(acp_host *h);
/* Answer the permission the agent waits for: "allow", "reject" or
 * "cancelled". */
void acp_answer_permission(acp_host *h, const char *how);

#endif
