/*
 * fuzz_http.c - libFuzzer target for the HTTP request reader: any bytes,
 * split at a point the input chooses, must never crash or overrun; what it
 * hands out is a whole request within the limits, and an error is one of
 * the statuses it documents, with a one-line reason.
 */
#include "net/http_parse.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    size_t step = data[0] % 16 + 1; /* the first byte picks the split */
    data++;
    size--;
    hp_limits l = {.header_bytes = 1024, .headers = 16, .body_bytes = 4096};
    hp_parser *p = hp_new(&l);
    if (p == NULL)
        return 0;
    size_t at = 0;
    while (at < size) {
        size_t n = size - at < step ? size - at : step;
        bool done;
        ssize_t used = hp_feed(p, data + at, n, &done);
        if (used < 0) {
            int s = hp_status(p);
            if ((s != 400 && s != 413 && s != 417 && s != 431 && s != 505 && s != 500) ||
                strchr(hp_reason(p), '\n') != NULL || hp_request(p) != NULL)
                abort();
            break;
        }
        if ((size_t)used > n)
            abort();
        at += (size_t)used;
        if (done) {
            const hp_req *r = hp_request(p);
            if (r == NULL || r->target == NULL || r->method == NULL || r->body_len > 4096 ||
                r->nheaders > 16 || (r->body_len > 0) != (r->body != NULL))
                abort();
            for (size_t i = 0; i < r->nheaders; i++)
                if (hp_header_get(r, r->headers[i].name) == NULL)
                    abort();
        } else if ((size_t)used < n) {
            abort(); /* it stops early only at the end of a request */
        }
    }
    hp_finish(p);
    hp_free(p);
    return 0;
}
