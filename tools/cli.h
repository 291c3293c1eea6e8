/*
 * cli.h - the `parley` command: subcommands and what they share.
 *
 * Exit status, for scripts: 0 success, 1 the command ran and found or hit a
 * failure, 2 bad usage or unreadable input.
 */
#ifndef PARLEY_CLI_H
#define PARLEY_CLI_H

#include "parley.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

enum { CLI_OK = 0, CLI_FAIL = 1, CLI_USAGE = 2 };

typedef struct cli_cmd {
    const char *name;
    const char *summary;
    int (*run)(int argc, char **argv); /* argv[0] is the command's name */
} cli_cmd;

/* Print a one-line error prefixed by the command, plus a hint to --help;
 * returns CLI_USAGE. */
int cli_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Parse a positive int option value; false (and a message) if invalid. */
bool cli_parse_int(const char *cmd, const char *opt, const char *val, int min, int max, int *out);

int cmd_serve(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_lint(int argc, char **argv);
int cmd_import(int argc, char **argv);
int cmd_blocks(int argc, char **argv);
int cmd_load(int argc, char **argv);
int cmd_tail(int argc, char **argv);
int cmd_send(int argc, char **argv);
int cmd_append(int argc, char **argv);
int cmd_conversations(int argc, char **argv);
int cmd_demo_agent(int argc, char **argv);
int cmd_acp(int argc, char **argv);

/* serve's --agents FILE: its agents into r; 0, or -1 with why. */
struct acp_registry;
int serve_read_agents(const char *path, struct acp_registry *r, char *why, size_t cap);
int bench_runtime(int argc, char **argv);
int bench_store(int argc, char **argv);
int bench_open(int argc, char **argv);
int bench_conversation(int argc, char **argv);
int bench_ws(int argc, char **argv);
int bench_view(int argc, char **argv);
int bench_convs(int argc, char **argv);
int bench_nats(int argc, char **argv);

/* Benchmarks' command lines: --runs N (1..101), --json, --dir DIR (only
 * when `dir` is not NULL), -h/--help, and the whole-number options of
 * `ints` (each within its range), nothing else. Returns -1 when the
 * benchmark is to run, else the exit status (help printed, or a usage
 * error said). runs, json and *dir keep their defaults unless given. */
typedef struct cli_int_opt {
    const char *name; /* "--events" */
    int *val;
    int min, max;
} cli_int_opt;
int cli_bench_args(const char *cmd, const char *usage, int argc, char **argv, int *runs, bool *json,
                   const char **dir, const cli_int_opt *ints, size_t nints);

/* pl_append(json, len) or, json NULL, pl_control(op), waited for on the
 * calling thread (one of the command's own, never a runtime loop): the
 * verdict's outcome (pl_outcome), or -1 when it could not be asked; why
 * says what it was ("outcome: detail", a rejection's rule first). */
int cli_pl_wait(pl_conv *c, const char *json, size_t len, pl_control_op op, char *why, size_t n);
/* pl_reject(reason), waited for as cli_pl_wait waits. */
int cli_pl_reject(pl_conv *c, const char *reason, char *why, size_t n);

/* Benchmarks: event `seq` of conversation n, the 4-event cycle of an
 * agent turn (a user message 0.4-1 KiB, an action with its thought, its
 * observation 0.9-3.9 KiB, an agent message), as JSON bytes. */
struct rt_buf *bench_cycle_event(int n, uint64_t seq);

/* Benchmarks: the median of n samples (sorts them in place). */
double cli_median(double *v, int n);
double cli_now_s(void);
/* The process's resident set (/proc/self/statm), in bytes. */
long cli_rss_bytes(void);
/* The allocator behind malloc ("mimalloc 2.0.9" or "glibc malloc"), as
 * found at run time (alloc.c). */
const char *cli_alloc_name(void);
/* Before anything else in main: the allocator's options (alloc.c). */
void cli_alloc_init(void);
/* A fatal signal's report on stderr before the process dies of it
 * (crash.c). */
void cli_crash_report_init(void);
/* Benchmarks: give freed memory back to the kernel; and the heap in use,
 * in bytes (glibc: malloc's count of bytes in use; mimalloc: the process's
 * resident set once trimmed, for mimalloc counts none). */
void cli_heap_trim(void);
size_t cli_heap_bytes(void);
/* Benchmarks: the scratch directory `base` (created if missing), or a new
 * one under $TMPDIR; 0, or -1 with the reason printed for `cmd`. */
int cli_scratch_dir(const char *cmd, const char *base, char *out, size_t cap);
/* A --dir given as pool:DIR or local:DIR asks for that store backend:
 * *base loses the prefix, which is returned ("" otherwise: the default
 * for a new directory) to put before the store locations made under it. */
const char *cli_backend_prefix(const char **base);
/* Remove a directory tree (what is left of it: errors are ignored). */
void cli_rm_tree(const char *dir);

#endif
