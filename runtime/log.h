/*
 * log.h - one-line structured logs on stderr.
 *
 *   2026-11-22T10:00:00.123Z warn runtime actor failed name=conv id=42 reason="..."
 *
 * Each record is written with one write(2), so lines from different threads
 * never interleave. The level is set once at start (PARLEY_LOG env or flags).
 */
#ifndef RT_LOG_H
#define RT_LOG_H

typedef enum { RT_LOG_DEBUG = 0, RT_LOG_INFO, RT_LOG_WARN, RT_LOG_ERROR, RT_LOG_OFF } rt_log_level;

void rt_log_set_level(rt_log_level l);
rt_log_level rt_log_get_level(void);
/* Parse "debug|info|warn|error|off"; -1 if none of those. */
int rt_log_parse_level(const char *s);

#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
void rt_log(rt_log_level l, const char *component, const char *fmt, ...);

#endif
