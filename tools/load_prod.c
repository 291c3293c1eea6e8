/*
 * load_prod.c - the producers of `parley load`: each holds one HTTP/1.1
 * keep-alive connection and posts agent messages to POST
 * /api/conversations/{id}/events/append, one event or an array of
 * --batch, each text ending in its send time (load_mark_put).
 *
 * Two ways to send. As fast as acknowledged (--rate max): one request in
 * flight, the next one sent when the answer comes; latency is measured
 * from the actual send. At a fixed rate: requests go out at their intended
 * times, whatever is still unanswered (pipelined, answered in order), and
 * both latencies count from the intended time, so a server that stalls
 * cannot hide it by slowing the client down (no coordinated omission).
 *
 * The request is built once; only the timestamps are written over for
 * each send. Answers are read with http_resp (llhttp); their "index"
 * values are the acked indexes, kept per conversation for the verdict.
 *
 * The setup connection (conv -1, on shard 0) is a producer too: it posts
 * `{}` to /api/conversations until every conversation is created.
 */
#include "load.h"

#include "net/http_resp.h"
#include "runtime/text.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { RING = 1024 }; /* requests in flight per producer, at most */

struct load_prod {
    uv_tcp_t tcp;
    load_shard *sh;
    int conv; /* -1: the setup connection */
    int g;    /* the producer's number in the run */
    bool up, awaited, closed;
    hr_parser *hr;
    char *req; /* the whole request; timestamps at mark0 + i * stride */
    size_t req_len, mark0, stride;
    int k, created;
    uint64_t ring[RING]; /* the intended send times of the requests in flight */
    uint32_t head, inflight;
    uint64_t next, every; /* at a fixed rate: the next intended time, and the step */
};

static void settle(load_prod *p)
{
    if (p->awaited) {
        p->awaited = false;
        load_done(p->sh);
    }
}

static void prod_end(load_prod *p, const char *kind, const char *why)
{
    if (p->closed)
        return;
    p->closed = true;
    p->up = false;
    load_close((uv_handle_t *)&p->tcp);
    /* after the acks, an idle keep-alive connection may be closed */
    if (kind != NULL && (p->sh->run->phase <= LOAD_ACKS || p->inflight > 0))
        load_err(p->sh, kind, "a producer's connection: %s", why);
    if (p->inflight > 0 && p->sh->run->phase != LOAD_CLOSE)
        load_errs_add(&p->sh->errs, "no_answer", p->inflight);
    p->inflight = 0;
    settle(p);
}

/* The request: head and body, built once. */
static int build(load_prod *p, const char *path, const char *body, size_t blen)
{
    const load_cfg *c = &p->sh->run->cfg;
    rt_text t = {0};
    rt_text_printf(&t,
                   "POST %s%s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"
                   "Content-Length: %zu\r\n",
                   c->url.prefix, path, c->url.authority, blen);
    if (c->api_key != NULL)
        rt_text_printf(&t, "X-Session-API-Key: %s\r\n", c->api_key);
    rt_text_puts(&t, "\r\n");
    size_t head = t.len;
    rt_text_put(&t, body, blen);
    if (t.failed) {
        free(t.p);
        return -1;
    }
    free(p->req);
    p->req = t.p;
    p->req_len = t.len;
    p->mark0 += head;
    return 0;
}

static int build_append(load_prod *p)
{
    static const char ev[] = "{\"source\":\"agent\",\"kind\":\"MessageEvent\",\"llm_message\":"
                             "{\"role\":\"assistant\",\"content\":[{\"type\":\"text\",\"text\":\"";
    static const char end[] = "\"}]}}";
    const load_cfg *c = &p->sh->run->cfg;
    size_t pad = (size_t)c->event_size - LOAD_MARK_LEN;
    rt_text b = {0};
    char path[128];
    p->k = c->batch;
    p->stride = sizeof(ev) - 1 + pad + LOAD_MARK_LEN + sizeof(end) - 1 + 1; /* and a comma */
    p->mark0 = (c->batch > 1) + sizeof(ev) - 1 + pad;
    if (c->batch > 1)
        rt_text_putc(&b, '[');
    for (int i = 0; i < c->batch; i++) {
        if (i > 0)
            rt_text_putc(&b, ',');
        rt_text_put(&b, ev, sizeof(ev) - 1);
        for (size_t j = 0; j < pad; j++)
            rt_text_putc(&b, 'x');
        rt_text_put(&b, LOAD_MARK "0000000000000000000", LOAD_MARK_LEN);
        rt_text_put(&b, end, sizeof(end) - 1);
    }
    if (c->batch > 1)
        rt_text_putc(&b, ']');
    snprintf(path, sizeof(path), "/api/conversations/%s/events/append",
             p->sh->run->convs[p->conv].id);
    int r = b.failed ? -1 : build(p, path, b.p, b.len);
    free(b.p);
    return r;
}

static void send_req(load_prod *p, uint64_t t)
{
    for (int i = 0; i < p->k; i++)
        load_mark_put(p->req + p->mark0 + (size_t)i * p->stride, t);
    int r = load_write((uv_stream_t *)&p->tcp, p->req, p->req_len);
    if (r != 0) {
        prod_end(p, "disconnected", uv_strerror(r));
        return;
    }
    p->ring[(p->head + p->inflight) % RING] = t;
    p->inflight++;
    p->sh->requests++;
}

/* ---- answers ---------------------------------------------------------------------- */

static void created(load_prod *p, const hr_resp *r)
{
    load_run *run = p->sh->run;
    json_t *j = r->status == 200 || r->status == 201
                    ? json_loadb((const char *)r->body, r->body_len, 0, NULL)
                    : NULL;
    const char *id = json_string_value(json_object_get(j, "id"));
    if (id == NULL || strlen(id) >= sizeof(run->convs[0].id)) {
        load_err(p->sh, "setup", "creating a conversation was answered %d: %.*s", r->status,
                 (int)(r->body_len > 300 ? 300 : r->body_len),
                 r->body != NULL ? (const char *)r->body : "");
        json_decref(j);
        prod_end(p, NULL, NULL);
        return;
    }
    snprintf(run->convs[p->created++].id, sizeof(run->convs[0].id), "%s", id);
    json_decref(j);
    if (p->created < run->cfg.conversations)
        send_req(p, uv_hrtime());
    else
        prod_end(p, NULL, NULL); /* settles the setup phase */
}

static void acked(load_prod *p, const hr_resp *r, uint64_t now)
{
    load_shard *sh = p->sh;
    uint64_t t0 = p->ring[p->head];
    p->head = (p->head + 1) % RING;
    p->inflight--;
    load_hist_add(&sh->ack, now > t0 ? now - t0 : 0);
    sh->t_last_ack = now;
    if (r->status == 200 || r->status == 201) {
        const char *b = (const char *)r->body, *end = b + r->body_len;
        int64_t index;
        while (b != NULL && load_ack_next(&b, end, &index)) {
            sh->events++;
            if (load_bits_add(&sh->acked[p->conv], index) != 0)
                load_err(sh, "ack_repeat", "index %lld of conversation %s was acked twice",
                         (long long)index, sh->run->convs[p->conv].id);
            if (sh->ack_min[p->conv] < 0 || index < sh->ack_min[p->conv])
                sh->ack_min[p->conv] = index;
            if (index > sh->ack_max[p->conv])
                sh->ack_max[p->conv] = index;
        }
    } else {
        char kind[16];
        snprintf(kind, sizeof(kind), "http_%d", r->status);
        load_err(sh, kind, "an append was answered %d: %.*s", r->status,
                 (int)(r->body_len > 300 ? 300 : r->body_len),
                 r->body != NULL ? (const char *)r->body : "");
    }
    if (sh->run->phase == LOAD_RUN && sh->run->cfg.rate == 0)
        send_req(p, now);
    else if (p->inflight == 0)
        settle(p);
}

static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *b)
{
    (void)hint;
    load_prod *p = h->data;
    *b = uv_buf_init((char *)p->sh->rbuf, LOAD_RBUF);
}

static void on_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *b)
{
    load_prod *p = st->data;
    if (nread < 0) {
        prod_end(p, "disconnected", uv_strerror((int)nread));
        return;
    }
    const uint8_t *in = (const uint8_t *)b->base;
    uint64_t now = uv_hrtime();
    for (size_t at = 0; at < (size_t)nread && !p->closed;) {
        bool done;
        ssize_t used = hr_feed(p->hr, in + at, (size_t)nread - at, &done);
        if (used < 0) {
            prod_end(p, "http_bad_answer", hr_error(p->hr));
            return;
        }
        at += (size_t)used;
        if (!done)
            continue;
        if (p->inflight == 0) {
            prod_end(p, "http_bad_answer", "an answer to no request");
            return;
        }
        if (p->conv < 0) {
            p->inflight--;
            created(p, hr_response(p->hr));
        } else {
            acked(p, hr_response(p->hr), now);
        }
    }
}

static void on_connect(uv_connect_t *c, int status)
{
    load_prod *p = c->handle->data;
    free(c);
    if (status < 0) {
        prod_end(p, "connect", uv_strerror(status));
        return;
    }
    if (uv_read_start((uv_stream_t *)&p->tcp, on_alloc, on_read) != 0) {
        prod_end(p, "connect", "cannot read");
        return;
    }
    p->up = true;
    if (p->conv < 0)
        send_req(p, uv_hrtime()); /* the first conversation */
    else
        settle(p);
}

static void start(load_prod *p)
{
    p->hr = hr_new(NULL);
    if (p->hr == NULL) {
        p->closed = true;
        load_err(p->sh, "no_memory", "out of memory");
        settle(p);
        return;
    }
    int r = load_connect(p->sh, &p->tcp, 0, on_connect);
    p->tcp.data = p;
    if (r != 0)
        prod_end(p, "connect", uv_strerror(r));
}

/* ---- the phases ------------------------------------------------------------------- */

int load_prods_init(load_shard *sh)
{
    const load_cfg *c = &sh->run->cfg;
    int total = c->idle ? 0 : c->conversations * c->producers, t = c->threads;
    sh->prods = calloc((size_t)(total / t + 1), sizeof(*sh->prods));
    if (sh->prods == NULL)
        return -1;
    for (int g = sh->id; g < total; g += t)
        sh->prods[sh->nprods++] = (load_prod){.sh = sh, .conv = g / c->producers, .g = g};
    if (sh->id != 0)
        return 0;
    sh->setup = calloc(1, sizeof(*sh->setup));
    if (sh->setup == NULL)
        return -1;
    *sh->setup = (load_prod){.sh = sh, .conv = -1};
    return build(sh->setup, "/api/conversations", "{}", 2);
}

void load_prods_phase(load_shard *sh)
{
    load_run *run = sh->run;
    const load_cfg *c = &run->cfg;
    int total = c->conversations * c->producers;
    switch (run->phase) {
    case LOAD_SETUP:
        sh->setup->awaited = true;
        sh->waiting++;
        start(sh->setup);
        return;
    case LOAD_CONNECT:
        for (int i = 0; i < sh->nprods; i++) {
            load_prod *p = &sh->prods[i];
            if (build_append(p) != 0) {
                load_err(sh, "no_memory", "out of memory");
                continue;
            }
            p->awaited = true;
            sh->waiting++;
            start(p);
        }
        return;
    case LOAD_RUN:
        for (int i = 0; i < sh->nprods; i++) {
            load_prod *p = &sh->prods[i];
            if (!p->up)
                continue;
            if (c->rate == 0) {
                send_req(p, uv_hrtime());
                continue;
            }
            p->every = (uint64_t)(1e9 * p->k * total / c->rate);
            p->next = run->t_run + p->every * (uint64_t)p->g / (uint64_t)total; /* staggered */
        }
        return;
    case LOAD_ACKS:
        for (int i = 0; i < sh->nprods; i++) {
            load_prod *p = &sh->prods[i];
            p->awaited = p->inflight > 0;
            sh->waiting += p->awaited;
        }
        return;
    case LOAD_CLOSE:
        for (int i = 0; i < sh->nprods; i++) {
            load_prod *p = &sh->prods[i];
            if (p->inflight > 0 && !p->closed) {
                load_err(sh, "no_answer", "%u requests of a producer were not answered",
                         p->inflight);
                load_errs_add(&sh->errs, "no_answer", p->inflight - 1);
            }
            if (p->hr != NULL)
                prod_end(p, NULL, NULL);
        }
        if (sh->setup != NULL && sh->setup->hr != NULL)
            prod_end(sh->setup, NULL, NULL);
        return;
    default:
        return;
    }
}

void load_prods_tick(load_shard *sh, uint64_t now)
{
    if (sh->run->phase != LOAD_RUN || sh->run->cfg.rate == 0)
        return;
    for (int i = 0; i < sh->nprods; i++) {
        load_prod *p = &sh->prods[i];
        while (p->up && p->next <= now && p->inflight < RING) {
            send_req(p, p->next);
            p->next += p->every;
        }
    }
}

void load_prods_free(load_shard *sh)
{
    for (int i = 0; sh->prods != NULL && i < sh->nprods; i++) {
        hr_free(sh->prods[i].hr);
        free(sh->prods[i].req);
    }
    if (sh->setup != NULL) {
        hr_free(sh->setup->hr);
        free(sh->setup->req);
    }
    free(sh->prods);
    free(sh->setup);
}
