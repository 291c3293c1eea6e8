/*
 * uuid.h - 128-bit ids: conversation ids (dashed or 32-hex in paths,
 * 32-hex as directory names) and the random UUID4s stamped on events.
 */
#ifndef RT_UUID_H
#define RT_UUID_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct rt_uuid {
    uint8_t b[16];
} rt_uuid;

/* Accepts exactly 32 hex digits, or 36 characters in the 8-4-4-4-12 dashed
 * form; either case. Nothing else (no braces, no spaces, no "urn:"). */
bool rt_uuid_parse(const char *s, size_t len, rt_uuid *out);
void rt_uuid_hex(const rt_uuid *u, char out[33]);    /* lowercase, NUL-terminated */
void rt_uuid_dashed(const rt_uuid *u, char out[37]); /* lowercase, NUL-terminated */
/* A random version-4 UUID; 0, or -errno if the system has no randomness. */
int rt_uuid_v4(rt_uuid *out);
/* Each byte's value as a hex digit (either case) plus one; 0: not one. */
extern const uint8_t rt_hex_value1[256];
/* The value of a hex digit (either case), or -1. Inline, one load: a
 * UUID in every request's path is 32 of them. */
static inline int rt_hex_digit(char c)
{
    return (int)rt_hex_value1[(unsigned char)c] - 1;
}
bool rt_uuid_eq(const rt_uuid *a, const rt_uuid *b);
/* Byte order of two rt_uuid, as qsort and bsearch want it. */
int rt_uuid_cmp(const void *a, const void *b);

#endif
