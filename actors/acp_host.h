/*
 * acp_host.h - a conversation's hosted agent: an actor, supervised in the
 * conversation's tree after the conversation and its stuck detector
 * (rest_for_one), that drives one agent process speaking the Agent Client
 * Protocol on stdio, as that agent's client (spec/acp-reducer.md A).
 *
 * It follows the conversation's log as a subscriber, and acts on what is
 * durable there, never on what was merely asked:
 * - each user message (and each nudge of the stuck detector) becomes one
 *   session/prompt, in log order (deferred messages when they commit),
 *   while the conversation is running;
 * - the prompt's session updates become events (acp_map.h), appended
 *   through the conversation like any producer's, so the gate judges them;
 *   under the reject policy a refused event cancels the turn and a
 *   ConversationErrorEvent says why;
 * - the prompt's stop reason sets the status (end_turn: finished);
 * - a pause, an interrupt, a stuck finding or an error cancels the turn
 *   (session/cancel); a nudge cancels it and is prompted next;
 * - session/request_permission: answered at once under NeverConfirm (the
 *   default, as upstream's ACPAgent always does), else the conversation
 *   waits for confirmation and the user's answer (a run: allow; a
 *   UserRejectObservation of the call: reject) is what it answers.
 *
 * The process starts when there is a prompt to send and stops when the
 * conversation has been idle for its idle-close time (sessions are loaded
 * again when the agent offers loadSession). A crash or an exit mid-turn:
 * the calls it left open get AgentErrorEvents, and it restarts with
 * backoff and is prompted again, up to 3 restarts a minute; past that the
 * conversation is in error. An agent that writes what is not JSON-RPC, a
 * line over 16 MiB, or floods a turn (acp_map.h's bounds) is stopped, with
 * a ConversationErrorEvent saying which. The agent may read and write
 * files only beneath the conversation's workspace (fs/...); parley declares
 * no terminal capability.
 */
#ifndef ACP_HOST_H
#define ACP_HOST_H

#include "runtime/rt.h"

enum {
    ACP_LINE = RT_KIND_RANGE(2), /* arg: the process's id; buf: a line of its stdout */
    ACP_EXIT,                    /* arg: the process's id; buf: rt_proc_exit */
    ACP_RESPAWN,                 /* timer: the backoff after a crash is over */
    ACP_IDLE,                    /* timer: stop the process if nothing happened */
    ACP_FS_DONE,                 /* arg: the process's id; buf: the answer to send */
};

/* Its arg is the conversation's conv_ctx (conv_impl.h). */
extern const rt_behaviour acp_host_behaviour;

#endif
