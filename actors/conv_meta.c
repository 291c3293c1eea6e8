/*
 * conv_meta.c - changes to a conversation's stored info (meta.json: title,
 * tags, ...) go through its actor, one at a time: each is merged into the
 * info as the previous change left it and written durably (temp file,
 * fsync, rename, in the thread pool) before the next is merged. So two
 * clients changing different fields at once both keep their change.
 */
#include "conv_impl.h"

#include "runtime/json.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct meta_change {
    struct meta_change *next;
    rt_buf *changes; /* a JSON object: the members to set */
    rt_promise reply;
} meta_change;

typedef struct meta_job {
    uv_work_t req;
    conv_ctx *ctx;
    rt_actor *self; /* held */
    st_conv *sc;    /* held */
    rt_buf *meta;   /* the whole info to write */
    int err;
} meta_job;

static void write_work(uv_work_t *req)
{
    meta_job *j = req->data;
    j->err = st_conv_set_meta(j->sc, j->meta);
}

static void write_done(uv_work_t *req, int status)
{
    (void)status;
    meta_job *j = req->data;
    if (j->err == 0) /* before it is answered: a list asked next shows it */
        convs_note_meta(j->ctx, j->meta);
    rt_notify(j->self, CONV_META_SAVED, (uint64_t)(j->err < 0 ? -j->err : 0), NULL);
    rt_actor_unref(j->self);
    st_conv_release(j->sc);
    rt_buf_unref(j->meta);
    free(j);
}

/* The info with the change merged in; NULL if out of memory. */
static rt_buf *merged(conv *c, const rt_buf *changes)
{
    rt_buf *m = st_conv_meta(c->sc);
    json_t *meta =
        m != NULL ? rt_json_read((const char *)rt_buf_data(m), rt_buf_len(m), 0, NULL) : NULL;
    rt_buf_unref(m);
    json_t *ch = rt_json_read((const char *)rt_buf_data(changes), rt_buf_len(changes), 0, NULL);
    if (!json_is_object(meta)) {
        json_decref(meta);
        meta = json_object();
    }
    if (json_is_object(ch))
        json_object_update(meta, ch);
    json_decref(ch);
    conv_meta_redact(meta);
    return rt_json_buf(meta);
}

/* Start writing the oldest change, if none is being written. */
static void next_change(conv *c)
{
    while (c->meta_queue != NULL && !c->meta_busy) {
        meta_change *m = c->meta_queue;
        meta_job *j = calloc(1, sizeof(*j));
        if (j != NULL && (j->meta = merged(c, m->changes)) != NULL &&
            st_conv_get(c->ctx->svc->store, &c->ctx->id, &j->sc) == 0) {
            j->req.data = j;
            j->self = rt_actor_ref(c->self);
            j->ctx = c->ctx;
            rt_runtime *rt = rt_actor_runtime(c->self);
            if (uv_queue_work(rt_runtime_uv(rt, rt_actor_loop(c->self)), &j->req, write_work,
                              write_done) == 0) {
                c->meta_busy = true;
                return;
            }
            rt_actor_unref(j->self);
            st_conv_release(j->sc);
        }
        bool gone = j != NULL && j->meta != NULL;
        if (j != NULL)
            rt_buf_unref(j->meta);
        free(j);
        c->meta_queue = m->next;
        conv_answer(&m->reply,
                    gone ? conv_reply_detail(PL_NOT_FOUND, 0, "the conversation is gone")
                         : conv_reply_detail(PL_FAILED, 0, "cannot update: out of memory"));
        rt_buf_unref(m->changes);
        free(m);
    }
}

/* The members upstream keeps as SecretStr (an LLM's keys, wherever an LLM
 * is: the agent's, a condenser's...). */
static const char *const secret_names[] = {"api_key", "aws_access_key_id", "aws_secret_access_key"};

static void redact(json_t *v, bool all)
{
    const char *k;
    json_t *m;
    size_t i;
    if (json_is_object(v)) {
        json_object_foreach(v, k, m)
        {
            bool secret = all;
            for (size_t n = 0; n < sizeof(secret_names) / sizeof(secret_names[0]); n++)
                secret |= strcmp(k, secret_names[n]) == 0;
            if (secret && json_is_string(m) && json_string_length(m) > 0)
                json_object_set_new(v, k, json_string(CONV_REDACTED));
            else
                redact(m, false);
        }
    } else if (json_is_array(v)) {
        json_array_foreach(v, i, m) redact(m, false);
    }
}

void conv_meta_redact(json_t *meta)
{
    redact(meta, false);
    json_t *sec = json_object_get(meta, "secrets");
    if (json_is_object(sec))
        redact(sec, true);
    else if (sec != NULL)
        json_object_del(meta, "secrets");
}

/* An environment variable's name: a letter or _, then letters, digits, _. */
static bool env_name(const char *k)
{
    if (k[0] == '\0' || (k[0] >= '0' && k[0] <= '9') || strlen(k) > CONV_SECRET_NAME_MAX)
        return false;
    return strspn(k, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_") ==
           strlen(k);
}

json_t *conv_secrets_parse(json_t *v, char *why, size_t cap)
{
    if (!json_is_object(v)) {
        snprintf(why, cap, "secrets must be an object: name -> value");
        return NULL;
    }
    if (json_object_size(v) > CONV_SECRETS_MAX) {
        snprintf(why, cap, "at most %d secrets", CONV_SECRETS_MAX);
        return NULL;
    }
    json_t *out = json_object();
    const char *k;
    json_t *x;
    json_object_foreach(v, k, x)
    {
        const char *kind = json_string_value(json_object_get(x, "kind"));
        json_t *val = json_is_string(x) ? x : json_object_get(x, "value");
        if (!env_name(k)) {
            snprintf(why, cap,
                     "secret name '%.64s': letters, digits and _ (not first), at most %d: it is "
                     "an environment variable of the agent",
                     k, CONV_SECRET_NAME_MAX);
        } else if (kind != NULL && strcmp(kind, "StaticSecret") != 0) {
            snprintf(why, cap,
                     "secret %s: a %.40s is not supported (parley fetches nothing): send its "
                     "value",
                     k, kind);
        } else if (!json_is_string(val) || json_string_length(val) > CONV_SECRET_VALUE_MAX) {
            snprintf(why, cap,
                     "secret %s: the value must be a string of at most %d bytes, or "
                     "{\"value\": string}",
                     k, CONV_SECRET_VALUE_MAX);
        } else {
            json_object_set(out, k, val);
            continue;
        }
        json_decref(out);
        return NULL;
    }
    return out;
}

void conv_set_meta(conv *c, const rt_buf *changes, rt_promise *reply)
{
    meta_change *m = changes != NULL ? calloc(1, sizeof(*m)) : NULL;
    if (m == NULL) {
        conv_answer(reply, conv_reply_detail(changes == NULL ? PL_INVALID : PL_FAILED, 0, "%s",
                                             changes == NULL ? "no changes" : "out of memory"));
        return;
    }
    m->changes = rt_buf_ref((rt_buf *)changes);
    m->reply = *reply;
    *reply = (rt_promise){0};
    meta_change **pp = &c->meta_queue;
    while (*pp != NULL)
        pp = &(*pp)->next;
    *pp = m;
    next_change(c);
}

void conv_meta_saved(conv *c, int err)
{
    meta_change *m = c->meta_queue;
    c->meta_busy = false;
    if (m != NULL) {
        c->meta_queue = m->next;
        char id[37];
        rt_uuid_dashed(&c->ctx->id, id);
        conv_answer(&m->reply,
                    err == 0 ? conv_reply_new(&(conv_reply_spec){.outcome = PL_DONE})
                    : err == ENOENT
                        ? conv_reply_detail(PL_NOT_FOUND, 0, "Conversation not found: %s", id)
                        : conv_reply_store_error(err, "cannot update conversation %s", id));
        rt_buf_unref(m->changes);
        free(m);
    }
    next_change(c);
}

void conv_refuse_meta(conv *c, pl_outcome o, const char *why)
{
    for (meta_change *m = c->meta_queue, *next; m != NULL; m = next) {
        next = m->next;
        conv_answer(&m->reply, conv_reply_detail(o, 0, "%s", why));
        rt_buf_unref(m->changes);
        free(m);
    }
    c->meta_queue = NULL;
}
