/*
 * support_json.h - test JSON written inline: parsed, or the test fails
 * saying what was wrong with it.
 */
#ifndef SUPPORT_JSON_H
#define SUPPORT_JSON_H

#include <jansson.h>

/* text parsed (a new reference): any JSON value. */
json_t *tj_json(const char *text);
/* The same with ' for " (for texts without apostrophes). */
json_t *tj_jsonq(const char *text);
/* got equals want (taken), or the test fails showing both. */
void tj_equal(const json_t *got, json_t *want);

#endif
