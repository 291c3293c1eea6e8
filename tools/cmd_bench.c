/*
 * cmd_bench.c - `parley bench <name>`: the benchmarks users quote. Each
 * prints medians over several runs, or one JSON object with --json.
 */
#include "cli.h"

#include <errno.h>
#include <ftw.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const cli_cmd benches[] = {
    {"runtime", "message hops on one loop, hand-offs across loops, bytes per idle actor",
     bench_runtime},
    {"store", "durable appends, page reads anywhere in a 1M-event log, opening it", bench_store},
    {"open", "opening an existing store: its time and the memory the catalog holds", bench_open},
    {"conversation", "the full path of an event through the actors; opening a big conversation",
     bench_conversation},
    {"conversations", "100,000 conversations in one process: creation rate, memory and fds each",
     bench_convs},
    {"view", "the visualizer's fold of a long conversation into blocks, its memory, /state's cost",
     bench_view},
    {"ws", "WebSocket fan-out and idle connections against a running `parley serve`", bench_ws},
    {"nats", "the JetStream store's log on a running cluster: appends, pages, take-overs",
     bench_nats},
};
#define NBENCHES (sizeof(benches) / sizeof(benches[0]))

int cli_bench_args(const char *cmd, const char *usage, int argc, char **argv, int *runs, bool *json,
                   const char **dir, const cli_int_opt *ints, size_t nints)
{
    enum { RUNS = 256, JSON, DIR, INTS, MAX_INTS = 8 };
    struct option opts[MAX_INTS + 5] = {{"runs", required_argument, NULL, RUNS},
                                        {"json", no_argument, NULL, JSON},
                                        {"help", no_argument, NULL, 'h'}};
    size_t n = 3;
    if (dir != NULL)
        opts[n++] = (struct option){"dir", required_argument, NULL, DIR};
    for (size_t i = 0; i < nints && i < MAX_INTS; i++)
        opts[n++] = (struct option){ints[i].name + 2, required_argument, NULL, INTS + (int)i};
    opts[n] = (struct option){NULL, 0, NULL, 0};
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        if (c == RUNS && !cli_parse_int(cmd, "--runs", optarg, 1, 101, runs))
            return CLI_USAGE;
        if (c == JSON)
            *json = true;
        if (c == DIR)
            *dir = optarg;
        if (c >= INTS && c < INTS + MAX_INTS) {
            const cli_int_opt *o = &ints[c - INTS];
            if (!cli_parse_int(cmd, o->name, optarg, o->min, o->max, o->val))
                return CLI_USAGE;
        }
        if (c == 'h') {
            fputs(usage, stdout);
            return CLI_OK;
        }
        if (c == '?')
            return cli_usage_error(cmd, "bad option");
    }
    if (optind < argc)
        return cli_usage_error(cmd, "unexpected argument '%s'", argv[optind]);
    return -1;
}

const char *cli_backend_prefix(const char **base)
{
    static const char *const kinds[] = {"pool:", "local:"};
    for (size_t i = 0; *base != NULL && i < sizeof(kinds) / sizeof(kinds[0]); i++)
        if (strncmp(*base, kinds[i], strlen(kinds[i])) == 0) {
            *base += strlen(kinds[i]);
            return kinds[i];
        }
    return "";
}

int cli_scratch_dir(const char *cmd, const char *base, char *out, size_t cap)
{
    if (base != NULL) {
        snprintf(out, cap, "%s", base);
        if (mkdir(out, 0755) != 0 && errno != EEXIST) {
            fprintf(stderr, "parley %s: cannot create %s: %s\n", cmd, out, strerror(errno));
            return -1;
        }
        return 0;
    }
    const char *tmp = getenv("TMPDIR");
    snprintf(out, cap, "%s/parley-bench-XXXXXX", tmp != NULL && tmp[0] ? tmp : "/tmp");
    if (mkdtemp(out) == NULL) {
        fprintf(stderr, "parley %s: cannot create a scratch directory in %s: %s\n", cmd,
                tmp != NULL && tmp[0] ? tmp : "/tmp", strerror(errno));
        return -1;
    }
    return 0;
}

static int rm_entry(const char *p, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    remove(p);
    return 0;
}

void cli_rm_tree(const char *dir)
{
    nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static void usage(FILE *f)
{
    fprintf(f, "usage: parley bench <name> [options]   (parley bench <name> --help)\n\n"
               "benchmarks:\n");
    for (size_t i = 0; i < NBENCHES; i++)
        fprintf(f, "  %-13s %s\n", benches[i].name, benches[i].summary);
}

int cmd_bench(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return CLI_USAGE;
    }
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        usage(stdout);
        return CLI_OK;
    }
    for (size_t i = 0; i < NBENCHES; i++)
        if (strcmp(argv[1], benches[i].name) == 0)
            return benches[i].run(argc - 1, argv + 1);
    return cli_usage_error("bench", "unknown benchmark '%s'", argv[1]);
}
