/*
 * visual_block.c - the terminal visualizer for blocks (reducer.h): one
 * block framed as visual_event frames an event, a tool call with its
 * result under it, a subagent's blocks indented by their depth, thinking
 * folded shorter than the rest. Pure: JSON in, text out.
 */
#include "visual_impl.h"
#include "runtime/json.h"

#include <stdlib.h>
#include <string.h>

enum { THINKING_LINES = 3, DEPTH_MAX = 8 };

static const char *str(const json_t *o, const char *key)
{
    return json_string_value(json_object_get(o, key));
}

/* A value as text: a string as it is, anything else as compact JSON. */
static void value(vis_lines *l, const char *label, const json_t *v)
{
    if (v == NULL || json_is_null(v))
        return;
    if (label != NULL)
        vis_text(l, "", label);
    if (json_is_string(v)) {
        vis_text(l, "", json_string_value(v));
        return;
    }
    char *s = rt_json_dumps(v, NULL);
    vis_text(l, "", s != NULL ? s : "?");
    free(s);
}

/* A user message's content: a string, or text and image parts. */
static void parts(vis_lines *l, const json_t *content)
{
    if (!json_is_array(content)) {
        value(l, NULL, content);
        return;
    }
    size_t i;
    json_t *p;
    json_array_foreach(content, i, p)
    {
        if (str(p, "text") != NULL)
            vis_text(l, "", str(p, "text"));
        else
            vis_text(l, "", "[image]");
    }
}

static void tool(vis_lines *l, const json_t *b, const json_t *result)
{
    const char *d = str(b, "description"), *title = str(b, "displayName");
    if (d != NULL && (title == NULL || strcmp(d, title) != 0)) /* not the title again */
        vis_labeled(l, "Summary:", d);
    value(l, "Arguments:", json_object_get(b, "input"));
    if (result != NULL) {
        vis_text(l, "",
                 json_is_true(json_object_get(result, "isError")) ? "Result: \xe2\x9c\x97 [error]"
                                                                  : "Result:");
        value(l, NULL, json_object_get(result, "output"));
    } else if (strcmp(str(b, "status") ? str(b, "status") : "", "error") == 0) {
        vis_text(l, "", "\xe2\x9c\x97 [failed]");
    }
}

bool visual_block(rt_text *out, const json_t *b, const json_t *result, int depth,
                  const visual_opts *o)
{
    visual_opts d = {0};
    if (o == NULL)
        o = &d;
    visual_opts folded = *o;
    const char *type = str(b, "type") ? str(b, "type") : "";
    const char *title = type, *color = WHITE;
    char buf[160];
    vis_lines l = {0};
    if (strcmp(type, "user_message") == 0) {
        title = "Message from User", color = GOLD;
        parts(&l, json_object_get(b, "content"));
    } else if (strcmp(type, "assistant_text") == 0) {
        title = "Message from Agent", color = BLUE;
        value(&l, NULL, json_object_get(b, "content"));
    } else if (strcmp(type, "thinking") == 0) {
        title = "Thinking", color = GREY;
        value(&l, NULL, json_object_get(b, "content"));
        if (o->fold_lines >= 0)
            folded.fold_lines = THINKING_LINES;
    } else if (strcmp(type, "tool_use") == 0) {
        const char *name = str(b, "displayName") ? str(b, "displayName") : str(b, "toolName");
        snprintf(buf, sizeof(buf), "Tool: %.100s", name ? name : "?");
        title = buf,
        color = result != NULL && json_is_true(json_object_get(result, "isError")) ? RED : BLUE;
        tool(&l, b, result);
    } else if (strcmp(type, "tool_result") == 0) {
        snprintf(buf, sizeof(buf), "Result of %.100s",
                 str(b, "toolUseId") ? str(b, "toolUseId") : "?");
        title = buf, color = json_is_true(json_object_get(b, "isError")) ? RED : YELLOW;
        value(&l, NULL, json_object_get(b, "output"));
    } else if (strcmp(type, "subagent") == 0) {
        snprintf(buf, sizeof(buf), "Subagent: %.100s", str(b, "name") ? str(b, "name") : "task");
        title = buf, color = MAGENTA;
        vis_labeled(&l, "Summary:", str(b, "description"));
        vis_labeled(&l, "Task:", str(b, "input"));
        vis_labeled(&l, "Status:", str(b, "status"));
        value(&l, "Output:", json_object_get(b, "output"));
    } else if (strcmp(type, "system") == 0) {
        snprintf(buf, sizeof(buf), "System (%.60s)", str(b, "subtype") ? str(b, "subtype") : "?");
        title = buf, color = MAGENTA;
        value(&l, NULL, json_object_get(b, "message"));
    } else if (strcmp(type, "error") == 0) {
        title = "Error", color = RED;
        value(&l, NULL, json_object_get(b, "message"));
        vis_labeled(&l, "Code:", str(b, "code"));
    } else if (strcmp(type, "skill_load") == 0) {
        snprintf(buf, sizeof(buf), "Skill: %.100s",
                 str(b, "skillName") ? str(b, "skillName") : "?");
        title = buf, color = MAGENTA;
        value(&l, NULL, json_object_get(b, "content"));
    } else {
        return false;
    }
    if (l.n == 0)
        vis_text(&l, "", "[empty]");
    char indent[2 * DEPTH_MAX + 1];
    int n = depth < 0 ? 0 : depth > DEPTH_MAX ? DEPTH_MAX : depth;
    memset(indent, ' ', (size_t)(2 * n));
    indent[2 * n] = '\0';
    vis_frame(out, title, color, &l, &folded, indent);
    vis_lines_free(&l);
    return true;
}
