/*
 * fuzz_json.c - libFuzzer target: rt_json_read against jansson's own
 * json_loadb. For every input and each flag set the two must agree: both
 * refuse, or both accept and build the same value (same members in the
 * same order, the same numbers, the same strings). The one exception is
 * a raw NUL byte, which no JSON text holds: we refuse it wherever it is,
 * while jansson reads past it in places ("3\0" is 3 to jansson). What is
 * read is then written by rt_json_dumps and by json_dumps: the same text.
 *
 * And documents (rt_jdoc_read) against rt_json_read with duplicates
 * refused, on everything, NUL bytes included: both refuse with the same
 * words at the same place, or both read the same value.
 */
#include "runtime/jdoc.h"
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

static void same_values(json_t *ours, json_t *theirs, size_t flags, const uint8_t *data,
                        size_t size)
{
    char *a = json_dumps(ours, JSON_COMPACT | JSON_ENCODE_ANY);
    char *b = json_dumps(theirs, JSON_COMPACT | JSON_ENCODE_ANY);
    if (a == NULL || b == NULL || strcmp(a, b) != 0 || !json_equal(ours, theirs))
        differ("different values", flags, data, size);
    free(a);
    free(b);
}

static void jdoc_agrees(const uint8_t *data, size_t size, size_t flags)
{
    json_error_t je, de;
    json_t *tree = rt_json_read((const char *)data, size, flags | JSON_REJECT_DUPLICATES, &je);
    rt_jdoc *d = rt_jdoc_read((const char *)data, size, flags, &de);
    if ((d == NULL) != (tree == NULL))
        differ(d == NULL ? "the document refuses what rt_json_read reads"
                         : "the document reads what rt_json_read refuses",
               flags, data, size);
    if (d == NULL && (strcmp(je.text, de.text) != 0 || je.position != de.position ||
                      je.line != de.line || je.column != de.column))
        differ("the document refuses another way", flags, data, size);
    if (d != NULL) {
        json_t *ours = rt_jdoc_tree(d, 0);
        same_values(ours, tree, flags, data, size);
        json_decref(ours);
    }
    rt_jdoc_unref(d);
    json_decref(tree);
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
        jdoc_agrees(data, size, f);
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
            same_values(ours, theirs, f, data, size);
            char *a = rt_json_dumps(theirs, NULL);
            char *b = json_dumps(theirs, JSON_COMPACT | JSON_ENCODE_ANY);
            if (a == NULL || b == NULL || strcmp(a, b) != 0)
                differ("rt_json_dumps writes other text than json_dumps", f, data, size);
            free(a);
            free(b);
        }
        json_decref(ours);
        json_decref(theirs);
    }
    return 0;
}
