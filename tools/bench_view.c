/*
 * bench_view.c - `parley bench view`: the visualizer's fold, on one core,
 * without I/O: a conversation of N events (the agent-turn cycle of `bench
 * conversation`: messages, actions with thoughts, observations of up to
 * 4 KiB) parsed and folded into blocks as the visualizer folds its log
 * (actors/view.h: parley's events converted, reduced, changes marked).
 * Reported: events/s; the heap the block state holds once folded (bytes
 * per event, and for the whole conversation: the blocks keep the text, the
 * raw events are not kept); the time to answer the whole state and a poll
 * of the last 100 events' changes (view_since), serialized.
 */
#include "cli.h"

#include "actors/event.h"
#include "actors/view.h"
#include "runtime/buf.h"
#include "runtime/json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage[] =
    "usage: parley bench view [--runs N] [--events N] [--json]\n\n"
    "Fold a conversation of N events (default 100000; an agent's turns: messages,\n"
    "actions, observations up to 4 KiB) into blocks as the visualizer does, on one\n"
    "core: events/s (parse + convert + reduce), the heap the block state holds,\n"
    "and the time to serialize the whole state and a poll of the last 100 events'\n"
    "changes. Medians over --runs (default 5).\n";

/* Serialized as the visualizer answers: its length; *t the time, ms. */
static double ms_of(json_t *j, double *t)
{
    double t0 = cli_now_s();
    rt_text w = {0};
    ev_json_append(&w, j);
    *t = (cli_now_s() - t0) * 1e3;
    free(w.p);
    return (double)w.len;
}

int bench_view(int argc, char **argv)
{
    int runs = 5, events = 100000;
    bool json = false;
    cli_int_opt ints[] = {{"--events", &events, 100, 10000000}};
    int r = cli_bench_args("bench view", usage, argc, argv, &runs, &json, NULL, ints, 1);
    if (r >= 0)
        return r;
    rt_buf **evs = malloc((size_t)events * sizeof(*evs));
    if (evs == NULL)
        return CLI_FAIL;
    double bytes = 0;
    for (int i = 0; i < events; i++) {
        evs[i] = bench_cycle_event(0, (uint64_t)i);
        bytes += (double)rt_buf_len(evs[i]);
    }
    double *rate = calloc((size_t)runs, sizeof(double)),
           *heap = calloc((size_t)runs, sizeof(double));
    double *whole = calloc((size_t)runs, sizeof(double)),
           *poll = calloc((size_t)runs, sizeof(double));
    double state_bytes = 0;
    int status = CLI_OK;
    for (int run = 0; run < runs && status == CLI_OK; run++) {
        size_t before = cli_heap_bytes();
        view *v = view_new(NULL, NULL);
        double t0 = cli_now_s();
        for (int i = 0; i < events && v != NULL; i++) {
            json_t *e =
                rt_json_read((const char *)rt_buf_data(evs[i]), rt_buf_len(evs[i]), 0, NULL);
            if (e == NULL || view_apply(v, (uint64_t)i, e) != 0)
                status = CLI_FAIL;
            json_decref(e);
        }
        rate[run] = events / (cli_now_s() - t0);
        heap[run] = (double)cli_heap_bytes() - (double)before;
        json_t *st = v != NULL ? view_since(v, -1) : NULL;
        state_bytes = ms_of(st, &whole[run]);
        json_decref(st);
        double t1 = cli_now_s();
        json_t *since = v != NULL ? view_since(v, events - 101) : NULL;
        double dummy;
        ms_of(since, &dummy);
        poll[run] = (cli_now_s() - t1) * 1e3;
        json_decref(since);
        if (v == NULL || view_skipped(v) != 0)
            status = CLI_FAIL;
        view_free(v);
    }
    for (int i = 0; i < events; i++)
        rt_buf_unref(evs[i]);
    free(evs);
    if (status != CLI_OK) {
        fprintf(stderr,
                "parley bench view: the fold failed (out of memory, or an event skipped)\n");
    } else if (json) {
        printf("{\"events\": %d, \"event_bytes\": %.0f, \"events_per_s\": %.0f, \"heap_bytes\": "
               "%.0f, \"heap_per_event\": %.1f, \"state_bytes\": %.0f, \"whole_state_ms\": %.2f, "
               "\"poll_100_ms\": %.3f}\n",
               events, bytes, cli_median(rate, runs), cli_median(heap, runs),
               cli_median(heap, runs) / events, state_bytes, cli_median(whole, runs),
               cli_median(poll, runs));
    } else {
        printf("fold %d events (%.1f MB of JSON), medians of %d runs:\n", events, bytes / 1e6,
               runs);
        printf("  fold (parse, convert, reduce)  %.0f events/s\n", cli_median(rate, runs));
        printf("  block state held               %.1f MB (%.0f bytes/event; the text kept)\n",
               cli_median(heap, runs) / 1e6, cli_median(heap, runs) / events);
        printf("  whole state serialized         %.1f ms (%.1f MB)\n", cli_median(whole, runs),
               state_bytes / 1e6);
        printf("  poll: the last 100 events      %.3f ms\n", cli_median(poll, runs));
    }
    free(rate);
    free(heap);
    free(whole);
    free(poll);
    return status;
}
