/*
 * log.c - one-line logs on stderr, one write(2) per record so that
 * concurrent threads never interleave within a line.
 */
#include "log.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

static const char *const level_names[] = {"debug", "info", "warn", "error", "off"};
static _Atomic int level = -1; /* -1: not set yet, read PARLEY_LOG */

int rt_log_parse_level(const char *s)
{
    for (int i = 0; s != NULL && i <= RT_LOG_OFF; i++)
        if (strcasecmp(s, level_names[i]) == 0)
            return i;
    return -1;
}

void rt_log_set_level(rt_log_level l)
{
    atomic_store(&level, (int)l);
}

rt_log_level rt_log_get_level(void)
{
    int l = atomic_load(&level);
    if (l < 0) {
        l = rt_log_parse_level(getenv("PARLEY_LOG"));
        if (l < 0)
            l = RT_LOG_INFO;
        atomic_store(&level, l);
    }
    return (rt_log_level)l;
}

void rt_log(rt_log_level l, const char *component, const char *fmt, ...)
{
    if (l < rt_log_get_level() || l >= RT_LOG_OFF)
        return;
    char line[1024];
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    int n = snprintf(line, sizeof(line), "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ %s %s ",
                     tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                     ts.tv_nsec / 1000000, level_names[l], component);
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
    va_end(ap);
    size_t len = (size_t)n + (m < 0 ? 0 : (size_t)m);
    if (len > sizeof(line) - 2)
        len = sizeof(line) - 2; /* truncated: still one line */
    line[len++] = '\n';
    ssize_t w = write(STDERR_FILENO, line, len);
    (void)w;
}
