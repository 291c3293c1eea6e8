/*
 * convs_summary.c - what lists show of every conversation, kept by the
 * service so that a list needs no conversation's actors (conv_summary in
 * conversation.h): the info's times, read once, and what each
 * conversation actor last noted. A clean close writes them all to the
 * store (SUMMARY_FILE); the next start takes them back, once, so that
 * after a restart a list by status still asks nobody; after a crash there
 * is no such file, and each conversation is asked once.
 */
#include "conv_impl.h"

#include "runtime/json.h"
#include "runtime/log.h"

#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- what lists show --------------------------------------------------- */

/* The info's created_at and updated_at into e (lock held). */
static void set_meta_part(conv_entry *e, const json_t *meta)
{
    const char *c = json_string_value(json_object_get(meta, "created_at"));
    const char *u = json_string_value(json_object_get(meta, "updated_at"));
    snprintf(e->created, sizeof(e->created), "%s", c != NULL ? c : "");
    snprintf(e->meta_updated, sizeof(e->meta_updated), "%s", u != NULL ? u : "");
    e->meta_known = true;
}

static json_t *parse_meta(rt_buf *m)
{
    return m != NULL ? rt_json_read((const char *)rt_buf_data(m), rt_buf_len(m), 0, NULL) : NULL;
}

void convs_note(conv_ctx *ctx, const conv_reply *info)
{
    conv_entry *e = conv_entry_of(ctx);
    pthread_mutex_lock(&ctx->svc->mu);
    e->known = info != NULL;
    if (info == NULL) {
        pthread_mutex_unlock(&ctx->svc->mu);
        return;
    }
    e->status = info->status;
    e->count = info->count;
    e->findings = info->findings;
    memcpy(e->last_event, info->updated, sizeof(e->last_event));
    pthread_mutex_unlock(&ctx->svc->mu);
}

void convs_note_meta(conv_ctx *ctx, rt_buf *meta)
{
    json_t *j = parse_meta(meta);
    pthread_mutex_lock(&ctx->svc->mu);
    set_meta_part(conv_entry_of(ctx), j);
    pthread_mutex_unlock(&ctx->svc->mu);
    json_decref(j);
}

static void summary_of(const conv_entry *e, conv_summary *out)
{
    *out = (conv_summary){.exists = true,
                          .known = e->known,
                          .status = e->status,
                          .count = e->count,
                          .findings = e->findings};
    memcpy(out->created, e->created, sizeof(out->created));
    memcpy(out->meta_updated, e->meta_updated, sizeof(out->meta_updated));
    memcpy(out->last_event, e->last_event, sizeof(out->last_event));
}

/* On a store shared by nodes, what the conversation's writer published
 * of it (st_conv_summary), if that is newer than what this node noted:
 * every status it reaches is an event, so the longer log is the newer. */
static void take_published(convs *s, const rt_uuid *id, conv_summary *out)
{
    st_summary p;
    if (!out->exists || st_conv_summary(s->store, id, &p) != 0 ||
        (out->known && p.count <= out->count) || p.status > CONV_DELETING)
        return;
    out->known = true;
    out->status = (conv_status)p.status;
    out->count = p.count;
    out->findings = (conv_findings){.violations = p.violations, .stuck = p.stuck};
    memcpy(out->last_event, p.last_event, sizeof(out->last_event));
}

int convs_summaries(convs *s, const rt_uuid *ids, size_t n, conv_summary *out)
{
    bool shared = st_store_shared(s->store);
    pthread_mutex_lock(&s->mu);
    for (size_t i = 0; i < n; i++) {
        if (i % 1024 == 1023) { /* conversations note on their loops meanwhile */
            pthread_mutex_unlock(&s->mu);
            pthread_mutex_lock(&s->mu);
        }
        conv_entry *e = convs_find(s, &ids[i]);
        if (e != NULL && e->meta_known) {
            summary_of(e, &out[i]);
            if (shared)
                take_published(s, &ids[i], &out[i]);
            continue;
        }
        /* first asked: its info is read once, without the lock */
        pthread_mutex_unlock(&s->mu);
        st_conv *sc;
        out[i] = (conv_summary){.exists = false};
        if (st_conv_get(s->store, &ids[i], &sc) != 0) {
            pthread_mutex_lock(&s->mu);
            continue;
        }
        rt_buf *m = st_conv_meta(sc);
        st_conv_release(sc);
        json_t *j = parse_meta(m);
        rt_buf_unref(m);
        pthread_mutex_lock(&s->mu);
        if ((e = convs_entry(s, &ids[i])) == NULL) {
            pthread_mutex_unlock(&s->mu);
            json_decref(j);
            return -ENOMEM;
        }
        if (!e->meta_known) /* else an actor noted a newer one meanwhile */
            set_meta_part(e, j);
        json_decref(j);
        summary_of(e, &out[i]);
        if (shared)
            take_published(s, &ids[i], &out[i]);
    }
    pthread_mutex_unlock(&s->mu);
    return 0;
}

const char *conv_last_update(const char *updated, const char *created, const char *last_event)
{
    const char *info = updated != NULL && updated[0] != '\0' ? updated : created;
    if (last_event != NULL && last_event[0] != '\0' &&
        (info == NULL || strcmp(last_event, info) > 0))
        return last_event;
    return info;
}

const char *conv_summary_updated(const conv_summary *c)
{
    return conv_last_update(c->meta_updated, c->created, c->last_event);
}

/* ---- across a clean restart ------------------------------------------------ */

#define SUMMARY_FILE "summaries.jsonl"
#define SUMMARY_HEAD "{\"parley_summaries\":1}\n"

static void put_field(rt_text *t, const char *name, const char *v)
{
    rt_text_printf(t, ",\"%s\":", name);
    rt_text_json_string(t, v, strlen(v));
}

void convs_save(convs *s)
{
    rt_text t = {0};
    size_t n = 0;
    rt_text_puts(&t, SUMMARY_HEAD);
    pthread_mutex_lock(&s->mu);
    for (size_t i = 0; i < s->nbuckets; i++)
        for (conv_entry *e = s->buckets[i]; e != NULL; e = e->next) {
            st_conv *sc;
            /* not known, deleted, or running: opening it again finds it
             * stopped mid-run (an error), which its actor must say */
            if (!e->known || e->status == CONV_RUNNING ||
                st_conv_get(s->store, &e->ctx.id, &sc) != 0)
                continue;
            if (!e->meta_known) { /* no list asked for it yet */
                rt_buf *m = st_conv_meta(sc);
                json_t *j = parse_meta(m);
                rt_buf_unref(m);
                set_meta_part(e, j);
                json_decref(j);
            }
            st_conv_release(sc);
            char hex[33];
            rt_uuid_hex(&e->ctx.id, hex);
            rt_text_printf(&t,
                           "{\"id\":\"%s\",\"status\":\"%s\",\"count\":%" PRIu64
                           ",\"violations\":%" PRIu64 ",\"stuck\":%" PRIu64,
                           hex, conv_status_name(e->status), e->count, e->findings.violations,
                           e->findings.stuck);
            put_field(&t, "created", e->created);
            put_field(&t, "updated", e->meta_updated);
            put_field(&t, "last_event", e->last_event);
            rt_text_puts(&t, "}\n");
            n++;
        }
    pthread_mutex_unlock(&s->mu);
    int r = t.failed ? -ENOMEM : st_store_put_file(s->store, SUMMARY_FILE, t.p, t.len);
    if (r < 0) /* the next start asks each conversation instead */
        rt_log(RT_LOG_WARN, "conversations", "cannot save the summaries of %zu conversations: %s",
               n, strerror(-r));
    free(t.p);
}

static void copy_string(char *dst, size_t cap, const json_t *v)
{
    snprintf(dst, cap, "%s", json_is_string(v) ? json_string_value(v) : "");
}

/* One line of the file into its entry: false if it is not one. */
static bool load_line(convs *s, const char *p, size_t n)
{
    json_t *j = rt_json_read(p, n, 0, NULL);
    const char *hex = json_string_value(json_object_get(j, "id"));
    int status = conv_status_parse(json_string_value(json_object_get(j, "status")));
    rt_uuid id;
    st_conv *sc;
    bool ok = hex != NULL && rt_uuid_parse(hex, strlen(hex), &id) && status >= 0;
    if (ok && st_conv_get(s->store, &id, &sc) == 0) { /* else gone meanwhile */
        st_conv_release(sc);
        pthread_mutex_lock(&s->mu);
        conv_entry *e = convs_entry(s, &id);
        if (e != NULL) {
            e->known = e->meta_known = true;
            e->status = (conv_status)status;
            e->count = (uint64_t)json_integer_value(json_object_get(j, "count"));
            e->findings.violations = (uint64_t)json_integer_value(json_object_get(j, "violations"));
            e->findings.stuck = (uint64_t)json_integer_value(json_object_get(j, "stuck"));
            copy_string(e->created, sizeof(e->created), json_object_get(j, "created"));
            copy_string(e->meta_updated, sizeof(e->meta_updated), json_object_get(j, "updated"));
            copy_string(e->last_event, sizeof(e->last_event), json_object_get(j, "last_event"));
        }
        pthread_mutex_unlock(&s->mu);
    }
    json_decref(j);
    return ok;
}

void convs_load(convs *s)
{
    char *data;
    size_t len;
    int r = st_store_take_file(s->store, SUMMARY_FILE, &data, &len);
    if (r == -ENOENT)
        return;
    if (r < 0) {
        rt_log(RT_LOG_WARN, "conversations", "cannot read the summaries of the last close: %s",
               strerror(-r));
        return;
    }
    size_t head = strlen(SUMMARY_HEAD), n = 0, bad = 0;
    if (len < head || memcmp(data, SUMMARY_HEAD, head) != 0)
        bad++;
    for (size_t at = bad ? len : head; at < len;) {
        const char *end = memchr(data + at, '\n', len - at);
        size_t l = end != NULL ? (size_t)(end - (data + at)) : len - at;
        if (load_line(s, data + at, l))
            n++;
        else
            bad++;
        at += l + 1;
    }
    free(data);
    rt_log(bad ? RT_LOG_WARN : RT_LOG_INFO, "conversations",
           "summaries of %zu conversations taken from the last close%s", n,
           bad ? " (some lines were not summaries: those conversations are asked)" : "");
}
