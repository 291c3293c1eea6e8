/*
 * workspace.c - hosted agents' working directories (workspace.h).
 */
#include "workspace.h"

#include "io.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

int st_workspace_make(const char *base, const rt_uuid *id, char *out, size_t cap)
{
    char hex[33], real[PATH_MAX];
    rt_uuid_hex(id, hex);
    if (mkdir(base, 0755) != 0 && errno != EEXIST)
        return -errno;
    if (realpath(base, real) == NULL)
        return -errno;
    int n = snprintf(out, cap, "%s/workspaces", real);
    if (n < 0 || (size_t)n + 34 > cap)
        return -ENAMETOOLONG;
    if (mkdir(out, 0755) != 0 && errno != EEXIST)
        return -errno;
    snprintf(out + n, cap - (size_t)n, "/%s", hex);
    if (mkdir(out, 0700) != 0 && errno != EEXIST)
        return -errno;
    return 0;
}

void st_workspace_remove(const char *base, const rt_uuid *id)
{
    char hex[33], path[PATH_MAX];
    rt_uuid_hex(id, hex);
    snprintf(path, sizeof(path), "%s/workspaces/%s", base, hex);
    st_rm_tree(path);
}
