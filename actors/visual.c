/*
 * visual.c - the terminal visualizer. See visual.h.
 *
 * The content is built line by line into a list first (labels such as
 * "Thought:" marked so that colour can pick them out, as upstream's
 * highlight patterns do), then folded and framed.
 */
#include "visual.h"
#include "visual_impl.h"
#include "runtime/json.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct kind_style {
    const char *kind, *title, *color;
} kind_style;

static const kind_style styles[] = {
    {"ActionEvent", "Agent Action", BLUE},
    {"ObservationEvent", "Observation", YELLOW},
    {"UserRejectObservation", "User Rejected Action", RED},
    {"AgentErrorEvent", "Agent Error", RED},
    {"MessageEvent", "Message", NULL}, /* by source */
    {"SystemPromptEvent", "System Prompt", MAGENTA},
    {"PauseEvent", "User Paused", BRIGHT_YELLOW},
    {"Condensation", "Condensation", WHITE},
    {"CondensationRequest", "Condensation Request", MAGENTA},
    {"ACPToolCallEvent", "ACP Tool Call", BLUE},
};

/* Labels upstream highlights, and how. */
static const struct {
    const char *label, *color;
} labels[] = {
    {"Reasoning:", GREY}, {"Thought:", GREY},  {"Action:", BLUE},          {"Arguments:", BLUE},
    {"Tool:", YELLOW},    {"Result:", YELLOW}, {"Rejection Reason:", RED},
};

static void add(vis_lines *l, const char *s, size_t len)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 16;
        char **v = realloc(l->v, cap * sizeof(*v));
        if (v == NULL)
            return;
        l->v = v;
        l->cap = cap;
    }
    char *c = malloc(len + 1);
    if (c == NULL)
        return;
    memcpy(c, s, len);
    c[len] = '\0';
    l->v[l->n++] = c;
}

/* Text split at newlines into lines, each after `indent`. */
void vis_text(vis_lines *l, const char *indent, const char *s)
{
    size_t il = strlen(indent);
    for (;;) {
        const char *nl = strchr(s, '\n');
        size_t n = nl != NULL ? (size_t)(nl - s) : strlen(s);
        char *buf = malloc(il + n + 1);
        if (buf == NULL)
            return;
        memcpy(buf, indent, il);
        memcpy(buf + il, s, n);
        add(l, buf, il + n);
        free(buf);
        if (nl == NULL)
            return;
        s = nl + 1;
    }
}

void vis_labeled(vis_lines *l, const char *label, const char *text)
{
    if (text == NULL || text[0] == '\0')
        return;
    size_t n = strlen(label) + 1 + strlen(text) + 1;
    char *buf = malloc(n);
    if (buf == NULL)
        return;
    snprintf(buf, n, "%s %s", label, text);
    vis_text(l, "", buf);
    free(buf);
}

/* The text as a C string (the caller frees it); "" if it failed. */
static char *cstr(rt_text *t)
{
    rt_text_put(t, "", 0); /* room for the NUL is always kept */
    if (t->p == NULL || t->failed) {
        free(t->p);
        return calloc(1, 1);
    }
    t->p[t->len] = '\0';
    return t->p;
}

static const char *str(json_t *o, const char *key)
{
    return json_string_value(json_object_get(o, key));
}

/* The text items of a content list, joined with newlines; malloc'd, "" if none. */
static char *joined_text(json_t *content)
{
    rt_text t = {0};
    size_t i;
    json_t *item;
    json_array_foreach(content, i, item)
    {
        const char *s = str(item, "text");
        if (s == NULL)
            continue;
        if (t.len > 0)
            rt_text_putc(&t, '\n');
        rt_text_puts(&t, s);
    }
    return cstr(&t);
}

static void action(vis_lines *l, json_t *e)
{
    const char *risk = str(e, "security_risk");
    if (risk != NULL && strcmp(risk, "UNKNOWN") != 0)
        vis_labeled(l, "Predicted Security Risk:", risk);
    vis_labeled(l, "Summary:", str(e, "summary"));
    vis_labeled(l, "Reasoning:", str(e, "reasoning_content"));
    char *thought = joined_text(json_object_get(e, "thought"));
    vis_labeled(l, "Thought:", thought);
    free(thought);
    json_t *a = json_object_get(e, "action");
    if (json_is_object(a)) {
        vis_labeled(l, "Action:", str(a, "kind") != NULL ? str(a, "kind") : "?");
        vis_text(l, "", "Arguments:");
        const char *k;
        json_t *v;
        json_object_foreach(a, k, v)
        {
            if (strcmp(k, "kind") == 0 || json_is_null(v))
                continue;
            char *val = json_is_string(v) ? strdup(json_string_value(v))
                                          : rt_json_dumps(v, NULL);
            if (val == NULL)
                continue;
            size_t n = strlen(k) + 4;
            char *indent = malloc(n);
            if (indent != NULL && strchr(val, '\n') == NULL) {
                snprintf(indent, n, "  %s:", k);
                vis_labeled(l, indent, val);
            } else if (indent != NULL) { /* a multi-line value under its name */
                snprintf(indent, n, "  %s:", k);
                vis_text(l, "", indent);
                vis_text(l, "    ", val);
            }
            free(indent);
            free(val);
        }
    } else {
        json_t *call = json_object_get(e, "tool_call");
        vis_text(l, "", "Function call:");
        char buf[600];
        snprintf(buf, sizeof(buf), "- %s (%s)",
                 str(call, "name") != NULL ? str(call, "name") : str(e, "tool_name"),
                 str(call, "id") != NULL ? str(call, "id") : str(e, "tool_call_id"));
        vis_text(l, "", buf);
    }
}

static void observation(vis_lines *l, json_t *e)
{
    vis_labeled(l, "Tool:", str(e, "tool_name"));
    vis_text(l, "", "Result:");
    json_t *o = json_object_get(e, "observation");
    if (json_is_true(json_object_get(o, "is_error")))
        vis_text(l, "", "\xe2\x9c\x97 [An error occurred during execution.]");
    char *text = joined_text(json_object_get(o, "content"));
    if (text[0] != '\0')
        vis_text(l, "", text);
    free(text);
}

static void message(vis_lines *l, json_t *e)
{
    json_t *m = json_object_get(e, "llm_message");
    char *text = joined_text(json_object_get(m, "content"));
    vis_text(l, "", text[0] != '\0' ? text : "[no text content]");
    free(text);
    json_t *skills = json_object_get(e, "activated_skills");
    if (json_array_size(skills) > 0) {
        rt_text t = {0};
        size_t i;
        json_t *s;
        json_array_foreach(skills, i, s)
        {
            rt_text_puts(&t, i > 0 ? ", " : "");
            rt_text_puts(&t, json_is_string(s) ? json_string_value(s) : "?");
        }
        char *joined = cstr(&t);
        vis_labeled(l, "Activated Skills:", joined);
        free(joined);
    }
}

static void system_prompt(vis_lines *l, json_t *e)
{
    const char *p = str(json_object_get(e, "system_prompt"), "text");
    vis_text(l, "", p != NULL ? p : "");
    json_t *tools = json_object_get(e, "tools");
    char buf[256];
    snprintf(buf, sizeof(buf), "Tools Available: %zu", json_array_size(tools));
    vis_text(l, "", buf);
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t)
    {
        const char *d = str(t, "description") != NULL ? str(t, "description") : "";
        size_t n = strcspn(d, "\n");
        const char *name = str(t, "title") != NULL ? str(t, "title") : str(t, "kind");
        snprintf(buf, sizeof(buf), "  - %s: %.*s%s", name != NULL ? name : "?",
                 (int)(n > 100 ? 100 : n), d, n > 100 ? "..." : "");
        vis_text(l, "", buf);
    }
}

static void condensation(vis_lines *l, json_t *e)
{
    vis_text(l, "", "Auto Conversation Condensation Triggered.");
    char buf[64];
    snprintf(buf, sizeof(buf), "Forgetting %zu events",
             json_array_size(json_object_get(e, "forgotten_event_ids")));
    vis_text(l, "", buf);
    const char *s = str(e, "summary");
    if (s != NULL) {
        vis_text(l, "", "[Summary of Events Being Forgotten]");
        vis_text(l, "", s);
    }
}

/* The block's content lines; the style, or NULL when the event is not shown. */
static const kind_style *content(json_t *e, vis_lines *l, const char **title, const char **color)
{
    const char *kind = str(e, "kind");
    const kind_style *st = NULL;
    for (size_t i = 0; kind != NULL && i < sizeof(styles) / sizeof(styles[0]); i++)
        if (strcmp(kind, styles[i].kind) == 0)
            st = &styles[i];
    if (st == NULL)
        return NULL;
    *title = st->title;
    *color = st->color;
    if (strcmp(kind, "ActionEvent") == 0) {
        if (!json_is_object(json_object_get(e, "action")))
            *title = "Agent Action (Not Executed)";
        action(l, e);
    } else if (strcmp(kind, "ObservationEvent") == 0) {
        observation(l, e);
    } else if (strcmp(kind, "UserRejectObservation") == 0) {
        vis_labeled(l, "Tool:", str(e, "tool_name"));
        vis_labeled(l, "Rejection Reason:", str(e, "rejection_reason"));
    } else if (strcmp(kind, "AgentErrorEvent") == 0) {
        vis_text(l, "", "Error Details:");
        vis_text(l, "", str(e, "error") != NULL ? str(e, "error") : "");
    } else if (strcmp(kind, "MessageEvent") == 0) {
        const char *src = str(e, "source") != NULL ? str(e, "source") : "";
        bool agent = strcmp(src, "agent") == 0, user = strcmp(src, "user") == 0;
        *title = agent                      ? "Message from Agent"
                 : user                     ? "Message from User"
                 : strcmp(src, "hook") == 0 ? "Message from Hook"
                                            : "Message from Environment";
        *color = agent ? BLUE : user ? GOLD : MAGENTA;
        message(l, e);
    } else if (strcmp(kind, "SystemPromptEvent") == 0) {
        system_prompt(l, e);
    } else if (strcmp(kind, "PauseEvent") == 0) {
        vis_text(l, "", "Conversation Paused");
    } else if (strcmp(kind, "Condensation") == 0) {
        condensation(l, e);
    } else if (strcmp(kind, "CondensationRequest") == 0) {
        vis_text(l, "", "Conversation condensation requested");
    } else { /* ACPToolCallEvent */
        vis_labeled(l, "Tool:", str(e, "title"));
        vis_labeled(l, "Status:", str(e, "status"));
    }
    return st;
}

static void rule(rt_text *out, const char *title, const char *color, const visual_opts *o,
                 const char *indent)
{
    int width = o->width > 0 ? o->width : WIDTH_DEFAULT;
    rt_text_puts(out, indent);
    rt_text_puts(out, "\xe2\x94\x80\xe2\x94\x80 "); /* "── " */
    if (o->color)
        rt_text_printf(out, "\x1b[1;%sm%s\x1b[0m", color, title);
    else
        rt_text_puts(out, title);
    rt_text_putc(out, ' ');
    for (int n = (int)strlen(indent) + (int)strlen(title) + 4; n < width; n++)
        rt_text_puts(out, "\xe2\x94\x80");
    rt_text_putc(out, '\n');
}

static void line(rt_text *out, const char *s, const visual_opts *o, const char *indent)
{
    rt_text_puts(out, indent);
    for (size_t i = 0; o->color && i < sizeof(labels) / sizeof(labels[0]); i++) {
        size_t n = strlen(labels[i].label);
        if (strncmp(s, labels[i].label, n) == 0) {
            rt_text_printf(out, "\x1b[1;%sm%s\x1b[0m%s\n", labels[i].color, labels[i].label, s + n);
            return;
        }
    }
    rt_text_puts(out, s);
    rt_text_putc(out, '\n');
}

void vis_frame(rt_text *out, const char *title, const char *color, const vis_lines *l,
               const visual_opts *o, const char *indent)
{
    size_t keep = o->fold_lines == 0  ? FOLD_DEFAULT
                  : o->fold_lines < 0 ? l->n
                                      : (size_t)o->fold_lines;
    rule(out, title, color, o, indent);
    rt_text_putc(out, '\n');
    for (size_t i = 0; i < l->n && i < keep; i++)
        line(out, l->v[i], o, indent);
    if (l->n > keep) {
        rt_text_puts(out, indent);
        rt_text_printf(out, "%s... (%zu more lines)%s\n", o->color ? "\x1b[2m" : "", l->n - keep,
                       o->color ? "\x1b[0m" : "");
    }
    rt_text_putc(out, '\n');
}

void vis_lines_free(vis_lines *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->v[i]);
    free(l->v);
    memset(l, 0, sizeof(*l));
}

bool visual_event(rt_text *out, json_t *event, const visual_opts *o)
{
    visual_opts d = {0};
    if (o == NULL)
        o = &d;
    vis_lines l = {0};
    const char *title = NULL, *color = NULL;
    bool shown = content(event, &l, &title, &color) != NULL && l.n > 0;
    if (shown)
        vis_frame(out, title, color, &l, o, "");
    vis_lines_free(&l);
    return shown;
}

void visual_status(rt_text *out, const char *status, const char *rule_name, const visual_opts *o)
{
    visual_opts d = {0};
    if (o == NULL)
        o = &d;
    bool bad = status != NULL && (strcmp(status, "stuck") == 0 || strcmp(status, "error") == 0);
    if (o->color)
        rt_text_printf(out, "\x1b[1;%sm", bad ? RED : GREY);
    rt_text_printf(out, "\xe2\x80\xa2 status: %s", status != NULL ? status : "?");
    if (rule_name != NULL)
        rt_text_printf(out, " (rule: %s)", rule_name);
    rt_text_puts(out, o->color ? "\x1b[0m\n" : "\n");
}

bool visual_color_ok(FILE *f)
{
    const char *no = getenv("NO_COLOR");
    return (no == NULL || no[0] == '\0') && isatty(fileno(f));
}
