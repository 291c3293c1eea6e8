/*
 * nats_store.c - the JetStream backend's table (backend.h): conversations
 * whose logs are on a NATS JetStream cluster (nats_log.h).
 *
 * Not there yet: the log is (nats_log.c), the catalog, meta, files and the
 * append workers are not; opening reports so.
 */
#include "backend.h"

#include <errno.h>
#include <stdio.h>

static int nats_open(const st_opts *o, st_store **out, char *err, size_t errlen)
{
    (void)o;
    *out = NULL;
    if (err != NULL)
        snprintf(err, errlen, "the NATS store is not behind the store interface yet");
    return -ENOTSUP;
}

const st_backend st_nats_backend = {
    .name = "nats",
    .open = nats_open,
};
