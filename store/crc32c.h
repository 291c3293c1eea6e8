/*
 * crc32c.h - CRC-32C (Castagnoli), the checksum of every stored record.
 * Uses the SSE4.2 instruction when the CPU has it, a table otherwise; both
 * give the same values (check: crc32c("123456789") == 0xE3069283).
 */
#ifndef ST_CRC32C_H
#define ST_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* Extend `crc` (0 to start) over n bytes; chains across calls. */
uint32_t st_crc32c(uint32_t crc, const void *data, size_t n);
/* The table-driven path alone, so that tests can compare the two. */
uint32_t st_crc32c_portable(uint32_t crc, const void *data, size_t n);

#endif
