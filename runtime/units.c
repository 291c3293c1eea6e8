/* units.c - durations and sizes from command-line text, strictly: the whole
 * string must be one non-negative integer and one known suffix. */
#include "units.h"

#include "err.h"

#include <ctype.h>
#include <string.h>

struct unit {
    const char *suffix;
    uint64_t mult;
};

static int parse_with(const char *s, const struct unit *units, uint64_t bare, uint64_t *out)
{
    if (s == NULL || !isdigit((unsigned char)*s))
        return RT_EINVAL;
    uint64_t v = 0;
    while (isdigit((unsigned char)*s)) {
        unsigned d = (unsigned)(*s++ - '0');
        if (v > (UINT64_MAX - d) / 10)
            return RT_EINVAL;
        v = v * 10 + d;
    }
    uint64_t mult = 0;
    if (*s == '\0')
        mult = bare;
    for (const struct unit *u = units; mult == 0 && u->suffix != NULL; u++)
        if (strcmp(s, u->suffix) == 0)
            mult = u->mult;
    if (mult == 0 || (v != 0 && v > UINT64_MAX / mult))
        return RT_EINVAL;
    *out = v * mult;
    return 0;
}

int rt_parse_duration_ms(const char *s, uint64_t bare_ms, uint64_t *ms)
{
    static const struct unit units[] = {
        {"ms", 1}, {"s", 1000}, {"m", 60000}, {"h", 3600000}, {NULL, 0}};
    return parse_with(s, units, bare_ms, ms);
}

int rt_parse_bytes(const char *s, uint64_t *bytes)
{
    static const struct unit units[] = {
        {"B", 1},          {"KiB", 1ull << 10}, {"MiB", 1ull << 20}, {"GiB", 1ull << 30},
        {"kB", 1000},      {"KB", 1000},        {"MB", 1000000},     {"GB", 1000000000},
        {"K", 1ull << 10}, {"M", 1ull << 20},   {"G", 1ull << 30},   {NULL, 0}};
    return parse_with(s, units, 1, bytes);
}
