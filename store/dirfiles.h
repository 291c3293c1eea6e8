/*
 * dirfiles.h - what every backend on a local directory keeps there besides
 * its logs: the store's own small files (st_store_put_file, take_file) and
 * the hosted agents' working directories (st_workspace), `<dir>/workspaces/
 * <32 hex>/`, removed with their conversation. Blocking.
 */
#ifndef ST_DIRFILES_H
#define ST_DIRFILES_H

#include "runtime/uuid.h"

#include <stddef.h>

int st_dir_workspace(const char *dir, const rt_uuid *id, char *out, size_t cap);
/* Remove conversation id's working directory, if there is one. */
void st_dir_remove_workspace(const char *dir, const rt_uuid *id);
int st_dir_put_file(const char *dir, const char *name, const void *data, size_t len);
int st_dir_take_file(const char *dir, const char *name, char **data, size_t *len);
/* rm -rf path: 0 or -errno. */
int st_rm_tree(const char *path);

#endif
