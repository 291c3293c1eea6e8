/*
 * acp_backend.h - where `parley acp` finds its conversations: a server of
 * the API (acp_remote.c: REST to post, the follower to stream) or an
 * instance in this process (acp_local.c: include/parley.h). Each fills an
 * acpa_backend whose events go to the inbox; the core calls it from the
 * command's one thread.
 */
#ifndef PARLEY_ACP_BACKEND_H
#define PARLEY_ACP_BACKEND_H

#include "acp_agent.h"
#include "acp_inbox.h"
#include "net/tls.h"
#include "net/url.h"
#include "parley.h"

/* What a session the command creates asks of the editor: confirm each
 * action (confirmation_policy AlwaysConfirm: a hosted agent's permission
 * requests, an OpenHands agent's actions) or none (NeverConfirm,
 * --always-approve). */
typedef enum acp_approve { ACP_ASK = 0, ACP_ALWAYS_APPROVE } acp_approve;
#define ACP_POLICY(approve) ((approve) == ACP_ASK ? "AlwaysConfirm" : "NeverConfirm")

typedef struct acp_remote acp_remote;
/* A server at u (tls for https, taken), sessions hosting `agent` (NULL:
 * the server's default). NULL if out of memory. */
acp_remote *acp_remote_new(const net_url *u, net_tls_config *tls, const char *api_key,
                           const char *agent, acp_approve approve, acp_inbox *in, acpa_backend *b);
/* Stop following, free (no push into the inbox after it returns). */
void acp_remote_free(acp_remote *r);

typedef struct acp_local acp_local;
/* An instance on o (data_dir, agents, default_agent), sessions hosting
 * `agent` (NULL: the default). NULL with err saying why. */
acp_local *acp_local_new(const pl_options *o, const char *agent, acp_approve approve, acp_inbox *in,
                         acpa_backend *b, char *err, size_t errlen);
void acp_local_free(acp_local *l);

#endif
