/* uuid.c - parsing, printing and generating UUIDs. */
#include "uuid.h"

#include <errno.h>
#include <string.h>
#include <sys/random.h>

const uint8_t rt_hex_value1[256] = {
    ['0'] = 1,  ['1'] = 2,  ['2'] = 3,  ['3'] = 4,  ['4'] = 5,  ['5'] = 6,  ['6'] = 7,  ['7'] = 8,
    ['8'] = 9,  ['9'] = 10, ['a'] = 11, ['b'] = 12, ['c'] = 13, ['d'] = 14, ['e'] = 15, ['f'] = 16,
    ['A'] = 11, ['B'] = 12, ['C'] = 13, ['D'] = 14, ['E'] = 15, ['F'] = 16,
};

bool rt_uuid_parse(const char *s, size_t len, rt_uuid *out)
{
    /* where byte k's two digits start, dashed (8-4-4-4-12) */
    static const uint8_t at_dashed[16] = {0, 2, 4, 6, 9, 11, 14, 16, 19, 21, 24, 26, 28, 30, 32, 34};
    bool dashed = len == 36;
    if (!dashed && len != 32)
        return false;
    if (dashed && (s[8] != '-' || s[13] != '-' || s[18] != '-' || s[23] != '-'))
        return false;
    rt_uuid u;
    int bad = 0; /* negative once any digit is not one */
    for (size_t k = 0; k < 16; k++) {
        size_t i = dashed ? at_dashed[k] : 2 * k;
        int hi = rt_hex_digit(s[i]), lo = rt_hex_digit(s[i + 1]);
        bad |= hi | lo;
        u.b[k] = (uint8_t)((unsigned)hi << 4 | (unsigned)lo);
    }
    if (bad < 0)
        return false;
    *out = u;
    return true;
}

static const char digits[] = "0123456789abcdef";

void rt_uuid_hex(const rt_uuid *u, char out[33])
{
    for (int i = 0; i < 16; i++) {
        out[2 * i] = digits[u->b[i] >> 4];
        out[2 * i + 1] = digits[u->b[i] & 15];
    }
    out[32] = '\0';
}

void rt_uuid_dashed(const rt_uuid *u, char out[37])
{
    char *p = out;
    for (int i = 0; i < 16; i++) {
        if (i == 4 || i == 6 || i == 8 || i == 10)
            *p++ = '-';
        *p++ = digits[u->b[i] >> 4];
        *p++ = digits[u->b[i] & 15];
    }
    *p = '\0';
}

/* Random bytes come from getrandom in blocks, one block per thread: one
 * system call per 16 ids instead of one per id (every appended event gets
 * one). A block is used once, front to back, and never shared. */
enum { RANDOM_BLOCK = 256 };

static int random_bytes(uint8_t *out, size_t n)
{
    static _Thread_local uint8_t block[RANDOM_BLOCK];
    static _Thread_local size_t used = RANDOM_BLOCK;
    if (n > RANDOM_BLOCK)
        return -EINVAL;
    if (RANDOM_BLOCK - used < n) {
        size_t got = 0;
        while (got < RANDOM_BLOCK) {
            ssize_t r = getrandom(block + got, RANDOM_BLOCK - got, 0);
            if (r < 0 && errno == EINTR)
                continue;
            if (r < 0)
                return -errno;
            got += (size_t)r;
        }
        used = 0;
    }
    memcpy(out, block + used, n);
    memset(block + used, 0, n); /* what was handed out does not stay behind */
    used += n;
    return 0;
}

int rt_uuid_v4(rt_uuid *out)
{
    int r = random_bytes(out->b, sizeof(out->b));
    if (r < 0)
        return r;
    out->b[6] = (uint8_t)((out->b[6] & 0x0f) | 0x40); /* version 4 */
    out->b[8] = (uint8_t)((out->b[8] & 0x3f) | 0x80); /* RFC 4122 variant */
    return 0;
}

bool rt_uuid_eq(const rt_uuid *a, const rt_uuid *b)
{
    return memcmp(a->b, b->b, sizeof(a->b)) == 0;
}

int rt_uuid_cmp(const void *a, const void *b)
{
    return memcmp(((const rt_uuid *)a)->b, ((const rt_uuid *)b)->b, sizeof(((rt_uuid *)a)->b));
}
