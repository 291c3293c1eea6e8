/*
 * err.h - the runtime's error codes. Functions return 0 or one of these
 * (negative, in their own range so that they never collide with -errno);
 * handlers may also fail with any other negative value, e.g. -ENOSPC, which
 * is passed through as the exit reason and described by rt_strerror.
 *
 * Each module with codes of its own has a range of a thousand, so that no
 * two collide:
 *   -1 .. -999        -errno
 *   -1000 .. -1999    the runtime's, below
 *   -2000 .. -2999    net/tls.h (NET_TLS_*)
 *   -3000 .. -3999    net/ws.h (NET_WS_*)
 * A new module takes the next free thousand and adds it here. It describes
 * its codes itself, registering a describer for its range at start-up
 * (rt_err_register; net/ws.c does it in a constructor, so every program
 * that links it has it), so that rt_strerror describes every code (in an
 * actor's exit reason, say) without the runtime naming the modules above it.
 */
#ifndef RT_ERR_H
#define RT_ERR_H

#include <stddef.h>

enum {
    RT_OK = 0,
    RT_EINVAL = -1001,  /* a bad argument, e.g. a NULL behaviour */
    RT_ENOMEM = -1002,  /* allocation failed */
    RT_ECLOSED = -1003, /* the actor has stopped, or the runtime is shutting down */
    RT_EFULL = -1004,   /* the bounded mailbox is full: retry later or push back on the producer */
    RT_ETIMEDOUT = -1005, /* a call's deadline passed before its reply */
    RT_ENOREPLY = -1006,  /* the receiver finished with a request without replying */
    RT_EFAIL = -1007,     /* a handler failed without saying why */
    RT_EASSERT = -1008,   /* an RT_ASSERT failed inside a handler */
    RT_ETHREAD = -1009,   /* called from a thread that may not make this call */
};

/* A static one-line description of an error code (any negative value):
 * "unknown error" for a code in no range, or one its describer does not know. */
const char *rt_strerror(int err);

/* Describes a module's code: a static one-line string, or NULL if unknown. */
typedef const char *rt_err_describer(int err);

#define RT_ERR_MODULE_FIRST (-2000) /* a module's codes are this one and below */
#define RT_ERR_RANGES_MAX   16      /* a range per module, with room to spare */

/* Let rt_strerror describe the codes lo..hi (lo <= hi <= RT_ERR_MODULE_FIRST)
 * with fn from now on, on any thread. RT_EINVAL for a bad range or one that
 * overlaps another's (registering the same range and fn again is 0),
 * RT_EFULL once RT_ERR_RANGES_MAX ranges are taken. Meant for start-up: a
 * range is never given back. */
int rt_err_register(int lo, int hi, rt_err_describer *fn);

/* printf one line into a caller's error buffer; nothing when err is NULL
 * or errlen 0. */
void rt_say(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif
