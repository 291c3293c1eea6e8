/*
 * load_log.c - the last part of `parley load`'s verdict: the server's log,
 * read back by REST. Every conversation is paged from its first event (the
 * follower's copy, follow.h, checks the paging: dense, each id once, the
 * inclusive cursor where it should be), and then each index a producer
 * was told (201) holds one of the load's events, and there are no more of
 * them than were acked, unless some requests went unanswered or were
 * answered 503 or 504 (those may or may not have been appended: a server
 * that lost its cluster or the node that owns the conversation cannot
 * tell). An existing conversation's (--conversation)
 * events from before the run are not the load's, whatever they hold.
 */
#include "actors/follow.h"
#include "load.h"
#include "remote.h"
#include "runtime/json.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool bit(const load_bits *b, uint64_t i)
{
    return i / 64 < b->nw && (b->w[i / 64] >> (i % 64) & 1) != 0;
}

/* Page the whole log of cid into f: 0, or -1 with why. */
static int page_all(remote *r, const char *cid, fl *f, char *why, size_t cap)
{
    fl_fetch q;
    fl_probe(f);
    while (fl_want(f, &q)) {
        char path[512];
        snprintf(path, sizeof(path), "/api/conversations/%s/events/search?limit=%u%s%s", cid,
                 q.limit, q.cursor[0] ? "&page_id=" : "", q.cursor);
        const char *body;
        int st = remote_call(r, "GET", path, NULL, &body);
        if (st != 200) {
            snprintf(why, cap, "reading the log of %s: %s%d %.100s", cid, st < 0 ? "" : "status ",
                     st, body);
            return -1;
        }
        json_error_t je;
        json_t *j = json_loads(body, 0, &je), *items = json_object_get(j, "items");
        size_t n = json_array_size(items);
        const char **ids = calloc(n + 1, sizeof(*ids));
        rt_buf **bytes = calloc(n + 1, sizeof(*bytes));
        fl_result res = FL_NOMEM;
        if (ids != NULL && bytes != NULL) {
            size_t i = 0;
            for (; i < n; i++) {
                json_t *ev = json_array_get(items, i);
                ids[i] = json_string_value(json_object_get(ev, "id"));
                bytes[i] = rt_json_buf(json_incref(ev));
                if (ids[i] == NULL || bytes[i] == NULL)
                    break;
            }
            if (i == n)
                res = fl_page(f, &q, ids, bytes, n,
                              json_string_value(json_object_get(j, "next_page_id")));
            for (size_t k = 0; k < n; k++)
                rt_buf_unref(bytes[k]);
        }
        free(ids);
        free(bytes);
        json_decref(j);
        if (res != FL_ADDED) {
            snprintf(why, cap, "the log of %s does not page as a log (%s)", cid,
                     res == FL_DIVERGED ? "an event twice or out of place" : "out of memory");
            return -1;
        }
    }
    return 0;
}

int load_count_before(load_run *run)
{
    load_cfg *c = &run->cfg;
    remote *r = remote_new(&c->url, NULL, c->api_key);
    char path[128];
    snprintf(path, sizeof(path), "/api/conversations/%s/events/count", c->conversation);
    const char *body = "";
    int st = r != NULL ? remote_call(r, "GET", path, NULL, &body) : -1;
    char *end = NULL;
    unsigned long long n = st == 200 ? strtoull(body, &end, 10) : 0;
    bool ok = st == 200 && *body != '\0' && *end == '\0'; /* body is r's: read it before */
    if (!ok)
        fprintf(stderr, "parley load: conversation %s: %s%d %.100s\n", c->conversation,
                st < 0 ? "" : "status ", st, body);
    else
        run->convs[0].first = n;
    remote_free(r);
    return ok ? 0 : -1;
}

int load_check_log(load_run *run, bool unanswered)
{
    load_cfg *c = &run->cfg;
    net_tls_config *tls = NULL;
    remote *r = remote_new(&c->url, tls, c->api_key);
    if (r == NULL) {
        snprintf(run->log_why, sizeof(run->log_why), "out of memory");
        return -1;
    }
    int rc = 0;
    for (int ci = 0; rc == 0 && ci < c->conversations; ci++) {
        const char *cid = run->convs[ci].id;
        fl *f = fl_new();
        if (f == NULL || page_all(r, cid, f, run->log_why, sizeof(run->log_why)) != 0) {
            if (f == NULL)
                snprintf(run->log_why, sizeof(run->log_why), "out of memory");
            fl_free(f);
            rc = -1;
            break;
        }
        uint64_t n = fl_count(f), acked = 0, marked = 0;
        for (uint64_t i = 0; i < n; i++) {
            const rt_buf *b = fl_bytes(f, i);
            bool ours = i >= run->convs[ci].first &&
                        memmem(rt_buf_data(b), rt_buf_len(b), LOAD_MARK, strlen(LOAD_MARK)) != 0;
            bool was_acked = false;
            for (int s = 0; s < c->threads && !was_acked; s++)
                was_acked = bit(&run->shards[s].acked[ci], i);
            marked += ours;
            acked += was_acked;
            if (was_acked && !ours) {
                snprintf(run->log_why, sizeof(run->log_why),
                         "event %llu of %s was acked to a producer but is not one of its events",
                         (unsigned long long)i, cid);
                rc = -1;
                break;
            }
        }
        int64_t max = run->convs[ci].acked_max;
        if (rc == 0 && max >= 0 && (uint64_t)max >= n) {
            snprintf(run->log_why, sizeof(run->log_why),
                     "index %lld of %s was acked, the log has %llu events", (long long)max, cid,
                     (unsigned long long)n);
            rc = -1;
        } else if (rc == 0 && marked != acked && !unanswered) {
            snprintf(run->log_why, sizeof(run->log_why),
                     "the log of %s holds %llu of the load's events, %llu were acked", cid,
                     (unsigned long long)marked, (unsigned long long)acked);
            rc = -1;
        }
        run->log_events += n;
        run->log_acked += acked;
        fl_free(f);
    }
    remote_free(r);
    return rc;
}
