/*
 * support_json.h - test JSON written inline: parsed, or the test fails
 * saying what was wrong with it.
 */
#ifndef SUPPORT_JSON_H
#define SUPPORT_JSON_H

#include "runtime/jdoc.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

/* text parsed (a new reference): any JSON value. */
json_t *tj_json(const char *text);
/* The same with ' for " (for texts without apostrophes). */
json_t *tj_jsonq(const char *text);
/* got equals want (taken), or the test fails showing both. */
void tj_equal(const json_t *got, json_t *want);

/* d's nodes hang together: every value ends after itself and within its
 * container, a container has as many members as it says, keys are strings,
 * every string ends in a NUL inside the text (text_len bytes), and a
 * container spans its brackets. */
void tj_jdoc_nodes(const rt_jdoc *d, size_t text_len);
/* rt_jdoc_read and rt_json_read (duplicates refused) agree on text: both
 * refuse it with the same words at the same place, or both read the same
 * value, members in the same order; the test fails otherwise. True if
 * they read it. */
bool tj_jdoc_agrees(const char *text, size_t len, size_t flags);

#endif
