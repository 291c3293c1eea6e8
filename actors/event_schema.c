/*
 * event_schema.c - parsing and validating events (ev_parse, ev_from_doc,
 * ev_from_json) against the upstream pydantic models, one table per kind.
 *
 * Upstream: github:OpenHands/software-agent-sdk at 611629e6, files
 * openhands-sdk/openhands/sdk/event/ (the events), llm/message.py (Message,
 * TextContent, ImageContent, MessageToolCall, thinking blocks, reasoning
 * item), critic/result.py, event/error_classification.py and
 * openhands-agent-server/openhands/agent_server/models.py (ServerErrorEvent).
 *
 * What is checked, and why it is no more:
 * - Events forbid extra members (Event has extra="forbid"), so an unknown
 *   top-level member is refused. So do TextContent and ErrorClassification.
 *   Message, ImageContent, MessageToolCall, the thinking blocks, the
 *   reasoning item and CriticResult are plain BaseModels (extra="ignore"):
 *   unknown members there are accepted and kept as given.
 * - A field without a default is required. A field typed `X | None` may be
 *   null; one typed `X` with a default may be left out but not be null
 *   (pydantic refuses None there).
 * - JSON types are matched exactly: pydantic's lax mode would also turn
 *   "1" or 1.0 into an int and 1 into a bool, but no upstream producer
 *   sends those, and a value we store must read back the same everywhere.
 * - Payloads that upstream resolves through their own `kind` (action,
 *   observation, tools[]) must be objects with a string `kind`; the value
 *   is not checked, since tools (and so their actions and observations)
 *   can be defined by users.
 * - The fields that event.h exposes as C strings (id, parent_id,
 *   tool_call_id, ...) may not contain U+0000, which a C string cannot
 *   hold; elsewhere it is accepted (a terminal's output may carry one).
 *
 * Error messages are one line: "<Kind>: <what>" with a dotted path for
 * nested members ("ActionEvent: field 'tool_call.origin' must be one of
 * completion, responses"). Names that come from the input are cut short
 * and control characters replaced, so that a message stays one line.
 */
#include "actors/event.h"
#include "runtime/json.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- types --- */

typedef enum tk {
    TK_ANY,         /* any JSON value */
    TK_STR,         /* string */
    TK_CSTR,        /* string without U+0000: event.h hands it out as a C string */
    TK_ID,          /* an event id: non-empty, not "__root__", no U+0000 */
    TK_BOOL,        /* true or false */
    TK_INT,         /* integer */
    TK_NNINT,       /* integer >= 0 */
    TK_SCORE,       /* number in [0, 1] */
    TK_OBJ,         /* any object */
    TK_ENUM,        /* one of the strings in `values` */
    TK_LIST,        /* list of `elem` */
    TK_MODEL,       /* object checked against `model` */
    TK_PAYLOAD,     /* object with a string `kind` (polymorphic, opaque) */
    TK_CONTENT,     /* TextContent or ImageContent, told apart by `type` */
    TK_MSG_CONTENT, /* Message.content: a list of content, or null/a string */
    TK_THINKING,    /* ThinkingBlock or RedactedThinkingBlock */
} tk;

typedef struct model model;

typedef struct ty {
    tk k;
    const struct ty *elem;
    const model *m;
    const char *const *values; /* NULL-terminated */
} ty;

enum {
    F_REQ = 1u,  /* no default upstream: must be present */
    F_NULL = 2u, /* typed `X | None`: null is accepted */
};

typedef struct field {
    const char *name;
    const ty *t;
    unsigned flags;
} field;

struct model {
    const field *fields;
    size_t n;
    bool forbid_extra;
    /* Members upstream removes before validating (old events). */
    const char *const *deprecated;
};

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))
#define MODEL(f, forbid, dep)                                                                      \
    {                                                                                              \
        (f), COUNT(f), (forbid), (dep)                                                             \
    }

static const char *const SOURCES[] = {"agent", "user", "environment", "hook", NULL};
static const char *const SECURITY_RISKS[] = {"UNKNOWN", "LOW", "MEDIUM", "HIGH", NULL};
static const char *const REJECTION_SOURCES[] = {"user", "hook", NULL};
static const char *const HOOK_EVENT_TYPES[] = {
    "PreToolUse", "PostToolUse", "UserPromptSubmit", "SessionStart", "SessionEnd", "Stop", NULL};
static const char *const ROLES[] = {"user", "system", "assistant", "tool", NULL};
static const char *const ORIGINS[] = {"completion", "responses", NULL};
static const char *const FAILURE_KINDS[] = {"auth",     "quota",     "rate_limit",
                                            "config",   "transient", "agent_action",
                                            "internal", "unknown",   NULL};
/* ConversationExecutionStatus, the value of an `execution_status` update. */
static const char *const EXECUTION_STATUSES[] = {
    "idle",  "running",  "paused", "waiting_for_confirmation", "finished", "error",
    "stuck", "deleting", NULL};
static const char *const FAILURE_ACTIONS[] = {"none", "retry", "settings", NULL};

static const ty T_ANY = {TK_ANY, NULL, NULL, NULL};
static const ty T_STR = {TK_STR, NULL, NULL, NULL};
static const ty T_CSTR = {TK_CSTR, NULL, NULL, NULL};
static const ty T_ID = {TK_ID, NULL, NULL, NULL};
static const ty T_BOOL = {TK_BOOL, NULL, NULL, NULL};
static const ty T_INT = {TK_INT, NULL, NULL, NULL};
static const ty T_NNINT = {TK_NNINT, NULL, NULL, NULL};
static const ty T_SCORE = {TK_SCORE, NULL, NULL, NULL};
static const ty T_OBJ = {TK_OBJ, NULL, NULL, NULL};
static const ty T_PAYLOAD = {TK_PAYLOAD, NULL, NULL, NULL};
static const ty T_CONTENT = {TK_CONTENT, NULL, NULL, NULL};
static const ty T_MSG_CONTENT = {TK_MSG_CONTENT, NULL, NULL, NULL};
static const ty T_THINKING = {TK_THINKING, NULL, NULL, NULL};
static const ty T_SOURCE = {TK_ENUM, NULL, NULL, SOURCES};
static const ty T_SECURITY_RISK = {TK_ENUM, NULL, NULL, SECURITY_RISKS};
static const ty T_REJECTION_SOURCE = {TK_ENUM, NULL, NULL, REJECTION_SOURCES};
static const ty T_HOOK_EVENT_TYPE = {TK_ENUM, NULL, NULL, HOOK_EVENT_TYPES};
static const ty T_ROLE = {TK_ENUM, NULL, NULL, ROLES};
static const ty T_ORIGIN = {TK_ENUM, NULL, NULL, ORIGINS};
static const ty T_FAILURE_KIND = {TK_ENUM, NULL, NULL, FAILURE_KINDS};
static const ty T_FAILURE_ACTION = {TK_ENUM, NULL, NULL, FAILURE_ACTIONS};
static const ty T_EXECUTION_STATUS = {TK_ENUM, NULL, NULL, EXECUTION_STATUSES};
static const ty T_STRS = {TK_LIST, &T_STR, NULL, NULL};
static const ty T_INTS = {TK_LIST, &T_INT, NULL, NULL};
static const ty T_ANYS = {TK_LIST, &T_ANY, NULL, NULL};
static const ty T_PAYLOADS = {TK_LIST, &T_PAYLOAD, NULL, NULL};
static const ty T_THINKINGS = {TK_LIST, &T_THINKING, NULL, NULL};

/* ------------------------------------------------------- nested models --- */

/* llm/message.py. TextContent alone forbids extras; `enable_truncation`
 * is a retired member it still drops silently when loading old events. */
static const char *const TEXT_DEPRECATED[] = {"enable_truncation", NULL};
static const ty T_TEXT_TYPE = {TK_ENUM, NULL, NULL, (const char *const[]){"text", NULL}};
static const ty T_IMAGE_TYPE = {TK_ENUM, NULL, NULL, (const char *const[]){"image", NULL}};
static const ty T_THINKING_TYPE = {TK_ENUM, NULL, NULL, (const char *const[]){"thinking", NULL}};
static const ty T_REDACTED_TYPE = {TK_ENUM, NULL, NULL,
                                   (const char *const[]){"redacted_thinking", NULL}};

static const field TEXT_CONTENT_F[] = {
    {"cache_prompt", &T_BOOL, 0},
    {"type", &T_TEXT_TYPE, 0},
    {"text", &T_STR, F_REQ},
};
static const model TEXT_CONTENT = MODEL(TEXT_CONTENT_F, true, TEXT_DEPRECATED);
static const ty T_TEXT = {TK_MODEL, NULL, &TEXT_CONTENT, NULL};
static const ty T_TEXTS = {TK_LIST, &T_TEXT, NULL, NULL};

static const field IMAGE_CONTENT_F[] = {
    {"cache_prompt", &T_BOOL, 0},
    {"type", &T_IMAGE_TYPE, 0},
    {"image_urls", &T_STRS, F_REQ},
};
static const model IMAGE_CONTENT = MODEL(IMAGE_CONTENT_F, false, NULL);

static const field TOOL_CALL_F[] = {
    {"id", &T_STR, F_REQ},        {"responses_item_id", &T_STR, F_NULL}, {"name", &T_STR, F_REQ},
    {"arguments", &T_STR, F_REQ}, {"origin", &T_ORIGIN, F_REQ},
};
static const model TOOL_CALL = MODEL(TOOL_CALL_F, false, NULL);
static const ty T_TOOL_CALL = {TK_MODEL, NULL, &TOOL_CALL, NULL};
static const ty T_TOOL_CALLS = {TK_LIST, &T_TOOL_CALL, NULL, NULL};

static const field THINKING_F[] = {
    {"type", &T_THINKING_TYPE, 0},
    {"thinking", &T_STR, F_REQ},
    {"signature", &T_STR, F_NULL},
};
static const model THINKING = MODEL(THINKING_F, false, NULL);

static const field REDACTED_F[] = {
    {"type", &T_REDACTED_TYPE, 0},
    {"data", &T_STR, F_REQ},
};
static const model REDACTED = MODEL(REDACTED_F, false, NULL);

static const field REASONING_F[] = {
    {"id", &T_STR, F_NULL},       {"summary", &T_STRS, 0},
    {"content", &T_STRS, F_NULL}, {"encrypted_content", &T_STR, F_NULL},
    {"status", &T_STR, F_NULL},
};
static const model REASONING = MODEL(REASONING_F, false, NULL);
static const ty T_REASONING = {TK_MODEL, NULL, &REASONING, NULL};

static const field MESSAGE_F[] = {
    {"role", &T_ROLE, F_REQ},
    {"content", &T_MSG_CONTENT, F_NULL},
    {"tool_calls", &T_TOOL_CALLS, F_NULL},
    {"tool_call_id", &T_STR, F_NULL},
    {"name", &T_STR, F_NULL},
    {"reasoning_content", &T_STR, F_NULL},
    {"thinking_blocks", &T_THINKINGS, 0},
    {"responses_reasoning_item", &T_REASONING, F_NULL},
};
static const model MESSAGE = MODEL(MESSAGE_F, false, NULL);
static const ty T_MESSAGE = {TK_MODEL, NULL, &MESSAGE, NULL};

/* event/error_classification.py */
static const field CLASSIFICATION_F[] = {
    {"kind", &T_FAILURE_KIND, F_REQ},
    {"retryable", &T_BOOL, F_REQ},
    {"user_action", &T_FAILURE_ACTION, 0},
    {"error_id", &T_STR, F_NULL},
};
static const model CLASSIFICATION = MODEL(CLASSIFICATION_F, true, NULL);
static const ty T_CLASSIFICATION = {TK_MODEL, NULL, &CLASSIFICATION, NULL};

/* critic/result.py. `message` has no default upstream but is nullable, so
 * the null-free dumps that upstream itself writes leave it out: it is
 * optional here, or upstream's own stored events would be refused. */
static const field CRITIC_F[] = {
    {"score", &T_SCORE, F_REQ},
    {"message", &T_STR, F_NULL},
    {"metadata", &T_OBJ, F_NULL},
};
static const model CRITIC = MODEL(CRITIC_F, false, NULL);
static const ty T_CRITIC = {TK_MODEL, NULL, &CRITIC, NULL};

/* ---------------------------------------------------------- the events --- */

static const field BASE_F[] = {
    {"id", &T_ID, 0},
    {"timestamp", &T_CSTR, 0},
    {"source", &T_SOURCE, 0}, /* required or defaulted: per kind, below */
    {"parent_id", &T_CSTR, F_NULL},
    {"kind", &T_STR, 0},
};
enum { B_ID, B_TIMESTAMP, B_SOURCE, B_PARENT_ID }; /* BASE_F's order */

static const field MESSAGE_EV[] = {
    {"llm_message", &T_MESSAGE, F_REQ}, {"llm_response_id", &T_CSTR, F_NULL},
    {"activated_skills", &T_STRS, 0},   {"extended_content", &T_TEXTS, 0},
    {"sender", &T_STR, F_NULL},         {"critic_result", &T_CRITIC, F_NULL},
};
static const field ACTION_EV[] = {
    {"thought", &T_TEXTS, F_REQ},         {"reasoning_content", &T_STR, F_NULL},
    {"thinking_blocks", &T_THINKINGS, 0}, {"responses_reasoning_item", &T_REASONING, F_NULL},
    {"action", &T_PAYLOAD, F_NULL},       {"tool_name", &T_CSTR, F_REQ},
    {"tool_call_id", &T_CSTR, F_REQ},     {"tool_call", &T_TOOL_CALL, F_REQ},
    {"llm_response_id", &T_CSTR, F_REQ},  {"security_risk", &T_SECURITY_RISK, 0},
    {"critic_result", &T_CRITIC, F_NULL}, {"summary", &T_STR, F_NULL},
};
static const field OBSERVATION_EV[] = {
    {"tool_name", &T_CSTR, F_REQ},      {"tool_call_id", &T_CSTR, F_REQ},
    {"observation", &T_PAYLOAD, F_REQ}, {"action_id", &T_STR, F_REQ},
    {"extended_content", &T_TEXTS, 0},
};
static const field USER_REJECT_EV[] = {
    {"tool_name", &T_CSTR, F_REQ},   {"tool_call_id", &T_CSTR, F_REQ},
    {"rejection_reason", &T_STR, 0}, {"rejection_source", &T_REJECTION_SOURCE, 0},
    {"action_id", &T_STR, F_REQ},
};
static const field AGENT_ERROR_EV[] = {
    {"tool_name", &T_CSTR, F_REQ},
    {"tool_call_id", &T_CSTR, F_REQ},
    {"error", &T_STR, F_REQ},
    {"classification", &T_CLASSIFICATION, F_NULL},
};
static const field SYSTEM_PROMPT_EV[] = {
    {"system_prompt", &T_TEXT, F_REQ},
    {"tools", &T_PAYLOADS, F_REQ},
    {"dynamic_context", &T_TEXT, F_NULL},
};
static const field CONDENSATION_EV[] = {
    {"forgotten_event_ids", &T_STRS, 0},
    {"summary", &T_STR, F_NULL},
    {"summary_offset", &T_NNINT, F_NULL},
    {"llm_response_id", &T_STR, F_REQ},
};
static const field CONDENSATION_SUMMARY_EV[] = {
    {"summary", &T_STR, F_REQ},
};
/* `key` defaults to a random UUID upstream; `value` is Any. */
static const field STATE_UPDATE_EV[] = {
    {"key", &T_CSTR, 0},
    {"value", &T_ANY, F_NULL},
};
static const field CONVERSATION_ERROR_EV[] = {
    {"code", &T_STR, F_REQ},
    {"detail", &T_STR, F_REQ},
    {"classification", &T_CLASSIFICATION, F_NULL},
};
static const field HOOK_EXECUTION_EV[] = {
    {"hook_event_type", &T_HOOK_EVENT_TYPE, F_REQ},
    {"hook_command", &T_STR, F_REQ},
    {"tool_name", &T_STR, F_NULL},
    {"success", &T_BOOL, F_REQ},
    {"blocked", &T_BOOL, 0},
    {"exit_code", &T_INT, F_REQ},
    {"stdout", &T_STR, 0},
    {"stderr", &T_STR, 0},
    {"reason", &T_STR, F_NULL},
    {"additional_context", &T_STR, F_NULL},
    {"error", &T_STR, F_NULL},
    {"action_id", &T_STR, F_NULL},
    {"message_id", &T_STR, F_NULL},
    {"hook_input", &T_OBJ, F_NULL},
};
static const field LLM_COMPLETION_LOG_EV[] = {
    {"filename", &T_STR, F_REQ},
    {"log_data", &T_STR, F_REQ},
    {"model_name", &T_STR, 0},
    {"usage_id", &T_STR, 0},
};
static const field STREAMING_DELTA_EV[] = {
    {"content", &T_STR, F_NULL},
    {"reasoning_content", &T_STR, F_NULL},
};
static const field TOKEN_EV[] = {
    {"prompt_token_ids", &T_INTS, F_REQ},
    {"response_token_ids", &T_INTS, F_REQ},
};
static const field ACP_TOOL_CALL_EV[] = {
    {"tool_call_id", &T_STR, F_REQ}, {"title", &T_STR, F_REQ},      {"status", &T_STR, F_NULL},
    {"tool_kind", &T_STR, F_NULL},   {"raw_input", &T_ANY, F_NULL}, {"raw_output", &T_ANY, F_NULL},
    {"content", &T_ANYS, F_NULL},    {"is_error", &T_BOOL, 0},
};
static const field SERVER_ERROR_EV[] = {
    {"code", &T_STR, F_REQ},
    {"detail", &T_STR, F_REQ},
};

typedef struct kind_schema {
    const field *fields;
    size_t n;
    /* The class's `source` default; EV_SRC_NONE when it has none (the
     * producer must say). */
    ev_source default_source;
} kind_schema;

#define KS(f, src)                                                                                 \
    {                                                                                              \
        (f), COUNT(f), (src)                                                                       \
    }
#define KS_EMPTY(src)                                                                              \
    {                                                                                              \
        NULL, 0, (src)                                                                             \
    }

static const kind_schema SCHEMAS[EV_KIND_COUNT] = {
    [EV_MESSAGE] = KS(MESSAGE_EV, EV_SRC_NONE),
    [EV_ACTION] = KS(ACTION_EV, EV_SRC_AGENT),
    [EV_OBSERVATION] = KS(OBSERVATION_EV, EV_SRC_ENVIRONMENT),
    [EV_USER_REJECT] = KS(USER_REJECT_EV, EV_SRC_ENVIRONMENT),
    [EV_AGENT_ERROR] = KS(AGENT_ERROR_EV, EV_SRC_AGENT),
    [EV_SYSTEM_PROMPT] = KS(SYSTEM_PROMPT_EV, EV_SRC_AGENT),
    [EV_PAUSE] = KS_EMPTY(EV_SRC_USER),
    [EV_INTERRUPT] = KS_EMPTY(EV_SRC_USER),
    [EV_CONDENSATION] = KS(CONDENSATION_EV, EV_SRC_ENVIRONMENT),
    [EV_CONDENSATION_REQUEST] = KS_EMPTY(EV_SRC_ENVIRONMENT),
    [EV_CONDENSATION_SUMMARY] = KS(CONDENSATION_SUMMARY_EV, EV_SRC_ENVIRONMENT),
    [EV_STATE_UPDATE] = KS(STATE_UPDATE_EV, EV_SRC_ENVIRONMENT),
    [EV_CONVERSATION_ERROR] = KS(CONVERSATION_ERROR_EV, EV_SRC_NONE),
    [EV_HOOK_EXECUTION] = KS(HOOK_EXECUTION_EV, EV_SRC_HOOK),
    [EV_LLM_COMPLETION_LOG] = KS(LLM_COMPLETION_LOG_EV, EV_SRC_ENVIRONMENT),
    [EV_STREAMING_DELTA] = KS(STREAMING_DELTA_EV, EV_SRC_AGENT),
    [EV_TOKEN] = KS(TOKEN_EV, EV_SRC_NONE),
    [EV_ACP_TOOL_CALL] = KS(ACP_TOOL_CALL_EV, EV_SRC_AGENT),
    [EV_SERVER_ERROR] = KS(SERVER_ERROR_EV, EV_SRC_NONE),
};

/* ------------------------------------------------------------ messages --- */

typedef struct vctx {
    const char *kind; /* the message prefix: the event's kind, "event", or none */
    char *err;
    size_t errlen;
    const rt_jdoc *d; /* the document the values are in */
} vctx;

/* Enough of a path to tell where the problem is; deeper paths are cut. */
#define PATH_MAX_ 160

/* A name taken from the input, made fit for a one-line message: at most
 * 64 bytes, cut at a character boundary, control characters as '?'. */
static void printable(const char *s, size_t len, char out[80])
{
    size_t o = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (o >= 64 && (c & 0xc0) != 0x80) {
            memcpy(out + o, "...", 3);
            o += 3;
            break;
        }
        if (o >= 72)
            break; /* a run of continuation bytes: malformed, stop anyway */
        out[o++] = (c < 0x20 || c == 0x7f) ? '?' : (char)c;
    }
    out[o] = '\0';
}

static int fail(vctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int fail(vctx *c, const char *fmt, ...)
{
    if (c->err == NULL || c->errlen == 0)
        return -EINVAL;
    int n = c->kind != NULL ? snprintf(c->err, c->errlen, "%s: ", c->kind) : 0;
    if (n >= 0 && (size_t)n < c->errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(c->err + n, c->errlen - (size_t)n, fmt, ap);
        va_end(ap);
    }
    /* Whatever was cut, never leave half a UTF-8 character at the end. */
    size_t len = strlen(c->err);
    size_t i = len;
    while (i > 0 && ((unsigned char)c->err[i - 1] & 0xc0) == 0x80)
        i--;
    if (i > 0 && ((unsigned char)c->err[i - 1] & 0x80)) {
        unsigned char lead = (unsigned char)c->err[i - 1];
        size_t want = lead >= 0xf0 ? 4 : lead >= 0xe0 ? 3 : 2;
        if (len - (i - 1) < want)
            c->err[i - 1] = '\0';
    }
    return -EINVAL;
}

/* path.key, cut at PATH_MAX_ - 1 bytes: every field checked makes one,
 * and snprintf cost more than the check itself. */
static void sub_key(char out[PATH_MAX_], const char *path, const char *key)
{
    size_t o = 0;
    for (const char *s = path; *s != '\0' && o < PATH_MAX_ - 1; s++)
        out[o++] = *s;
    if (path[0] != '\0' && o < PATH_MAX_ - 1)
        out[o++] = '.';
    for (const char *s = key; *s != '\0' && o < PATH_MAX_ - 1; s++)
        out[o++] = *s;
    out[o] = '\0';
}

/* path[i], cut the same way (a list's elements: no snprintf either). */
static void sub_index(char out[PATH_MAX_], const char *path, size_t i)
{
    char digits[24];
    size_t nd = 0, o = 0;
    do
        digits[nd++] = (char)('0' + i % 10);
    while ((i /= 10) != 0);
    for (const char *s = path; *s != '\0' && o < PATH_MAX_ - 1; s++)
        out[o++] = *s;
    if (o < PATH_MAX_ - 1)
        out[o++] = '[';
    while (nd > 0 && o < PATH_MAX_ - 1)
        out[o++] = digits[--nd];
    if (o < PATH_MAX_ - 1)
        out[o++] = ']';
    out[o] = '\0';
}

static int check_value(vctx *c, const char *path, uint32_t v, const ty *t);

static const char *type_phrase(const ty *t)
{
    switch (t->k) {
    case TK_STR:
    case TK_CSTR:
        return "a string";
    case TK_ID:
        return "a non-empty string";
    case TK_BOOL:
        return "a boolean";
    case TK_INT:
        return "an integer";
    case TK_NNINT:
        return "a non-negative integer";
    case TK_SCORE:
        return "a number between 0 and 1";
    case TK_LIST:
        return t->elem->k == TK_STR   ? "a list of strings"
               : t->elem->k == TK_INT ? "a list of integers"
                                      : "a list";
    case TK_MSG_CONTENT:
        return "a list of content";
    case TK_ENUM:
        return "a string";
    default:
        return "an object";
    }
}

static int bad_type(vctx *c, const char *path, const ty *t)
{
    return fail(c, "field '%s' must be %s", path, type_phrase(t));
}

static rt_jtype type_of(const vctx *c, uint32_t v)
{
    return rt_jdoc_type(c->d, v);
}

/* A string's value, or NULL (not a string). */
static const char *str_of(const vctx *c, uint32_t v)
{
    return rt_jdoc_str(c->d, v);
}

static int check_enum(vctx *c, const char *path, uint32_t v, const ty *t)
{
    const char *s = str_of(c, v);
    if (s != NULL)
        for (const char *const *e = t->values; *e != NULL; e++)
            if (strcmp(s, *e) == 0 && strlen(*e) == c->d->node[v].len)
                return 0;
    char list[160] = "";
    size_t o = 0;
    for (const char *const *e = t->values; *e != NULL && o < sizeof(list); e++)
        o += (size_t)snprintf(list + o, sizeof(list) - o, "%s%s", o ? ", " : "", *e);
    return fail(c, "field '%s' must be one of %s", path, list);
}

static const field *find_field(const field *f, size_t n, const char *key, size_t klen)
{
    for (size_t i = 0; i < n; i++)
        if (strlen(f[i].name) == klen && memcmp(f[i].name, key, klen) == 0)
            return &f[i];
    return NULL;
}

static bool listed(const char *const *names, const char *key)
{
    for (; names != NULL && *names != NULL; names++)
        if (strcmp(*names, key) == 0)
            return true;
    return false;
}

static int check_field(vctx *c, const char *path, uint32_t v, const field *f)
{
    if (type_of(c, v) == RT_JNULL) {
        if (f->flags & F_NULL)
            return 0;
        if (f->t->k == TK_ENUM)
            return check_enum(c, path, v, f->t);
        return bad_type(c, path, f->t);
    }
    return check_value(c, path, v, f->t);
}

static int unknown_field(vctx *c, const char *path, const char *key, size_t klen)
{
    char name[80];
    printable(key, klen, name);
    if (path[0] == '\0')
        return fail(c, "unknown field '%s'", name);
    return fail(c, "unknown field '%s.%s'", path, name);
}

/* Members in the order given (so the first problem reported is the first
 * one a reader meets), then the required ones that are missing. If `base`
 * is given, base_at[i] is where base field i's value is (RT_JNONE: not
 * there), so that nobody looks for it again. */
static int check_fields(vctx *c, const char *path, uint32_t o, const field *base, size_t nbase,
                        uint32_t *base_at, const field *f, size_t n, bool forbid,
                        const char *const *deprecated)
{
    char sub[PATH_MAX_];
    const rt_jdoc *d = c->d;
    uint64_t seen = 0; /* f's fields met (models have fewer than 64) */
    for (size_t i = 0; i < nbase; i++)
        base_at[i] = RT_JNONE;
    for (uint32_t k = rt_jdoc_first(d, o); k != RT_JNONE; k = rt_jdoc_next(d, o, k)) {
        const char *key = str_of(c, k);
        size_t klen = d->node[k].len;
        const field *fd = find_field(base, nbase, key, klen);
        if (fd != NULL)
            base_at[fd - base] = k + 1;
        else if ((fd = find_field(f, n, key, klen)) != NULL)
            seen |= 1ull << (fd - f);
        if (fd == NULL) {
            if (forbid && !listed(deprecated, key))
                return unknown_field(c, path, key, klen);
            continue;
        }
        sub_key(sub, path, fd->name);
        int rc = check_field(c, sub, k + 1, fd);
        if (rc != 0)
            return rc;
    }
    for (size_t i = 0; i < n; i++) {
        if ((f[i].flags & F_REQ) && !(seen & 1ull << i)) {
            sub_key(sub, path, f[i].name);
            return fail(c, "missing required field '%s'", sub);
        }
    }
    return 0;
}

static int check_model(vctx *c, const char *path, uint32_t v, const model *m)
{
    if (type_of(c, v) != RT_JOBJ)
        return fail(c, "field '%s' must be an object", path);
    return check_fields(c, path, v, NULL, 0, NULL, m->fields, m->n, m->forbid_extra,
                        m->deprecated);
}

/* The string member key of object v is s. */
static bool member_is(const vctx *c, uint32_t v, const char *key, const char *s)
{
    const char *m = str_of(c, rt_jdoc_get(c->d, v, key));
    return m != NULL && strcmp(m, s) == 0;
}

static bool has_member(const vctx *c, uint32_t v, const char *key)
{
    return rt_jdoc_get(c->d, v, key) != RT_JNONE;
}

/* Smart unions upstream (no discriminator): `type` decides when present,
 * else the member that only one side has. */
static int check_content(vctx *c, const char *path, uint32_t v)
{
    if (type_of(c, v) != RT_JOBJ)
        return fail(c, "field '%s' must be an object", path);
    if (member_is(c, v, "type", "image"))
        return check_model(c, path, v, &IMAGE_CONTENT);
    if (member_is(c, v, "type", "text"))
        return check_model(c, path, v, &TEXT_CONTENT);
    if (has_member(c, v, "type"))
        return fail(c, "field '%s.type' must be one of text, image", path);
    if (has_member(c, v, "image_urls"))
        return check_model(c, path, v, &IMAGE_CONTENT);
    return check_model(c, path, v, &TEXT_CONTENT);
}

static int check_thinking(vctx *c, const char *path, uint32_t v)
{
    if (type_of(c, v) != RT_JOBJ)
        return fail(c, "field '%s' must be an object", path);
    if (member_is(c, v, "type", "thinking"))
        return check_model(c, path, v, &THINKING);
    if (member_is(c, v, "type", "redacted_thinking"))
        return check_model(c, path, v, &REDACTED);
    if (has_member(c, v, "type"))
        return fail(c, "field '%s.type' must be one of thinking, redacted_thinking", path);
    if (!has_member(c, v, "thinking") && has_member(c, v, "data"))
        return check_model(c, path, v, &REDACTED);
    return check_model(c, path, v, &THINKING);
}

static int check_list(vctx *c, const char *path, uint32_t v, const ty *elem)
{
    char sub[PATH_MAX_];
    size_t i = 0;
    for (uint32_t x = rt_jdoc_first(c->d, v); x != RT_JNONE; x = rt_jdoc_next(c->d, v, x), i++) {
        sub_index(sub, path, i);
        /* list[X] elements are never optional: null is refused unless X
         * itself is Any */
        int rc = elem->k == TK_ANY               ? 0
                 : type_of(c, x) == RT_JNULL ? bad_type(c, sub, elem)
                                             : check_value(c, sub, x, elem);
        if (rc != 0)
            return rc;
    }
    return 0;
}

static bool has_nul(const vctx *c, uint32_t v)
{
    return strlen(str_of(c, v)) != c->d->node[v].len;
}

static bool is_number(rt_jtype t)
{
    return t == RT_JINT || t == RT_JREAL;
}

static double number_of(const vctx *c, uint32_t v)
{
    const rt_jnode *n = &c->d->node[v];
    return n->type == RT_JINT ? (double)n->u.i : n->u.r;
}

static int check_value(vctx *c, const char *path, uint32_t v, const ty *t)
{
    rt_jtype jt = type_of(c, v);
    switch (t->k) {
    case TK_ANY:
        return 0;
    case TK_STR:
        return jt == RT_JSTR ? 0 : bad_type(c, path, t);
    case TK_CSTR:
        if (jt != RT_JSTR)
            return bad_type(c, path, t);
        return has_nul(c, v) ? fail(c, "field '%s' must not contain U+0000", path) : 0;
    case TK_ID:
        if (jt != RT_JSTR || c->d->node[v].len == 0)
            return bad_type(c, path, t);
        if (has_nul(c, v))
            return fail(c, "field '%s' must not contain U+0000", path);
        if (strcmp(str_of(c, v), "__root__") == 0)
            return fail(c, "field '%s' may not be the reserved id '__root__'", path);
        return 0;
    case TK_BOOL:
        return jt == RT_JTRUE || jt == RT_JFALSE ? 0 : bad_type(c, path, t);
    case TK_INT:
        return jt == RT_JINT ? 0 : bad_type(c, path, t);
    case TK_NNINT:
        return jt == RT_JINT && c->d->node[v].u.i >= 0 ? 0 : bad_type(c, path, t);
    case TK_SCORE:
        return is_number(jt) && number_of(c, v) >= 0.0 && number_of(c, v) <= 1.0
                   ? 0
                   : bad_type(c, path, t);
    case TK_OBJ:
        return jt == RT_JOBJ ? 0 : bad_type(c, path, t);
    case TK_ENUM:
        return check_enum(c, path, v, t);
    case TK_LIST:
        return jt == RT_JARR ? check_list(c, path, v, t->elem) : bad_type(c, path, t);
    case TK_MODEL:
        return check_model(c, path, v, t->m);
    case TK_PAYLOAD:
        if (jt != RT_JOBJ)
            return bad_type(c, path, t);
        if (str_of(c, rt_jdoc_get(c->d, v, "kind")) == NULL)
            return fail(c, "field '%s' must have a string 'kind'", path);
        return 0;
    case TK_CONTENT:
        return check_content(c, path, v);
    case TK_MSG_CONTENT:
        /* Message coerces a bare string into one TextContent upstream. */
        if (jt == RT_JSTR)
            return 0;
        return jt == RT_JARR ? check_list(c, path, v, &T_CONTENT) : bad_type(c, path, t);
    case TK_THINKING:
        return check_thinking(c, path, v);
    }
    return bad_type(c, path, t);
}

/* --------------------------------------------------------------- events --- */

static ev_source source_from_name(const char *s)
{
    for (int i = EV_SRC_AGENT; i <= EV_SRC_HOOK; i++)
        if (strcmp(s, ev_source_name((ev_source)i)) == 0)
            return (ev_source)i;
    return EV_SRC_NONE;
}

static const char *str_member(const vctx *c, uint32_t o, const char *key)
{
    return str_of(c, rt_jdoc_get(c->d, o, key));
}

int ev_from_doc(rt_jdoc *d, uint32_t at, ev *out, char *err, size_t errlen)
{
    if (out == NULL)
        return -EINVAL;
    memset(out, 0, sizeof(*out));
    vctx c = {"event", err, errlen, d};
    if (d == NULL || at >= d->n || type_of(&c, at) != RT_JOBJ)
        return fail(&c, "must be a JSON object");
    uint32_t kv = rt_jdoc_get(d, at, "kind");
    if (kv == RT_JNONE)
        return fail(&c, "missing required field 'kind'");
    const char *kname = str_of(&c, kv);
    if (kname == NULL)
        return fail(&c, "field 'kind' must be a string");
    ev_kind kind = ev_kind_from_name(kname);
    if (kind == EV_INVALID || strlen(kname) != d->node[kv].len) {
        char name[80];
        printable(kname, d->node[kv].len, name);
        c.kind = NULL;
        return fail(&c, "unknown event kind '%s'", name);
    }

    const kind_schema *ks = &SCHEMAS[kind];
    c.kind = ev_kind_name(kind);
    uint32_t base_at[COUNT(BASE_F)];
    int rc = check_fields(&c, "", at, BASE_F, COUNT(BASE_F), base_at, ks->fields, ks->n, true,
                          NULL);
    if (rc != 0)
        return rc;
    /* `value` is Any, except for the one key the conversation acts on */
    const char *key = str_member(&c, at, "key");
    if (kind == EV_STATE_UPDATE && key != NULL && strcmp(key, "execution_status") == 0 &&
        (rc = check_enum(&c, "value", rt_jdoc_get(d, at, "value"), &T_EXECUTION_STATUS)) != 0)
        return rc;
    const char *src = str_of(&c, base_at[B_SOURCE]);
    if (src == NULL && ks->default_source == EV_SRC_NONE)
        return fail(&c, "missing required field 'source'");

    out->doc = rt_jdoc_ref(d);
    out->at = at;
    out->kind = kind;
    out->source = src != NULL ? source_from_name(src) : ks->default_source;
    out->id = str_of(&c, base_at[B_ID]);
    out->timestamp = str_of(&c, base_at[B_TIMESTAMP]);
    out->parent_id = str_of(&c, base_at[B_PARENT_ID]);
    switch (kind) {
    case EV_ACTION:
    case EV_MESSAGE:
        out->llm_response_id = str_member(&c, at, "llm_response_id");
        break;
    case EV_STATE_UPDATE:
        out->state_key = key;
        break;
    default:
        break;
    }
    if (kind == EV_ACTION || ev_observation_like(out)) {
        out->tool_call_id = str_member(&c, at, "tool_call_id");
        out->tool_name = str_member(&c, at, "tool_name");
    }
    return 0;
}

/* Refused reading: one line, "invalid JSON: <what> at line L, column C". */
static int unreadable(const json_error_t *jerr, char *err, size_t errlen)
{
    vctx c = {"invalid JSON", err, errlen, NULL};
    char text[80];
    printable(jerr->text, strlen(jerr->text), text);
    return fail(&c, "%s at line %d, column %d", text, jerr->line, jerr->column);
}

int ev_parse(const char *json, size_t len, ev *out, char *err, size_t errlen)
{
    if (out == NULL)
        return -EINVAL;
    memset(out, 0, sizeof(*out));
    if (json == NULL) {
        if (err != NULL && errlen > 0)
            snprintf(err, errlen, "invalid JSON: no input");
        return -EINVAL;
    }
    json_error_t jerr;
    /* U+0000 is legal JSON and does occur in tool output; a value that is
     * not an object is refused below, with a clearer message. */
    rt_jdoc *d = rt_jdoc_read(json, len, JSON_ALLOW_NUL | JSON_DECODE_ANY, &jerr);
    if (d == NULL)
        return unreadable(&jerr, err, errlen);
    int rc = ev_from_doc(d, 0, out, err, errlen);
    rt_jdoc_unref(d);
    return rc;
}

int ev_from_json(json_t *obj, ev *out, char *err, size_t errlen)
{
    if (out == NULL)
        return -EINVAL;
    memset(out, 0, sizeof(*out));
    if (obj == NULL)
        return fail(&(vctx){"event", err, errlen, NULL}, "must be a JSON object");
    /* jansson's text: every real with the digits that read back to it */
    char *text = rt_json_dumps(obj, NULL);
    if (text == NULL) {
        if (err != NULL && errlen > 0)
            snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    int rc = ev_parse(text, strlen(text), out, err, errlen);
    free(text);
    return rc;
}
