/*
 * acp_map_impl.h - what both directions of the ACP mapping share:
 * acp_map.c (session updates to events) and acp_map_out.c (events to
 * session updates). Not for other modules.
 */
#ifndef ACP_MAP_IMPL_H
#define ACP_MAP_IMPL_H

#include "actors/acp_map.h"

typedef struct acp_text {
    char *s;
    size_t len, cap;
} acp_text;

/* Appends n bytes of s: -E2BIG (and nothing appended) if the text would
 * grow past max, -ENOMEM. */
int acp__text_add(acp_text *t, const char *s, size_t n, size_t max);
/* Appends as much of s as fits under max, cut at a UTF-8 character
 * boundary: text rendered for reading is cut, not refused. */
void acp__text_put(acp_text *t, const char *s, size_t n, size_t max);
void acp__text_reset(acp_text *t);

const char *acp__str(const json_t *o, const char *k);

/* v (a new reference), or a note of its size if its JSON is larger than
 * max bytes; NULL for NULL. */
json_t *acp__bounded(json_t *v, size_t max);
/* o[k] = acp__bounded(v), unless v is absent or null. */
void acp__set_bounded(json_t *o, const char *k, json_t *v, size_t max);

/* The limits l asks for, with the defaults where it says 0. */
acp_limits acp__limits(const acp_limits *l);

/* The ACP stop reason whose conversation error acp_stop_status explains
 * with `why`, or NULL if none does: the inverse of acp_stop_status. */
const char *acp__stop_reason_of_why(const char *why);

#endif
