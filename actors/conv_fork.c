/*
 * conv_fork.c - a new conversation from a prefix of another's log
 * (conversation.h: convs_fork).
 *
 * The fork's events are the source's, read from its log and appended to
 * the fork's conversation in arrays of FORK_BATCH, so each goes through
 * the fork's own gate like any producer's and is durable before the next
 * array goes. Status updates are left out: a fork starts idle, as
 * upstream's does, whatever its source was doing. Anything refused or
 * failed deletes the fork again: a fork is whole or absent.
 */
#include "conv_impl.h"
#include "conv_read.h"

#include "runtime/json.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { FORK_BATCH = 100 };

typedef struct wait {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool done;
    pl_outcome outcome;
    char detail[300];
} wait;

static void on_answer(void *ctx, rt_msg *m)
{
    wait *w = ctx;
    const conv_reply *cr = m->kind == CONV_RESULT ? conv_reply_of(m) : NULL;
    pthread_mutex_lock(&w->mu);
    if (cr != NULL) {
        w->outcome = cr->v.outcome;
        snprintf(w->detail, sizeof(w->detail), "%s%s%s", cr->v.rule != NULL ? cr->v.rule : "",
                 cr->v.rule != NULL ? ": " : "", cr->v.detail != NULL ? cr->v.detail : "");
    } else {
        w->outcome = PL_BUSY;
        snprintf(w->detail, sizeof(w->detail), "the conversation did not answer: %s",
                 rt_strerror(m->kind == RT_KIND_ERROR ? m->status : RT_EFAIL));
    }
    w->done = true;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

/* Ask conversation id (kind, buf taken) and wait: its outcome, detail in w. */
static pl_outcome ask(convs *s, const rt_uuid *id, uint32_t kind, rt_buf *buf, wait *w)
{
    memset(w, 0, sizeof(*w));
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    int r = convs_call(s, id, RT_LOOP_ANY, kind, 0, buf, 0, on_answer, w);
    if (r < 0) {
        rt_buf_unref(buf);
        w->outcome = PL_BUSY;
        snprintf(w->detail, sizeof(w->detail), "cannot reach the conversation: %s", rt_strerror(r));
    } else {
        pthread_mutex_lock(&w->mu);
        while (!w->done)
            pthread_cond_wait(&w->cv, &w->mu);
        pthread_mutex_unlock(&w->mu);
    }
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
    return w->outcome;
}

/* Whether the fork leaves e out: a change of execution status. */
static bool left_out(json_t *e)
{
    const char *k = json_string_value(json_object_get(e, "kind"));
    const char *key = json_string_value(json_object_get(e, "key"));
    return k != NULL && strcmp(k, "ConversationStateUpdateEvent") == 0 && key != NULL &&
           strcmp(key, "execution_status") == 0;
}

/* Append the source's events [0, end) to the fork id, FORK_BATCH at a time. */
static int copy_events(convs *s, conv_reader *rd, uint64_t end, const rt_uuid *id, char *detail,
                       size_t cap)
{
    for (uint64_t at = 0; at < end;) {
        uint32_t n = end - at < FORK_BATCH ? (uint32_t)(end - at) : FORK_BATCH;
        st_page *pg;
        pl_outcome why;
        if (conv_read_page(rd, at, n, &pg, &why, detail, cap) < 0)
            return -EIO;
        json_t *batch = json_array();
        for (uint32_t i = 0; i < pg->n && batch != NULL; i++) {
            const char *b = (const char *)rt_buf_data(pg->bytes) + pg->ev[i].off;
            json_t *e = rt_json_read(b, pg->ev[i].len, 0, NULL);
            if (e != NULL && !left_out(e))
                json_array_append(batch, e);
            json_decref(e);
        }
        at += pg->n;
        bool short_page = pg->n == 0;
        st_page_free(pg);
        if (short_page) {
            json_decref(batch);
            break;
        }
        if (json_array_size(batch) == 0) {
            json_decref(batch);
            continue;
        }
        rt_buf *buf = rt_json_buf(batch);
        if (buf == NULL) {
            snprintf(detail, cap, "out of memory");
            return -ENOMEM;
        }
        wait w;
        pl_outcome o = ask(s, id, CONV_APPEND, buf, &w);
        if (o != PL_COMMITTED && o != PL_DUPLICATE) {
            snprintf(detail, cap, "the fork refused the source's events %llu..%llu (%s): %s",
                     (unsigned long long)(at - n), (unsigned long long)(at - 1), pl_outcome_name(o),
                     w.detail);
            return o == PL_REJECTED || o == PL_INVALID ? -EPROTO : -EIO;
        }
    }
    return 0;
}

/* The fork's info: the source's, less what is its own, with changes;
 * its agent apart (*agent, a new reference, or NULL). */
static rt_buf *fork_meta(st_conv *src, const rt_uuid *id, json_t *changes, json_t **agent)
{
    rt_buf *mb = st_conv_meta(src);
    json_t *m = rt_json_read((const char *)rt_buf_data(mb), rt_buf_len(mb), 0, NULL);
    rt_buf_unref(mb);
    if (!json_is_object(m)) {
        json_decref(m);
        m = json_object();
    }
    static const char *const own[] = {"id",
                                      "created_at",
                                      "updated_at",
                                      "title",
                                      "acp_session_id",
                                      "forked_from_conversation_id",
                                      "forked_from_event_id"};
    for (size_t i = 0; i < sizeof(own) / sizeof(own[0]); i++)
        json_object_del(m, own[i]);
    char dashed[37], ts[32];
    rt_uuid_dashed(id, dashed);
    ev_now_timestamp(ts);
    json_object_set_new(m, "id", json_string(dashed));
    json_object_set_new(m, "created_at", json_string(ts));
    json_object_update(m, changes);
    *agent = json_incref(json_object_get(m, "agent"));
    json_object_del(m, "agent");
    return rt_json_buf(m);
}

/* The agent into the fork's info, then its adapter into its tree. */
static int give_agent(convs *s, const rt_uuid *id, json_t *agent, char *detail, size_t cap)
{
    json_t *change = json_pack("{s:O}", "agent", agent);
    rt_buf *buf = rt_json_buf(change);
    wait w;
    pl_outcome o = buf != NULL ? ask(s, id, CONV_SET_META, buf, &w) : PL_FAILED;
    if (o != PL_DONE) {
        snprintf(detail, cap, "cannot give the fork its agent: %s",
                 buf != NULL ? w.detail : "out of memory");
        return -EIO;
    }
    int r = convs_attach_host(s, id);
    if (r < 0)
        snprintf(detail, cap, "cannot start the fork's agent: %s", strerror(-r));
    return r;
}

int convs_fork(convs *s, const rt_uuid *src, const rt_uuid *id, json_t *changes,
               const char *from_event, char *detail, size_t cap)
{
    conv_reader rd;
    pl_outcome why;
    if (conv_read_open(s->store, src, &rd, NULL, &why, detail, cap) < 0)
        return why == PL_NOT_FOUND ? -ENOENT : why == PL_BUSY ? -EAGAIN : -EIO;
    uint64_t end = conv_read_count(&rd);
    if (from_event != NULL) {
        uint64_t at;
        if (conv_read_find(&rd, from_event, strlen(from_event), &at) != 0) {
            conv_read_close(&rd);
            snprintf(detail, cap, "from_event_id %.80s is not an event of the conversation",
                     from_event);
            return -ESRCH;
        }
        end = at + 1;
    }
    json_t *agent = NULL;
    rt_buf *meta = fork_meta(rd.sc, id, changes, &agent);
    json_t *secrets = convs_secrets(s, src);
    rt_actor *a = NULL;
    bool created = false;
    int r = meta != NULL ? convs_create(s, id, NULL, meta, secrets, &a, &created) : -ENOMEM;
    rt_buf_unref(meta);
    json_decref(secrets);
    if (r == 0 && !created) {
        char dashed[37];
        rt_uuid_dashed(id, dashed);
        snprintf(detail, cap, "Conversation with id %s already exists", dashed);
        r = -EEXIST;
    } else if (r < 0) {
        snprintf(detail, cap, "cannot create the fork: %s", strerror(-r));
    } else {
        r = copy_events(s, &rd, end, id, detail, cap);
        if (r == 0 && agent != NULL)
            r = give_agent(s, id, agent, detail, cap);
        if (r < 0) { /* whole or absent */
            wait w;
            ask(s, id, CONV_DELETE, NULL, &w);
        }
    }
    json_decref(agent);
    rt_actor_unref(a);
    conv_read_close(&rd);
    return r;
}
