/*
 * route.h - from a request line to the route it names. Pure.
 *
 * The API's paths are a small fixed table (spec §2): each pattern is a list
 * of segments, literal or a parameter: {conversation} (a UUID, dashed or 32
 * hex digits) or {event} (any id, percent-decoded, at most 255 bytes).
 * Literal segments win over parameters, so /api/conversations/search is
 * never read as a conversation id. One trailing slash is ignored.
 *
 * A path that matches no pattern is 404; one that matches with another
 * method is 405 (with the methods it allows); a {conversation} that is not
 * a UUID is 422: no id reaches the store unvalidated.
 */
#ifndef NET_ROUTE_H
#define NET_ROUTE_H

#include "runtime/uuid.h"

#include <stdbool.h>
#include <stddef.h>

typedef enum net_route_id {
    NET_R_NONE = 0,
    NET_R_ALIVE,
    NET_R_HEALTH,
    NET_R_READY,
    NET_R_SERVER_INFO,
    NET_R_METRICS,
    NET_R_CONV_CREATE,         /* POST   /api/conversations */
    NET_R_CONV_BATCH,          /* GET    /api/conversations?ids=... */
    NET_R_CONV_SEARCH,         /* GET    /api/conversations/search */
    NET_R_CONV_COUNT,          /* GET    /api/conversations/count */
    NET_R_CONV_GET,            /* GET    /api/conversations/{c} */
    NET_R_CONV_DELETE,         /* DELETE /api/conversations/{c} */
    NET_R_CONV_PATCH,          /* PATCH  /api/conversations/{c} */
    NET_R_CONV_RUN,            /* POST   /api/conversations/{c}/run */
    NET_R_CONV_PAUSE,          /* POST   .../pause */
    NET_R_CONV_INTERRUPT,      /* POST   .../interrupt */
    NET_R_EV_SEARCH,           /* GET    /api/conversations/{c}/events/search */
    NET_R_EV_COUNT,            /* GET    .../events/count */
    NET_R_EV_GET,              /* GET    .../events/{e} */
    NET_R_EV_BATCH,            /* GET    .../events (event_ids in the body or query) */
    NET_R_EV_POST,             /* POST   .../events: a user message */
    NET_R_EV_APPEND,           /* POST   .../events/append: the producer route */
    NET_R_EV_CONFIRM,          /* POST   .../events/respond_to_confirmation */
    NET_R_CONV_SECRETS,        /* POST   .../secrets */
    NET_R_CONV_CONFIRM_POLICY, /* POST   .../confirmation_policy */
    NET_R_CONV_SECURITY,       /* POST   .../security_analyzer */
    NET_R_CONV_FINAL,          /* GET    .../agent_final_response */
    NET_R_CONV_TITLE,          /* POST   .../generate_title */
    NET_R_CONV_FORK,           /* POST   .../fork */
    NET_R_CONV_NAVIGATE,       /* POST   .../navigate */
    NET_R_CONV_ASK,            /* POST   .../ask_agent */
    NET_R_CONV_CONDENSE,       /* POST   .../condense */
    NET_R_CONV_GOAL,           /* POST   .../goal */
    NET_R_CONV_GOAL_STOP,      /* POST   .../goal/stop */
    NET_R_CONV_GOAL_RESUME,    /* POST   .../goal/resume */
    NET_R_CONV_SWITCH_LLM,     /* POST   .../switch_llm */
    NET_R_CONV_SWITCH_PROFILE, /* POST   .../switch_profile */
    NET_R_CONV_LOAD_PLUGIN,    /* POST   .../load_plugin */
    NET_R_CONV_SWITCH_ACP,     /* POST   .../switch_acp_model */
    NET_R_CONV_STATE,          /* GET    .../state: the conversation as blocks */
    NET_R_WS_EVENTS,           /* GET    /sockets/events/{c}: the WebSocket stream */
    NET_R_OPENAPI,             /* GET    /openapi.json */
    NET_R_WEB_LIST,            /* GET    /: the web page of conversations */
    NET_R_WEB_CONV,            /* GET    /conversations/{c}: a conversation's page */
    NET_R_WEB_ASSET,           /* GET    /assets/{e}: the pages' scripts and styles */
    NET_R_COUNT
} net_route_id;

enum { NET_EVENT_ID_MAX = 255 };

typedef struct net_route {
    net_route_id id;
    const char *name;  /* the pattern, for metrics and logs ("" when none) */
    bool open;         /* served without the API key */
    int status;        /* 0, or what to answer instead: 404, 405, 422, 400 */
    char detail[192];  /* why, when status != 0 */
    const char *allow; /* with 405: the methods the path has */
    bool has_conv;
    rt_uuid conv;
    char event_id[NET_EVENT_ID_MAX + 1]; /* NUL-terminated, "" when none */
    const char *query;                   /* after '?', into the target; NULL if none */
    size_t query_len;
} net_route;

/* Fill r for this method and request target. Returns r->status (0: routed). */
int net_route_match(const char *method, const char *target, net_route *r);

/* A route as the table has it. */
typedef struct net_route_spec {
    net_route_id id;
    const char *method;
    const char *path; /* segments; "{c}" a conversation, "{e}" an event */
    bool open;        /* no API key needed */
    const char *summary;
    const char *query; /* its query parameters, comma-separated, or NULL */
} net_route_spec;

size_t net_route_count(void);
const net_route_spec *net_route_at(size_t i);

/* The pattern of a route id, for metrics ("" for NET_R_NONE). */
const char *net_route_name(net_route_id id);

/* Percent-decode len bytes of src into dst (room for len + 1), '+' as a
 * space when plus is true. The length, or -1 on a bad escape or a NUL. */
long net_pct_decode(const char *src, size_t len, char *dst, bool plus);

#endif
