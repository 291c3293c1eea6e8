/*
 * workspace.h - the working directories of hosted agents: `<base>/workspaces/
 * <32 hex>/`, one per conversation, on this machine. The local store keeps
 * them under its data directory; the JetStream store under the local
 * directory it is given (st_opts.workspaces), since an agent's files are a
 * node's, not the cluster's.
 */
#ifndef ST_WORKSPACE_H
#define ST_WORKSPACE_H

#include "runtime/uuid.h"

#include <stddef.h>

/* The absolute path of id's workspace under base, made (with
 * base/workspaces) if missing. 0 or -errno. */
int st_workspace_make(const char *base, const rt_uuid *id, char *out, size_t cap);
/* Remove id's workspace under base and what it holds (none if never made). */
void st_workspace_remove(const char *base, const rt_uuid *id);

#endif
