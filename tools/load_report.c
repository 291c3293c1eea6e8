/*
 * load_report.c - what `parley load` says at the end: every shard's
 * results summed, the verdict, as text or as one JSON object.
 *
 * The verdict is about correctness, not speed: it fails when a subscriber
 * missed, repeated or reordered an acked event, an index was acked twice,
 * a connection failed or was closed by the server (the stalled ones
 * excepted), a request went unanswered, nothing was appended at all, or
 * the log read back by REST does not hold the acked events where their
 * acks said (load_log.c).
 * Appends the server refused (HTTP 4xx/5xx: backpressure, a compliance
 * rule) are errors to report, not a failed verdict.
 */
#include "load.h"

#include "runtime/text.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct totals {
    load_hist ack, delivery, read;
    uint64_t frames, others, events, requests, cuts, reads, t_last_frame, t_last_ack;
    int opened;
    load_errs errs;
} totals;

/* The stalled subscribers' fates, grouped by how they ended. */
typedef struct fate_group {
    char how[96];
    int count;
    double first_s, last_s; /* when the ends were seen; <0: not */
    uint64_t frames;
    bool gapless;
} fate_group;
enum { FATE_GROUPS = 8 };

static void sum(const load_run *run, totals *t)
{
    for (int i = 0; i < run->cfg.threads; i++) {
        const load_shard *sh = &run->shards[i];
        load_hist_merge(&t->ack, &sh->ack);
        load_hist_merge(&t->delivery, &sh->delivery);
        load_hist_merge(&t->read, &sh->read);
        t->reads += sh->reads;
        t->frames += sh->frames;
        t->others += sh->others;
        t->events += sh->events;
        t->requests += sh->requests;
        t->cuts += sh->cuts;
        t->opened += sh->opened;
        if (sh->t_last_frame > t->t_last_frame)
            t->t_last_frame = sh->t_last_frame;
        if (sh->t_last_ack > t->t_last_ack)
            t->t_last_ack = sh->t_last_ack;
        load_errs_merge(&t->errs, &sh->errs);
    }
}

static int group_fates(const load_run *run, fate_group *g)
{
    int n = 0;
    for (int i = 0; i < run->cfg.threads; i++)
        for (int j = 0; j < run->shards[i].nfates; j++) {
            const load_fate *f = &run->shards[i].fates[j];
            char how[96];
            if (f->close_code != 0)
                snprintf(how, sizeof(how), "closed %d %s", f->close_code, f->reason);
            else
                snprintf(how, sizeof(how), "%s", f->end);
            int k = 0;
            while (k < n && strcmp(g[k].how, how) != 0)
                k++;
            if (k == n && n < FATE_GROUPS) {
                g[n++] = (fate_group){.first_s = -1, .last_s = -1, .gapless = true};
                snprintf(g[k].how, sizeof(g[k].how), "%s", how);
            } else if (k == n) {
                k = n - 1;
            }
            g[k].count++;
            g[k].frames += f->frames;
            g[k].gapless &= f->gapless;
            if (f->at_s >= 0 && (g[k].first_s < 0 || f->at_s < g[k].first_s))
                g[k].first_s = f->at_s;
            if (f->at_s > g[k].last_s)
                g[k].last_s = f->at_s;
        }
    return n;
}

/* The verdict, and why when it fails. */
static bool verdict(const load_run *run, const totals *t, char *why, size_t cap)
{
    why[0] = '\0';
    for (int i = 0; i < t->errs.n; i++) {
        if (strncmp(t->errs.name[i], "http_", 5) == 0 && strcmp(t->errs.name[i], "http_bad_answer"))
            continue;
        size_t at = strlen(why);
        snprintf(why + at, cap - at, "%s%s %llu", at ? ", " : "", t->errs.name[i],
                 (unsigned long long)t->errs.count[i]);
    }
    if (why[0] == '\0' && !run->cfg.idle && run->cfg.producers > 0 && t->events == 0)
        snprintf(why, cap, "nothing was appended");
    if (why[0] == '\0' && run->log_why[0] != '\0')
        snprintf(why, cap, "%s", run->log_why);
    return why[0] == '\0';
}

static double rate_per_s(uint64_t n, uint64_t t0, uint64_t t1)
{
    return t1 > t0 ? (double)n / ((double)(t1 - t0) / 1e9) : 0;
}

static double ms(uint64_t ns)
{
    return (double)ns / 1e6;
}

static void pcts(rt_text *w, const load_hist *h)
{
    rt_text_printf(w,
                   "{\"p50\": %.3f, \"p90\": %.3f, \"p99\": %.3f, \"p999\": %.3f, \"max\": %.3f}",
                   ms(load_hist_pct(h, .5)), ms(load_hist_pct(h, .9)), ms(load_hist_pct(h, .99)),
                   ms(load_hist_pct(h, .999)), ms(h->max));
}

static void json(const load_run *run, const load_server *srv, const totals *t, bool pass,
                 const char *why, const fate_group *g, int ng)
{
    const load_cfg *c = &run->cfg;
    rt_text w = {0};
    rt_text_printf(&w, "{\"verdict\": \"%s\", \"verdict_detail\": ", pass ? "pass" : "fail");
    rt_text_json_string(&w, why, strlen(why));
    char url[600];
    snprintf(url, sizeof(url), "http://%s%s", c->url.authority, c->url.prefix);
    rt_text_puts(&w, ", \"url\": ");
    rt_text_json_string(&w, url, strlen(url));
    rt_text_printf(&w,
                   ", \"conversations\": %d, \"producers\": %d, \"subscribers\": %d, "
                   "\"stalled\": %d, \"rate\": ",
                   c->conversations, c->idle ? 0 : c->producers, c->subscribers, c->stalled);
    if (c->rate > 0)
        rt_text_printf(&w, "%.0f", c->rate);
    else
        rt_text_puts(&w, "\"max\"");
    rt_text_printf(
        &w,
        ", \"mix\": \"%s\", \"batch\": %d, \"event_size\": %d, \"duration_s\": %.3f, \"threads\": "
        "%d, "
        "\"events\": %llu, \"requests\": %llu, \"events_per_s\": %.0f, \"frames\": "
        "%llu, \"frames_per_s\": %.0f, \"other_frames\": %llu, \"ack_ms\": ",
        c->mix ? "realistic" : "messages", c->batch, c->event_size, (double)c->duration_ms / 1e3,
        c->threads, (unsigned long long)t->events, (unsigned long long)t->requests,
        rate_per_s(t->events, run->t_run, t->t_last_ack), (unsigned long long)t->frames,
        rate_per_s(t->frames, run->t_run, t->t_last_frame), (unsigned long long)t->others);
    pcts(&w, &t->ack);
    rt_text_puts(&w, ", \"delivery_ms\": ");
    pcts(&w, &t->delivery);
    rt_text_printf(
        &w, ", \"reads\": %llu, \"reads_per_s\": %.0f, \"read_ms\": ", (unsigned long long)t->reads,
        c->duration_ms > 0 ? (double)t->reads * 1000 / (double)c->duration_ms : 0);
    pcts(&w, &t->read);
    rt_text_puts(&w, ", \"errors\": {");
    for (int i = 0; i < t->errs.n; i++)
        rt_text_printf(&w, "%s\"%s\": %llu", i ? ", " : "", t->errs.name[i],
                       (unsigned long long)t->errs.count[i]);
    rt_text_printf(&w, "}, \"faults\": {\"on\": %s, \"cuts\": %llu}", c->faults ? "true" : "false",
                   (unsigned long long)t->cuts);
    rt_text_printf(&w, ", \"log\": {\"events\": %llu, \"acked\": %llu}",
                   (unsigned long long)run->log_events, (unsigned long long)run->log_acked);
    rt_text_puts(&w, ", \"stalled_subscribers\": [");
    for (int i = 0; i < ng; i++) {
        rt_text_printf(&w, "%s{\"count\": %d, \"end\": ", i ? ", " : "", g[i].count);
        rt_text_json_string(&w, g[i].how, strlen(g[i].how));
        if (g[i].first_s >= 0)
            rt_text_printf(&w, ", \"seen_s\": %.3f", g[i].first_s);
        else
            rt_text_puts(&w, ", \"seen_s\": null");
        rt_text_printf(&w, ", \"frames\": %llu, \"gapless\": %s}", (unsigned long long)g[i].frames,
                       g[i].gapless ? "true" : "false");
    }
    rt_text_printf(&w, "], \"subscribers_opened\": %d, \"connect_s\": %.3f", t->opened,
                   run->connect_s);
    rt_text_printf(&w, ", \"client\": {\"cpu_s\": %.3f}", srv->self_cpu_s);
    if (c->server_pid > 0) {
        rt_text_printf(&w,
                       ", \"server\": {\"pid\": %d, \"cpu_s\": %.3f, \"rss_before_kib\": %ld, "
                       "\"rss_kib\": %ld, \"hwm_kib\": %ld}",
                       c->server_pid, srv->cpu_s, srv->rss_before_kib, srv->rss_kib, srv->hwm_kib);
        if (c->idle && t->opened > 0)
            rt_text_printf(&w, ", \"idle\": {\"connections\": %d, \"bytes_per_connection\": %.0f}",
                           t->opened,
                           (double)(srv->rss_kib - srv->rss_before_kib) * 1024 / t->opened);
    }
    if (c->ncpu_pids > 0) {
        rt_text_puts(&w, ", \"cpu_pids\": [");
        for (int i = 0; i < c->ncpu_pids; i++)
            rt_text_printf(&w, "%s{\"pid\": %d, \"cpu_s\": %.3f}", i ? ", " : "", c->cpu_pids[i],
                           srv->cpu_each_s[i]);
        rt_text_puts(&w, "]");
    }
    rt_text_puts(&w, "}\n");
    if (!w.failed)
        fwrite(w.p, 1, w.len, stdout);
    free(w.p);
}

/* 1234567 -> "1,234,567" */
static const char *commas(uint64_t v, char out[32])
{
    char d[24];
    int n = snprintf(d, sizeof(d), "%llu", (unsigned long long)v), o = 0;
    for (int i = 0; i < n; i++) {
        if (i > 0 && (n - i) % 3 == 0)
            out[o++] = ',';
        out[o++] = d[i];
    }
    out[o] = '\0';
    return out;
}

static void line_pcts(const char *what, const load_hist *h)
{
    if (h->n == 0) {
        printf("  %-11s none measured\n", what);
        return;
    }
    printf("  %-11s p50 %.2f ms   p90 %.2f ms   p99 %.2f ms   p99.9 %.2f ms   max %.2f ms\n", what,
           ms(load_hist_pct(h, .5)), ms(load_hist_pct(h, .9)), ms(load_hist_pct(h, .99)),
           ms(load_hist_pct(h, .999)), ms(h->max));
}

static void text(const load_run *run, const load_server *srv, const totals *t, bool pass,
                 const char *why, const fate_group *g, int ng)
{
    const load_cfg *c = &run->cfg;
    char a[32], b[32], r[32];
    if (c->rate > 0)
        snprintf(r, sizeof(r), "%.0f events/s", c->rate);
    char what[64] = "agent turns (realistic mix)";
    if (!c->mix)
        snprintf(what, sizeof(what), "batch %d, %d-byte texts", c->batch, c->event_size);
    printf("parley load http://%s%s: %d conversation%s, %d producer%s and %d subscriber%s (+%d "
           "stalled) each, rate %s, %s, %.1f s\n",
           c->url.authority, c->url.prefix, c->conversations, c->conversations == 1 ? "" : "s",
           c->idle ? 0 : c->producers, c->producers == 1 && !c->idle ? "" : "s", c->subscribers,
           c->subscribers == 1 ? "" : "s", c->stalled, c->rate > 0 ? r : "max", what,
           (double)c->duration_ms / 1e3);
    if (!c->idle) {
        printf("  %-11s %s events in %s requests: %.0f events/s\n", "appended",
               commas(t->events, a), commas(t->requests, b),
               rate_per_s(t->events, run->t_run, t->t_last_ack));
        line_pcts("ack", &t->ack);
        printf("  %-11s %s frames to %d subscribers: %.0f frames/s\n", "delivered",
               commas(t->frames, a), c->conversations * c->subscribers,
               rate_per_s(t->frames, run->t_run, t->t_last_frame));
        line_pcts("delivery", &t->delivery);
        if (c->readers > 0) {
            printf("  %-11s %s pages of 100 by %d readers: %.0f pages/s\n", "read",
                   commas(t->reads, a), c->conversations * c->readers,
                   (double)t->reads * 1000 / (double)c->duration_ms);
            line_pcts("page", &t->read);
        }
    }
    printf("  %-11s %s subscribers open in %.2f s\n", "connected", commas((uint64_t)t->opened, a),
           run->connect_s);
    printf("  %-11s", "errors");
    for (int i = 0; i < t->errs.n; i++)
        printf("%s %s %s", i ? "," : "", t->errs.name[i], commas(t->errs.count[i], a));
    printf("%s\n", t->errs.n == 0 ? " none" : "");
    for (int i = 0; i < ng; i++) {
        printf("  %-11s %d: %s", i == 0 ? "stalled" : "", g[i].count, g[i].how);
        if (g[i].first_s >= 0)
            printf(", seen at %.1f s", g[i].first_s);
        printf("; read %s events after the run, %s\n", commas(g[i].frames, a),
               g[i].gapless ? "in order" : "NOT in order");
    }
    printf("  %-11s %.2f s CPU during the run (this process)\n", "client", srv->self_cpu_s);
    if (c->server_pid > 0) {
        printf("  %-11s pid %d: %.2f s CPU during the run, RSS %.1f MiB (%.1f before the "
               "subscribers, peak %.1f)\n",
               "server", c->server_pid, srv->cpu_s, srv->rss_kib / 1024.0,
               srv->rss_before_kib / 1024.0, srv->hwm_kib / 1024.0);
        if (c->idle && t->opened > 0)
            printf("  %-11s %s connections: %.0f bytes of server RSS each\n", "idle",
                   commas((uint64_t)t->opened, a),
                   (double)(srv->rss_kib - srv->rss_before_kib) * 1024 / t->opened);
    }
    for (int i = 0; i < c->ncpu_pids; i++)
        printf("  %-11s pid %d: %.2f s CPU during the run\n", i == 0 ? "cpu" : "", c->cpu_pids[i],
               srv->cpu_each_s[i]);
    if (c->faults)
        printf("  %-11s %s connections cut: subscribers resumed with after_id, producers dialed "
               "again\n",
               "faults", commas(t->cuts, a));
    if (!c->idle)
        printf("  %-11s %s events read back by REST, %s of them acked\n", "log",
               commas(run->log_events, a), commas(run->log_acked, b));
    if (pass)
        printf("  %-11s pass: %s\n", "verdict",
               c->idle ? "every connection opened and stayed open"
                       : "every subscriber got every acked event once, in order, "
                         "and the log holds each where its ack said");
    else
        printf("  %-11s FAIL: %s\n", "verdict", why);
}

int load_report(const load_run *run, const load_server *srv)
{
    totals *t = calloc(1, sizeof(*t));
    if (t == NULL)
        return 1;
    fate_group g[FATE_GROUPS];
    char why[512];
    sum(run, t);
    int ng = group_fates(run, g);
    bool pass = verdict(run, t, why, sizeof(why));
    if (run->cfg.json)
        json(run, srv, t, pass, why, g, ng);
    else
        text(run, srv, t, pass, why, g, ng);
    fflush(stdout);
    free(t);
    return pass ? 0 : 1;
}
