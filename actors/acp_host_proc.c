/*
 * acp_host_proc.c - a hosted agent's actor, the process's side
 * (acp_host.h): starting it (initialize, session/new or session/load),
 * its JSON-RPC lines, the client methods it may call (permission, files
 * beneath its workspace), and what happens when it dies or misbehaves.
 */
#include "acp_host_impl.h"

#include "runtime/log.h"
#include "runtime/json.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

extern char **environ;

/* ---- talking to it ------------------------------------------------------------ */

void acp_send(acp_host *h, rt_buf *line)
{
    if (line == NULL) {
        rt_log(RT_LOG_ERROR, "agent", "%s: out of memory for a message", h->agent);
        return;
    }
    if (h->proc == NULL) {
        rt_buf_unref(line);
        return;
    }
    rt_proc_write(h->proc, line);
}

int64_t acp_request(acp_host *h, const char *method, json_t *params)
{
    int64_t id = h->next_req++;
    acp_send(h, rpc_request(id, method, params));
    return id;
}

static void reply(acp_host *h, json_t *id, json_t *result)
{
    acp_send(h, rpc_result(id, result));
}

/* No permission request pending any more. */
static void perm_clear(acp_host *h)
{
    json_decref(h->perm_id);
    json_decref(h->perm_options);
    free(h->perm_call);
    h->perm_id = h->perm_options = NULL;
    h->perm_call = NULL;
    h->perm_asked = h->perm_waiting = false;
}

static void reply_error(acp_host *h, json_t *id, int code, const char *message)
{
    acp_send(h, rpc_error(id, code, message));
}

void acp_answer_permission(acp_host *h, const char *how)
{
    if (h->perm_id == NULL)
        return;
    const char *want = strcmp(how, "allow") == 0 ? "allow" : "reject";
    const char *chosen = NULL;
    json_t *o;
    size_t i;
    /* the first option of the kind wanted, once-only preferred */
    for (int pass = 0; pass < 2 && chosen == NULL && strcmp(how, "cancelled") != 0; pass++)
        json_array_foreach(h->perm_options, i, o)
        {
            const char *kind = json_string_value(json_object_get(o, "kind"));
            char k[32];
            snprintf(k, sizeof(k), "%s_%s", want, pass == 0 ? "once" : "always");
            if (chosen == NULL && kind != NULL && strcmp(kind, k) == 0)
                chosen = json_string_value(json_object_get(o, "optionId"));
        }
    json_t *outcome = chosen != NULL
                          ? json_pack("{s:s, s:s}", "outcome", "selected", "optionId", chosen)
                          : json_pack("{s:s}", "outcome", "cancelled");
    reply(h, h->perm_id, json_pack("{s:o}", "outcome", outcome));
    perm_clear(h);
}

static void on_permission(acp_host *h, rpc_msg *m)
{
    if (h->turn == NULL || h->perm_id != NULL || h->cancel_sent) {
        reply(h, m->id,
              json_pack("{s:{s:s}}", "outcome", "outcome", "cancelled")); /* nothing to ask now */
        return;
    }
    const char *call =
        json_string_value(json_object_get(json_object_get(m->params, "toolCall"), "toolCallId"));
    json_t *options = json_object_get(m->params, "options");
    if (call == NULL || !json_is_array(options)) {
        reply_error(h, m->id, RPC_INVALID_PARAMS, "toolCall.toolCallId and options are required");
        return;
    }
    h->perm_id = json_incref(m->id);
    h->perm_options = json_incref(options);
    h->perm_call = strdup(call);
    if (!h->confirm) { /* NeverConfirm: as upstream's ACPAgent, allow */
        acp_answer_permission(h, "allow");
        return;
    }
    h->perm_asked = true;
    if (conv_transition_ok(h->status, CONV_WAITING_FOR_CONFIRMATION))
        acp_append(h, json_pack("{s:s, s:s, s:s, s:s}", "kind", "ConversationStateUpdateEvent",
                                "source", "environment", "key", "execution_status", "value",
                                "waiting_for_confirmation"));
}

/* ---- files beneath the workspace (fs/...), off the loop ----------------------------- */

typedef struct fs_job {
    uv_work_t req;
    rt_actor *self; /* held */
    uint64_t proc_id;
    char root[PATH_MAX];
    bool write;
    json_t *id, *params; /* held */
    rt_buf *answer;
} fs_job;

/* Open path (absolute) beneath root, never leaving it: not by "..", not
 * through a symlink, not through /proc magic. -errno; -EXDEV: outside. */
static int open_beneath(const char *root, const char *path, int flags)
{
    size_t rl = strlen(root);
    if (path[0] != '/' || strncmp(path, root, rl) != 0 || (path[rl] != '/' && path[rl] != '\0'))
        return -EXDEV;
    const char *rel = path[rl] == '\0' ? "." : path + rl + 1;
    int dir = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir < 0)
        return -errno;
    struct open_how how = {.flags = (uint64_t)flags | O_CLOEXEC,
                           .mode = (flags & O_CREAT) ? 0644 : 0,
                           .resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS};
    long fd = syscall(SYS_openat2, dir, rel, &how, sizeof(how));
    int e = errno;
    close(dir);
    return fd >= 0 ? (int)fd : -e;
}

static json_t *read_text(const char *root, json_t *params, int *code, char *why, size_t wl)
{
    const char *path = json_string_value(json_object_get(params, "path"));
    json_t *jline = json_object_get(params, "line"), *jlimit = json_object_get(params, "limit");
    if (path == NULL || (jline != NULL && !json_is_null(jline) && !json_is_integer(jline)) ||
        (jlimit != NULL && !json_is_null(jlimit) && !json_is_integer(jlimit))) {
        *code = RPC_INVALID_PARAMS;
        snprintf(why, wl, "path (absolute), line and limit (integers) are expected");
        return NULL;
    }
    int fd = open_beneath(root, path, O_RDONLY);
    struct stat st;
    if (fd >= 0 && (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size > ACP_FS_MAX)) {
        close(fd);
        fd = S_ISREG(st.st_mode) ? -EFBIG : -EISDIR;
    }
    if (fd < 0) {
        *code = fd == -ENOENT ? RPC_RESOURCE_NOT_FOUND : RPC_INVALID_PARAMS;
        snprintf(why, wl, "%s: %s", path,
                 fd == -EXDEV   ? "outside the conversation's workspace"
                 : fd == -EFBIG ? "larger than parley reads (8 MiB)"
                                : strerror(-fd));
        return NULL;
    }
    char *data = malloc((size_t)st.st_size + 1);
    ssize_t n = data != NULL ? read(fd, data, (size_t)st.st_size) : -1;
    close(fd);
    if (n < 0) {
        free(data);
        *code = RPC_INTERNAL_ERROR;
        snprintf(why, wl, "%s: cannot read it", path);
        return NULL;
    }
    /* lines `line` (1-based) on, at most `limit` of them */
    long first = json_is_integer(jline) ? (long)json_integer_value(jline) : 1;
    long limit = json_is_integer(jlimit) ? (long)json_integer_value(jlimit) : -1;
    size_t from = 0, to = (size_t)n;
    long ln = 1;
    for (size_t i = 0; i < (size_t)n && ln < first; i++)
        if (data[i] == '\n' && ++ln == first)
            from = i + 1;
    if (ln < first)
        from = (size_t)n;
    if (limit >= 0) {
        long taken = 0;
        to = from;
        while (to < (size_t)n && taken < limit) {
            char *nl = memchr(data + to, '\n', (size_t)n - to);
            to = nl != NULL ? (size_t)(nl - data) + 1 : (size_t)n;
            taken++;
        }
    }
    json_t *r = json_pack("{s:s%}", "content", data + from, to - from);
    free(data);
    if (r == NULL) {
        *code = RPC_INVALID_PARAMS;
        snprintf(why, wl, "%s: not text (UTF-8)", path);
    }
    return r;
}

static json_t *write_text(const char *root, json_t *params, int *code, char *why, size_t wl)
{
    const char *path = json_string_value(json_object_get(params, "path"));
    json_t *content = json_object_get(params, "content");
    if (path == NULL || !json_is_string(content)) {
        *code = RPC_INVALID_PARAMS;
        snprintf(why, wl, "path (absolute) and content (a string) are expected");
        return NULL;
    }
    if (json_string_length(content) > ACP_FS_MAX) {
        *code = RPC_INVALID_PARAMS;
        snprintf(why, wl, "%s: larger than parley writes (8 MiB)", path);
        return NULL;
    }
    int fd = open_beneath(root, path, O_WRONLY | O_CREAT | O_TRUNC);
    if (fd < 0) {
        *code = fd == -ENOENT ? RPC_RESOURCE_NOT_FOUND : RPC_INVALID_PARAMS;
        snprintf(why, wl, "%s: %s", path,
                 fd == -EXDEV ? "outside the conversation's workspace" : strerror(-fd));
        return NULL;
    }
    const char *s = json_string_value(content);
    size_t len = json_string_length(content), off = 0;
    while (off < len) {
        ssize_t w = write(fd, s + off, len - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            break;
        off += (size_t)w;
    }
    close(fd);
    if (off < len) {
        *code = RPC_INTERNAL_ERROR;
        snprintf(why, wl, "%s: cannot write it", path);
        return NULL;
    }
    return json_null();
}

static void fs_work(uv_work_t *req)
{
    fs_job *j = req->data;
    int code = 0;
    char why[600];
    json_t *r = j->write ? write_text(j->root, j->params, &code, why, sizeof(why))
                         : read_text(j->root, j->params, &code, why, sizeof(why));
    j->answer = r != NULL ? rpc_result(j->id, r) : rpc_error(j->id, code, why);
}

static void fs_done(uv_work_t *req, int status)
{
    (void)status;
    fs_job *j = req->data;
    /* told even without an answer: the operation is counted until then */
    if (rt_notify(j->self, ACP_FS_DONE, j->proc_id, j->answer) < 0)
        rt_buf_unref(j->answer);
    rt_actor_unref(j->self);
    json_decref(j->id);
    json_decref(j->params);
    free(j);
}

static void on_fs(acp_host *h, rpc_msg *m, bool write)
{
    if (h->fs_inflight >= ACP_FS_INFLIGHT) {
        reply_error(h, m->id, RPC_INTERNAL_ERROR,
                    "too many file operations at once (4): wait for an answer first");
        return;
    }
    fs_job *j = calloc(1, sizeof(*j));
    if (j == NULL) {
        reply_error(h, m->id, RPC_INTERNAL_ERROR, "out of memory");
        return;
    }
    j->req.data = j;
    j->self = rt_actor_ref(h->self);
    j->proc_id = h->proc_id;
    snprintf(j->root, sizeof(j->root), "%s", h->workspace);
    j->write = write;
    j->id = json_incref(m->id);
    j->params = json_incref(m->params);
    uv_loop_t *loop = rt_runtime_uv(rt_actor_runtime(h->self), rt_actor_loop(h->self));
    if (uv_queue_work(loop, &j->req, fs_work, fs_done) != 0) {
        reply_error(h, m->id, RPC_INTERNAL_ERROR, "cannot queue the file operation");
        rt_actor_unref(j->self);
        json_decref(j->id);
        json_decref(j->params);
        free(j);
        return;
    }
    h->fs_inflight++;
}

void acp_on_fs_done(acp_host *h, rt_msg *m)
{
    if (h->fs_inflight > 0)
        h->fs_inflight--;
    if (h->proc != NULL && m->arg == h->proc_id && m->buf != NULL)
        acp_send(h, rt_buf_ref(m->buf));
}

/* ---- starting it ------------------------------------------------------------------- */

/* parley's environment, then the agent's own, then the conversation's
 * secrets: later names win. */
static char **make_env(acp_host *h)
{
    size_t n = 0, k = 0;
    while (environ[n] != NULL)
        n++;
    for (size_t i = 0; h->spec->env[i] != NULL; i++)
        n++;
    n += h->nsecrets;
    char **env = calloc(n + 1, sizeof(*env));
    if (env == NULL)
        return NULL;
    char *none[] = {NULL};
    char *const *lists[] = {environ, h->spec->env, h->secret_env != NULL ? h->secret_env : none};
    for (int l = 0; l < 3; l++)
        for (size_t i = 0; lists[l][i] != NULL; i++) {
            const char *eq = strchr(lists[l][i], '=');
            size_t nl = eq != NULL ? (size_t)(eq - lists[l][i]) : strlen(lists[l][i]);
            size_t at = k;
            for (size_t x = 0; x < k; x++)
                if (strncmp(env[x], lists[l][i], nl) == 0 && env[x][nl] == '=')
                    at = x;
            env[at] = lists[l][i];
            if (at == k)
                k++;
        }
    return env;
}

/* dir (absolute), resolved, as the workspace: it must be a directory. */
static int work_in(const char *dir, char *out, size_t cap)
{
    char real[PATH_MAX];
    struct stat st;
    if (realpath(dir, real) == NULL)
        return -errno;
    if (stat(real, &st) != 0)
        return -errno;
    if (!S_ISDIR(st.st_mode))
        return -ENOTDIR;
    if (strlen(real) >= cap)
        return -ENAMETOOLONG;
    snprintf(out, cap, "%s", real);
    return 0;
}

int acp_spawn(acp_host *h)
{
    char why[600];
    int r = h->working_dir != NULL
                ? work_in(h->working_dir, h->workspace, sizeof(h->workspace))
                : st_workspace(h->ctx->svc->store, &h->ctx->id, h->workspace, sizeof(h->workspace));
    if (r < 0) {
        snprintf(why, sizeof(why), "cannot %s the agent's workspace %s: %s",
                 h->working_dir != NULL ? "use" : "make",
                 h->working_dir != NULL ? h->working_dir : "", strerror(-r));
        acp_fail(h, "AgentStartFailed", why);
        return r;
    }
    acp_secrets_load(h);
    char **env = make_env(h);
    char logname[120];
    snprintf(logname, sizeof(logname), "agent %s", h->agent);
    rt_proc_opts po = {.argv = (const char *const *)h->spec->argv,
                       .env = (const char *const *)env,
                       .cwd = h->spec->cwd != NULL ? h->spec->cwd : h->workspace,
                       .line_kind = ACP_LINE,
                       .exit_kind = ACP_EXIT,
                       .log_name = logname};
    r = env != NULL ? rt_proc_spawn(h->self, &po, &h->proc) : RT_ENOMEM;
    free(env);
    if (r < 0) {
        snprintf(why, sizeof(why), "cannot start agent '%s' (%s): %s", h->agent, h->spec->argv[0],
                 uv_strerror(r));
        acp_fail(h, "AgentStartFailed", why);
        h->proc = NULL;
        return r;
    }
    h->proc_id = rt_proc_id(h->proc);
    h->unacked = 0;
    h->pstate = ACP_P_INIT;
    h->last_activity = conv_mono_ms();
    rt_log(RT_LOG_INFO, "agent", "%s: started pid %d", h->agent, rt_proc_pid(h->proc));
    h->req_init = acp_request(h, "initialize",
                              json_pack("{s:i, s:{s:{s:b, s:b}, s:b}, s:{s:s, s:s}}",
                                        "protocolVersion", 1, "clientCapabilities", "fs",
                                        "readTextFile", 1, "writeTextFile", 1, "terminal", 0,
                                        "clientInfo", "name", "parley", "version", PARLEY_VERSION));
    return 0;
}

static void new_session(acp_host *h)
{
    h->loading = false;
    h->req_session =
        acp_request(h, "session/new", json_pack("{s:s, s:[]}", "cwd", h->workspace, "mcpServers"));
}

/* The session id, kept in the conversation's stored info, so that a new
 * process (or a restarted parley) can load it. */
static void keep_session(acp_host *h, const char *sid)
{
    if (h->session_id != NULL && strcmp(h->session_id, sid) == 0)
        return;
    free(h->session_id);
    h->session_id = strdup(sid);
    json_t *ch = json_pack("{s:s}", "acp_session_id", sid);
    rt_buf *b = rt_json_buf(ch);
    if (b != NULL && rt_ask(h->conv, CONV_SET_META, 0, b, h->self) < 0)
        rt_buf_unref(b);
}

/* ---- its lines ------------------------------------------------------------------------- */

static void on_response(acp_host *h, rpc_msg *m)
{
    int64_t id = json_is_integer(m->id) ? (int64_t)json_integer_value(m->id) : -1;
    char why[600];
    if (id == h->req_init && h->pstate == ACP_P_INIT) {
        json_t *v = json_object_get(m->result, "protocolVersion");
        if (m->type == RPC_ERROR || !json_is_integer(v) || json_integer_value(v) != 1) {
            snprintf(why, sizeof(why), "initialize: %s",
                     m->type == RPC_ERROR ? m->message : "the agent does not speak ACP version 1");
            acp_misbehaved(h, "AgentStartFailed", why);
            return;
        }
        h->can_load = json_is_true(
            json_object_get(json_object_get(m->result, "agentCapabilities"), "loadSession"));
        h->pstate = ACP_P_SESSION;
        if (h->can_load && h->session_id != NULL) {
            h->loading = true; /* what it replays is in the log already */
            h->req_session = acp_request(h, "session/load",
                                         json_pack("{s:s, s:s, s:[]}", "sessionId", h->session_id,
                                                   "cwd", h->workspace, "mcpServers"));
        } else {
            new_session(h);
        }
    } else if (id == h->req_session && h->pstate == ACP_P_SESSION) {
        if (h->loading) {
            if (m->type == RPC_ERROR) { /* it does not know it (any more): a new one */
                new_session(h);
                return;
            }
            h->loading = false;
        } else {
            const char *sid = json_string_value(json_object_get(m->result, "sessionId"));
            if (m->type == RPC_ERROR || sid == NULL || sid[0] == '\0') {
                snprintf(why, sizeof(why), "session/new: %s",
                         m->type == RPC_ERROR ? m->message : "no sessionId in its answer");
                acp_misbehaved(h, "AgentStartFailed", why);
                return;
            }
            keep_session(h, sid);
        }
        h->pstate = ACP_P_READY;
        acp_advance(h);
    } else if (id == h->req_prompt && h->turn != NULL) {
        if (m->type == RPC_ERROR) {
            snprintf(why, sizeof(why), "session/prompt failed: %s (%lld)", m->message,
                     (long long)m->code);
            acp_end_turn(h, NULL, "AgentError", why);
            return;
        }
        const char *stop = json_string_value(json_object_get(m->result, "stopReason"));
        if (h->inflight == 0) {
            acp_end_turn(h, stop, NULL, NULL);
            return;
        }
        /* its last events are not answered yet: one may be refused, and
         * that, not the stop reason, would end the turn */
        h->turn_over = true;
        snprintf(h->stop_reason, sizeof(h->stop_reason), "%s", stop != NULL ? stop : "");
    } /* answers to nothing we wait for (a cancelled turn's, a past process's): ignored */
}

/* A session/update: its events, if it belongs to the turn. */
static void on_update(acp_host *h, rpc_msg *m)
{
    if (h->loading || h->turn == NULL || h->refused)
        return; /* a replay of history, or nothing asked: nothing to record */
    json_t *out = json_array();
    char why[300];
    int r = acp_turn_update(h->turn, json_object_get(m->params, "update"), out, why, sizeof(why));
    if (r < 0) {
        json_decref(out);
        acp_misbehaved(h, r == -E2BIG ? "AgentFlood" : "AgentProtocolError", why);
        return;
    }
    h->last_activity = conv_mono_ms();
    acp_append(h, out);
}

void acp_on_line(acp_host *h, rt_msg *m)
{
    if (h->proc == NULL || m->arg != h->proc_id)
        return; /* a process let go of */
    if (m->buf == NULL) {
        acp_misbehaved(h, "AgentProtocolError", "the agent wrote a line longer than 16 MiB");
        return;
    }
    if (rt_proc_write_queued(h->proc) > ACP_STDIN_MAX) {
        acp_misbehaved(h, "AgentFlood",
                       "the agent does not read what parley writes to it (64 MiB wait) while it "
                       "goes on writing");
        return;
    }
    rpc_msg rm;
    rpc_parse((const char *)rt_buf_data(m->buf), rt_buf_len(m->buf), &rm);
    switch (rm.type) {
    case RPC_INVALID: {
        char why[300];
        snprintf(why, sizeof(why), "the agent wrote what is not JSON-RPC 2.0: %s", rm.why);
        acp_misbehaved(h, "AgentProtocolError", why);
        rpc_clear(&rm);
        return;
    }
    case RPC_RESULT:
    case RPC_ERROR:
        on_response(h, &rm);
        break;
    case RPC_NOTIFY:
        if (strcmp(rm.method, "session/update") == 0)
            on_update(h, &rm);
        break; /* other notifications: nothing to do */
    case RPC_REQUEST:
        if (strcmp(rm.method, "session/request_permission") == 0)
            on_permission(h, &rm);
        else if (strcmp(rm.method, "fs/read_text_file") == 0)
            on_fs(h, &rm, false);
        else if (strcmp(rm.method, "fs/write_text_file") == 0)
            on_fs(h, &rm, true);
        else
            reply_error(h, rm.id, RPC_METHOD_NOT_FOUND, "parley does not offer this method");
        break;
    }
    rpc_clear(&rm);
    if (h->proc != NULL && m->arg == h->proc_id)
        acp_line_done(h);
}

/* ---- its end --------------------------------------------------------------------------- */

void acp_close_proc(acp_host *h)
{
    if (h->proc == NULL)
        return;
    if (h->turn != NULL && !h->cancel_sent && h->session_id != NULL)
        acp_send(
            h, rpc_notification("session/cancel", json_pack("{s:s}", "sessionId", h->session_id)));
    rt_proc_close(h->proc);
    h->proc = NULL;
    h->pstate = ACP_P_NONE;
    h->unacked = 0;
    h->loading = false;
}

void acp_misbehaved(acp_host *h, const char *code, const char *why)
{
    acp_close_proc(h);
    if (h->turn != NULL)
        acp_end_turn(h, NULL, code, why);
    else
        acp_fail(h, code, why);
}

void acp_on_exit(acp_host *h, rt_msg *m)
{
    if (h->proc == NULL || m->arg != h->proc_id || m->buf == NULL)
        return;
    rt_proc_exit how;
    memcpy(&how, rt_buf_data(m->buf), sizeof(how));
    char why[200];
    if (how.signal != 0)
        snprintf(why, sizeof(why), "the agent process was killed by signal %d", how.signal);
    else
        snprintf(why, sizeof(why), "the agent process exited with status %lld",
                 (long long)how.status);
    rt_proc_close(h->proc);
    h->proc = NULL;
    h->pstate = ACP_P_NONE;
    h->unacked = 0;
    h->loading = false;
    rt_log(RT_LOG_WARN, "agent", "%s: %s", h->agent, why);
    if (h->turn == NULL && (h->qhead == NULL || h->status != CONV_RUNNING))
        return; /* nothing was owed: it is started again when there is */
    /* restarts in the last window */
    uint64_t now = conv_mono_ms();
    unsigned k = 0;
    for (unsigned i = 0; i < h->nrestarts; i++)
        if (now - h->restarts[i] < ACP_RESTART_WINDOW)
            h->restarts[k++] = h->restarts[i];
    h->nrestarts = k;
    if (h->nrestarts >= ACP_RESTARTS) {
        char detail[300];
        snprintf(detail, sizeof(detail), "%s; it was restarted %u times within %d s: given up", why,
                 ACP_RESTARTS, ACP_RESTART_WINDOW / 1000);
        h->nrestarts = 0;
        if (h->turn != NULL)
            acp_end_turn(h, NULL, "AgentCrashed", detail);
        else
            acp_fail(h, "AgentCrashed", detail);
        return;
    }
    h->restarts[h->nrestarts++] = now;
    h->respawn_wait = true;
    rt_timer_start(h->self, (uint64_t)ACP_BACKOFF_MS << (h->nrestarts - 1), 0, ACP_RESPAWN, 0);
    if (h->turn == NULL)
        return;
    /* the turn's open calls are answered; its message is prompted again
     * once the process is back */
    json_t *out = json_array();
    acp_turn_end(h->turn, why, out);
    acp_append(h, out);
    acp_turn_free(h->turn);
    h->turn = NULL;
    acp_prompt *q = h->turn_msg;
    h->turn_msg = NULL;
    q->next = h->qhead;
    h->qhead = q;
    if (h->qtail == NULL)
        h->qtail = q;
    perm_clear(h);
}
