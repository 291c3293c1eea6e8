/*
 * event_filter.h - the filters of event search and count (spec §2.2). Pure.
 *
 *   kind             the event's class: qualified ("openhands.sdk.event.
 *                    llm_convertible.message.MessageEvent") or bare
 *                    ("MessageEvent", a parley extension)
 *   source           exact
 *   body             case-insensitive substring (at most 255 bytes) of a
 *                    MessageEvent's text, extended_content and
 *                    reasoning_content; empty, every MessageEvent (as
 *                    upstream); other events never match
 *   timestamp__gte   inclusive, timestamp__lt exclusive: ISO datetimes;
 *                    with a zone they are turned into server-local naive
 *                    time first, then compared as strings, as upstream
 */
#ifndef NET_EVENT_FILTER_H
#define NET_EVENT_FILTER_H

#include "query.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

typedef struct net_event_filter {
    char kind[128];
    char source[32];
    char body[256];
    bool has_body; /* body= was given (it may be empty) */
    char ts_gte[40], ts_lt[40];
    bool any; /* some filter is set */
} net_event_filter;

/* From the query; -1 with one line in err (for a 422) if a value is bad. */
int net_event_filter_parse(const net_query *q, net_event_filter *f, char *err, size_t errlen);
/* Does the event (its stored JSON) pass? Parses only when it has to. */
bool net_event_filter_match(const net_event_filter *f, const char *json, size_t len);
/* An ISO datetime as server-local naive text; -1 if it is not one. */
int net_local_timestamp(const char *in, char out[40]);

#endif
