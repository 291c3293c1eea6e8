/*
 * transcript_opencode.c - an OpenCode session export (`opencode export`)
 * as parley events (transcript.h). The export is checked whole before
 * anything is made, so a bad one appends nothing. A tool part holds its
 * call and, once finished, its result: the action, then the result at
 * once (id "<part id>-result", the part's end time). A call still
 * running when the export was taken stays open, and is closed as
 * interrupted if the user speaks again.
 */
#include "actors/transcript_impl.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *str(const json_t *o, const char *key)
{
    return json_string_value(json_object_get(o, key));
}

/* time[key] in ms as ISO 8601 into out; else the fallback (may be ""). */
static const char *time_of(const json_t *time, const char *key, const char *fallback, char out[32])
{
    json_t *v = json_object_get(time, key);
    if (!json_is_number(v))
        return fallback[0] != '\0' ? fallback : NULL;
    tr_iso_ms((long long)json_number_value(v), out);
    return out;
}

static int check(const json_t *x, char *why, size_t whylen)
{
    json_t *msgs = json_object_get(x, "messages");
    if (!json_is_object(x) || !json_is_array(msgs))
        return tr_bad(why, whylen, "not an OpenCode export: no \"messages\" list");
    size_t i, j;
    json_t *m, *p;
    json_array_foreach(msgs, i, m)
    {
        json_t *info = json_object_get(m, "info");
        const char *role = str(info, "role");
        if (str(info, "id") == NULL || role == NULL)
            return tr_bad(why, whylen, "message %zu: no info.id or info.role", i + 1);
        if (strcmp(role, "user") != 0 && strcmp(role, "assistant") != 0)
            return tr_bad(why, whylen, "message %zu: unknown role '%.32s'", i + 1, role);
        if (!json_is_array(json_object_get(m, "parts")))
            return tr_bad(why, whylen, "message %zu: no parts list", i + 1);
        json_array_foreach(json_object_get(m, "parts"), j, p)
        {
            const char *type = str(p, "type");
            if (type == NULL || str(p, "id") == NULL)
                return tr_bad(why, whylen, "message %zu, part %zu: no type or id", i + 1, j + 1);
            if (strcmp(type, "tool") == 0 && (str(p, "tool") == NULL || str(p, "callID") == NULL ||
                                              !json_is_object(json_object_get(p, "state"))))
                return tr_bad(why, whylen,
                              "message %zu, part %zu: a tool part without tool, callID "
                              "or state",
                              i + 1, j + 1);
        }
    }
    return 0;
}

static bool image_file(const json_t *p)
{
    const char *mime = str(p, "mime");
    return strcmp(str(p, "type"), "file") == 0 && mime != NULL && strncmp(mime, "image/", 6) == 0 &&
           str(p, "url") != NULL;
}

static int user_message(tr_calls *calls, const json_t *m, const char *ts, const json_t *where,
                        json_t *out)
{
    json_t *parts = json_array(), *evs = json_array();
    if (parts == NULL || evs == NULL) {
        json_decref(parts);
        json_decref(evs);
        return -ENOMEM;
    }
    size_t j;
    json_t *p;
    json_array_foreach(json_object_get(m, "parts"), j, p)
    {
        if (strcmp(str(p, "type"), "text") == 0 && str(p, "text") != NULL &&
            str(p, "text")[0] != '\0')
            json_array_append_new(parts, tr_text_part(str(p, "text")));
        else if (image_file(p))
            json_array_append_new(parts, tr_image_part(str(p, "url")));
    }
    if (json_array_size(parts) == 0) {
        json_decref(parts);
        json_decref(evs);
        return 0;
    }
    json_t *open = tr_calls_open(calls, "main");
    const char *call;
    json_t *v;
    void *tmp;
    json_object_foreach_safe(open, tmp, call, v)
    {
        const char *tool, *action;
        tr_calls_find(calls, call, &tool, &action);
        json_array_append_new(evs, tr_interrupted(call, tool));
        tr_calls_close(calls, "main", call);
    }
    size_t primary = json_array_size(evs);
    json_array_append_new(evs, tr_user_message(parts));
    int rc = tr_emit(evs, primary, str(json_object_get(m, "info"), "id"), ts, where, out);
    json_decref(evs);
    return rc;
}

static int tool_part(tr_calls *calls, const json_t *p, const char *resp, const char *created,
                     json_t *where, json_t *out)
{
    json_t *st = json_object_get(p, "state");
    const char *status = str(st, "status"), *tool = str(p, "tool"), *call = str(p, "callID");
    json_t *input = json_object_get(st, "input");
    const char *summary = str(st, "title") != NULL ? str(st, "title") : str(input, "description");
    char t1[32], t2[32];
    const char *start = time_of(json_object_get(st, "time"), "start", created, t1);
    json_t *evs = json_pack("[o]", tr_action(call, tool, input, summary, resp));
    int rc = evs != NULL ? tr_emit(evs, 0, str(p, "id"), start, where, out) : -ENOMEM;
    json_decref(evs);
    if (rc == 0)
        rc = tr_calls_add(calls, "main", call, tool, str(p, "id"));
    bool done = status != NULL && strcmp(status, "completed") == 0;
    bool failed = status != NULL && strcmp(status, "error") == 0;
    if (rc != 0 || (!done && !failed))
        return rc;
    const char *text = done ? str(st, "output") : str(st, "error");
    char id[300];
    snprintf(id, sizeof(id), "%s-result", str(p, "id"));
    evs = json_pack("[o]",
                    tr_result(call, tool, str(p, "id"), NULL, text != NULL ? text : "", failed));
    rc = evs != NULL
             ? tr_emit(evs, 0, id,
                       time_of(json_object_get(st, "time"), "end", start != NULL ? start : "", t2),
                       where, out)
             : -ENOMEM;
    json_decref(evs);
    tr_calls_close(calls, "main", call);
    return rc;
}

static int assistant_message(tr_calls *calls, const json_t *m, size_t mi, const char *created,
                             json_t *out)
{
    const char *resp = str(json_object_get(m, "info"), "id");
    size_t j;
    json_t *p;
    int rc = 0;
    json_array_foreach(json_object_get(m, "parts"), j, p)
    {
        const char *type = str(p, "type"), *text = str(p, "text");
        json_t *where =
            json_pack("{s:I, s:I}", "message", (json_int_t)mi + 1, "part", (json_int_t)j + 1);
        char t[32];
        const char *ts = time_of(json_object_get(p, "time"), "start", created, t);
        bool blank = text == NULL || text[strspn(text, " \t\r\n")] == '\0';
        json_t *evs = NULL;
        if (where == NULL)
            rc = -ENOMEM;
        else if (strcmp(type, "tool") == 0)
            rc = tool_part(calls, p, resp, created, where, out);
        else if (strcmp(type, "text") == 0 && !blank)
            evs = json_pack("[o]", tr_agent_text(text, resp));
        else if (strcmp(type, "reasoning") == 0 && !blank)
            evs = json_pack("[o]", tr_agent_thinking(text, NULL, false, resp));
        if (rc == 0 && evs != NULL)
            rc = tr_emit(evs, 0, str(p, "id"), ts, where, out);
        json_decref(evs);
        json_decref(where);
        if (rc != 0)
            return rc;
    }
    return 0;
}

int tr_opencode(const json_t *x, json_t *out, char *why, size_t whylen)
{
    int rc = check(x, why, whylen);
    if (rc != 0)
        return rc;
    tr_calls calls;
    if (tr_calls_init(&calls) != 0)
        return -ENOMEM;
    size_t first = json_array_size(out), i;
    json_t *m;
    json_array_foreach(json_object_get(x, "messages"), i, m)
    {
        json_t *info = json_object_get(m, "info");
        char created[32] = "";
        time_of(json_object_get(info, "time"), "created", "", created);
        if (strcmp(str(info, "role"), "user") == 0) {
            json_t *where = json_pack("{s:I}", "message", (json_int_t)i + 1);
            rc = where != NULL ? user_message(&calls, m, created[0] ? created : NULL, where, out)
                               : -ENOMEM;
            json_decref(where);
        } else {
            rc = assistant_message(&calls, m, i, created, out);
        }
        if (rc != 0)
            break;
    }
    tr_calls_clear(&calls);
    if (rc != 0)
        while (json_array_size(out) > first)
            json_array_remove(out, json_array_size(out) - 1);
    return rc;
}
