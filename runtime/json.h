/*
 * json.h - reading JSON text into jansson values, fast.
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

#include <jansson.h>
#include <stddef.h>

json_t *rt_json_read(const char *text, size_t len, size_t flags, json_error_t *err);

#endif
