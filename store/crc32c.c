/*
 * crc32c.c - CRC-32C, reflected polynomial 0x82F63B78. The hardware path
 * is picked once, at first use, from cpuid; it is ~20x faster than the
 * table, which matters when the committer checksums 100 MB/s.
 */
#include "crc32c.h"

#include <pthread.h>

#if defined(__x86_64__)
#include <cpuid.h>
#include <nmmintrin.h>
#endif

static uint32_t table[8][256];

static void make_table(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++)
            table[t][i] = (table[t - 1][i] >> 8) ^ table[0][table[t - 1][i] & 0xff];
}

static uint32_t crc_sw(uint32_t crc, const uint8_t *p, size_t n)
{
    while (n >= 8) {
        uint32_t lo = crc ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                             (uint32_t)p[3] << 24);
        crc = table[7][lo & 0xff] ^ table[6][(lo >> 8) & 0xff] ^ table[5][(lo >> 16) & 0xff] ^
              table[4][lo >> 24] ^ table[3][p[4]] ^ table[2][p[5]] ^ table[1][p[6]] ^
              table[0][p[7]];
        p += 8;
        n -= 8;
    }
    while (n--)
        crc = (crc >> 8) ^ table[0][(crc ^ *p++) & 0xff];
    return crc;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) static uint32_t crc_hw(uint32_t crc, const uint8_t *p, size_t n)
{
    uint64_t c = crc;
    while (n >= 8) {
        uint64_t v;
        __builtin_memcpy(&v, p, 8);
        c = _mm_crc32_u64(c, v);
        p += 8;
        n -= 8;
    }
    uint32_t c32 = (uint32_t)c;
    while (n--)
        c32 = _mm_crc32_u8(c32, *p++);
    return c32;
}

static int have_sse42(void)
{
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_SSE4_2);
}
#endif

static int mode; /* 1 table, 2 hardware; set once */
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void pick(void)
{
    make_table();
    mode = 1;
#if defined(__x86_64__)
    if (have_sse42())
        mode = 2;
#endif
}

uint32_t st_crc32c(uint32_t crc, const void *data, size_t n)
{
    pthread_once(&once, pick);
#if defined(__x86_64__)
    if (mode == 2)
        return ~crc_hw(~crc, data, n);
#endif
    return ~crc_sw(~crc, data, n);
}

uint32_t st_crc32c_portable(uint32_t crc, const void *data, size_t n)
{
    pthread_once(&once, pick);
    return ~crc_sw(~crc, data, n);
}
