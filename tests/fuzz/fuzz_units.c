/*
 * fuzz_units.c - libFuzzer target for the duration and size parsers that
 * read user flags (--defer-timeout 10m, --max-body 16MiB): they must never
 * crash, and what they accept must be a number followed by a known suffix
 * whose value does not overflow.
 */
#include "runtime/units.h"
#include "runtime/err.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char s[64];
    if (size >= sizeof(s))
        return 0;
    memcpy(s, data, size);
    s[size] = '\0';
    uint64_t v;
    for (int kind = 0; kind < 2; kind++) {
        int r = kind == 0 ? rt_parse_duration_ms(s, 1000, &v) : rt_parse_bytes(s, &v);
        if (r == 0) {
            /* accepted: digits first, then letters only */
            size_t i = 0;
            while (isdigit((unsigned char)s[i]))
                i++;
            if (i == 0)
                abort();
            for (; s[i] != '\0'; i++)
                if (!isalpha((unsigned char)s[i]))
                    abort();
        } else if (r != RT_EINVAL) {
            abort();
        }
    }
    return 0;
}
