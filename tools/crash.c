/*
 * crash.c - what a process that dies of a fatal signal says first: the
 * signal, the thread, and a backtrace on stderr, then the same death (the
 * default action, so the exit status and a core dump are as without it).
 * A library's abort() is otherwise silent (libnats and libuv abort when a
 * mutex call fails), and a server that died leaves nothing to go on.
 * Frames of static functions are printed as binary(+offset): `addr2line
 * -f -e build/parley 0xoffset` names them. Not under sanitizers, which
 * report such deaths themselves.
 */
#include "cli.h"

#include <execinfo.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define CRASH_REPORT 0
#else
#define CRASH_REPORT 1
#endif

static void say(const char *s)
{
    ssize_t r = write(STDERR_FILENO, s, strlen(s));
    (void)r; /* nothing to do about a failed write to stderr, and no time */
}

/* Only async-signal-safe calls: write, prctl, backtrace (its first call,
 * which loads libgcc_s, is made by cli_crash_report_init). */
static void on_fatal(int sig)
{
    char name[17] = {0}, num[4] = {0};
    prctl(PR_GET_NAME, name, 0, 0, 0);
    num[0] = (char)('0' + sig / 10 % 10);
    num[1] = (char)('0' + sig % 10);
    say("parley: fatal signal ");
    say(num[0] == '0' ? num + 1 : num);
    say(" (");
    say(sigabbrev_np(sig) != NULL ? sigabbrev_np(sig) : "?");
    say(") in thread ");
    say(name);
    say("; backtrace:\n");
    void *frames[64];
    int n = backtrace(frames, 64);
    backtrace_symbols_fd(frames, n, STDERR_FILENO);
    raise(sig); /* SA_RESETHAND: the default action now */
}

void cli_crash_report_init(void)
{
    if (!CRASH_REPORT)
        return;
    void *warm[1];
    backtrace(warm, 1);
    static const int sigs[] = {SIGABRT, SIGSEGV, SIGBUS, SIGILL, SIGFPE};
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_fatal;
    sa.sa_flags = SA_RESETHAND | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
        sigaction(sigs[i], &sa, NULL);
}
