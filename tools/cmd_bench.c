/*
 * cmd_bench.c - `parley bench <name>`: the benchmarks users quote. Each
 * prints medians over several runs, or one JSON object with --json.
 */
#include "cli.h"

#include <string.h>

static const cli_cmd benches[] = {
    {"runtime", "message hops on one loop, hand-offs across loops, bytes per idle actor",
     bench_runtime},
    {"store", "durable appends, page reads anywhere in a 1M-event log, opening it", bench_store},
};
#define NBENCHES (sizeof(benches) / sizeof(benches[0]))

static void usage(FILE *f)
{
    fprintf(f, "usage: parley bench <name> [options]   (parley bench <name> --help)\n\n"
               "benchmarks:\n");
    for (size_t i = 0; i < NBENCHES; i++)
        fprintf(f, "  %-8s %s\n", benches[i].name, benches[i].summary);
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
