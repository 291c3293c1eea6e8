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
 * The requests are built once (templates); only the timestamps, and with
 * --mix realistic the request's number in its ids, are written over for
 * each send. --mix realistic posts agent turns (put_turn) instead of
 * agent messages. Answers are read with http_resp (llhttp); their "index"
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

enum {
    RING = 1024,   /* requests in flight per producer, at most */
    TEMPLATES = 8, /* different requests per producer, with --mix realistic */
    SEQ_LEN = 10,  /* digits of the request number in a mix's ids */
};

/* A request built once: head and body, and where each send writes its
 * send time (marks) and its number (ctrs). */
typedef struct tmpl {
    rt_text b;
    size_t *marks, *ctrs;
    int nmarks, nctrs, events;
} tmpl;

struct load_prod {
    uv_tcp_t tcp;
    load_shard *sh;
    int conv; /* -1: the setup connection */
    int g;    /* the producer's number in the run */
    bool up, awaited, closed;
    hr_parser *hr;
    tmpl t[TEMPLATES]; /* the requests it sends, in turn */
    int nt, cur;
    uint64_t seq; /* requests sent: written into the ids of a mix */
    int cut_in;   /* --faults: answers until this producer drops its connection */
    int created;
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
static int note(size_t **at, int *n, size_t off)
{
    size_t *a = realloc(*at, (size_t)(*n + 1) * sizeof(**at));
    if (a == NULL)
        return -1;
    a[(*n)++] = off;
    *at = a;
    return 0;
}

/* A send time's place in the body being built (placeholder written). */
static void put_mark(tmpl *t)
{
    if (note(&t->marks, &t->nmarks, t->b.len) != 0)
        t->b.failed = true;
    rt_text_put(&t->b, LOAD_MARK "0000000000000000000", LOAD_MARK_LEN);
}

static void put_seq(tmpl *t)
{
    if (note(&t->ctrs, &t->nctrs, t->b.len) != 0)
        t->b.failed = true;
    rt_text_put(&t->b, "0000000000", SEQ_LEN);
}

static void put_pad(tmpl *t, size_t n)
{
    for (size_t j = 0; j < n; j++)
        rt_text_putc(&t->b, 'x');
}

/* Put the request's head in front of body (t->b), moving the places. */
static int build(tmpl *t, const load_cfg *c, const char *path)
{
    rt_text h = {0};
    rt_text_printf(&h,
                   "POST %s%s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"
                   "Content-Length: %zu\r\n",
                   c->url.prefix, path, c->url.authority, t->b.len);
    if (c->api_key != NULL)
        rt_text_printf(&h, "X-Session-API-Key: %s\r\n", c->api_key);
    rt_text_puts(&h, "\r\n");
    size_t head = h.len;
    rt_text_put(&h, t->b.p, t->b.len);
    bool failed = h.failed || t->b.failed;
    free(t->b.p);
    t->b = h;
    for (int i = 0; i < t->nmarks; i++)
        t->marks[i] += head;
    for (int i = 0; i < t->nctrs; i++)
        t->ctrs[i] += head;
    return failed ? -1 : 0;
}

static void tmpl_free(tmpl *t)
{
    free(t->b.p);
    free(t->marks);
    free(t->ctrs);
    *t = (tmpl){0};
}

/* An agent message: --batch of them, event_size bytes of text each. */
static void put_messages(tmpl *t, const load_cfg *c)
{
    static const char ev[] = "{\"source\":\"agent\",\"kind\":\"MessageEvent\",\"llm_message\":"
                             "{\"role\":\"assistant\",\"content\":[{\"type\":\"text\",\"text\":\"";
    if (c->batch > 1)
        rt_text_putc(&t->b, '[');
    for (int i = 0; i < c->batch; i++) {
        rt_text_puts(&t->b, i > 0 ? "," : "");
        rt_text_puts(&t->b, ev);
        put_pad(t, (size_t)c->event_size - LOAD_MARK_LEN);
        put_mark(t);
        rt_text_puts(&t->b, "\"}]}}");
    }
    if (c->batch > 1)
        rt_text_putc(&t->b, ']');
    t->events = c->batch;
}

static size_t size_between(uint64_t *x, size_t lo, size_t hi)
{
    *x ^= *x << 13, *x ^= *x >> 7, *x ^= *x << 17;
    return lo + (size_t)(*x % (hi - lo + 1));
}

/* One turn of an agent, as one all-or-nothing array: the user's message,
 * k parallel tool calls (one LLM response), their k observations (0.5 to
 * 16 KiB of output each), and the agent's answer. The ids, tool call ids
 * and commands carry the producer's number and the request's (the ctrs),
 * so no two turns are alike to the gate or the stuck detector. */
static void put_turn(tmpl *t, int g, int k, uint64_t *x)
{
    char who[32];
    snprintf(who, sizeof(who), "%d-", g);
    rt_text_puts(&t->b, "[{\"source\":\"user\",\"kind\":\"MessageEvent\",\"llm_message\":"
                        "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"");
    put_pad(t, size_between(x, 64, 1024));
    put_mark(t);
    rt_text_puts(&t->b, "\"}]}}");
    for (int j = 0; j < k; j++) { /* the actions */
        rt_text_printf(&t->b, ",{\"id\":\"act-%s", who);
        put_seq(t);
        rt_text_printf(&t->b,
                       "-%d\",\"source\":\"agent\",\"kind\":\"ActionEvent\","
                       "\"thought\":[],\"tool_name\":\"terminal\",\"tool_call_id\":\"call-%s",
                       j, who);
        put_seq(t);
        rt_text_printf(&t->b, "-%d\",\"tool_call\":{\"id\":\"call-%s", j, who);
        put_seq(t);
        rt_text_printf(&t->b,
                       "-%d\",\"name\":\"terminal\",\"arguments\":\"{}\","
                       "\"origin\":\"completion\"},\"llm_response_id\":\"resp-%s",
                       j, who);
        put_seq(t);
        rt_text_puts(&t->b, "\",\"action\":{\"kind\":\"TerminalAction\",\"command\":\"run ");
        put_seq(t);
        put_mark(t);
        rt_text_puts(&t->b, "\"}}");
    }
    for (int j = 0; j < k; j++) { /* their observations */
        rt_text_printf(&t->b,
                       ",{\"source\":\"environment\",\"kind\":\"ObservationEvent\","
                       "\"tool_name\":\"terminal\",\"tool_call_id\":\"call-%s",
                       who);
        put_seq(t);
        rt_text_printf(&t->b, "-%d\",\"action_id\":\"act-%s", j, who);
        put_seq(t);
        rt_text_printf(&t->b,
                       "-%d\",\"observation\":{\"kind\":\"TerminalObservation\","
                       "\"exit_code\":0,\"content\":[{\"type\":\"text\",\"text\":\"",
                       j);
        put_pad(t, size_between(x, 512, 16384));
        put_mark(t);
        rt_text_puts(&t->b, "\"}]}}");
    }
    rt_text_puts(&t->b, ",{\"source\":\"agent\",\"kind\":\"MessageEvent\",\"llm_message\":"
                        "{\"role\":\"assistant\",\"content\":[{\"type\":\"text\",\"text\":\"");
    put_pad(t, size_between(x, 64, 2048));
    put_mark(t);
    rt_text_puts(&t->b, "\"}]}}]");
    t->events = 2 + 2 * k;
}

static int build_append(load_prod *p)
{
    const load_cfg *c = &p->sh->run->cfg;
    char path[128];
    snprintf(path, sizeof(path), "/api/conversations/%s/events/append",
             p->sh->run->convs[p->conv].id);
    uint64_t x = 0x9e3779b97f4a7c15ull * (uint64_t)(p->g + 1);
    p->nt = c->mix ? TEMPLATES : 1;
    for (int i = 0; i < p->nt; i++) {
        tmpl *t = &p->t[i];
        if (c->mix)
            put_turn(t, p->g, 1 + (int)size_between(&x, 0, 2), &x); /* 1 to 3 tool calls */
        else
            put_messages(t, c);
        if (build(t, c, path) != 0)
            return -1;
    }
    return 0;
}

static void send_req(load_prod *p, uint64_t t)
{
    tmpl *tm = &p->t[p->cur];
    p->cur = (p->cur + 1) % p->nt;
    char seq[SEQ_LEN + 1];
    snprintf(seq, sizeof(seq), "%0*llu", SEQ_LEN, (unsigned long long)(p->seq++ % 10000000000ull));
    for (int i = 0; i < tm->nmarks; i++)
        load_mark_put(tm->b.p + tm->marks[i], t);
    for (int i = 0; i < tm->nctrs; i++)
        memcpy(tm->b.p + tm->ctrs[i], seq, SEQ_LEN);
    int r = load_write((uv_stream_t *)&p->tcp, tm->b.p, tm->b.len);
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

static void redial(load_prod *p);

static void acked(load_prod *p, const hr_resp *r, uint64_t now)
{
    load_shard *sh = p->sh;
    uint64_t t0 = p->ring[p->head];
    p->head = (p->head + 1) % RING;
    p->inflight--;
    load_hist_add(&sh->ack, now > t0 ? now - t0 : 0);
    sh->t_last_ack = now;
    if (sh->trace.limit > 0)
        load_trace_add(&sh->trace, t0, now > t0 ? now - t0 : 0, r->status, p->conv);
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
    if (sh->run->phase == LOAD_RUN && sh->run->cfg.rate == 0 && sh->run->cfg.faults &&
        --p->cut_in <= 0)
        redial(p); /* between requests, as a client whose connection dropped */
    else if (sh->run->phase == LOAD_RUN && sh->run->cfg.rate == 0)
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

static void start(load_prod *p);

static void on_redial_closed(uv_handle_t *h)
{
    load_prod *p = h->data;
    if (p->sh->run->phase != LOAD_RUN) {
        p->closed = true; /* the run ended meanwhile */
        return;
    }
    p->sh->cuts++;
    start(p);
}

/* --faults: close the connection (nothing in flight) and connect again;
 * on_connect sends the next request. */
static void redial(load_prod *p)
{
    p->up = false;
    p->cut_in = 20 + (int)(uv_hrtime() % 180);
    hr_free(p->hr);
    p->hr = NULL;
    uv_close((uv_handle_t *)&p->tcp, on_redial_closed);
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
    else if (p->sh->run->phase == LOAD_RUN && p->sh->run->cfg.rate == 0)
        send_req(p, uv_hrtime()); /* connected again after a cut (--faults) */
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
        sh->prods[sh->nprods++] =
            (load_prod){.sh = sh, .conv = g / c->producers, .g = g, .cut_in = 20 + g % 180};
    if (sh->id != 0)
        return 0;
    sh->setup = calloc(1, sizeof(*sh->setup));
    if (sh->setup == NULL)
        return -1;
    *sh->setup = (load_prod){.sh = sh, .conv = -1, .nt = 1};
    rt_text_puts(&sh->setup->t[0].b, "{}");
    return build(&sh->setup->t[0], c, "/api/conversations");
}

void load_prods_phase(load_shard *sh)
{
    load_run *run = sh->run;
    const load_cfg *c = &run->cfg;
    int total = c->conversations * c->producers;
    switch (run->phase) {
    case LOAD_SETUP:
        if (c->conversation[0] != '\0') { /* --conversation: it is there */
            snprintf(run->convs[0].id, sizeof(run->convs[0].id), "%s", c->conversation);
            return;
        }
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
            p->every = (uint64_t)(1e9 * p->t[0].events * total / c->rate);
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
        for (int k = 0; k < TEMPLATES; k++)
            tmpl_free(&sh->prods[i].t[k]);
    }
    if (sh->setup != NULL) {
        hr_free(sh->setup->hr);
        tmpl_free(&sh->setup->t[0]);
    }
    free(sh->prods);
    free(sh->setup);
}
