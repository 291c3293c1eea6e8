/*
 * json.h - reading JSON text into jansson values, and writing them, fast.
 *
 * rt_json_read accepts exactly what jansson's json_loadb accepts with the
 * same flags and builds the same values (tests/fuzz/fuzz_json.c checks it
 * against json_loadb). It exists because json_loadb costs about 130
 * instructions per byte of string text, more than half of all the CPU an
 * append takes; this reader scans strings a byte class at a time and makes
 * each value once.
 *
 * Flags, as jansson's: JSON_REJECT_DUPLICATES, JSON_DECODE_ANY (a scalar
 * at the top; otherwise an object or an array is required) and
 * JSON_ALLOW_NUL (\u0000 in strings; never in keys). Numbers are read in
 * the C locale, which parley never changes. On failure, NULL and *err (if
 * given) says what and where, as jansson would (its wording differs).
 * One deliberate difference: a raw NUL byte is refused wherever it is
 * (no JSON text holds one); jansson reads past it in places.
 */
#ifndef RT_JSON_H
#define RT_JSON_H

#include "buf.h"

#include <jansson.h>
#include <stddef.h>

json_t *rt_json_read(const char *text, size_t len, size_t flags, json_error_t *err);

/* v as text: what json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY) returns,
 * byte for byte (keys in their order, \u escapes upper case; tests and
 * tests/fuzz/fuzz_json.c check it against jansson), malloc'd and
 * NUL-terminated; *len (may be NULL) its length. NULL if v is NULL or out
 * of memory. It exists because json_dumps costs thousands of
 * instructions for a small object (for each object or array, a table of
 * the containers it is in, keyed by their address printed with snprintf:
 * 15k for a state checkpoint of 150 bytes), which made a conversation's
 * state and meta files a sixth of what creating one costs. */
char *rt_json_dumps(const json_t *v, size_t *len);

/* The same text in a buffer, and v's reference dropped: NULL if v is NULL
 * or out of memory. */
rt_buf *rt_json_buf(json_t *v);

#endif
