/* dirfiles.c - the store's own files and workspaces in a directory (dirfiles.h). */
#include "dirfiles.h"

#include "backend.h"
#include "io.h"

#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

static int rm_entry(const char *p, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    return remove(p) != 0 && errno != ENOENT ? -1 : 0;
}

int st_rm_tree(const char *path)
{
    return nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS) != 0 ? -errno : 0;
}

void st_dir_remove_workspace(const char *dir, const rt_uuid *id)
{
    char hex[33], ws[4096];
    rt_uuid_hex(id, hex);
    snprintf(ws, sizeof(ws), "%s/workspaces/%s", dir, hex);
    st_rm_tree(ws); /* its hosted agent's files go with it (none if never hosted) */
}

int st_dir_workspace(const char *dir, const rt_uuid *id, char *out, size_t cap)
{
    char hex[33], base[4096];
    rt_uuid_hex(id, hex);
    if (realpath(dir, base) == NULL)
        return -errno;
    int n = snprintf(out, cap, "%s/workspaces", base);
    if (n < 0 || (size_t)n + 34 > cap)
        return -ENAMETOOLONG;
    if (mkdir(out, 0755) != 0 && errno != EEXIST)
        return -errno;
    snprintf(out + n, cap - (size_t)n, "/%s", hex);
    if (mkdir(out, 0700) != 0 && errno != EEXIST)
        return -errno;
    return 0;
}

int st_dir_put_file(const char *dir, const char *name, const void *data, size_t len)
{
    if (!st_store_file_name_ok(name))
        return -EINVAL;
    return st_write_file_atomic(dir, name, data, len);
}

int st_dir_take_file(const char *dir, const char *name, char **data, size_t *len)
{
    if (!st_store_file_name_ok(name))
        return -EINVAL;
    char path[4200];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    int r = st_read_file(path, (size_t)1 << 30, data, len);
    if (r < 0)
        return r;
    /* durably gone before anything it describes can change */
    if (unlink(path) != 0 || (r = st_fsync_dir(dir)) < 0) {
        r = r < 0 ? r : -errno;
        free(*data);
        *data = NULL;
        return r;
    }
    return 0;
}
