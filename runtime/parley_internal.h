/*
 * parley_internal.h - what parley's own front ends (the server of `parley
 * serve`) reach inside an instance for. Not part of the public API.
 */
#ifndef PARLEY_INTERNAL_H
#define PARLEY_INTERNAL_H

#include "actors/conversation.h"
#include "parley.h"
#include "rt.h"
#include "store/store.h"

rt_runtime *pl__runtime(pl_instance *p);
st_store *pl__store(pl_instance *p);
convs *pl__convs(pl_instance *p);

#endif
