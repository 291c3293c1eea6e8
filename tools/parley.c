/*
 * parley.c - `parley`, the one program: a table of subcommands.
 */
#include "cli.h"

#include "runtime/rt.h"

#include <getopt.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

static const cli_cmd commands[] = {
    {"serve", "run the server on a local data directory", cmd_serve},
    {"bench", "run a benchmark: parley bench <name> (runtime, store, conversation)", cmd_bench},
    {"lint", "check a recorded conversation offline: gate verdicts, stuck findings", cmd_lint},
    {"import", "make a recorded conversation or agent transcript a new conversation", cmd_import},
    {"blocks", "print a conversation's view state (blocks, subagents) as one JSON object",
     cmd_blocks},
    {"load", "load a running server: producers, subscribers, readers, a verdict", cmd_load},
    {"tail", "print a conversation's events from a server, and follow them", cmd_tail},
    {"send", "post a user message to a conversation on a server", cmd_send},
    {"append", "post events (NDJSON) through the producer route, a verdict each", cmd_append},
    {"conversations", "list the conversations on a server", cmd_conversations},
    {"acp", "an Agent Client Protocol agent on stdio for editors: sessions are conversations",
     cmd_acp},
    {"demo-agent", "a scripted ACP agent on stdio, for demos and benchmarks", cmd_demo_agent},
};
#define NCOMMANDS (sizeof(commands) / sizeof(commands[0]))

static void usage(FILE *f)
{
    fprintf(f, "usage: parley <command> [options]\n"
               "       parley <command> --help\n"
               "       parley --version\n\n"
               "parley hosts many AI-agent conversations in one process: it checks each\n"
               "event against the tool-call rules of LLM APIs, makes it durable in an\n"
               "append-only log, and streams it to whoever is watching.\n\n"
               "commands:\n");
    for (size_t i = 0; i < NCOMMANDS; i++)
        fprintf(f, "  %-13s %s\n", commands[i].name, commands[i].summary);
    fprintf(f, "\nenvironment: PARLEY_LOG=debug|info|warn|error|off sets the log level.\n");
}

int cli_usage_error(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "parley %s: ", cmd);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, " (see: parley %s --help)\n", cmd);
    return CLI_USAGE;
}

bool cli_parse_int(const char *cmd, const char *opt, const char *val, int min, int max, int *out)
{
    char *end;
    long v = strtol(val, &end, 10);
    if (*val == '\0' || *end != '\0' || v < min || v > max) {
        cli_usage_error(cmd, "%s wants a whole number from %d to %d, not '%s'", opt, min, max, val);
        return false;
    }
    *out = (int)v;
    return true;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double cli_median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(double), cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

double cli_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

long cli_rss_bytes(void)
{
    long pages = 0, resident = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f != NULL) {
        if (fscanf(f, "%ld %ld", &pages, &resident) != 2)
            resident = 0;
        fclose(f);
    }
    return resident * sysconf(_SC_PAGESIZE);
}

int main(int argc, char **argv)
{
    cli_alloc_init();
    cli_crash_report_init();
    /* A peer that closes while we write must cost an EPIPE on that
     * connection, not the process: every command talks to sockets. */
    signal(SIGPIPE, SIG_IGN);
    /* serve holds a socket per connection and files per open log, load a
     * socket per simulated client: the soft open-files limit (often 1,024)
     * is raised to the hard one */
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    if (argc < 2) {
        usage(stderr);
        return CLI_USAGE;
    }
    const char *name = argv[1];
    if (strcmp(name, "--help") == 0 || strcmp(name, "-h") == 0 || strcmp(name, "help") == 0) {
        usage(stdout);
        return CLI_OK;
    }
    if (strcmp(name, "--version") == 0) {
        printf("parley %s (%s)\n", PARLEY_VERSION, cli_alloc_name());
        return CLI_OK;
    }
    for (size_t i = 0; i < NCOMMANDS; i++)
        if (strcmp(name, commands[i].name) == 0)
            return commands[i].run(argc - 1, argv + 1);
    fprintf(stderr, "parley: unknown command '%s' (see: parley --help)\n", name);
    return CLI_USAGE;
}
