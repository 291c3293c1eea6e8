/*
 * cmd_serve.c - `parley serve`: the HTTP server on a local data directory
 * (or a NATS JetStream cluster, --store),
 * until SIGINT or SIGTERM; then it stops accepting, lets the requests in
 * flight be answered, flushes the logs and exits 0.
 */
#include "cli.h"

#include "actors/acp_registry.h"
#include "net/api.h"
#include "parley.h"
#include "runtime/log.h"

#include "runtime/units.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <uv.h>

static const char serve_usage[] =
    "usage: parley serve [--data DIR] [--store nats://HOST:PORT[,HOST:PORT...]]\n"
    "                    [--node-id ID] [--nats-creds FILE] [--nats-tls-ca FILE]\n"
    "                    [--nats-tls-cert FILE --nats-tls-key FILE] [--nats-shards N]\n"
    "                    [--listen HOST:PORT] [--api-key KEY]\n"
    "                    [--tls-cert FILE --tls-key FILE] [--durability POLICY] [--workers N]\n"
    "                    [--log-level LEVEL] [limits...] [--defer-timeout DURATION]\n"
    "                    [--defer-max N] [--hold-timeout DURATION] [--hold-max N]\n"
    "                    [--idle-close DURATION] [--agent NAME=COMMAND]... [--agents FILE]\n"
    "                    [--default-agent NAME] [--viz-idle DURATION] [--viz-max-blocks N]\n\n"
    "Serve the conversations of a local data directory (or of a NATS JetStream\n"
    "cluster: --store) over HTTP (the OpenHands agent-server API) until SIGINT or\n"
    "SIGTERM. The first line on stdout is `listening on http://HOST:PORT`.\n\n"
    "  --data DIR           data directory, created if missing (default ./parley-data);\n"
    "                       one process at a time. A new directory keeps every\n"
    "                       conversation in shared segment files, one that has a store\n"
    "                       keeps its kind; pool:DIR or local:DIR (a directory per\n"
    "                       conversation) names it (README, \"Store\"). With --store:\n"
    "                       only this machine's workspaces of hosted agents\n"
    "                       (workspaces/<id>/), not locked\n"
    "  --store nats://HOST:PORT[,HOST:PORT...]\n"
    "                       keep the conversations on a NATS JetStream cluster instead\n"
    "                       (servers 2.9 or newer; every server given is a way in)\n"
    "  --node-id ID         this node's name in logs and in the log's take-over records\n"
    "                       (letters, digits, '.', '_', '-'; default HOSTNAME-PID)\n"
    "  --nats-creds FILE    NATS credentials (JWT and NKey seed) to connect with\n"
    "  --nats-tls-ca FILE   connect to NATS with TLS, trusting the servers signed by this CA\n"
    "  --nats-tls-cert FILE, --nats-tls-key FILE\n"
    "                       this client's certificate chain and key for NATS (mutual TLS)\n"
    "  --nats-shards N      shard streams holding the conversations' logs, 1..1024 (default:\n"
    "                       what the cluster recorded, 16 on a new one); fixed for a\n"
    "                       cluster: a node giving another count is refused\n"
    "  --durability POLICY  full: acknowledge appends once fdatasync'ed (default);\n"
    "                       interval=DURATION: fdatasync every DURATION (e.g. 250ms);\n"
    "                       none: leave flushing to the kernel (the local store only:\n"
    "                       the cluster acknowledges once a majority has it)\n"
    "  --listen HOST:PORT   address to serve on (default 127.0.0.1:8000; port 0 picks a\n"
    "                       free one; [::1]:PORT for IPv6)\n"
    "  --api-key KEY        require header X-Session-API-Key: KEY on /api/* (default:\n"
    "                       $SESSION_API_KEY; none: no key needed); repeat it to\n"
    "                       accept any of several keys (at most 16)\n"
    "  --tls-cert FILE, --tls-key FILE\n"
    "                       serve HTTPS (TLS 1.2, AEAD suites) with this PEM certificate\n"
    "                       chain and key\n"
    "  --workers N          worker loops (threads), 1..256 (default: number of cores)\n"
    "  --log-level LEVEL    debug, info, warn, error or off (default info, or $PARLEY_LOG)\n"
    "  --defer-timeout DURATION\n"
    "                       how long a user or environment message posted while a tool\n"
    "                       call is pending waits for the result before it is refused\n"
    "                       (default 10m; e.g. 90s, 1h; at most 7 days)\n"
    "  --defer-max N        messages waiting so per conversation, 1..10000 (default 64)\n"
    "  --hold-timeout DURATION\n"
    "                       how long an event whose parent_id is not in the log yet waits\n"
    "                       for it (default 5s; at most 1h)\n"
    "  --hold-max N         events waiting so per conversation, 1..10000 (default 64)\n"
    "  --idle-close DURATION\n"
    "                       a conversation without requests this long closes its log\n"
    "                       files and index, and opens them again when next asked\n"
    "                       (default 5m; 0: never)\n"
    "  --viz-idle DURATION  a conversation's visualizer (GET .../state, view=blocks)\n"
    "                       stops after this long unwatched, and starts again when\n"
    "                       next asked (default 60s; at most 1 day)\n"
    "  --viz-max-blocks N   a conversation folding into more blocks than this has no\n"
    "                       view (its state is refused, 507): a bound on a visualizer's\n"
    "                       memory, about 2.6 KB a block; 1..100000000 (default 500000)\n"
    "hosted agents (processes speaking the Agent Client Protocol on stdio; a\n"
    "conversation names one with \"agent\": {\"kind\": \"ACPAgent\", \"acp_command\": [NAME]}):\n"
    "  --agent NAME=COMMAND register an agent; COMMAND is split into words as a shell\n"
    "                       would, without expansion (repeatable)\n"
    "  --agents FILE        register the agents of a JSON file:\n"
    "                       {NAME: {\"command\": [...], \"env\": {...}, \"cwd\": \"...\"}}\n"
    "  --default-agent NAME host NAME in conversations created without an agent\n"
    "limits (what a client controls):\n"
    "  --max-body SIZE      request body bytes (default 16MiB; 413 beyond)\n"
    "  --max-header SIZE    request line and header bytes (default 16KiB; 431 beyond)\n"
    "  --max-connections N  open connections (default 10000; 503 beyond)\n"
    "  --header-timeout DURATION\n"
    "                       time from a request's first byte to its last header\n"
    "                       (default 10s; 408 after)\n"
    "  --idle-timeout DURATION\n"
    "                       silence allowed between requests and inside a body\n"
    "                       (default 60s)\n"
    "WebSocket streams (/sockets/events/{id}):\n"
    "  --ws-max-subscribers N\n"
    "                       sockets per conversation, 1..100000 (default 1000; 1013 beyond)\n"
    "  --ws-queue SIZE      bytes queued per socket that the client has not taken yet\n"
    "                       (default 1MiB); events beyond it wait in the log, not in memory\n"
    "  --ws-stall-timeout DURATION\n"
    "                       a socket whose queue stays full this long is closed with 1013\n"
    "                       (default 30s)\n"
    "  --ws-ping-interval DURATION\n"
    "                       server pings; no pong by the next one closes the socket\n"
    "                       (default 30s; 0: no pings)\n"
    "  --ws-auth-timeout DURATION\n"
    "                       time for the first-frame auth when a key is needed (default 10s)\n"
    "  --ws-max-message SIZE\n"
    "                       a client message (default 1MiB; 1009 beyond)\n"
    "  -h, --help           show this help\n";

/* A duration option, in milliseconds, from 1 ms to max_ms. */
static bool parse_duration(const char *opt, const char *val, uint64_t max_ms,
                           unsigned long long *out)
{
    uint64_t ms;
    if (rt_parse_duration_ms(val, 1000, &ms) != 0 || ms == 0 || ms > max_ms) {
        cli_usage_error("serve", "%s wants a duration from 1ms to %llus (e.g. 90s, 10m), not '%s'",
                        opt, (unsigned long long)(max_ms / 1000), val);
        return false;
    }
    *out = ms;
    return true;
}

/* HOST:PORT, [V6]:PORT or :PORT. */
static bool parse_listen(const char *v, char *host, size_t cap, int *port)
{
    const char *colon = strrchr(v, ':');
    const char *h = v;
    size_t hl = colon != NULL ? (size_t)(colon - v) : 0;
    if (hl >= 2 && v[0] == '[' && v[hl - 1] == ']') {
        h++;
        hl -= 2;
    }
    if (colon == NULL || hl >= cap ||
        !cli_parse_int("serve", "--listen port", colon + 1, 0, 65535, port)) {
        cli_usage_error("serve",
                        "--listen wants HOST:PORT (e.g. 127.0.0.1:8000, [::1]:0), not '%s'", v);
        return false;
    }
    if (hl > 0) {
        memcpy(host, h, hl);
        host[hl] = '\0';
    }
    return true;
}

int serve_read_agents(const char *path, acp_registry *r, char *why, size_t cap)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        snprintf(why, cap, "%s", strerror(errno));
        return -1;
    }
    char *text = NULL;
    size_t len = 0, got;
    char chunk[65536];
    while ((got = fread(chunk, 1, sizeof(chunk), f)) > 0 && len < (1u << 20)) {
        char *t = realloc(text, len + got);
        if (t == NULL)
            break;
        text = t;
        memcpy(text + len, chunk, got);
        len += got;
    }
    fclose(f);
    int rc = len >= (1u << 20) ? (snprintf(why, cap, "larger than 1 MiB"), -1)
                               : acp_registry_add_json(r, text != NULL ? text : "", len, why, cap);
    free(text);
    return rc;
}

static void no_work(uv_work_t *w)
{
    (void)w;
}

static void no_work_done(uv_work_t *w, int status)
{
    (void)w;
    (void)status;
}

/* On a shared store each forward to another node holds a thread of
 * libuv's pool while it waits (net/api.h): the pool gets that many threads
 * more than libuv's default 4, so that forwards to a stalled owner never
 * hold up this node's other work there. libuv sizes its pool from
 * UV_THREADPOOL_SIZE when it first uses it: start it now, before any
 * other thread, then take the variable away so that hosted agents (node
 * is libuv too) do not inherit it. A size the user set is kept. */
static void pool_for_forwards(void)
{
    if (getenv("UV_THREADPOOL_SIZE") != NULL)
        return;
    char n[16];
    snprintf(n, sizeof n, "%d", 4 + NET_FORWARDS_MAX);
    uv_loop_t l;
    uv_work_t w;
    if (setenv("UV_THREADPOOL_SIZE", n, 1) == 0 && uv_loop_init(&l) == 0) {
        if (uv_queue_work(&l, &w, no_work, no_work_done) == 0)
            uv_run(&l, UV_RUN_DEFAULT);
        uv_loop_close(&l);
    }
    unsetenv("UV_THREADPOOL_SIZE");
}

static void on_signal(uv_signal_t *h, int signum)
{
    rt_log(RT_LOG_INFO, "serve", "signal=%s stopping", signum == SIGINT ? "SIGINT" : "SIGTERM");
    uv_stop(h->loop);
}

int cmd_serve(int argc, char **argv)
{
    static const struct option opts[] = {{"data", required_argument, NULL, 'd'},
                                         {"workers", required_argument, NULL, 'w'},
                                         {"durability", required_argument, NULL, 'D'},
                                         {"log-level", required_argument, NULL, 'l'},
                                         {"defer-timeout", required_argument, NULL, 'T'},
                                         {"defer-max", required_argument, NULL, 'M'},
                                         {"hold-timeout", required_argument, NULL, 't'},
                                         {"hold-max", required_argument, NULL, 'm'},
                                         {"listen", required_argument, NULL, 'L'},
                                         {"api-key", required_argument, NULL, 'k'},
                                         {"tls-cert", required_argument, NULL, 'C'},
                                         {"tls-key", required_argument, NULL, 'K'},
                                         {"max-body", required_argument, NULL, 'B'},
                                         {"max-header", required_argument, NULL, 'H'},
                                         {"max-connections", required_argument, NULL, 'N'},
                                         {"header-timeout", required_argument, NULL, 'U'},
                                         {"idle-timeout", required_argument, NULL, 'I'},
                                         {"ws-max-subscribers", required_argument, NULL, 1},
                                         {"ws-queue", required_argument, NULL, 2},
                                         {"ws-stall-timeout", required_argument, NULL, 3},
                                         {"ws-ping-interval", required_argument, NULL, 4},
                                         {"ws-auth-timeout", required_argument, NULL, 5},
                                         {"ws-max-message", required_argument, NULL, 6},
                                         {"idle-close", required_argument, NULL, 7},
                                         {"agent", required_argument, NULL, 8},
                                         {"agents", required_argument, NULL, 9},
                                         {"default-agent", required_argument, NULL, 10},
                                         {"viz-idle", required_argument, NULL, 11},
                                         {"viz-max-blocks", required_argument, NULL, 12},
                                         {"store", required_argument, NULL, 13},
                                         {"node-id", required_argument, NULL, 14},
                                         {"nats-creds", required_argument, NULL, 15},
                                         {"nats-tls-ca", required_argument, NULL, 16},
                                         {"nats-tls-cert", required_argument, NULL, 17},
                                         {"nats-tls-key", required_argument, NULL, 18},
                                         {"nats-shards", required_argument, NULL, 19},
                                         {"help", no_argument, NULL, 'h'},
                                         {NULL, 0, NULL, 0}};
    const char *data = "parley-data", *durability = "full";
    int workers = 0, c, n;
    pl_options po = {0};
    pl_http_options so = {.port = 8000};
    const char *keys[16];
    size_t nkeys = 0;
    char host[256] = "127.0.0.1";
    unsigned long long ms;
    uint64_t bytes;
    acp_registry agents = {0};
    const char *default_agent = NULL;
    char why[512];
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'd':
            data = optarg;
            break;
        case 'w':
            if (!cli_parse_int("serve", "--workers", optarg, 1, 256, &workers))
                return CLI_USAGE;
            break;
        case 'D':
            durability = optarg;
            break;
        case 'T':
            if (!parse_duration("--defer-timeout", optarg, 7 * 86400 * 1000ull,
                                &po.defer_timeout_ms))
                return CLI_USAGE;
            break;
        case 't':
            if (!parse_duration("--hold-timeout", optarg, 3600 * 1000ull, &po.hold_timeout_ms))
                return CLI_USAGE;
            break;
        case 'M':
            if (!cli_parse_int("serve", "--defer-max", optarg, 1, 10000, &n))
                return CLI_USAGE;
            po.defer_max = (unsigned)n;
            break;
        case 'm':
            if (!cli_parse_int("serve", "--hold-max", optarg, 1, 10000, &n))
                return CLI_USAGE;
            po.hold_max = (unsigned)n;
            break;
        case 'l': {
            int l = rt_log_parse_level(optarg);
            if (l < 0)
                return cli_usage_error("serve", "unknown log level '%s'", optarg);
            rt_log_set_level((rt_log_level)l);
            break;
        }
        case 'L':
            if (!parse_listen(optarg, host, sizeof(host), &so.port))
                return CLI_USAGE;
            break;
        case 'k':
            if (nkeys == sizeof(keys) / sizeof(keys[0]))
                return cli_usage_error("serve", "at most 16 --api-key");
            keys[nkeys++] = optarg;
            break;
        case 'C':
            so.tls_cert = optarg;
            break;
        case 'K':
            so.tls_key = optarg;
            break;
        case 'B':
        case 'H':
            if (rt_parse_bytes(optarg, &bytes) != 0 || bytes < 1024 || bytes > (1ull << 30))
                return cli_usage_error("serve", "%s wants a size from 1KiB to 1GiB, not '%s'",
                                       c == 'B' ? "--max-body" : "--max-header", optarg);
            *(c == 'B' ? &so.max_body : &so.max_header) = (size_t)bytes;
            break;
        case 'N':
            if (!cli_parse_int("serve", "--max-connections", optarg, 1, 1000000, &n))
                return CLI_USAGE;
            so.max_connections = (unsigned)n;
            break;
        case 'U':
        case 'I':
            if (!parse_duration(c == 'U' ? "--header-timeout" : "--idle-timeout", optarg,
                                3600 * 1000ull, &ms))
                return CLI_USAGE;
            *(c == 'U' ? &so.header_timeout_ms : &so.idle_timeout_ms) = ms;
            break;
        case 1:
            if (!cli_parse_int("serve", "--ws-max-subscribers", optarg, 1, 100000, &n))
                return CLI_USAGE;
            po.max_subscribers = (unsigned)n;
            break;
        case 2:
        case 6:
            if (rt_parse_bytes(optarg, &bytes) != 0 || bytes < 1024 || bytes > (1ull << 30))
                return cli_usage_error("serve", "%s wants a size from 1KiB to 1GiB, not '%s'",
                                       c == 2 ? "--ws-queue" : "--ws-max-message", optarg);
            *(c == 2 ? &so.ws_queue_bytes : &so.ws_message_bytes) = (size_t)bytes;
            break;
        case 3:
        case 5:
            if (!parse_duration(c == 3 ? "--ws-stall-timeout" : "--ws-auth-timeout", optarg,
                                3600 * 1000ull, &ms))
                return CLI_USAGE;
            *(c == 3 ? &so.ws_stall_ms : &so.ws_auth_timeout_ms) = ms;
            break;
        case 4:
            if (strcmp(optarg, "0") == 0) {
                so.ws_ping_off = 1;
            } else {
                if (!parse_duration("--ws-ping-interval", optarg, 3600 * 1000ull, &ms))
                    return CLI_USAGE;
                so.ws_ping_ms = ms;
            }
            break;
        case 7:
            if (strcmp(optarg, "0") == 0)
                po.idle_close_ms = ULLONG_MAX;
            else if (!parse_duration("--idle-close", optarg, 7 * 86400 * 1000ull,
                                     &po.idle_close_ms))
                return CLI_USAGE;
            break;
        case 11:
            if (!parse_duration("--viz-idle", optarg, 86400 * 1000ull, &po.viz_idle_ms))
                return CLI_USAGE;
            if (po.viz_idle_ms == 0)
                return cli_usage_error("serve", "--viz-idle must be more than 0");
            break;
        case 12:
            if (!cli_parse_int("serve", "--viz-max-blocks", optarg, 1, 100000000, &n))
                return CLI_USAGE;
            po.viz_max_blocks = (unsigned long long)n;
            break;
        case 8:
            if (acp_registry_add_arg(&agents, optarg, why, sizeof(why)) != 0) {
                acp_registry_clear(&agents);
                return cli_usage_error("serve", "%s", why);
            }
            break;
        case 9:
            if (serve_read_agents(optarg, &agents, why, sizeof(why)) != 0) {
                acp_registry_clear(&agents);
                return cli_usage_error("serve", "--agents %s: %s", optarg, why);
            }
            break;
        case 10:
            default_agent = optarg;
            break;
        case 13:
            if (strncmp(optarg, "nats://", 7) != 0 || optarg[7] == '\0') {
                acp_registry_clear(&agents);
                return cli_usage_error(
                    "serve", "--store wants nats://HOST:PORT[,HOST:PORT...], not '%s'", optarg);
            }
            po.store = optarg;
            break;
        case 14:
            po.node_id = optarg;
            break;
        case 15:
            po.nats_creds = optarg;
            break;
        case 16:
            po.nats_tls_ca = optarg;
            break;
        case 17:
            po.nats_tls_cert = optarg;
            break;
        case 18:
            po.nats_tls_key = optarg;
            break;
        case 19:
            if (!cli_parse_int("serve", "--nats-shards", optarg, 1, 1024, &n)) {
                acp_registry_clear(&agents);
                return CLI_USAGE;
            }
            po.nats_shards = (unsigned)n;
            break;
        case 'h':
            acp_registry_clear(&agents);
            fputs(serve_usage, stdout);
            return CLI_OK;
        default:
            acp_registry_clear(&agents);
            return cli_usage_error("serve", "bad option");
        }
    }
    if (optind < argc)
        return cli_usage_error("serve", "unexpected argument '%s'", argv[optind]);
    if ((so.tls_cert == NULL) != (so.tls_key == NULL))
        return cli_usage_error("serve", "HTTPS needs both --tls-cert and --tls-key");
    if (po.store == NULL &&
        (po.node_id != NULL || po.nats_creds != NULL || po.nats_tls_ca != NULL ||
         po.nats_tls_cert != NULL || po.nats_tls_key != NULL || po.nats_shards != 0))
        return cli_usage_error("serve", "--node-id and --nats-* options need --store nats://...");
    if ((po.nats_tls_cert == NULL) != (po.nats_tls_key == NULL))
        return cli_usage_error("serve", "NATS mutual TLS needs both --nats-tls-cert and "
                                        "--nats-tls-key");
    if (po.store != NULL && data != NULL &&
        (strncmp(data, "pool:", 5) == 0 || strncmp(data, "local:", 6) == 0))
        return cli_usage_error("serve",
                               "with --store, --data is a plain directory (this "
                               "machine's workspaces of hosted agents), not '%s'",
                               data);

    if (po.store != NULL)
        pool_for_forwards();

    pl_instance *p;
    char err[512];
    po.workers = workers;
    po.data_dir = data;
    po.durability = durability;
    pl_agent *pa = calloc(agents.n + 1, sizeof(*pa));
    for (size_t i = 0; pa != NULL && i < agents.n; i++)
        pa[i] = (pl_agent){.name = agents.agents[i].name,
                           .argv = (const char *const *)agents.agents[i].argv,
                           .env = (const char *const *)agents.agents[i].env,
                           .cwd = agents.agents[i].cwd};
    po.agents = pa;
    po.nagents = pa != NULL ? agents.n : 0;
    po.default_agent = default_agent;
    int r = pl_open(&po, &p, err, sizeof(err));
    free(pa);
    acp_registry_clear(&agents); /* pl_open copied them */
    if (r == PL_EINVAL)
        return cli_usage_error("serve", "%s", err);
    if (r < 0) {
        fprintf(stderr, "parley serve: %s\n", err[0] ? err : pl_strerror(r));
        return CLI_FAIL;
    }
    so.host = host;
    if (nkeys == 0) /* the keys given, or else the environment's */
        so.api_key = getenv("SESSION_API_KEY");
    so.api_keys = keys;
    so.napi_keys = nkeys;
    pl_http *srv;
    r = pl_http_start(p, &so, &srv, err, sizeof(err));
    if (r < 0) {
        fprintf(stderr, "parley serve: %s\n", err);
        pl_close(p);
        return r == PL_EINVAL ? CLI_USAGE : CLI_FAIL;
    }
    uv_loop_t main_loop;
    uv_signal_t sigint, sigterm;
    uv_loop_init(&main_loop);
    uv_signal_init(&main_loop, &sigint);
    uv_signal_init(&main_loop, &sigterm);
    uv_signal_start(&sigint, on_signal, SIGINT);
    uv_signal_start(&sigterm, on_signal, SIGTERM);
    /* announced only once the signals are ours: a script that waits for this
     * line and then sends SIGTERM must get a clean stop */
    printf("listening on %s\n", pl_http_url(srv));
    fflush(stdout);
    struct rlimit rl = {0};
    getrlimit(RLIMIT_NOFILE, &rl);
    long files = rl.rlim_cur == RLIM_INFINITY ? -1 : (long)rl.rlim_cur;
    rt_log(RT_LOG_INFO, "serve",
           "version=%s url=%s workers=%d data=%s store=%s conversations=%zu durability=%s "
           "auth=%s open_files=%ld",
           pl_version(), pl_http_url(srv), pl_workers(p), data,
           po.store != NULL ? po.store : pl_store_kind(p), pl_conversations(p),
           po.store != NULL ? "replicated" : durability,
           nkeys > 0 || (so.api_key != NULL && so.api_key[0] != '\0') ? "api-key" : "none", files);
    /* each connection is a file, and each conversation in use two more */
    unsigned conns = so.max_connections != 0 ? so.max_connections : 10000;
    if (files >= 0 && files < (long)conns + 64)
        rt_log(RT_LOG_WARN, "serve",
               "the open-files limit (%ld) is below --max-connections (%u): raise it (ulimit -Hn) "
               "or lower --max-connections",
               files, conns);
    uv_run(&main_loop, UV_RUN_DEFAULT);

    pl_http_stop(srv, 10000);
    pl_close(p);
    uv_close((uv_handle_t *)&sigint, NULL);
    uv_close((uv_handle_t *)&sigterm, NULL);
    uv_run(&main_loop, UV_RUN_DEFAULT);
    uv_loop_close(&main_loop);
    rt_log(RT_LOG_INFO, "serve", "stopped cleanly");
    return CLI_OK;
}
