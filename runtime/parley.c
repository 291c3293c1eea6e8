/* parley.c - the public embedding API over the runtime and the store. */
#include "parley.h"
#include "parley_internal.h"

#include "actors/conversation.h"
#include "rt.h"
#include "store/store.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

struct pl_instance {
    rt_runtime *rt;
    st_store *store;
    convs *convs;
};

const char *pl_version(void)
{
    return PARLEY_VERSION;
}

const char *pl_strerror(int err)
{
    return rt_strerror(err);
}

int pl_open(const pl_options *o, pl_instance **out, char *err, size_t errlen)
{
    char scratch[256];
    if (err == NULL) {
        err = scratch;
        errlen = sizeof(scratch);
    }
    err[0] = '\0';
    if (out == NULL || (o != NULL && o->workers < 0)) {
        snprintf(err, errlen, "invalid options");
        return RT_EINVAL;
    }
    st_opts so = {.dir = o != NULL && o->data_dir != NULL ? o->data_dir : "parley-data"};
    if (o != NULL && o->durability != NULL &&
        st_parse_durability(o->durability, &so.durability, &so.interval_ms) != 0) {
        snprintf(err, errlen, "unknown durability '%s' (full, interval=DURATION or none)",
                 o->durability);
        return RT_EINVAL;
    }
    unsigned long long idle =
        o != NULL && o->idle_close_ms != 0 ? o->idle_close_ms : CONV_IDLE_CLOSE_MS;
    so.idle_ttl_ms = idle; /* a log nobody holds closes as soon as a conversation's would */
    pl_instance *p = calloc(1, sizeof(*p));
    if (p == NULL)
        return RT_ENOMEM;
    int r = st_store_open(&so, &p->store, err, errlen);
    rt_opts ro = {.loops = o != NULL ? o->workers : 0};
    if (r == 0 && (r = rt_runtime_new(&ro, &p->rt)) < 0) {
        snprintf(err, errlen, "cannot start the runtime: %s", rt_strerror(r));
        st_store_close(p->store);
    }
    conv_opts co = {.idle_close_ms = idle};
    if (o != NULL) {
        co.defer_timeout_ms = o->defer_timeout_ms;
        co.defer_max = o->defer_max;
        co.hold_timeout_ms = o->hold_timeout_ms;
        co.hold_max = o->hold_max;
        co.max_subscribers = o->max_subscribers;
    }
    if (r == 0 && (r = convs_new(p->rt, p->store, &co, &p->convs)) < 0) {
        snprintf(err, errlen, "cannot start the conversations: %s", rt_strerror(r));
        rt_runtime_wait(p->rt);
        st_store_close(p->store);
        rt_runtime_free(p->rt);
    }
    if (r < 0) {
        free(p);
        return r;
    }
    *out = p;
    return 0;
}

int pl_workers(const pl_instance *p)
{
    return rt_runtime_loops(p->rt);
}

size_t pl_conversations(pl_instance *p)
{
    return st_store_count(p->store);
}

void pl_close(pl_instance *p)
{
    if (p == NULL)
        return;
    /* the store's committer may still answer actors: the runtime stays
     * (refusing those answers) until the store has closed */
    rt_runtime_wait(p->rt);
    st_store_close(p->store);
    convs_free(p->convs);
    rt_runtime_free(p->rt);
    free(p);
}

rt_runtime *pl__runtime(pl_instance *p)
{
    return p->rt;
}

st_store *pl__store(pl_instance *p)
{
    return p->store;
}

convs *pl__convs(pl_instance *p)
{
    return p->convs;
}
