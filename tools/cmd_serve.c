/*
 * cmd_serve.c - `parley serve`: start the runtime on a local data directory
 * and run until SIGINT or SIGTERM, then stop cleanly and exit 0.
 *
 * The HTTP/WebSocket server lands in a later step; until then serve brings
 * up the worker loops and says so.
 */
#include "cli.h"

#include "runtime/parley.h"
#include "runtime/rt.h"

#include "runtime/units.h"

#include <getopt.h>
#include <uv.h>

static const char serve_usage[] =
    "usage: parley serve [--data DIR] [--durability POLICY] [--workers N] [--log-level LEVEL]\n"
    "                    [--defer-timeout DURATION] [--defer-max N]\n"
    "                    [--hold-timeout DURATION] [--hold-max N]\n\n"
    "Run parley on a local data directory until SIGINT or SIGTERM.\n\n"
    "  --data DIR           data directory, created if missing (default ./parley-data);\n"
    "                       one process at a time\n"
    "  --durability POLICY  full: acknowledge appends once fdatasync'ed (default);\n"
    "                       interval=DURATION: fdatasync every DURATION (e.g. 250ms);\n"
    "                       none: leave flushing to the kernel\n"
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
                                         {"help", no_argument, NULL, 'h'},
                                         {NULL, 0, NULL, 0}};
    const char *data = "parley-data", *durability = "full";
    int workers = 0, c, n;
    pl_options po = {0};
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
        case 'h':
            fputs(serve_usage, stdout);
            return CLI_OK;
        default:
            return cli_usage_error("serve", "bad option");
        }
    }
    if (optind < argc)
        return cli_usage_error("serve", "unexpected argument '%s'", argv[optind]);

    pl_instance *p;
    char err[512];
    po.workers = workers;
    po.data_dir = data;
    po.durability = durability;
    int r = pl_open(&po, &p, err, sizeof(err));
    if (r == RT_EINVAL)
        return cli_usage_error("serve", "%s", err);
    if (r < 0) {
        fprintf(stderr, "parley serve: %s\n", err[0] ? err : pl_strerror(r));
        return CLI_FAIL;
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
    printf("parley %s: runtime up with %d worker loops, data directory %s "
           "(%zu conversations, durability %s)\n"
           "no network server yet: the HTTP API arrives in a later release. "
           "Stop with Ctrl-C.\n",
           pl_version(), pl_workers(p), data, pl_conversations(p), durability);
    fflush(stdout);
    uv_run(&main_loop, UV_RUN_DEFAULT);

    pl_close(p);
    uv_close((uv_handle_t *)&sigint, NULL);
    uv_close((uv_handle_t *)&sigterm, NULL);
    uv_run(&main_loop, UV_RUN_DEFAULT);
    uv_loop_close(&main_loop);
    rt_log(RT_LOG_INFO, "serve", "stopped cleanly");
    return CLI_OK;
}
