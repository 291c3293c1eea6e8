/*
 * acp_local.c - `parley acp --data DIR`: sessions in an instance of this
 * process, through the public API (include/parley.h), so one command is
 * all an editor needs. Writes wait for their verdict on the command's
 * thread; a subscription per conversation, from its first event, brings
 * the events on parley's callback thread to the inbox.
 */
#include "acp_backend.h"
#include "cli.h"

#include "actors/event.h"
#include "runtime/json.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct sub_ud {
    acp_inbox *in;
    char cid[64];
    uint64_t history; /* events before the subscription */
    bool synced;
    pl_conv *c;
    pl_sub *s;
} sub_ud;

struct acp_local {
    pl_instance *p;
    char *agent;
    acp_approve approve;
    acp_inbox *in;
    sub_ud **subs;
    size_t n;
};

/* ---- events ------------------------------------------------------------------------------------
 */

static void on_event(void *ctx, const pl_event *e)
{
    sub_ud *s = ctx;
    acp_inbox_push(s->in, ACPI_EVENT, s->cid, e->json, e->len);
    if (!s->synced && e->index + 1 >= s->history) {
        s->synced = true;
        acp_inbox_push(s->in, ACPI_SYNCED, s->cid, NULL, 0);
    }
}

static void on_ended(void *ctx, int why)
{
    sub_ud *s = ctx;
    const char *w = why == PL_ENOENT ? "the conversation was deleted" : pl_strerror(why);
    acp_inbox_push(s->in, ACPI_ENDED, s->cid, w, strlen(w));
}

static sub_ud *find(acp_local *l, const char *cid)
{
    for (size_t i = 0; i < l->n; i++)
        if (strcmp(l->subs[i]->cid, cid) == 0)
            return l->subs[i];
    return NULL;
}

/* ---- the backend ---------------------------------------------------------------------------- */

static int create(void *ud, const char *cwd, char id[64], char *why, size_t n)
{
    acp_local *l = ud;
    json_t *m = json_pack("{s:{s:s}}", "confirmation_policy", "kind", ACP_POLICY(l->approve));
    if (m != NULL && cwd != NULL && cwd[0] == '/')
        json_object_set_new(m, "workspace", json_pack("{s:s}", "working_dir", cwd));
    char *meta = m != NULL ? rt_json_dumps(m, NULL) : NULL;
    json_decref(m);
    if (meta == NULL) {
        snprintf(why, n, "out of memory");
        return -ENOMEM;
    }
    pl_conv_options o = {.meta_json = meta, .agent = l->agent};
    pl_conv *c;
    int e = pl_conv_create(l->p, &o, &c);
    free(meta);
    if (e != 0) {
        snprintf(why, n, "%s", pl_strerror(e));
        return e == PL_ENOENT ? -ENOENT : -EIO;
    }
    snprintf(id, 64, "%s", pl_conv_id(c));
    pl_conv_release(c);
    return 0;
}

static int attach(void *ud, const char *cid, char *why, size_t n)
{
    acp_local *l = ud;
    sub_ud *s = calloc(1, sizeof(*s));
    sub_ud **t = realloc(l->subs, (l->n + 1) * sizeof(*t));
    if (t != NULL)
        l->subs = t;
    if (s == NULL || t == NULL) {
        free(s);
        snprintf(why, n, "out of memory");
        return -ENOMEM;
    }
    s->in = l->in;
    snprintf(s->cid, sizeof(s->cid), "%s", cid);
    int e = pl_conv_open(l->p, cid, &s->c);
    if (e == 0 && (e = pl_count(s->c, &s->history)) == 0) {
        if (s->history == 0) {
            s->synced = true;
            acp_inbox_push(s->in, ACPI_SYNCED, s->cid, NULL, 0);
        }
        pl_sub_callbacks cb = {.event = on_event, .ended = on_ended};
        e = pl_subscribe(s->c, 0, &cb, s, &s->s);
    }
    if (e != 0) {
        snprintf(why, n, "%s", e == PL_ENOENT ? "no such conversation" : pl_strerror(e));
        pl_conv_release(s->c);
        free(s);
        return e == PL_ENOENT ? -ENOENT : -EIO;
    }
    l->subs[l->n++] = s;
    return 0;
}

static int post(void *ud, const char *cid, json_t *content, char *why, size_t n)
{
    sub_ud *s = find(ud, cid);
    if (s == NULL) {
        snprintf(why, n, "not attached");
        return -ENOENT;
    }
    json_t *msg = ev_user_message("user", content);
    char *json = msg != NULL ? rt_json_dumps(msg, NULL) : NULL;
    json_decref(msg);
    if (json == NULL) {
        snprintf(why, n, "out of memory");
        return -ENOMEM;
    }
    int o = cli_pl_wait(s->c, json, strlen(json), 0, why, n);
    free(json);
    if (o != PL_COMMITTED && o != PL_DUPLICATE && o != PL_DEFERRED)
        return -EIO;
    o = cli_pl_wait(s->c, NULL, 0, PL_RUN, why, n);
    return o == PL_DONE || o == PL_CONFLICT ? 0 : -EIO; /* conflict: it runs already */
}

static int pause_(void *ud, const char *cid, char *why, size_t n)
{
    sub_ud *s = find(ud, cid);
    if (s == NULL) {
        snprintf(why, n, "not attached");
        return -ENOENT;
    }
    return cli_pl_wait(s->c, NULL, 0, PL_PAUSE, why, n) == PL_DONE ? 0 : -EBUSY;
}

static int confirm(void *ud, const char *cid, bool accept, const char *reason, char *why, size_t n)
{
    sub_ud *s = find(ud, cid);
    if (s == NULL) {
        snprintf(why, n, "not attached");
        return -ENOENT;
    }
    int o =
        accept ? cli_pl_wait(s->c, NULL, 0, PL_RUN, why, n) : cli_pl_reject(s->c, reason, why, n);
    return o == PL_DONE ? 0 : -EIO;
}

acp_local *acp_local_new(const pl_options *o, const char *agent, acp_approve approve, acp_inbox *in,
                         acpa_backend *b, char *err, size_t errlen)
{
    acp_local *l = calloc(1, sizeof(*l));
    if (l == NULL || (agent != NULL && (l->agent = strdup(agent)) == NULL)) {
        free(l);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    l->approve = approve;
    l->in = in;
    if (pl_open(o, &l->p, err, errlen) != 0) {
        free(l->agent);
        free(l);
        return NULL;
    }
    *b = (acpa_backend){.ud = l,
                        .create = create,
                        .attach = attach,
                        .post = post,
                        .pause = pause_,
                        .confirm = confirm};
    return l;
}

void acp_local_free(acp_local *l)
{
    if (l == NULL)
        return;
    for (size_t i = 0; i < l->n; i++)
        pl_unsubscribe(l->subs[i]->s);
    pl_close(l->p);
    for (size_t i = 0; i < l->n; i++) {
        pl_conv_release(l->subs[i]->c);
        free(l->subs[i]);
    }
    free(l->subs);
    free(l->agent);
    free(l);
}
