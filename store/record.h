/*
 * record.h - the framing of stored records (pure: no I/O).
 *
 *   u32 len      payload bytes
 *   u32 crc      CRC-32C of every other byte of the record, in order
 *   [16 tag]     journal records only: the conversation's id
 *   u64 index    dense index of the event in its conversation, 0..N-1
 *   u8  idlen    1..255
 *   id           the event's id (so that lookups by id need no JSON)
 *   u8  keylen   0..255
 *   key          an optional second lookup key (a tool call's id)
 *   payload      the event's JSON bytes, exactly as served
 *
 * Integers are little-endian. A record is valid when it is complete and its
 * CRC matches: a torn or corrupted record is never mistaken for an event.
 * Journal records seed their CRC with the journal file's sequence number,
 * so records left over in a recycled journal file never validate.
 */
#ifndef ST_RECORD_H
#define ST_RECORD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum {
    ST_ID_MAX = 255,
    ST_KEY_MAX = 255,
    ST_TAG_LEN = 16,
    ST_REC_HDR = 17,               /* segment record header, before id */
    ST_JREC_HDR = 17 + ST_TAG_LEN, /* journal record header */
    ST_REC_HDR_MAX = ST_JREC_HDR + ST_ID_MAX + 1 + ST_KEY_MAX,
    ST_FILE_HDR = 16, /* magic (8) + a u64 (first index or sequence) */
};
#define ST_PAYLOAD_MAX ((uint32_t)256 << 20) /* a length beyond this is garbage */

typedef struct st_rec {
    uint64_t index;
    const uint8_t *tag; /* journal records: 16 bytes, else NULL */
    const uint8_t *id;
    uint32_t idlen;
    const uint8_t *key; /* NULL when keylen is 0 */
    uint32_t keylen;
    const uint8_t *payload;
    uint32_t len;
    size_t size; /* the whole record */
} st_rec;

/* Build the header, id and key of a record into `hdr` (ST_REC_HDR_MAX
 * bytes room); `tag` NULL for segment records. `seed` starts the CRC (0 for
 * segments). Returns their size. */
size_t st_rec_encode(uint8_t *hdr, const uint8_t *tag, uint32_t seed, uint64_t index,
                     const void *id, uint32_t idlen, const void *key, uint32_t keylen,
                     const void *payload, uint32_t len);

enum { ST_REC_OK = 0, ST_REC_SHORT = 1, ST_REC_BAD = 2 };
/* Decode the record at p, given `avail` readable bytes. ST_REC_SHORT: the
 * record (by its length) runs past avail; ST_REC_BAD: malformed or CRC
 * mismatch. */
int st_rec_decode(const uint8_t *p, size_t avail, bool tagged, uint32_t seed, st_rec *r);

/* The size of the record at p from its header alone: 0 if too few bytes
 * are available to tell, SIZE_MAX if the header is garbage. */
size_t st_rec_size(const uint8_t *p, size_t avail, bool tagged);

/* The CRC seed of the journal file with this sequence number. */
uint32_t st_journal_seed(uint64_t seq);

/* File headers: 8 magic bytes then a u64. */
void st_file_header(uint8_t out[ST_FILE_HDR], const char magic[8], uint64_t v);
bool st_file_header_ok(const uint8_t in[ST_FILE_HDR], const char magic[8], uint64_t *v);

static inline void st_put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}
static inline void st_put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}
static inline uint32_t st_get32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static inline uint64_t st_get64(const uint8_t *p)
{
    return (uint64_t)st_get32(p) | (uint64_t)st_get32(p + 4) << 32;
}

#endif
