/*
 * fuzz_check.h - what the fuzz targets share: CHECK, an invariant that
 * aborts (libFuzzer then keeps the input), and fuzz_line, the check of an
 * error message: terminated within its buffer, not empty, one line.
 */
#ifndef FUZZ_CHECK_H
#define FUZZ_CHECK_H
#include <stdlib.h>
#include <string.h>

#define CHECK(c)                                                                                   \
    do {                                                                                           \
        if (!(c))                                                                                  \
            abort();                                                                               \
    } while (0)

static inline void fuzz_line(const char *s, size_t cap)
{
    size_t n = strnlen(s, cap);
    CHECK(n < cap && n > 0);
    CHECK(memchr(s, '\n', n) == NULL && memchr(s, '\r', n) == NULL);
}
#endif
