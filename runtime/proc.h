/*
 * proc.h - a child process owned by an actor, spoken to in lines.
 *
 * The owner spawns it from one of its handlers; the process runs in its
 * own process group (its children too), with pipes for stdin, stdout and
 * stderr on the owner's loop. Each line the process writes on stdout comes
 * to the owner as a message (the line without its newline); its stderr is
 * logged, a bounded number of lines a minute. When it has exited and its
 * stdout is drained, the owner gets one exit message, after every line.
 *
 * Nothing the process does can make parley block or grow without bound:
 * a line longer than max_line is dropped as it streams (the owner gets an
 * empty notice in its place), and once max_pending lines are delivered and
 * not yet acknowledged (rt_proc_ack), reading stops, so a process writing
 * faster than its owner handles blocks on its own pipe.
 *
 * rt_proc_close ends the owner's part: nothing more is delivered. The
 * process's stdin is closed (a well-behaved one exits on EOF), then it gets
 * SIGTERM after stop_grace_ms and SIGKILL after as long again; the handle
 * frees itself once the process is gone. The loop, and so the runtime's
 * shutdown, waits for that.
 *
 * Every call is made on the owner's loop, from its handlers (or init/stop).
 */
#ifndef RT_PROC_H
#define RT_PROC_H

#include "actor.h"
#include "buf.h"

#include <stddef.h>
#include <stdint.h>

typedef struct rt_proc rt_proc;

typedef struct rt_proc_opts {
    const char *const *argv; /* argv[0] is looked up in PATH */
    const char *const *env;  /* NULL-terminated "K=V"; NULL: parley's own */
    const char *cwd;         /* NULL: parley's */
    /* The owner's message kinds. line_kind: arg = the process's id, buf =
     * the line, or NULL for a line over max_line (dropped). exit_kind: arg =
     * the id, buf = an rt_proc_exit. */
    uint32_t line_kind, exit_kind;
    size_t max_line;        /* 0: 16 MiB */
    uint32_t max_pending;   /* 0: 64 */
    uint64_t stop_grace_ms; /* 0: 1000 */
    const char *log_name;   /* how its stderr lines are prefixed in the log */
} rt_proc_opts;

typedef struct rt_proc_exit {
    int64_t status; /* exit status, or -1 if killed by a signal */
    int signal;     /* the signal, or 0 */
} rt_proc_exit;

/* Start argv; *out is the handle, its id in messages is rt_proc_id. A
 * negative error (RT_ENOENT-like libuv codes: the command is not there)
 * when it could not start; then nothing is delivered. */
int rt_proc_spawn(rt_actor *owner, const rt_proc_opts *o, rt_proc **out);
uint64_t rt_proc_id(const rt_proc *p); /* unique for the process' life */
int rt_proc_pid(const rt_proc *p);
/* Queue bytes for its stdin (the buf reference is taken, also on error).
 * RT_ECLOSED once its stdin is gone. */
int rt_proc_write(rt_proc *p, rt_buf *data);
/* Bytes queued for its stdin and not written yet. */
size_t rt_proc_write_queued(const rt_proc *p);
/* The owner has handled n more of its lines. */
void rt_proc_ack(rt_proc *p, uint32_t n);
/* Send a signal to its process group now (the stop sequence still runs). */
void rt_proc_signal(rt_proc *p, int sig);
/* Let it go: see above. NULL is ignored. */
void rt_proc_close(rt_proc *p);

#endif
