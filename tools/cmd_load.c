/*
 * cmd_load.c - `parley load URL ...`: load a running server with
 * producers and WebSocket subscribers, measure it, and judge it.
 *
 * This file reads the command line, runs the phases of load.h on the
 * shards' threads (waiting for each phase on every shard before the next,
 * and saying progress on a terminal meanwhile), merges what the producers
 * were acked between the phases, reads the server's CPU time and memory
 * from /proc, and hands the lot to load_report.c.
 */
#include "cli.h"
#include "load.h"

#include "runtime/units.h"
#include "runtime/uuid.h"

#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <netdb.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

static const char load_usage[] =
    "usage: parley load URL [--conversations C | --conversation ID] [--producers P]\n"
    "                   [--subscribers S]\n"
    "                   [--rate R|max] [--batch K] [--event-size BYTES] [--duration D]\n"
    "                   [--stalled N] [--mix KIND] [--readers R] [--faults] [--idle] [--threads N] "
    "[--server-pid PID]\n"
    "                   [--cpu-pid PID[,PID...]]\n"
    "                   [--config FILE] [--api-key KEY] [--trace FILE] [--json]\n\n"
    "Load a running server of the OpenHands agent-server API (parley serve, or\n"
    "another) and check it: C new conversations, each with P producers posting\n"
    "agent messages over HTTP/1.1 keep-alive (POST /api/conversations/{id}/events/\n"
    "append) and S WebSocket subscribers reading every event\n"
    "(/sockets/events/{id}?envelope=index). Reports appends and frames delivered per\n"
    "second, append-ack and delivery latency percentiles, errors by kind, and a\n"
    "verdict: pass when every subscriber got every acknowledged event exactly once\n"
    "and in order. Exit status 1 when the verdict is fail, 2 for bad usage.\n\n"
    "  URL                 http://HOST:PORT[/PREFIX] of the server; a host other than\n"
    "                      127.0.0.1, ::1 or localhost gets a warning\n"
    "  --conversations C   conversations to create (default 1)\n"
    "  --conversation ID   load this existing conversation instead of new ones (with\n"
    "                      --producers 0 and --readers, page a log that is there)\n"
    "  --producers P       producers per conversation, a connection each; 0: none\n"
    "                      (subscribers and readers only) (default 1)\n"
    "  --subscribers S     reading WebSocket subscribers per conversation (default 10)\n"
    "  --rate R|max        R: events per second over all producers, each request sent\n"
    "                      at its intended time whatever is still unanswered, and\n"
    "                      latencies counted from that time (open loop); max: each\n"
    "                      producer sends when its last request is answered (closed\n"
    "                      loop; the default)\n"
    "  --batch K           events per request: 1 posts an event object, more an array\n"
    "                      of K (default 1)\n"
    "  --event-size BYTES  bytes of each event's text, at least 22 (default 100)\n"
    "  --duration D        how long the producers post, e.g. 500ms, 10s, 2m (default\n"
    "                      10s); the last answers and deliveries are waited for after\n"
    "  --stalled N         N more subscribers per conversation that never read after\n"
    "                      their upgrade (4 KiB receive buffer); how and when the server\n"
    "                      ended them is reported, and only the others are measured\n"
    "  --mix KIND          messages (the default): agent messages of --event-size,\n"
    "                      --batch a request; realistic: each request one agent turn,\n"
    "                      all or nothing: a user message (64 B-1 KiB), 1 to 3\n"
    "                      parallel tool calls, their observations (0.5-16 KiB of\n"
    "                      output each), the agent's answer (64 B-2 KiB)\n"
    "  --readers R         R REST readers per conversation, a connection each, paging\n"
    "                      events/search?limit=100 as fast as answered from random\n"
    "                      cursors (ids their pages showed); reads/s and read latency\n"
    "                      are reported, and each page's first item is checked to be\n"
    "                      its cursor (default 0)\n"
    "  --faults            each reading subscriber cuts its connection every 100 to\n"
    "                      1,000 frames during the run and connects again with\n"
    "                      after_id=<the last event it got>: it must go on exactly\n"
    "                      where it was; each producer (--rate max) drops its\n"
    "                      connection every 20 to 200 answers and dials again (cuts\n"
    "                      are counted in the report)\n"
    "  --idle              no producers: open the subscribers, hold them for the\n"
    "                      duration, report the server's RSS per connection (needs\n"
    "                      --server-pid)\n"
    "  --threads N         client loops, each a thread with its share of the\n"
    "                      connections (default 1)\n"
    "  --server-pid PID    the server's process, on this machine: its CPU time during\n"
    "                      the run and its RSS, from /proc\n"
    "  --cpu-pid PID,...   more processes on this machine (a cluster's other nodes, its\n"
    "                      NATS servers; at most 16) whose CPU time over the same span\n"
    "                      as the server's is reported, each\n"
    "  --config FILE       options from a JSON object, e.g. {\"conversations\": 4,\n"
    "                      \"mix\": \"realistic\", \"faults\": true, \"duration\": \"30s\"}\n"
    "                      (keys: the long options; flags on the command line win)\n"
    "  --api-key KEY       the server's session API key: X-Session-API-Key on requests,\n"
    "                      an auth frame first on each WebSocket\n"
    "  --trace FILE        every append's answer into FILE, in send order, as CSV:\n"
    "                      sent_s (CLOCK_MONOTONIC seconds, as perf record -k\n"
    "                      CLOCK_MONOTONIC), ack_ms, status, conversation (0..C-1);\n"
    "                      the first 8,388,608 answers (24 bytes each in memory)\n"
    "  --json              the report as one JSON object (keys: verdict, events_per_s,\n"
    "                      frames_per_s, ack_ms and delivery_ms {p50, p90, p99, p999,\n"
    "                      max}, errors {kind: count}, stalled_subscribers, server, ...)\n"
    "  -h, --help          show this help\n\n"
    "Latencies: ack, from a request's send (or intended) time to its answer;\n"
    "delivery, from an event's send (or intended) time, written in its text on this\n"
    "machine's monotonic clock, to its frame's arrival. Errors by kind: http_STATUS,\n"
    "connect, upgrade, ws_close_CODE, ws_protocol, disconnected, order_gap,\n"
    "order_repeat, missing, ack_repeat, no_answer, open_timeout. While it runs, a\n"
    "one-line progress goes to stderr when stderr is a terminal.\n";

enum { MAX_CONNECTIONS = 200000 };

/* --config FILE: a JSON object of options ({"conversations": 2, "mix":
 * "realistic", "faults": true, "rate": "max", "duration": "10s", ...};
 * keys are the long options, '_' or '-'), turned into arguments put before
 * the command line's, so that flags given there win. 0 with *out (to
 * free, with the strings in it), or an exit status. */
typedef struct args {
    int argc;
    char **argv;
    json_t *owner;
} args;

static int with_config(int argc, char **argv, args *out)
{
    const char *file = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--config") == 0 && i + 1 < argc)
            file = argv[i + 1];
        else if (strncmp(argv[i], "--config=", 9) == 0)
            file = argv[i] + 9;
    }
    *out = (args){argc, argv, NULL};
    if (file == NULL)
        return 0;
    json_error_t je;
    json_t *j = json_load_file(file, 0, &je);
    if (!json_is_object(j)) {
        fprintf(stderr, "parley load: --config %s: %s\n", file,
                j == NULL ? je.text : "not a JSON object");
        json_decref(j);
        return CLI_USAGE;
    }
    json_t *strs = json_array();
    char **v = calloc((size_t)argc + 2 * json_object_size(j) + 1, sizeof(*v));
    int n = 0;
    v[n++] = argv[0];
    const char *key;
    json_t *val;
    json_object_foreach(j, key, val)
    {
        char opt[64], num[40];
        snprintf(opt, sizeof(opt), "--%s", key);
        for (char *q = opt; *q; q++)
            *q = *q == '_' ? '-' : *q;
        const char *arg = NULL;
        if (json_is_string(val))
            arg = json_string_value(val);
        else if (json_is_integer(val))
            snprintf(num, sizeof(num), "%lld", (long long)json_integer_value(val)), arg = num;
        else if (json_is_real(val))
            snprintf(num, sizeof(num), "%g", json_real_value(val)), arg = num;
        else if (json_is_false(val))
            continue;
        else if (!json_is_true(val)) {
            fprintf(stderr, "parley load: --config %s: %s: a string, number or boolean\n", file,
                    key);
            json_decref(strs);
            json_decref(j);
            free(v);
            return CLI_USAGE;
        }
        json_array_append_new(strs, json_string(opt));
        v[n++] = (char *)json_string_value(json_array_get(strs, json_array_size(strs) - 1));
        if (arg != NULL) {
            json_array_append_new(strs, json_string(arg));
            v[n++] = (char *)json_string_value(json_array_get(strs, json_array_size(strs) - 1));
        }
    }
    for (int i = 1; i < argc; i++)
        v[n++] = argv[i];
    json_decref(j);
    *out = (args){n, v, strs};
    return 0;
}

static int parse(int argc, char **argv, load_cfg *c)
{
    enum {
        CONVS = 256,
        CONV,
        PRODS,
        SUBS,
        RATE,
        BATCH,
        SIZE,
        DUR,
        STALLED,
        FAULTS,
        READERS,
        MIX,
        CONFIG,
        IDLE,
        THREADS,
        PID,
        CPU_PID,
        KEY,
        TRACE,
        JSON
    };
    static const struct option opts[] = {
        {"conversations", required_argument, NULL, CONVS},
        {"conversation", required_argument, NULL, CONV},
        {"producers", required_argument, NULL, PRODS},
        {"subscribers", required_argument, NULL, SUBS},
        {"rate", required_argument, NULL, RATE},
        {"batch", required_argument, NULL, BATCH},
        {"event-size", required_argument, NULL, SIZE},
        {"duration", required_argument, NULL, DUR},
        {"stalled", required_argument, NULL, STALLED},
        {"idle", no_argument, NULL, IDLE},
        {"faults", no_argument, NULL, FAULTS},
        {"readers", required_argument, NULL, READERS},
        {"mix", required_argument, NULL, MIX},
        {"config", required_argument, NULL, CONFIG},
        {"threads", required_argument, NULL, THREADS},
        {"server-pid", required_argument, NULL, PID},
        {"cpu-pid", required_argument, NULL, CPU_PID},
        {"api-key", required_argument, NULL, KEY},
        {"trace", required_argument, NULL, TRACE},
        {"json", no_argument, NULL, JSON},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *cmd = "load";
    uint64_t v;
    char *end, err[200];
    int o;
    optind = 1;
    while ((o = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        bool ok = true;
        switch (o) {
        case CONVS:
            ok = cli_parse_int(cmd, "--conversations", optarg, 1, 100000, &c->conversations);
            break;
        case PRODS:
            ok = cli_parse_int(cmd, "--producers", optarg, 0, 1000, &c->producers);
            break;
        case SUBS:
            ok = cli_parse_int(cmd, "--subscribers", optarg, 0, 100000, &c->subscribers);
            break;
        case CONV: {
            rt_uuid id;
            if (!rt_uuid_parse(optarg, strlen(optarg), &id))
                return cli_usage_error(cmd, "--conversation wants a conversation id, not '%s'",
                                       optarg);
            rt_uuid_dashed(&id, c->conversation);
            break;
        }
        case CONFIG: /* read by with_config, before */
            break;
        case MIX:
            if (strcmp(optarg, "realistic") != 0 && strcmp(optarg, "messages") != 0)
                return cli_usage_error(cmd, "--mix is messages or realistic, not %s", optarg);
            c->mix = strcmp(optarg, "realistic") == 0;
            break;
        case READERS:
            ok = cli_parse_int(cmd, "--readers", optarg, 0, 1000, &c->readers);
            break;
        case FAULTS:
            c->faults = true;
            break;
        case STALLED:
            ok = cli_parse_int(cmd, "--stalled", optarg, 0, 1000, &c->stalled);
            break;
        case BATCH:
            ok = cli_parse_int(cmd, "--batch", optarg, 1, 1000, &c->batch);
            break;
        case THREADS:
            ok = cli_parse_int(cmd, "--threads", optarg, 1, 64, &c->threads);
            break;
        case PID:
            ok = cli_parse_int(cmd, "--server-pid", optarg, 1, 1 << 30, &c->server_pid);
            break;
        case CPU_PID:
            for (char *p = optarg; ok && *p != '\0';) {
                char one[24];
                size_t len = strcspn(p, ",");
                if (len == 0 || len >= sizeof(one) || c->ncpu_pids == LOAD_CPU_PIDS)
                    return cli_usage_error(cmd, "--cpu-pid wants up to %d pids, comma-separated",
                                           LOAD_CPU_PIDS);
                memcpy(one, p, len);
                one[len] = '\0';
                ok = cli_parse_int(cmd, "--cpu-pid", one, 1, 1 << 30, &c->cpu_pids[c->ncpu_pids++]);
                p += len + (p[len] == ',');
            }
            break;
        case RATE:
            c->rate = strcmp(optarg, "max") == 0 ? 0 : strtod(optarg, &end);
            if (strcmp(optarg, "max") != 0 && (*end != '\0' || !(c->rate > 0 && c->rate <= 1e8)))
                return cli_usage_error(cmd, "--rate wants events per second (up to 1e8) or max");
            break;
        case SIZE:
            if (rt_parse_bytes(optarg, &v) != 0 || v < LOAD_MARK_LEN || v > LOAD_MESSAGE_MAX / 2)
                return cli_usage_error(cmd, "--event-size wants %d bytes to 512KiB, not '%s'",
                                       LOAD_MARK_LEN, optarg);
            c->event_size = (int)v;
            break;
        case DUR:
            if (rt_parse_duration_ms(optarg, 1000, &v) != 0 || v < 100 || v > 86400000)
                return cli_usage_error(cmd, "--duration wants 100ms to 24h, not '%s'", optarg);
            c->duration_ms = v;
            break;
        case IDLE:
            c->idle = true;
            break;
        case KEY:
            if (strlen(optarg) > 200 || strpbrk(optarg, "\"\\\r\n") != NULL)
                return cli_usage_error(cmd, "--api-key: at most 200 plain characters");
            c->api_key = optarg;
            break;
        case TRACE: {
            /* made (or emptied) now: a path it cannot write fails before the run */
            FILE *f = fopen(optarg, "w");
            if (f == NULL)
                return cli_usage_error(cmd, "--trace %s: %s", optarg, strerror(errno));
            fclose(f);
            c->trace = optarg;
            break;
        }
        case JSON:
            c->json = true;
            break;
        case 'h':
            fputs(load_usage, stdout);
            return CLI_OK;
        default:
            return cli_usage_error(cmd, "bad option");
        }
        if (!ok)
            return CLI_USAGE;
    }
    if (optind != argc - 1)
        return cli_usage_error(cmd, optind >= argc ? "the server's URL is needed"
                                                   : "one URL, and options");
    if (net_url_parse(argv[optind], &c->url, err, sizeof(err)) != 0)
        return cli_usage_error(cmd, "%s: %s", argv[optind], err);
    if (c->url.tls)
        return cli_usage_error(cmd, "https:// is not spoken yet: use http://");
    if (c->conversation[0] != '\0' && c->conversations != 1)
        return cli_usage_error(cmd, "--conversation is one conversation: no --conversations");
    if (c->idle && c->server_pid == 0)
        return cli_usage_error(cmd, "--idle needs --server-pid, to read the server's memory");
    long conns = (long)c->conversations * (c->subscribers + c->stalled + c->producers + c->readers);
    if (conns > MAX_CONNECTIONS)
        return cli_usage_error(cmd, "%ld connections: at most %d", conns, MAX_CONNECTIONS);
    return -1;
}

/* Room for every connection (main raised the soft open-files limit to the
 * hard one). */
static int check_nofile(long need)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return 0;
    if (rl.rlim_cur != RLIM_INFINITY && (long)rl.rlim_cur < need + 32) {
        fprintf(stderr,
                "parley load: %ld connections need more open files than the limit of %ld "
                "(ulimit -Hn)\n",
                need, (long)rl.rlim_cur);
        return -1;
    }
    return 0;
}

static int resolve(load_cfg *c)
{
    char port[16];
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res;
    snprintf(port, sizeof(port), "%d", c->url.port);
    int r = getaddrinfo(c->url.host, port, &hints, &res);
    if (r != 0) {
        fprintf(stderr, "parley load: cannot resolve %s: %s\n", c->url.host, gai_strerror(r));
        return -1;
    }
    memcpy(&c->addr, res->ai_addr, res->ai_addrlen);
    freeaddrinfo(res);
    return 0;
}

/* ---- the server, from /proc ---------------------------------------------------------- */

static int read_proc(int pid, const char *what, char *buf, size_t cap)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/%s", pid, what);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return -1;
    size_t n = fread(buf, 1, cap - 1, f);
    fclose(f);
    buf[n] = '\0';
    return 0;
}

static double cpu_s(int pid)
{
    char buf[2048];
    uint64_t ticks;
    if (pid <= 0 || read_proc(pid, "stat", buf, sizeof(buf)) != 0 ||
        load_proc_ticks(buf, &ticks) != 0)
        return -1;
    return (double)ticks / (double)sysconf(_SC_CLK_TCK);
}

static long kib(int pid, const char *key)
{
    char buf[8192];
    return pid > 0 && read_proc(pid, "status", buf, sizeof(buf)) == 0 ? load_proc_kib(buf, key)
                                                                      : -1;
}

/* ---- the phases --------------------------------------------------------------------- */

static void shard_main(void *arg)
{
    load_shard *sh = arg;
    load_shard_phase(sh);
    atomic_fetch_add(&sh->run->finished, 1);
}

static void progress(load_run *run, uint64_t *last_t, uint64_t *last_f, uint64_t *last_e)
{
    uint64_t now = uv_hrtime(), f = 0, e = 0, errs = 0;
    if (now - *last_t < 1000000000)
        return;
    for (int i = 0; i < run->cfg.threads; i++) {
        f += atomic_load_explicit(&run->shards[i].shown_frames, memory_order_relaxed);
        e += atomic_load_explicit(&run->shards[i].shown_events, memory_order_relaxed);
        errs += atomic_load_explicit(&run->shards[i].shown_errors, memory_order_relaxed);
    }
    double dt = (double)(now - *last_t) / 1e9;
    fprintf(stderr, "\r\033[K  %6.1f s  %llu events (%.0f/s)  %llu frames (%.0f/s)  %llu errors",
            (double)(now - run->t_run) / 1e9, (unsigned long long)e, (double)(e - *last_e) / dt,
            (unsigned long long)f, (double)(f - *last_f) / dt, (unsigned long long)errs);
    *last_t = now;
    *last_f = f;
    *last_e = e;
}

/* Run a phase on the first n shards, each on a thread of its own. */
static void phase(load_run *run, load_phase ph, int n)
{
    run->phase = ph;
    atomic_store(&run->finished, 0);
    for (int i = 0; i < n; i++)
        if (uv_thread_create(&run->shards[i].thread, shard_main, &run->shards[i]) != 0) {
            fprintf(stderr, "parley load: cannot start a thread\n");
            abort();
        }
    bool shown = run->cfg.progress && ph >= LOAD_RUN && ph <= LOAD_DRAIN;
    static uint64_t last_t, last_f, last_e;
    if (ph == LOAD_RUN)
        last_t = run->t_run, last_f = last_e = 0;
    while (atomic_load(&run->finished) < n) {
        uv_sleep(20);
        if (shown)
            progress(run, &last_t, &last_f, &last_e);
    }
    for (int i = 0; i < n; i++)
        uv_thread_join(&run->shards[i].thread);
    if (shown && ph == LOAD_DRAIN)
        fputs("\r\033[K", stderr);
}

/* What every shard's producers were acked, per conversation: the range
 * the subscribers must hold, and the indexes acked twice. */
static void merge_acks(load_run *run)
{
    for (int c = 0; c < run->cfg.conversations; c++) {
        load_conv *cv = &run->convs[c];
        load_bits all = {0};
        for (int i = 0; i < run->cfg.threads; i++) {
            load_shard *sh = &run->shards[i];
            if (sh->ack_min[c] >= 0 && (cv->acked_min < 0 || sh->ack_min[c] < cv->acked_min))
                cv->acked_min = sh->ack_min[c];
            if (sh->ack_max[c] > cv->acked_max)
                cv->acked_max = sh->ack_max[c];
            int64_t twice = run->cfg.threads > 1 ? load_bits_merge(&all, &sh->acked[c]) : 0;
            if (twice > 0)
                load_err(&run->shards[0], "ack_repeat",
                         "%lld indexes of conversation %s were "
                         "acked to two producers",
                         (long long)twice, cv->id);
        }
        load_bits_free(&all);
    }
}

static void free_run(load_run *run)
{
    for (int i = 0; run->shards != NULL && i < run->cfg.threads; i++)
        load_shard_free(&run->shards[i]);
    free(run->shards);
    free(run->convs);
    free(run);
}

static int run_load(int argc, char **argv)
{
    load_run *run = calloc(1, sizeof(*run));
    if (run == NULL)
        return CLI_FAIL;
    load_cfg *c = &run->cfg;
    *c = (load_cfg){.conversations = 1,
                    .producers = 1,
                    .subscribers = 10,
                    .batch = 1,
                    .event_size = 100,
                    .threads = 1,
                    .duration_ms = 10000};
    int rc = parse(argc, argv, c);
    if (rc >= 0) {
        free(run);
        return rc;
    }
    c->progress = isatty(2);
    long conns = (long)c->conversations * (c->subscribers + c->stalled + c->producers + c->readers);
    if (check_nofile(conns) != 0 || resolve(c) != 0) {
        free(run);
        return CLI_FAIL;
    }
    if (!net_url_local(&c->url))
        fprintf(stderr,
                "parley load: WARNING: %s is not this machine: this is a load test, and it "
                "will load whatever answers there\n",
                c->url.host);
    run->convs = calloc((size_t)c->conversations, sizeof(*run->convs));
    run->shards = calloc((size_t)c->threads, sizeof(*run->shards));
    for (int i = 0; run->convs != NULL && i < c->conversations; i++)
        run->convs[i].acked_min = run->convs[i].acked_max = -1;
    for (int i = 0; run->shards != NULL && i < c->threads; i++)
        if (load_shard_init(&run->shards[i], run, i) != 0) {
            fprintf(stderr, "parley load: out of memory\n");
            c->threads = i + 1;
            free_run(run);
            return CLI_FAIL;
        }
    if (run->convs == NULL || run->shards == NULL ||
        (c->conversation[0] != '\0' && load_count_before(run) != 0)) {
        free_run(run);
        return CLI_FAIL;
    }
    phase(run, LOAD_SETUP, 1);
    bool ready = true;
    for (int i = 0; i < c->conversations; i++)
        ready &= run->convs[i].id[0] != '\0';
    run->shards[0].requests = 0;
    load_server srv = {.cpu_s = -1, .rss_before_kib = kib(c->server_pid, "VmRSS")};
    if (ready) {
        uint64_t t0 = uv_hrtime();
        phase(run, LOAD_CONNECT, c->threads);
        run->connect_s = (double)(uv_hrtime() - t0) / 1e9;
        double cpu0 = cpu_s(c->server_pid), self0 = load_self_cpu_s(), each0[LOAD_CPU_PIDS];
        for (int i = 0; i < c->ncpu_pids; i++)
            each0[i] = cpu_s(c->cpu_pids[i]);
        run->t_run = uv_hrtime();
        phase(run, LOAD_RUN, c->threads);
        phase(run, LOAD_ACKS, c->threads);
        merge_acks(run);
        phase(run, LOAD_DRAIN, c->threads);
        double cpu1 = cpu_s(c->server_pid);
        srv.cpu_s = cpu0 >= 0 && cpu1 >= 0 ? cpu1 - cpu0 : -1;
        srv.self_cpu_s = load_self_cpu_s() - self0;
        for (int i = 0; i < c->ncpu_pids; i++) {
            double now = cpu_s(c->cpu_pids[i]);
            srv.cpu_each_s[i] = each0[i] >= 0 && now >= 0 ? now - each0[i] : -1;
        }
        srv.rss_kib = kib(c->server_pid, "VmRSS");
        srv.hwm_kib = kib(c->server_pid, "VmHWM");
        if (c->stalled > 0)
            phase(run, LOAD_FATE, c->threads);
    }
    phase(run, LOAD_CLOSE, c->threads);
    if (ready && !c->idle) {
        bool unanswered = false;
        for (int i = 0; i < c->threads; i++)
            for (int k = 0; k < run->shards[i].errs.n; k++)
                unanswered |= strcmp(run->shards[i].errs.name[k], "no_answer") == 0 ||
                              strcmp(run->shards[i].errs.name[k], "disconnected") == 0 ||
                              /* a server that could not tell whether it appended
                               * (parley: a cluster or an owner node that went away) */
                              strcmp(run->shards[i].errs.name[k], "http_503") == 0 ||
                              strcmp(run->shards[i].errs.name[k], "http_504") == 0;
        load_check_log(run, unanswered);
    }
    if (!ready)
        fprintf(stderr, "parley load: the conversations could not be created: nothing was run\n");
    rc = ready ? load_report(run, &srv) : CLI_FAIL;
    if (ready && c->trace != NULL && load_trace_write(run, c->trace) != 0)
        rc = CLI_FAIL;
    free_run(run);
    return rc;
}

int cmd_load(int argc, char **argv)
{
    args a;
    int rc = with_config(argc, argv, &a);
    if (rc != 0)
        return rc;
    rc = run_load(a.argc, a.argv); /* options point into a's strings */
    if (a.owner != NULL) {
        json_decref(a.owner);
        free(a.argv);
    }
    return rc;
}
