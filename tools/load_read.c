/*
 * load_read.c - the REST readers of `parley load` (--readers R per
 * conversation): each holds one HTTP/1.1 keep-alive connection and, during
 * the run, pages GET /api/conversations/{id}/events/search?limit=100 as
 * fast as answered, from cursors picked at random among the event ids its
 * pages have shown it (a reservoir of them), or from the first event. Each
 * answer is timed and checked: 200, a page of items, and the inclusive
 * cursor's event first. Pages are not parsed as JSON (they can be MiBs):
 * the first item's id and the next_page_id are found where parley writes
 * them, and both go into the reservoir.
 */
#include "load.h"

#include "net/http_resp.h"
#include "runtime/text.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { IDS = 512, ID_LEN = 40 };

struct load_reader {
    uv_tcp_t tcp;
    load_shard *sh;
    int conv;
    bool up, awaited, closed, inflight;
    hr_parser *hr;
    char cursor[ID_LEN]; /* of the request in flight; "" from the start */
    uint64_t t0;
    char (*ids)[ID_LEN]; /* the reservoir */
    int nids;
    uint64_t seen, seed;
};

static uint64_t rnd(load_reader *r)
{
    r->seed ^= r->seed << 13, r->seed ^= r->seed >> 7, r->seed ^= r->seed << 17;
    return r->seed;
}

static void settle(load_reader *r)
{
    if (r->awaited) {
        r->awaited = false;
        load_done(r->sh);
    }
}

static void reader_end(load_reader *r, const char *kind, const char *why)
{
    if (r->closed)
        return;
    r->closed = true;
    r->up = false;
    load_close((uv_handle_t *)&r->tcp);
    if (kind != NULL && r->sh->run->phase <= LOAD_ACKS)
        load_err(r->sh, kind, "a reader's connection: %s", why);
    r->inflight = false;
    settle(r);
}

static void send_read(load_reader *r)
{
    const load_cfg *c = &r->sh->run->cfg;
    r->cursor[0] = '\0';
    if (r->nids > 0 && rnd(r) % 8 != 0) /* mostly a random cursor; now and then the start */
        memcpy(r->cursor, r->ids[rnd(r) % (uint64_t)r->nids], ID_LEN);
    rt_text t = {0};
    rt_text_printf(&t,
                   "GET %s/api/conversations/%s/events/search?limit=100%s%s HTTP/1.1\r\n"
                   "Host: %s\r\n",
                   c->url.prefix, r->sh->run->convs[r->conv].id, r->cursor[0] ? "&page_id=" : "",
                   r->cursor, c->url.authority);
    if (c->api_key != NULL)
        rt_text_printf(&t, "X-Session-API-Key: %s\r\n", c->api_key);
    rt_text_puts(&t, "\r\n");
    int e = t.failed ? UV_ENOMEM : load_write((uv_stream_t *)&r->tcp, t.p, t.len);
    free(t.p);
    if (e != 0) {
        reader_end(r, "disconnected", uv_strerror(e));
        return;
    }
    r->t0 = uv_hrtime();
    r->inflight = true;
}

/* Keep an id for later cursors: every id seen has the same chance. */
static void keep(load_reader *r, const char *id)
{
    if (strlen(id) >= ID_LEN)
        return;
    uint64_t slot = r->nids < IDS ? (uint64_t)r->nids++ : rnd(r) % (r->seen + 1);
    r->seen++;
    if (slot < IDS)
        memcpy(r->ids[slot], id, strlen(id) + 1);
}

/* The string value after key at p (key included), into out. */
static bool string_at(const char *p, const char *end, const char *key, char out[ID_LEN])
{
    size_t kl = strlen(key);
    if ((size_t)(end - p) < kl || memcmp(p, key, kl) != 0)
        return false;
    p += kl;
    const char *q = memchr(p, '"', (size_t)(end - p));
    if (q == NULL || q - p >= ID_LEN || q == p)
        return false;
    memcpy(out, p, (size_t)(q - p));
    out[q - p] = '\0';
    return true;
}

static void answered(load_reader *r, const hr_resp *a, uint64_t now)
{
    load_shard *sh = r->sh;
    r->inflight = false;
    load_hist_add(&sh->read, now - r->t0);
    sh->reads++;
    if (a->status != 200) {
        char kind[24];
        snprintf(kind, sizeof(kind), "read_http_%d", a->status);
        load_err(sh, kind, "a page was answered %d", a->status);
    } else {
        /* no JSON parse of 100 events (up to MiBs): parley writes the first
         * item's id first, and next_page_id last */
        static const char head[] = "{\"items\":[", first[] = "{\"id\":\"",
                          next[] = "\"next_page_id\":\"";
        const char *b = (const char *)a->body, *e = b + a->body_len;
        char id[ID_LEN];
        if (a->body_len < sizeof(head) - 1 || memcmp(b, head, sizeof(head) - 1) != 0) {
            load_err(sh, "read_bad_page", "a page that is not {\"items\": [...]}");
        } else if (string_at(b + sizeof(head) - 1, e, first, id)) {
            if (r->cursor[0] != '\0' && strcmp(id, r->cursor) != 0)
                load_err(sh, "read_cursor", "a page from %s began with %s", r->cursor, id);
            keep(r, id);
        } else if (r->cursor[0] != '\0') {
            load_err(sh, "read_cursor", "a page from %s was empty", r->cursor);
        }
        const char *tail = a->body_len > 200 ? e - 200 : b;
        const char *n = memmem(tail, (size_t)(e - tail), next, sizeof(next) - 1);
        if (n != NULL && string_at(n, e, next, id))
            keep(r, id);
    }
    if (sh->run->phase == LOAD_RUN)
        send_read(r);
    else
        settle(r);
}

static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *b)
{
    (void)hint;
    load_reader *r = h->data;
    *b = uv_buf_init((char *)r->sh->rbuf, LOAD_RBUF);
}

static void on_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *b)
{
    load_reader *r = st->data;
    if (nread < 0) {
        reader_end(r, "disconnected", uv_strerror((int)nread));
        return;
    }
    const uint8_t *in = (const uint8_t *)b->base;
    for (size_t at = 0; at < (size_t)nread && !r->closed;) {
        bool done;
        ssize_t used = hr_feed(r->hr, in + at, (size_t)nread - at, &done);
        if (used < 0) {
            reader_end(r, "http_bad_answer", hr_error(r->hr));
            return;
        }
        at += (size_t)used;
        if (done && !r->inflight) {
            reader_end(r, "http_bad_answer", "an answer to no request");
            return;
        }
        if (done)
            answered(r, hr_response(r->hr), uv_hrtime());
    }
}

static void on_connect(uv_connect_t *c, int status)
{
    load_reader *r = c->handle->data;
    free(c);
    if (status < 0) {
        reader_end(r, "connect", uv_strerror(status));
        return;
    }
    if (uv_read_start((uv_stream_t *)&r->tcp, on_alloc, on_read) != 0) {
        reader_end(r, "connect", "cannot read");
        return;
    }
    r->up = true;
    settle(r);
}

int load_readers_init(load_shard *sh)
{
    const load_cfg *c = &sh->run->cfg;
    int total = c->idle ? 0 : c->conversations * c->readers, t = c->threads;
    sh->readers = calloc((size_t)(total / t + 1), sizeof(*sh->readers));
    if (sh->readers == NULL)
        return -1;
    for (int g = sh->id; g < total; g += t) {
        load_reader *r = &sh->readers[sh->nreaders++];
        *r = (load_reader){
            .sh = sh, .conv = g / c->readers, .seed = 0x9e3779b97f4a7c15ull * (g + 1)};
        r->ids = malloc(IDS * sizeof(*r->ids));
        if (r->ids == NULL)
            return -1;
    }
    return 0;
}

void load_readers_phase(load_shard *sh)
{
    for (int i = 0; i < sh->nreaders; i++) {
        load_reader *r = &sh->readers[i];
        switch (sh->run->phase) {
        case LOAD_CONNECT:
            r->hr = hr_new(NULL);
            r->awaited = true;
            sh->waiting++;
            if (r->hr == NULL) {
                reader_end(r, "no_memory", "out of memory");
                break;
            }
            int e = load_connect(sh, &r->tcp, 0, on_connect);
            r->tcp.data = r;
            if (e != 0)
                reader_end(r, "connect", uv_strerror(e));
            break;
        case LOAD_RUN:
            if (r->up)
                send_read(r);
            break;
        case LOAD_ACKS:
            r->awaited = r->inflight;
            sh->waiting += r->awaited;
            break;
        case LOAD_CLOSE:
            if (r->hr != NULL)
                reader_end(r, NULL, NULL);
            break;
        default:
            break;
        }
    }
}

void load_readers_free(load_shard *sh)
{
    for (int i = 0; sh->readers != NULL && i < sh->nreaders; i++) {
        hr_free(sh->readers[i].hr);
        free(sh->readers[i].ids);
    }
    free(sh->readers);
}
