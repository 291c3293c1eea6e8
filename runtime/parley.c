/* parley.c - the public embedding API over the runtime. */
#include "parley.h"

#include "rt.h"

#include <errno.h>
#include <stdlib.h>
#include <sys/stat.h>

struct pl_instance {
    rt_runtime *rt;
};

const char *pl_version(void)
{
    return PARLEY_VERSION;
}

const char *pl_strerror(int err)
{
    return rt_strerror(err);
}

int pl_open(const pl_options *o, pl_instance **out)
{
    const char *dir = o != NULL && o->data_dir != NULL ? o->data_dir : "parley-data";
    if (out == NULL || (o != NULL && o->workers < 0))
        return RT_EINVAL;
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        return -errno;
    pl_instance *p = calloc(1, sizeof(*p));
    if (p == NULL)
        return RT_ENOMEM;
    rt_opts ro = {.loops = o != NULL ? o->workers : 0};
    int r = rt_runtime_new(&ro, &p->rt);
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

void pl_close(pl_instance *p)
{
    if (p == NULL)
        return;
    rt_runtime_free(p->rt);
    free(p);
}
