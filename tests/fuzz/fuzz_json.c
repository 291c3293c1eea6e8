/*
 * fuzz_json.c - libFuzzer target: rt_json_read against jansson's own
 * json_loadb. For every input and each flag set the two must agree: both
 * refuse, or both accept and build the same value (same members in the
 * same order, the same numbers, the same strings). The one exception is
 * a raw NUL byte, which no JSON text holds: we refuse it wherever it is,
 * while jansson reads past it in places ("3\0" is 3 to jansson).
 */
#include "runtime/json.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void differ(const char *what, size_t flags, const uint8_t *data, size_t size)
{
    fprintf(stderr, "fuzz_json: %s (flags %#zx) on %zu bytes: %.*s\n", what, flags, size,
            (int)(size > 200 ? 200 : size), (const char *)data);
    abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const size_t flag_sets[] = {
        0,
        JSON_REJECT_DUPLICATES,
        JSON_DECODE_ANY | JSON_ALLOW_NUL,
        JSON_DECODE_ANY | JSON_REJECT_DUPLICATES,
    };
    for (size_t i = 0; i < sizeof(flag_sets) / sizeof(flag_sets[0]); i++) {
        size_t f = flag_sets[i];
        json_error_t e;
        json_t *ours = rt_json_read((const char *)data, size, f, &e);
        if (memchr(data, 0, size) != NULL) {
            if (ours != NULL)
                differ("we read a text with a NUL byte", f, data, size);
            continue;
        }
        json_t *theirs = json_loadb((const char *)data, size, f, NULL);
        if ((ours == NULL) != (theirs == NULL))
            differ(ours == NULL ? "we refuse what jansson reads" : "we read what jansson refuses",
                   f, data, size);
        if (ours == NULL && (e.text[0] == '\0' || e.position < 0 || (size_t)e.position > size))
            differ("a refusal without a reason or a place", f, data, size);
        if (ours != NULL) {
            char *a = json_dumps(ours, JSON_COMPACT | JSON_ENCODE_ANY);
            char *b = json_dumps(theirs, JSON_COMPACT | JSON_ENCODE_ANY);
            if (a == NULL || b == NULL || strcmp(a, b) != 0 || !json_equal(ours, theirs))
                differ("different values", f, data, size);
            free(a);
            free(b);
        }
        json_decref(ours);
        json_decref(theirs);
    }
    return 0;
}
