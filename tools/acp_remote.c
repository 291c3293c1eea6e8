/*
 * acp_remote.c - `parley acp --url`: sessions on a server of the API.
 * Writes are REST calls, blocking on the command's thread (remote.h):
 * POST /api/conversations, .../events {"role":"user",...,"run":true},
 * .../pause, .../events/respond_to_confirmation. Reads are a follower per
 * conversation (net/follower.h) on a runtime of one loop: an exact,
 * ordered copy of the log from its first event, then live over a
 * WebSocket, so events other clients append show too; each event goes to
 * the inbox as it is added to the copy.
 */
#include "acp_backend.h"

#include "net/follower.h"
#include "remote.h"
#include "runtime/runtime.h"
#include "runtime/json.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct follow_ud {
    acp_inbox *in;
    char cid[64];
    bool synced;
    rt_actor *a; /* the follower (a reference) */
} follow_ud;

struct acp_remote {
    net_url url;
    net_tls_config *tls;
    char *api_key, *agent;
    acp_approve approve;
    acp_inbox *in;
    remote *rest;
    rt_runtime *rt;
    follow_ud **f;
    size_t nf;
};

static void on_event(void *ud, uint64_t index, const char *id, const rt_buf *bytes)
{
    (void)index;
    (void)id;
    follow_ud *f = ud;
    acp_inbox_push(f->in, ACPI_EVENT, f->cid, rt_buf_data(bytes), rt_buf_len(bytes));
}

static void on_synced(void *ud, const fl *copy)
{
    (void)copy;
    follow_ud *f = ud;
    if (!f->synced)
        acp_inbox_push(f->in, ACPI_SYNCED, f->cid, NULL, 0);
    f->synced = true;
}

static void on_done(void *ud, int status, const char *why, const fl *copy, const follower_stats *st)
{
    (void)copy;
    (void)st;
    follow_ud *f = ud;
    if (status != 0)
        acp_inbox_push(f->in, ACPI_ENDED, f->cid, why, strlen(why));
}

/* One REST call: 0 if the status is want, else -errno and why. */
static int call(acp_remote *r, const char *method, const char *path, json_t *body, int want,
                json_t **out, char *why, size_t n)
{
    char *text = body != NULL ? rt_json_dumps(body, NULL) : NULL;
    json_decref(body);
    const char *answer;
    int st = remote_call(r->rest, method, path, text, &answer);
    free(text);
    if (st == want) {
        if (out != NULL)
            *out = json_loads(answer, 0, NULL);
        return 0;
    }
    json_t *j = json_loads(answer, 0, NULL);
    const char *detail = json_string_value(json_object_get(j, "detail"));
    if (st < 0)
        snprintf(why, n, "%s %s: %s", method, path, answer);
    else if ((st == 401 || st == 403) && r->api_key == NULL)
        snprintf(why, n,
                 "%s %s: %d: the server wants an API key: give it with --api-key KEY or "
                 "$SESSION_API_KEY",
                 method, path, st);
    else if (st == 401 || st == 403)
        snprintf(why, n,
                 "%s %s: %d: the server refused the API key given (--api-key or "
                 "$SESSION_API_KEY)",
                 method, path, st);
    else
        snprintf(why, n, "%s %s: %d %.300s", method, path, st, detail != NULL ? detail : answer);
    json_decref(j);
    return st == 404 ? -ENOENT : st == 409 ? -EBUSY : -EIO;
}

static int create(void *ud, const char *cwd, char id[64], char *why, size_t n)
{
    acp_remote *r = ud;
    json_t *b = json_object();
    if (r->agent != NULL)
        json_object_set_new(b, "agent",
                            json_pack("{s:s, s:[s]}", "kind", "ACPAgent", "acp_command", r->agent));
    if (cwd != NULL && cwd[0] == '/')
        json_object_set_new(b, "workspace", json_pack("{s:s}", "working_dir", cwd));
    json_object_set_new(b, "confirmation_policy",
                        json_pack("{s:s}", "kind", ACP_POLICY(r->approve)));
    json_t *info = NULL;
    int e = call(r, "POST", "/api/conversations", b, 201, &info, why, n);
    const char *cid = json_string_value(json_object_get(info, "id"));
    if (e == 0 && (cid == NULL || strlen(cid) >= 64)) {
        snprintf(why, n, "the server's answer has no conversation id");
        e = -EIO;
    }
    if (e == 0)
        snprintf(id, 64, "%s", cid);
    json_decref(info);
    return e;
}

static int attach(void *ud, const char *cid, char *why, size_t n)
{
    acp_remote *r = ud;
    char path[128];
    snprintf(path, sizeof(path), "/api/conversations/%s", cid);
    int e = call(r, "GET", path, NULL, 200, NULL, why, n);
    if (e != 0)
        return e;
    follow_ud **t = realloc(r->f, (r->nf + 1) * sizeof(*t));
    follow_ud *f = calloc(1, sizeof(*f));
    if (t != NULL)
        r->f = t;
    if (t == NULL || f == NULL) {
        free(f);
        snprintf(why, n, "out of memory");
        return -ENOMEM;
    }
    f->in = r->in;
    snprintf(f->cid, sizeof(f->cid), "%s", cid);
    follower_opts fo = {.url = r->url,
                        .tls = r->tls,
                        .api_key = r->api_key,
                        .conversation_id = cid,
                        .copy = fl_new(),
                        .follow = true,
                        .use_index = true,
                        .on_event = on_event,
                        .on_synced = on_synced,
                        .on_done = on_done,
                        .ud = f};
    if (fo.copy == NULL || follower_start(r->rt, &fo, &f->a) != 0) {
        fl_free(fo.copy);
        free(f);
        snprintf(why, n, "cannot start following the conversation");
        return -ENOMEM;
    }
    r->f[r->nf++] = f;
    return 0;
}

static int post(void *ud, const char *cid, json_t *content, char *why, size_t n)
{
    char path[128];
    snprintf(path, sizeof(path), "/api/conversations/%s/events", cid);
    return call(ud, "POST", path,
                json_pack("{s:s, s:O, s:b}", "role", "user", "content", content, "run", 1), 200,
                NULL, why, n);
}

static int pause_(void *ud, const char *cid, char *why, size_t n)
{
    char path[128];
    snprintf(path, sizeof(path), "/api/conversations/%s/pause", cid);
    return call(ud, "POST", path, NULL, 200, NULL, why, n);
}

static int confirm(void *ud, const char *cid, bool accept, const char *reason, char *why, size_t n)
{
    char path[160];
    snprintf(path, sizeof(path), "/api/conversations/%s/events/respond_to_confirmation", cid);
    return call(ud, "POST", path, json_pack("{s:b, s:s}", "accept", accept, "reason", reason), 200,
                NULL, why, n);
}

acp_remote *acp_remote_new(const net_url *u, net_tls_config *tls, const char *api_key,
                           const char *agent, acp_approve approve, acp_inbox *in, acpa_backend *b)
{
    acp_remote *r = calloc(1, sizeof(*r));
    if (r == NULL)
        return NULL;
    r->approve = approve;
    r->url = *u;
    r->tls = tls;
    r->in = in;
    r->api_key = api_key != NULL ? strdup(api_key) : NULL;
    r->agent = agent != NULL ? strdup(agent) : NULL;
    rt_opts o = {.loops = 1};
    if ((r->rest = remote_new(u, tls, api_key)) == NULL || rt_runtime_new(&o, &r->rt) != 0) {
        r->rt = NULL;
        acp_remote_free(r);
        return NULL;
    }
    *b = (acpa_backend){.ud = r,
                        .create = create,
                        .attach = attach,
                        .post = post,
                        .pause = pause_,
                        .confirm = confirm};
    return r;
}

void acp_remote_free(acp_remote *r)
{
    if (r == NULL)
        return;
    for (size_t i = 0; i < r->nf; i++)
        (void)rt_send(r->f[i]->a, FOLLOWER_STOP, 0, NULL); /* fails if it ended already */
    if (r->rt != NULL) {
        for (size_t i = 0; i < r->nf; i++)
            rt_actor_unref(r->f[i]->a);
        rt_runtime_shutdown(r->rt);
        rt_runtime_wait(r->rt);
        rt_runtime_free(r->rt);
    }
    for (size_t i = 0; i < r->nf; i++)
        free(r->f[i]);
    free(r->f);
    remote_free(r->rest);
    net_tls_config_free(r->tls);
    free(r->api_key);
    free(r->agent);
    free(r);
}
