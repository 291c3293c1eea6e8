/* record.c - encoding and checking stored records. */
#include "record.h"

#include "crc32c.h"

#include <string.h>

static size_t hdr_len(bool tagged)
{
    return tagged ? ST_JREC_HDR : ST_REC_HDR;
}

size_t st_rec_encode(uint8_t *hdr, const uint8_t *tag, uint32_t seed, uint64_t index,
                     const void *id, uint32_t idlen, const void *key, uint32_t keylen,
                     const void *payload, uint32_t len)
{
    size_t h = hdr_len(tag != NULL);
    uint8_t *p = hdr + 8;
    st_put32(hdr, len);
    if (tag != NULL) {
        memcpy(p, tag, ST_TAG_LEN);
        p += ST_TAG_LEN;
    }
    st_put64(p, index);
    p[8] = (uint8_t)idlen;
    memcpy(hdr + h, id, idlen);
    hdr[h + idlen] = (uint8_t)keylen;
    if (keylen > 0)
        memcpy(hdr + h + idlen + 1, key, keylen);
    size_t total = h + idlen + 1 + keylen;
    uint32_t crc = st_crc32c(seed, hdr, 4);
    crc = st_crc32c(crc, hdr + 8, total - 8);
    crc = st_crc32c(crc, payload, len);
    st_put32(hdr + 4, crc);
    return total;
}

size_t st_rec_size(const uint8_t *p, size_t avail, bool tagged)
{
    size_t h = hdr_len(tagged);
    if (avail < h)
        return 0;
    uint32_t len = st_get32(p);
    uint32_t idlen = p[h - 1];
    if (len > ST_PAYLOAD_MAX || idlen == 0)
        return SIZE_MAX;
    if (avail < h + idlen + 1)
        return 0;
    return h + idlen + 1 + p[h + idlen] + len;
}

int st_rec_decode(const uint8_t *p, size_t avail, bool tagged, uint32_t seed, st_rec *r)
{
    size_t h = hdr_len(tagged);
    size_t size = st_rec_size(p, avail, tagged);
    if (size == 0)
        return ST_REC_SHORT;
    if (size == SIZE_MAX)
        return ST_REC_BAD;
    if (avail < size)
        return ST_REC_SHORT;
    const uint8_t *q = p + 8;
    uint32_t idlen = p[h - 1];
    uint32_t len = st_get32(p);
    uint32_t crc = st_crc32c(seed, p, 4);
    crc = st_crc32c(crc, p + 8, size - 8);
    if (crc != st_get32(p + 4))
        return ST_REC_BAD;
    r->tag = tagged ? q : NULL;
    if (tagged)
        q += ST_TAG_LEN;
    r->index = st_get64(q);
    r->idlen = idlen;
    r->id = p + h;
    r->keylen = p[h + idlen];
    r->key = r->keylen > 0 ? p + h + idlen + 1 : NULL;
    r->payload = p + h + idlen + 1 + r->keylen;
    r->len = len;
    r->size = size;
    return ST_REC_OK;
}

uint32_t st_journal_seed(uint64_t seq)
{
    uint8_t b[8];
    st_put64(b, seq);
    return st_crc32c(0x9e3779b9u, b, sizeof(b)) | 1; /* never 0, the segments' seed */
}

void st_file_header(uint8_t out[ST_FILE_HDR], const char magic[8], uint64_t v)
{
    memcpy(out, magic, 8);
    st_put64(out + 8, v);
}

bool st_file_header_ok(const uint8_t in[ST_FILE_HDR], const char magic[8], uint64_t *v)
{
    if (memcmp(in, magic, 8) != 0)
        return false;
    *v = st_get64(in + 8);
    return true;
}
