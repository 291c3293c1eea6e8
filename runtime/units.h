/*
 * units.h - parsing the durations and sizes users type on command lines:
 * "250ms", "10s", "5m", "1h" (a bare number is in the given default unit);
 * "512", "64KiB", "16MiB", "1GiB", "10kB", "1MB" (bare: bytes).
 */
#ifndef RT_UNITS_H
#define RT_UNITS_H

#include <stdint.h>

/* 0 and *ms set, or RT_EINVAL (garbage, negative, overflow). `bare_ms` is
 * the unit of a number without a suffix, in milliseconds (1000 = seconds). */
int rt_parse_duration_ms(const char *s, uint64_t bare_ms, uint64_t *ms);
int rt_parse_bytes(const char *s, uint64_t *bytes);

#endif
