/*
 * support_conv.h - driving real conversations from tests: a store, a
 * runtime and the conversations service in a temp directory, requests sent
 * with rt_call and their answers collected, restarts that close everything
 * and reopen it from disk.
 */
#ifndef SUPPORT_CONV_H
#define SUPPORT_CONV_H

#include "actors/conversation.h"
#include "support_sync.h"

#include <jansson.h>

typedef struct tc_env {
    char *dir;
    st_durability durability;
    conv_opts o;
    st_store *store;
    rt_runtime *rt;
    convs *svc;
    rt_uuid id;
    rt_actor *conv;
    const char *meta; /* the conversation's info at creation; NULL: "{}" */
} tc_env;

/* A request's answer, filled on a loop thread. */
typedef struct tc_slot {
    bool done;
    int code;   /* the CONV_RESULT outcome, or the negative error of an
                   RT_KIND_ERROR answer */
    char *body; /* malloc'd */
} tc_slot;

/* Open the store (in a new temp dir when dir is NULL), the runtime (2
 * loops) and the service, and create (or find) conversation `id`. */
void tc_start(tc_env *e, const char *dir, const conv_opts *o, st_durability d);
/* Close everything (runtime, service, store); the directory stays. */
void tc_stop(tc_env *e);
/* tc_stop then tc_start on the same directory. */
void tc_restart(tc_env *e);
/* tc_stop and remove the directory. */
void tc_finish(tc_env *e);

/* Send a request; the answer lands in a new slot (freed by tc_slot_free). */
tc_slot *tc_request(tc_env *e, uint32_t kind, uint64_t arg, const char *body);
bool tc_wait(tc_slot *s);
void tc_slot_free(tc_slot *s);
/* Request and wait: the outcome; *body (if not NULL) gets the malloc'd body. */
int tc_call(tc_env *e, uint32_t kind, uint64_t arg, const char *body, char **out);

/* Every event of the conversation's log, as parsed JSON (an array). */
json_t *tc_log(tc_env *e);

#endif
