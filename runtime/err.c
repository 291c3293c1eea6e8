/* err.c - descriptions of the runtime's error codes. */
#include "err.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

const char *rt_strerror(int err)
{
    switch (err) {
    case RT_OK:
        return "ok";
    case RT_EINVAL:
        return "invalid argument";
    case RT_ENOMEM:
        return "out of memory";
    case RT_ECLOSED:
        return "actor or runtime is stopped";
    case RT_EFULL:
        return "mailbox is full";
    case RT_ETIMEDOUT:
        return "timed out waiting for a reply";
    case RT_ENOREPLY:
        return "request was handled without a reply";
    case RT_EFAIL:
        return "handler failed";
    case RT_EASSERT:
        return "assertion failed in handler";
    case RT_ETHREAD:
        return "not allowed from this thread";
    default:
        return err < 0 && err > -1000 ? strerror(-err) : "unknown error";
    }
}

void rt_say(char *err, size_t errlen, const char *fmt, ...)
{
    if (err == NULL || errlen == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}
