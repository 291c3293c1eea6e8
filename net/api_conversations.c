/*
 * api_conversations.c - /api/conversations: create, get, list, search,
 * count, update, delete, run, pause, interrupt.
 *
 * A conversation's info (ConversationInfo) is its stored meta (what the
 * creator sent, plus id, created_at, title and tags) with what its actor
 * knows now: execution_status and updated_at (its last event's time, or
 * its last update's, whichever is later), and parley's own event_count,
 * violations (ComplianceViolation records) and stuck_findings
 * (StuckPatternDetected), all of the durable log. Every read of infos
 * (get, batch, search, count) takes them from the service's summaries in
 * memory (gather_start) and asks a conversation's actor, which opens its
 * log if it has to, only when its summary is not known (not run since the
 * server started); see "search and count". One that cannot answer then
 * (its log will not open) is a 503 asked alone; in a list it is an item of
 * status "error" whose status_detail says why, so a list always answers.
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

/* Conversations asked at once: one not running opens its log to answer,
 * so a list of 100,000 must not open them all together. A conversation
 * another node may write is asked even when its summary is known, for the
 * log's state (actors/conv_refresh.c), FRESH_WAIT_MS at most: a cluster
 * that does not answer leaves the summary's. */
enum { GATHER_WINDOW = 64, FRESH_WAIT_MS = 1500 };

struct gather {
    net_req *r;
    size_t n, pending, next; /* next: the first not asked yet */
    rt_uuid *ids;
    json_t **info; /* per id: the info, or NULL (gone) */
    bool *ask;     /* per id: its summary is not known: ask its actor */
    char **why;    /* per id: why it could not answer (it exists), or NULL */
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
    for (size_t i = 0; i < g->n; i++) {
        json_decref(g->info[i]);
        free(g->why[i]);
    }
    free(g->info);
    free(g->ask);
    free(g->why);
    free(g->ids);
    free(g);
}

static void gather_pump(gather *g);

static void gather_check(gather *g)
{
    gather_pump(g);
    if (g->started && g->pending == 0 && g->next == g->n)
        g->done(g);
}

/* The status, times and counts of a conversation into its info. */
static void fill_info(json_t *info, conv_status status, const char *last_event, uint64_t count,
                      const conv_findings *f)
{
    json_object_set_new(info, "execution_status", json_string(conv_status_name(status)));
    const char *upd =
        conv_last_update(json_string_value(json_object_get(info, "updated_at")),
                         json_string_value(json_object_get(info, "created_at")), last_event);
    json_object_set_new(info, "updated_at", upd != NULL ? json_string(upd) : json_null());
    /* parley's own: what a list of conversations shows without asking each
     * one again */
    json_object_set_new(info, "event_count", json_integer((json_int_t)count));
    json_object_set_new(info, "violations", json_integer((json_int_t)f->violations));
    json_object_set_new(info, "stuck_findings", json_integer((json_int_t)f->stuck));
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
            fill_info(info, cr->status, cr->updated, cr->count, &cr->findings);
            json_decref(g->info[i]); /* a summary it had, asked for a fresher answer */
            g->info[i] = info;
        }
    } else if (cr != NULL && cr->v.outcome == PL_NOT_FOUND) {
        json_decref(g->info[i]);
        g->info[i] = NULL;
    } else if (g->info[i] == NULL) { /* else what its summary says stands */
        /* not gone, but it could not say how it is (its log would not open,
         * it timed out): a list shows it as such, one asked alone is a 503 */
        const char *why = cr != NULL ? cr->v.detail
                                     : rt_strerror(m->kind == RT_KIND_ERROR ? m->status : RT_EFAIL);
        free(g->why[i]);
        g->why[i] = strdup(why != NULL && why[0] != '\0' ? why : "it did not answer");
    }
    g->pending--;
    gather_check(g);
}

/* The info of conversation i of a list that could not answer (g->why[i]):
 * its stored info, status "error" and status_detail saying why; NULL if it
 * is gone meanwhile. */
static json_t *unanswered_info(gather *g, size_t i)
{
    json_t *info = meta_of(g->r->api->store, &g->ids[i]);
    if (info == NULL)
        return NULL;
    json_object_set_new(info, "execution_status", json_string(conv_status_name(CONV_ERROR)));
    char detail[320];
    snprintf(detail, sizeof(detail), "cannot answer: %s", g->why[i]);
    json_object_set_new(info, "status_detail", json_string(detail));
    return info;
}

/* Every item of a list: the info, unanswered_info for those that could
 * not answer, NULL for those gone. */
static void gather_settle(gather *g)
{
    for (size_t i = 0; i < g->n; i++)
        if (g->why[i] != NULL && g->info[i] == NULL)
            g->info[i] = unanswered_info(g, i);
}

/* Ask the next conversations, GATHER_WINDOW at a time at most. */
static void gather_pump(gather *g)
{
    net_req *r = g->r;
    while (g->pending < GATHER_WINDOW && g->next < g->n) {
        size_t i = g->next++;
        if (!g->ask[i])
            continue;
        ask *a = malloc(sizeof(*a));
        int e = a == NULL ? RT_ENOMEM : 0;
        if (a != NULL) {
            *a = (ask){g, i};
            g->pending++;
            /* one with a summary is asked for a fresher answer: not for long */
            uint64_t ms = g->info[i] != NULL && r->api->call_timeout_ms > FRESH_WAIT_MS
                              ? FRESH_WAIT_MS
                              : r->api->call_timeout_ms;
            e = convs_call(r->api->convs, &g->ids[i], RT_LOOP_ANY, CONV_STATUS, 0, NULL, ms,
                           on_status, a);
        }
        if (e < 0 && a != NULL) {
            g->pending--;
            free(a);
        }
        if (e == -ENOENT) { /* gone */
            json_decref(g->info[i]);
            g->info[i] = NULL;
        } else if (e < 0 && g->info[i] == NULL) { /* else its summary's stands */
            g->why[i] = strdup(rt_strerror(e));
        }
    }
}

/* The info of each conversation of ids (taken): from its summary, or, if
 * that is not known, from its actor (asked); done runs once all are in
 * (perhaps before this returns). fresh: on a store shared by nodes, the
 * actor of one that another node may write is asked even if its summary
 * is known: it answers as the log is now (actors/conv_refresh.c). */
static void gather_start(net_req *r, rt_uuid *ids, size_t n, gather_fn done, void *arg, bool fresh)
{
    st_store *st = r->api->store;
    fresh = fresh && st_store_shared(st);
    gather *g = calloc(1, sizeof(*g));
    conv_summary *sums = malloc((n + 1) * sizeof(*sums));
    if (g == NULL || sums == NULL || (g->info = calloc(n + 1, sizeof(json_t *))) == NULL ||
        (g->ask = calloc(n + 1, sizeof(bool))) == NULL ||
        (g->why = calloc(n + 1, sizeof(char *))) == NULL ||
        convs_summaries(r->api->convs, ids, n, sums) != 0) {
        if (g != NULL) {
            free(g->info);
            free(g->ask);
            free(g->why);
        }
        free(g);
        free(sums);
        free(ids);
        net_reply_error(r, 503, "out of memory");
        return;
    }
    for (size_t i = 0; i < n; i++) {
        const conv_summary *c = &sums[i];
        g->ask[i] = c->exists && (!c->known || (fresh && !st_conv_writes_here(st, &ids[i])));
        /* one asked for a fresher answer keeps its summary's if it cannot
         * give one (its cluster does not answer) */
        if (c->known && (g->info[i] = meta_of(r->api->store, &ids[i])) != NULL)
            fill_info(g->info[i], c->status, c->last_event, c->count, &c->findings);
    }
    free(sums);
    g->r = r;
    g->n = n;
    g->ids = ids;
    g->done = done;
    g->arg = arg;
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
    net_req *r = g->r;
    if (g->why[0] != NULL) { /* asked alone, it says why itself */
        char id[37];
        rt_uuid_dashed(&g->ids[0], id);
        net_reply_error(r, 503, "conversation %s cannot answer: %s", id, g->why[0]);
        gather_free(g);
        return;
    }
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
    gather_start(r, ids, 1, got_one, (void *)(intptr_t)status, true);
}

void net_reply_conv_info(net_req *r, const rt_uuid *id, int status)
{
    get_one(r, id, status);
}

static void got_many(gather *g)
{
    gather_settle(g);
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
    gather_start(r, ids, n, got_many, NULL, true);
}

/* ---- search and count ------------------------------------------------------------- */

/* Every listing works from the conversations service's summaries
 * (convs_summaries): status, counts and times of every conversation in
 * memory, so a search or count asks no conversation's actor, except one
 * not run since the server started, once: by status or update time, all
 * such are asked first; by creation, only those on the page. Then a pass
 * over the summaries keeps the page's conversations (a bounded heap, O(n
 * log limit)) and only they have their info read. */

typedef enum { BY_CREATED, BY_UPDATED } sort_key;

typedef struct listing {
    net_req *r;
    int status; /* -1: any */
    sort_key key;
    bool desc;
    long limit;
    bool has_page;
    rt_uuid page;
    bool count_only;
    bool asked;          /* those it needed to hear from were asked, once */
    rt_uuid *unanswered; /* those of them that could not answer, sorted */
    size_t nunanswered;
    char next[33]; /* the next page's first id, "" on the last page */
} listing;

static void listing_free(listing *l)
{
    if (l != NULL)
        free(l->unanswered);
    free(l);
}

/* One that could not answer when asked for its status: listed as "error"
 * (and its item says why), not left out of the listing or failing it. */
static bool unanswered(const listing *l, const rt_uuid *id)
{
    return l->nunanswered > 0 &&
           bsearch(id, l->unanswered, l->nunanswered, sizeof(rt_uuid), rt_uuid_cmp) != NULL;
}

static int parse_listing(net_req *r, listing *l, bool count_only)
{
    const net_query *q = &r->query;
    *l = (listing){.r = r,
                   .status = -1,
                   .key = BY_CREATED,
                   .desc = true,
                   .limit = 100,
                   .count_only = count_only};
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

typedef struct row {
    const char *key; /* created_at or the last update */
    rt_uuid id;
} row;

/* Does x come before y in the listing's order? */
static bool before(const listing *l, const row *x, const row *y)
{
    int c = strcmp(x->key, y->key);
    if (c == 0)
        c = memcmp(x->id.b, y->id.b, sizeof(x->id.b));
    return l->desc ? c > 0 : c < 0;
}

/* The heap of the k rows first in order, its root the last of them. */
static void sift_down(const listing *l, row *h, size_t n, size_t i)
{
    for (;;) {
        size_t m = i, a = 2 * i + 1, b = a + 1;
        if (a < n && before(l, &h[m], &h[a]))
            m = a;
        if (b < n && before(l, &h[m], &h[b]))
            m = b;
        if (m == i)
            return;
        row t = h[i];
        h[i] = h[m];
        h[m] = t;
        i = m;
    }
}

static void sift_up(const listing *l, row *h, size_t i)
{
    while (i > 0 && before(l, &h[(i - 1) / 2], &h[i])) {
        row t = h[i];
        h[i] = h[(i - 1) / 2];
        h[(i - 1) / 2] = t;
        i = (i - 1) / 2;
    }
}

/* The first k of rows[0..n) in order, sorted, into h (k entries at most);
 * how many. */
static size_t first_k(const listing *l, const row *rows, size_t n, row *h, size_t k)
{
    size_t m = 0;
    for (size_t i = 0; i < n && k > 0; i++) {
        if (m < k) {
            h[m] = rows[i];
            sift_up(l, h, m++);
        } else if (before(l, &rows[i], &h[0])) {
            h[0] = rows[i];
            sift_down(l, h, m, 0);
        }
    }
    for (size_t end = m; end > 1; end--) { /* heapsort: the last first out */
        row t = h[0];
        h[0] = h[end - 1];
        h[end - 1] = t;
        sift_down(l, h, end - 1, 0);
    }
    return m;
}

static void run_listing(listing *l);

static void asked(gather *g)
{
    listing *l = g->arg;
    size_t k = 0;
    for (size_t i = 0; i < g->n; i++)
        k += g->why[i] != NULL;
    if (k > 0 && (l->unanswered = calloc(k, sizeof(rt_uuid))) != NULL) {
        for (size_t i = 0; i < g->n; i++)
            if (g->why[i] != NULL)
                l->unanswered[l->nunanswered++] = g->ids[i];
        qsort(l->unanswered, l->nunanswered, sizeof(rt_uuid), rt_uuid_cmp);
    } /* else (out of memory) those are left out */
    gather_free(g);
    run_listing(l);
}

/* Ask every conversation whose summary is not known yet (once); true if
 * it did (asked then runs the listing again). */
static bool ask_unknown(listing *l, const rt_uuid *ids, const conv_summary *sums, size_t n)
{
    if (l->asked)
        return false;
    size_t k = 0;
    rt_uuid *who = calloc(n + 1, sizeof(*who));
    if (who == NULL)
        return false; /* then those are left out */
    for (size_t i = 0; i < n; i++)
        if (sums[i].exists && !sums[i].known)
            who[k++] = ids[i];
    if (k == 0) {
        free(who);
        return false;
    }
    l->asked = true;
    gather_start(l->r, who, k, asked, l, false);
    return true;
}

/* The page's infos are in (from summaries, or asked): the answer. */
static void listed_page(gather *g)
{
    listing *l = g->arg;
    gather_settle(g);
    json_t *items = json_array();
    for (size_t i = 0; i < g->n; i++)
        if (g->info[i] != NULL) /* else gone meanwhile */
            json_array_append(items, shown(g->r, g->info[i]));
    net_req *r = g->r;
    gather_free(g);
    net_reply_json(r, 200,
                   json_pack("{s:o, s:s?}", "items", items, "next_page_id",
                             l->next[0] != '\0' ? l->next : NULL));
    listing_free(l);
}

static void run_listing(listing *l)
{
    net_req *r = l->r;
    rt_uuid *ids = NULL;
    conv_summary *sums = NULL;
    row *rows = NULL, *page = NULL;
    size_t n = 0;
    bool need = l->status >= 0 || l->key == BY_UPDATED; /* status or update time */
    if (st_store_list(r->api->store, &ids, &n) != 0 ||
        (sums = malloc((n + 1) * sizeof(*sums))) == NULL ||
        convs_summaries(r->api->convs, ids, n, sums) != 0 ||
        (rows = malloc((n + 1) * sizeof(*rows))) == NULL ||
        (page = malloc(((size_t)l->limit + 1) * sizeof(*page))) == NULL) {
        net_reply_error(r, 503, "out of memory");
        goto out;
    }
    if (need && ask_unknown(l, ids, sums, n)) {
        l = NULL; /* it runs again once they answered */
        goto out;
    }
    size_t nrows = 0, from = SIZE_MAX;
    for (size_t i = 0; i < n; i++) {
        const conv_summary *c = &sums[i];
        int status = c->known ? (int)c->status : unanswered(l, &ids[i]) ? (int)CONV_ERROR : -1;
        if (!c->exists || (need && status < 0) || (l->status >= 0 && status != l->status))
            continue;
        if (l->has_page && rt_uuid_eq(&ids[i], &l->page))
            from = nrows;
        rows[nrows++] = (row){l->key == BY_CREATED ? c->created : conv_summary_updated(c), ids[i]};
    }
    if (l->count_only) {
        net_reply_json(r, 200, json_integer((json_int_t)nrows));
        goto out;
    }
    if (from != SIZE_MAX) { /* inclusive: those before the cursor go */
        row cursor = rows[from];
        size_t kept = 0;
        for (size_t i = 0; i < nrows; i++)
            if (!before(l, &rows[i], &cursor))
                rows[kept++] = rows[i];
        nrows = kept;
    }
    size_t m = first_k(l, rows, nrows, page, (size_t)l->limit + 1);
    size_t shown_n = m < (size_t)l->limit ? m : (size_t)l->limit;
    if (m > shown_n)
        rt_uuid_hex(&page[shown_n].id, l->next);
    rt_uuid *pids = calloc(shown_n + 1, sizeof(*pids));
    if (pids == NULL) {
        net_reply_error(r, 503, "out of memory");
        goto out;
    }
    for (size_t j = 0; j < shown_n; j++)
        pids[j] = page[j].id;
    /* the page's infos: from the summaries, a conversation not known asked */
    gather_start(r, pids, shown_n, listed_page, l, false);
    l = NULL;
out:
    free(page);
    free(rows);
    free(sums);
    free(ids);
    listing_free(l);
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
    run_listing(l);
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
        net_post_message(r, &c->id, json_is_string(role) ? json_string_value(role) : "user",
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
    c->meta = rt_json_buf(b);
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
    rt_buf *body = rt_json_buf(changes);
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
