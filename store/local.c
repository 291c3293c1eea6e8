/*
 * local.c - the local backend's table (backend.h): the conversations under
 * a data directory (store.c, catalog.c, commit.c) and their logs in the
 * local format (log.c, log_read.c).
 */
#include "backend.h"
#include "log_impl.h"
#include "store_impl.h"

const st_backend st_local_backend = {
    .name = "local",
    .open = stl_store_open,
    .close = stl_store_close,
    .workspace = stl_workspace,
    .count = stl_store_count,
    .open_logs = stl_store_open_logs,
    .max_open_logs = stl_store_max_open_logs,
    .max_event = stl_store_max_event,
    .list = stl_store_list,
    .children = stl_store_children,
    .put_file = stl_store_put_file,
    .take_file = stl_store_take_file,
    .conv_create = stl_conv_create,
    .conv_get = stl_conv_get,
    .conv_release = stl_conv_release,
    .conv_id = stl_conv_id,
    .conv_parent = stl_conv_parent,
    .conv_meta = stl_conv_meta,
    .conv_set_meta = stl_conv_set_meta,
    .conv_log = stl_conv_log,
    .append = stl_append,
    .conv_put_file = stl_conv_put_file,
    .conv_get_file = stl_conv_get_file,
    .conv_delete = stl_conv_delete,
    .log_count = stl_log_count,
    .log_read = stl_log_read,
    .log_find = stl_log_find,
    .log_find_key = stl_log_find_key,
    .log_read_now = stl_log_read,
    .log_find_now = stl_log_find,
    .log_memory = stl_log_memory,
    .log_read_only = stl_log_read_only,
};
