/*
 * api_conversations.c - /api/conversations: create, get, list, search,
 * count, update, delete, run, pause, interrupt.
 *
 * A conversation's info (ConversationInfo) is its stored meta (what the
 * creator sent, plus id, created_at, title and tags) with what its actor
 * knows now: execution_status and updated_at (its last event's time, or
 * its last update's, whichever is later), and parley's own event_count,
 * violations (ComplianceViolation records) and stuck_findings
 * (StuckPatternDetected), all of the durable log. So
 * asking about a conversation starts its actor (opening its log from the
 * last checkpoint); lists ask all of theirs at once and answer when the
 * last one has. Searches sorted by creation without a status filter ask
 * only the page's conversations (sorting every stored meta's created_at);
 * the others (status filter, sort by update) ask every conversation:
 * O(conversations), as upstream.
 */
#include "api.h"

#include "actors/acp_registry.h"
#include "actors/event.h"

#include "runtime/json.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { LIMIT_MAX = NET_PAGE_MAX, TITLE_MAX = 200, TAG_VALUE_MAX = 256 };

/* The stored meta, parsed; NULL if the conversation is gone. */
static json_t *meta_of(st_store *s, const rt_uuid *id)
{
    st_conv *sc;
    if (st_conv_get(s, id, &sc) != 0)
        return NULL;
    rt_buf *m = st_conv_meta(sc);
    rt_uuid parent, *kids = NULL;
    bool has_parent = st_conv_parent(sc, &parent);
    st_conv_release(sc);
    size_t nkids = 0;
    json_t *j =
        m != NULL ? rt_json_read((const char *)rt_buf_data(m), rt_buf_len(m), 0, NULL) : NULL;
    rt_buf_unref(m);
    if (!json_is_object(j)) {
        json_decref(j);
        j = json_object();
    }
    char dashed[37];
    rt_uuid_dashed(id, dashed);
    json_object_set_new(j, "id", json_string(dashed));
    /* the catalog's, not the meta's: children are found through it */
    rt_uuid_dashed(&parent, dashed);
    json_object_set_new(j, "parent_conversation_id",
                        has_parent ? json_string(dashed) : json_null());
    json_t *sub = json_array();
    if (st_store_children(s, id, &kids, &nkids) == 0)
        for (size_t i = 0; i < nkids; i++) {
            rt_uuid_dashed(&kids[i], dashed);
            json_array_append_new(sub, json_string(dashed));
        }
    free(kids);
    json_object_set_new(j, "sub_conversation_ids", sub);
    return j;
}

/* ---- what answers show -------------------------------------------------------- */

/* As upstream: agent.agent_context.skills is [] in answers unless the
 * request says include_skills=true (a stock agent inlines ~260 KB of
 * them, which no known client reads); what is stored is untouched. */
static json_t *shown(net_req *r, json_t *info)
{
    const char *v = net_query_get(&r->query, "include_skills");
    bool all = v != NULL && (strcmp(v, "true") == 0 || strcmp(v, "1") == 0);
    json_t *ctx = json_object_get(json_object_get(info, "agent"), "agent_context");
    json_t *skills = json_object_get(ctx, "skills");
    if (!all && json_is_array(skills) && json_array_size(skills) > 0)
        json_object_set_new(ctx, "skills", json_array());
    return info;
}

/* include_skills must be a boolean: 0, or -1 after answering 422. */
static int check_include_skills(net_req *r)
{
    const char *v = net_query_get(&r->query, "include_skills");
    if (v == NULL || strcmp(v, "true") == 0 || strcmp(v, "false") == 0 || strcmp(v, "1") == 0 ||
        strcmp(v, "0") == 0)
        return 0;
    net_reply_error(r, 422, "include_skills must be true or false, not '%.40s'", v);
    return -1;
}

/* ---- asking many conversations for their status ---------------------------- */

typedef struct gather gather;
typedef void (*gather_fn)(gather *g);

struct gather {
    net_req *r;
    size_t n, pending;
    rt_uuid *ids;
    json_t **info; /* per id: the info, or NULL (gone) */
    int failed;    /* a conversation there that could not answer: 503 */
    char why[256];
    gather_fn done;
    bool started;
    void *arg;
};

typedef struct ask {
    gather *g;
    size_t i;
} ask;

static void gather_free(gather *g)
{
    for (size_t i = 0; i < g->n; i++)
        json_decref(g->info[i]);
    free(g->info);
    free(g->ids);
    free(g);
}

static void gather_check(gather *g)
{
    if (g->started && g->pending == 0)
        g->done(g);
}

static void on_status(void *ctx, rt_msg *m)
{
    ask *a = ctx;
    gather *g = a->g;
    size_t i = a->i;
    free(a);
    const conv_reply *cr = m->kind == CONV_RESULT ? conv_reply_of(m) : NULL;
    if (cr != NULL && cr->v.outcome == PL_DONE) {
        json_t *info = meta_of(g->r->api->store, &g->ids[i]);
        if (info != NULL) {
            json_object_set_new(info, "execution_status",
                                json_string(conv_status_name(cr->status)));
            /* the later of its last event and its last update (PATCH) */
            const char *upd = json_string_value(json_object_get(info, "updated_at"));
            if (upd == NULL)
                upd = json_string_value(json_object_get(info, "created_at"));
            if (cr->updated[0] != '\0' && (upd == NULL || strcmp(cr->updated, upd) > 0))
                upd = cr->updated;
            json_object_set_new(info, "updated_at", upd != NULL ? json_string(upd) : json_null());
            /* parley's own: what a list of conversations shows without
             * asking each one again */
            json_object_set_new(info, "event_count", json_integer((json_int_t)cr->count));
            json_object_set_new(info, "violations",
                                json_integer((json_int_t)cr->findings.violations));
            json_object_set_new(info, "stuck_findings",
                                json_integer((json_int_t)cr->findings.stuck));
            g->info[i] = info;
        }
    } else if (!(cr != NULL && cr->v.outcome == PL_NOT_FOUND) && !g->failed) {
        /* not gone, but it could not say how it is (its log would not open,
         * it timed out): the answer would be wrong without it */
        char id[37];
        rt_uuid_dashed(&g->ids[i], id);
        snprintf(g->why, sizeof(g->why), "conversation %s cannot answer: %s", id,
                 cr != NULL ? cr->v.detail
                            : rt_strerror(m->kind == RT_KIND_ERROR ? m->status : RT_EFAIL));
        g->failed = 1;
    }
    g->pending--;
    gather_check(g);
}

/* Answers 503 and frees g if one of its conversations failed. */
static bool gather_failed(gather *g)
{
    if (!g->failed)
        return false;
    net_reply_error(g->r, 503, "%s", g->why);
    gather_free(g);
    return true;
}

/* Ask each conversation of ids (taken) for its info; done runs once all
 * have answered (perhaps before this returns). NULL if out of memory. */
static void gather_start(net_req *r, rt_uuid *ids, size_t n, gather_fn done, void *arg)
{
    gather *g = calloc(1, sizeof(*g));
    if (g == NULL || (g->info = calloc(n + 1, sizeof(json_t *))) == NULL) {
        free(g);
        free(ids);
        net_reply_error(r, 503, "out of memory");
        return;
    }
    g->r = r;
    g->n = n;
    g->ids = ids;
    g->done = done;
    g->arg = arg;
    for (size_t i = 0; i < n; i++) {
        rt_actor *actor;
        ask *a;
        if (convs_get(r->api->convs, &ids[i], &actor) != 0)
            continue;
        if ((a = malloc(sizeof(*a))) == NULL) {
            rt_actor_unref(actor);
            continue;
        }
        *a = (ask){g, i};
        g->pending++;
        if (rt_call(r->api->rt, RT_LOOP_ANY, actor, CONV_STATUS, 0, NULL, r->api->call_timeout_ms,
                    on_status, a) < 0) {
            g->pending--;
            free(a);
        }
        rt_actor_unref(actor);
    }
    g->started = true;
    gather_check(g);
}

static rt_uuid *one_id(const rt_uuid *id)
{
    rt_uuid *ids = malloc(sizeof(*ids));
    if (ids != NULL)
        *ids = *id;
    return ids;
}

/* ---- get one, get many ------------------------------------------------------- */

static void got_one(gather *g)
{
    if (gather_failed(g))
        return;
    net_req *r = g->r;
    json_t *info = g->info[0];
    g->info[0] = NULL;
    int status = (int)(intptr_t)g->arg;
    char id[37];
    rt_uuid_dashed(&g->ids[0], id);
    gather_free(g);
    if (info == NULL) {
        net_reply_error(r, 404, "Conversation not found: %s", id);
        return;
    }
    net_reply_json(r, status, shown(r, info));
}

static void get_one(net_req *r, const rt_uuid *id, int status)
{
    rt_uuid *ids = one_id(id);
    if (ids == NULL) {
        net_reply_error(r, 503, "out of memory");
        return;
    }
    gather_start(r, ids, 1, got_one, (void *)(intptr_t)status);
}

void net_reply_conv_info(net_req *r, const rt_uuid *id, int status)
{
    get_one(r, id, status);
}

static void got_many(gather *g)
{
    if (gather_failed(g))
        return;
    json_t *list = json_array();
    for (size_t i = 0; i < g->n; i++) {
        json_array_append_new(list, g->info[i] != NULL ? shown(g->r, g->info[i]) : json_null());
        g->info[i] = NULL;
    }
    net_req *r = g->r;
    gather_free(g);
    net_reply_json(r, 200, list);
}

static void get_many(net_req *r)
{
    size_t n = 0;
    while (net_query_nth(&r->query, "ids", n) != NULL)
        n++;
    if (n >= LIMIT_MAX) {
        net_reply_error(r, 422, "ids: fewer than %d conversation ids, please", LIMIT_MAX);
        return;
    }
    rt_uuid *ids = calloc(n + 1, sizeof(*ids));
    if (ids == NULL) {
        net_reply_error(r, 503, "out of memory");
        return;
    }
    for (size_t i = 0; i < n; i++) {
        const char *v = net_query_nth(&r->query, "ids", i);
        if (!rt_uuid_parse(v, strlen(v), &ids[i])) {
            free(ids);
            net_reply_error(r, 422, "ids: '%.60s' is not a conversation id (a UUID)", v);
            return;
        }
    }
    gather_start(r, ids, n, got_many, NULL);
}

/* ---- search and count ------------------------------------------------------------- */

typedef enum { BY_CREATED, BY_UPDATED } sort_key;

typedef struct listing {
    int status; /* -1: any */
    sort_key key;
    bool desc;
    long limit;
    bool has_page;
    rt_uuid page;
    bool count_only;
} listing;

static int parse_listing(net_req *r, listing *l, bool count_only)
{
    const net_query *q = &r->query;
    *l = (listing){
        .status = -1, .key = BY_CREATED, .desc = true, .limit = 100, .count_only = count_only};
    const char *v;
    if ((v = net_query_get(q, "status")) != NULL && (l->status = conv_status_parse(v)) < 0) {
        net_reply_error(r, 422,
                        "status must be an execution status (idle, running, ...), not '%.40s'", v);
        return -1;
    }
    if (count_only)
        return 0;
    if ((v = net_query_get(q, "sort_order")) != NULL) {
        if (strcmp(v, "CREATED_AT") == 0)
            l->desc = false;
        else if (strcmp(v, "UPDATED_AT") == 0)
            l->key = BY_UPDATED, l->desc = false;
        else if (strcmp(v, "UPDATED_AT_DESC") == 0)
            l->key = BY_UPDATED;
        else if (strcmp(v, "CREATED_AT_DESC") != 0) {
            net_reply_error(r, 422,
                            "sort_order must be CREATED_AT, CREATED_AT_DESC, UPDATED_AT or "
                            "UPDATED_AT_DESC, not '%.40s'",
                            v);
            return -1;
        }
    }
    char err[96];
    if (net_query_limit(q, &l->limit, err, sizeof(err)) < 0) {
        net_reply_error(r, 422, "%s", err);
        return -1;
    }
    /* an unknown cursor (a conversation's id or not) starts from the top, as
     * upstream */
    if ((v = net_query_get(q, "page_id")) != NULL && v[0] != '\0')
        l->has_page = rt_uuid_parse(v, strlen(v), &l->page);
    return 0;
}

typedef struct entry {
    json_t *info;
    const char *key; /* created_at or updated_at */
    rt_uuid id;
} entry;

static int cmp_asc(const void *a, const void *b)
{
    const entry *x = a, *y = b;
    int c = strcmp(x->key != NULL ? x->key : "", y->key != NULL ? y->key : "");
    return c != 0 ? c : memcmp(x->id.b, y->id.b, sizeof(x->id.b));
}

static int cmp_desc(const void *a, const void *b)
{
    return cmp_asc(b, a);
}

static void listed(gather *g)
{
    net_req *r = g->r;
    listing *l = g->arg;
    if (gather_failed(g)) {
        free(l);
        return;
    }
    entry *es = calloc(g->n + 1, sizeof(*es));
    size_t n = 0;
    for (size_t i = 0; es != NULL && i < g->n; i++) {
        json_t *info = g->info[i];
        if (info == NULL)
            continue;
        const char *st = json_string_value(json_object_get(info, "execution_status"));
        if (l->status >= 0 && (st == NULL || conv_status_parse(st) != l->status))
            continue;
        es[n++] = (entry){info,
                          json_string_value(json_object_get(
                              info, l->key == BY_CREATED ? "created_at" : "updated_at")),
                          g->ids[i]};
    }
    if (es == NULL) {
        gather_free(g);
        free(l);
        net_reply_error(r, 503, "out of memory");
        return;
    }
    if (l->count_only) {
        free(es);
        gather_free(g);
        free(l);
        net_reply_json(r, 200, json_integer((json_int_t)n));
        return;
    }
    qsort(es, n, sizeof(*es), l->desc ? cmp_desc : cmp_asc);
    size_t start = 0;
    if (l->has_page) /* inclusive; an unknown cursor starts from the top */
        for (size_t i = 0; i < n; i++)
            if (rt_uuid_eq(&es[i].id, &l->page)) {
                start = i;
                break;
            }
    json_t *items = json_array();
    size_t end = start + (size_t)l->limit < n ? start + (size_t)l->limit : n;
    for (size_t i = start; i < end; i++)
        json_array_append(items, shown(r, es[i].info));
    char next[33];
    if (end < n)
        rt_uuid_hex(&es[end].id, next);
    json_t *body = json_pack("{s:o, s:s?}", "items", items, "next_page_id", end < n ? next : NULL);
    free(es);
    gather_free(g);
    free(l);
    net_reply_json(r, 200, body);
}

/* ---- search by creation: only the page asked ---------------------------------------- */

/* Without a status filter, the order by creation is in the stored metas
 * alone (created_at never changes): sort them, and ask only the page's
 * conversations for the rest of their info. The result is what the
 * general path gives (a conversation deleted meanwhile is left out of the
 * page), at the cost of reading every meta, not of asking (and opening)
 * every conversation: what a list refreshed every few seconds over 100 000
 * conversations can afford. */

typedef struct birth {
    char at[40]; /* created_at, "" if it has none */
    rt_uuid id;
} birth;

static int cmp_created_asc(const void *a, const void *b)
{
    const birth *x = a, *y = b;
    int c = strcmp(x->at, y->at);
    return c != 0 ? c : memcmp(x->id.b, y->id.b, sizeof(x->id.b));
}

static int cmp_created_desc(const void *a, const void *b)
{
    return cmp_created_asc(b, a);
}

/* created_at of a stored meta, into at ("" if none). */
static void created_of(st_store *s, const rt_uuid *id, char at[40])
{
    at[0] = '\0';
    st_conv *sc;
    if (st_conv_get(s, id, &sc) != 0)
        return;
    rt_buf *m = st_conv_meta(sc);
    st_conv_release(sc);
    json_t *j =
        m != NULL ? rt_json_read((const char *)rt_buf_data(m), rt_buf_len(m), 0, NULL) : NULL;
    rt_buf_unref(m);
    const char *v = json_string_value(json_object_get(j, "created_at"));
    if (v != NULL)
        snprintf(at, 40, "%s", v);
    json_decref(j);
}

static void listed_page(gather *g)
{
    char *next = g->arg; /* 32 hex digits, or NULL for the last page */
    if (gather_failed(g)) {
        free(next);
        return;
    }
    json_t *items = json_array();
    for (size_t i = 0; i < g->n; i++)
        if (g->info[i] != NULL)
            json_array_append(items, shown(g->r, g->info[i]));
    json_t *body = json_pack("{s:o, s:s?}", "items", items, "next_page_id", next);
    net_req *r = g->r;
    free(next);
    gather_free(g);
    net_reply_json(r, 200, body);
}

static void list_by_created(net_req *r, const listing *l, rt_uuid *ids, size_t n)
{
    birth *cs = calloc(n + 1, sizeof(*cs));
    if (cs == NULL) {
        free(ids);
        net_reply_error(r, 503, "out of memory");
        return;
    }
    for (size_t i = 0; i < n; i++) {
        cs[i].id = ids[i];
        created_of(r->api->store, &ids[i], cs[i].at);
    }
    qsort(cs, n, sizeof(*cs), l->desc ? cmp_created_desc : cmp_created_asc);
    size_t start = 0;
    if (l->has_page) /* inclusive; an unknown cursor starts from the top */
        for (size_t i = 0; i < n; i++)
            if (rt_uuid_eq(&cs[i].id, &l->page)) {
                start = i;
                break;
            }
    size_t end = start + (size_t)l->limit < n ? start + (size_t)l->limit : n;
    char *next = NULL;
    if (end < n && (next = malloc(33)) != NULL)
        rt_uuid_hex(&cs[end].id, next);
    for (size_t i = start; i < end; i++)
        ids[i - start] = cs[i].id;
    free(cs);
    if (end < n && next == NULL) {
        free(ids);
        net_reply_error(r, 503, "out of memory");
        return;
    }
    gather_start(r, ids, end - start, listed_page, next);
}

static void list(net_req *r, bool count_only)
{
    listing *l = malloc(sizeof(*l));
    if (l == NULL) {
        net_reply_error(r, 503, "out of memory");
        return;
    }
    if (parse_listing(r, l, count_only) < 0) {
        free(l);
        return;
    }
    if (count_only && l->status < 0) {
        free(l);
        net_reply_json(r, 200, json_integer((json_int_t)st_store_count(r->api->store)));
        return;
    }
    rt_uuid *ids;
    size_t n;
    if (st_store_list(r->api->store, &ids, &n) != 0) {
        free(l);
        net_reply_error(r, 503, "out of memory");
        return;
    }
    if (!count_only && l->status < 0 && l->key == BY_CREATED) {
        list_by_created(r, l, ids, n);
        free(l);
        return;
    }
    gather_start(r, ids, n, listed, l);
}

/* ---- create --------------------------------------------------------------------------- */

typedef struct creation {
    rt_uuid id;
    rt_uuid parent;
    bool has_parent;
    rt_buf *meta;
    json_t *initial; /* the user message to post, or NULL */
    json_t *secrets; /* {name: value}, or NULL: in memory only, never stored */
    bool created;
    rt_actor *actor;
} creation;

static void creation_free(creation *c)
{
    rt_buf_unref(c->meta);
    json_decref(c->initial);
    json_decref(c->secrets);
    rt_actor_unref(c->actor);
    free(c);
}

/* Characters, not bytes, as Python counts a str. */
static size_t utf8_chars(const char *s)
{
    size_t n = 0;
    for (; *s; s++)
        n += ((unsigned char)*s & 0xC0) != 0x80;
    return n;
}

static const char *check_fields(json_t *b)
{
    json_t *v;
    if (!json_is_object(b))
        return "the body must be a JSON object (a StartConversationRequest)";
    if ((v = json_object_get(b, "title")) != NULL && !json_is_null(v) &&
        (!json_is_string(v) || json_string_length(v) < 1 ||
         utf8_chars(json_string_value(v)) > TITLE_MAX))
        return "title must be a string of 1 to 200 characters";
    if ((v = json_object_get(b, "tags")) != NULL && !json_is_null(v)) {
        const char *k;
        json_t *t;
        if (!json_is_object(v))
            return "tags must be an object of strings";
        json_object_foreach(v, k, t)
        {
            if (!json_is_string(t))
                return "tags must be an object of strings";
            /* as upstream: keys lowercase alphanumeric, values of 256 at most */
            if (k[0] == '\0' || strspn(k, "abcdefghijklmnopqrstuvwxyz0123456789") != strlen(k))
                return "a tag key must be lowercase letters and digits only";
            if (utf8_chars(json_string_value(t)) > TAG_VALUE_MAX)
                return "a tag value must be 256 characters at most";
        }
    }
    if ((v = json_object_get(b, "max_iterations")) != NULL &&
        (!json_is_integer(v) || json_integer_value(v) < 1))
        return "max_iterations must be a positive integer";
    if ((v = json_object_get(b, "stuck_detection")) != NULL && !json_is_boolean(v))
        return "stuck_detection must be true or false";
    if ((v = json_object_get(b, "initial_message")) != NULL && !json_is_null(v) &&
        (!json_is_object(v) || !json_is_array(json_object_get(v, "content"))))
        return "initial_message must be an object with a content list";
    return NULL;
}

/* In the thread pool: creating writes meta.json durably. */
static void create_work(net_req *r, net_outcome *out)
{
    creation *c = r->data;
    int e = convs_create(r->api->convs, &c->id, c->has_parent ? &c->parent : NULL, c->meta,
                         c->secrets, &c->actor, &c->created);
    char parent[37];
    rt_uuid_dashed(&c->parent, parent);
    if (e == -ELOOP) /* the texts are upstream's */
        net_fail(out, 422, "A conversation cannot be its own parent");
    else if (e == -ENOENT)
        net_fail(out, 422, "Parent conversation %s not found", parent);
    else if (e == -EXDEV)
        net_fail(out, 422, "Parent conversation %s belongs to a different workspace", parent);
    else if (e == -ENOSPC || e == -EDQUOT)
        net_fail(out, 507, "the disk is full: cannot create the conversation (%s)", strerror(-e));
    else if (e == -EMFILE || e == -ENFILE) /* a bound, as a log that cannot open */
        net_fail(out, 503, "cannot create the conversation: %s", strerror(-e));
    else if (e < 0)
        net_fail(out, 500, "cannot create the conversation: %s", strerror(-e));
}

static void create_finish(net_req *r)
{
    creation *c = r->data;
    int status = c->created ? 201 : 200;
    rt_uuid id = c->id;
    r->data = NULL;
    creation_free(c);
    get_one(r, &id, status);
}

static void initial_posted(net_req *r, rt_msg *refusal)
{
    if (refusal == NULL) {
        create_finish(r);
        return;
    }
    creation_free(r->data);
    r->data = NULL;
    net_reply_actor(r, refusal);
}

static void created(net_req *r, net_outcome *out)
{
    creation *c = r->data;
    if (c->actor == NULL) {
        r->data = NULL;
        creation_free(c);
        net_reply_error(r, out->status ? out->status : 500, "%s", out->detail);
        return;
    }
    /* upstream always starts a run with an initial message */
    json_t *role = json_object_get(c->initial, "role");
    if (c->created && c->initial != NULL &&
        net_post_message(r, c->actor, json_is_string(role) ? json_string_value(role) : "user",
                         json_object_get(c->initial, "content"), true, initial_posted) == 0)
        return;
    create_finish(r);
}

static void create(net_req *r)
{
    json_t *b = net_req_json(r, "a StartConversationRequest object");
    if (b == NULL)
        return;
    const char *bad = check_fields(b);
    creation *c = bad == NULL ? calloc(1, sizeof(*c)) : NULL;
    json_t *id = json_object_get(b, "conversation_id");
    json_t *parent = json_object_get(b, "parent_conversation_id");
    if (bad == NULL && c == NULL)
        bad = "out of memory";
    else if (bad == NULL && parent != NULL && !json_is_null(parent) &&
             !(c->has_parent =
                   json_is_string(parent) && rt_uuid_parse(json_string_value(parent),
                                                           json_string_length(parent), &c->parent)))
        bad = "parent_conversation_id must be a UUID (dashed or 32 hex digits)";
    else if (bad == NULL && id != NULL && !json_is_null(id) &&
             (!json_is_string(id) ||
              !rt_uuid_parse(json_string_value(id), json_string_length(id), &c->id)))
        bad = "conversation_id must be a UUID (dashed or 32 hex digits)";
    else if (bad == NULL && (id == NULL || json_is_null(id)) && rt_uuid_v4(&c->id) != 0)
        bad = "cannot make an id";
    if (bad != NULL) {
        free(c);
        json_decref(b);
        net_reply_error(r, 422, "%s", bad);
        return;
    }
    json_t *init = json_object_get(b, "initial_message");
    c->initial = json_is_object(init) ? json_incref(init) : NULL;
    json_object_del(b, "initial_message");
    json_object_del(b, "conversation_id");
    json_object_del(b, "parent_conversation_id"); /* the catalog keeps it */
    json_object_del(b, "sub_conversation_ids");
    char dashed[37], ts[32];
    rt_uuid_dashed(&c->id, dashed);
    ev_now_timestamp(ts);
    json_object_set_new(b, "id", json_string(dashed));
    json_object_set_new(b, "created_at", json_string(ts));
    if (json_object_get(b, "max_iterations") == NULL)
        json_object_set_new(b, "max_iterations", json_integer(500));
    if (json_object_get(b, "stuck_detection") == NULL)
        json_object_set_new(b, "stuck_detection", json_true());
    if (json_object_get(b, "confirmation_policy") == NULL)
        json_object_set_new(b, "confirmation_policy", json_pack("{s:s}", "kind", "NeverConfirm"));
    if (!json_is_object(json_object_get(b, "tags")))
        json_object_set_new(b, "tags", json_object());
    if (json_is_null(json_object_get(b, "title")))
        json_object_del(b, "title");
    char why[400];
    if (acp_registry_meta(convs_agents(r->api->convs), b, NULL, why, sizeof(why)) != 0) {
        creation_free(c);
        json_decref(b);
        net_reply_error(r, 422, "%s", why);
        return;
    }
    json_t *secrets = json_object_get(b, "secrets");
    if (secrets != NULL && !json_is_null(secrets) &&
        (c->secrets = conv_secrets_parse(secrets, why, sizeof(why))) == NULL) {
        creation_free(c);
        json_decref(b);
        net_reply_error(r, 422, "%s", why);
        return;
    }
    conv_meta_redact(b); /* before anything is stored or answered */
    c->meta = net_json_buf(b);
    if (c->meta == NULL) {
        creation_free(c);
        net_reply_error(r, 503, "out of memory");
        return;
    }
    r->data = c;
    net_api_work_then(r, create_work, NULL, NULL, created);
}

/* ---- update -------------------------------------------------------------------------- */

static void patch(net_req *r)
{
    json_t *b = net_req_json(r, "{\"title\"?: ..., \"tags\"?: {...}}");
    if (b == NULL)
        return;
    const char *bad = check_fields(b), *k;
    json_t *v;
    json_t *changes = json_object();
    if (bad == NULL) {
        json_object_foreach(b, k, v)
        {
            if (strcmp(k, "title") != 0 && strcmp(k, "tags") != 0) {
                bad = "only title and tags can be changed";
                break;
            }
            if (json_is_string(v) && strcmp(k, "title") == 0) { /* stripped, as upstream */
                const char *t = json_string_value(v), *end = t + strlen(t);
                while (*t == ' ' || *t == '\t' || *t == '\n' || *t == '\r')
                    t++;
                while (end > t &&
                       (end[-1] == ' ' || end[-1] == '\t' || end[-1] == '\n' || end[-1] == '\r'))
                    end--;
                if (end == t) {
                    bad = "title must be a string of 1 to 200 characters";
                    break;
                }
                json_object_set_new(changes, k, json_stringn(t, (size_t)(end - t)));
            } else if (!json_is_null(v)) {
                json_object_set(changes, k, v);
            }
        }
    }
    json_decref(b);
    char now[32];
    ev_now_timestamp(now);
    json_object_set_new(changes, "updated_at", json_string(now)); /* an update moves it */
    if (bad != NULL) {
        json_decref(changes);
        net_reply_error(r, 422, "%s", bad);
        return;
    }
    rt_buf *body = net_json_buf(changes);
    if (body == NULL) {
        net_reply_error(r, 503, "out of memory");
        return;
    }
    net_ask_conv(r, CONV_SET_META, 0, body); /* the actor merges changes one at a time */
}

/* ---- the routes: run, pause, interrupt and delete are the actor's -------------------------- */

void net_api_conversations(net_req *r)
{
    if ((r->route.id == NET_R_CONV_CREATE || r->route.id == NET_R_CONV_BATCH ||
         r->route.id == NET_R_CONV_SEARCH || r->route.id == NET_R_CONV_GET) &&
        check_include_skills(r) < 0)
        return;
    switch (r->route.id) {
    case NET_R_CONV_CREATE:
        create(r);
        break;
    case NET_R_CONV_BATCH:
        get_many(r);
        break;
    case NET_R_CONV_SEARCH:
        list(r, false);
        break;
    case NET_R_CONV_COUNT:
        list(r, true);
        break;
    case NET_R_CONV_GET:
        get_one(r, &r->route.conv, 200);
        break;
    case NET_R_CONV_PATCH:
        patch(r);
        break;
    case NET_R_CONV_RUN:
        net_ask_conv(r, CONV_CONTROL, CONV_RUN, NULL);
        break;
    case NET_R_CONV_PAUSE:
        net_ask_conv(r, CONV_CONTROL, CONV_PAUSE, NULL);
        break;
    case NET_R_CONV_INTERRUPT:
        net_ask_conv(r, CONV_CONTROL, CONV_INTERRUPT, NULL);
        break;
    case NET_R_CONV_DELETE:
        net_ask_conv(r, CONV_DELETE, 0, NULL);
        break;
    default:
        net_reply_error(r, 404, "no such route");
    }
}
