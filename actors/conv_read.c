/* conv_read.c - reading a conversation's log (conv_read.h). */
#include "actors/conv_read.h"
#include "actors/conv_reply.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

/* A store error as an outcome and a line. */
static void fail(int err, const rt_uuid *id, const char *what, const char *more, pl_outcome *why,
                 char *detail, size_t cap)
{
    char hex[37];
    rt_uuid_dashed(id, hex);
    if (err == -ENOENT) {
        *why = PL_NOT_FOUND;
        snprintf(detail, cap, "Conversation not found: %s", hex);
    } else if (err == -EMFILE || err == -ENFILE || err == -ENOMEM) {
        *why = PL_BUSY;
        snprintf(detail, cap, "cannot %s conversation %s: %s", what, hex, strerror(-err));
    } else if ((*why = conv_store_outcome(err)) == PL_NO_SPACE) {
        snprintf(detail, cap, "the disk is full: cannot %s conversation %s (%s)", what, hex,
                 strerror(-err));
    } else {
        snprintf(detail, cap, "cannot %s conversation %s: %s", what, hex,
                 more != NULL && more[0] != '\0' ? more : strerror(-err));
    }
}

int conv_read_open(st_store *s, const rt_uuid *id, conv_reader *out, st_open_report *rep,
                   pl_outcome *why, char *detail, size_t cap)
{
    st_open_report local;
    st_open_report *rp = rep != NULL ? rep : &local;
    memset(rp, 0, sizeof(*rp));
    *out = (conv_reader){0};
    int r = st_conv_get(s, id, &out->sc);
    if (r == 0 && (r = st_conv_log(out->sc, &out->log, rp)) < 0) {
        st_conv_release(out->sc);
        out->sc = NULL;
    }
    if (r == 0)
        return 0;
    fail(r, id, "open", rp->detail, why, detail, cap);
    return -1;
}

void conv_read_close(conv_reader *r)
{
    st_conv_release(r->sc);
    *r = (conv_reader){0};
}

uint64_t conv_read_count(const conv_reader *r)
{
    return st_log_count(r->log);
}

int conv_read_page(const conv_reader *r, uint64_t first, uint32_t max, st_page **out,
                   pl_outcome *why, char *detail, size_t cap)
{
    int e = st_log_read(r->log, first, max, out);
    if (e == 0)
        return 0;
    fail(e, st_conv_id(r->sc), "read", e == -EBADMSG ? "a record fails its checksum" : NULL, why,
         detail, cap);
    return -1;
}

int conv_read_find(const conv_reader *r, const char *id, size_t len, uint64_t *index)
{
    return st_log_find(r->log, id, len, index);
}
