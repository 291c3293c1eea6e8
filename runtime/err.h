/*
 * err.h - the runtime's error codes. Functions return 0 or one of these
 * (negative, in their own range so that they never collide with -errno);
 * handlers may also fail with any other negative value, e.g. -ENOSPC, which
 * is passed through as the exit reason and described by rt_strerror.
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

/* A static one-line description of an error code (any negative value). */
const char *rt_strerror(int err);
/* printf one line into a caller's error buffer; nothing when err is NULL
 * or errlen 0. */
void rt_say(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif
