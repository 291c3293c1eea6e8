/*
 * acp_registry.c - the agents a server may host (acp_registry.h).
 */
#include "acp_registry.h"

#include "runtime/json.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { NAME_MAX_ = 64, WORDS_MAX = 256 };

static int fail(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int fail(char *err, size_t errlen, const char *fmt, ...)
{
    if (err != NULL && errlen > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return -1;
}

void acp_free_strv(char **v)
{
    for (size_t i = 0; v != NULL && v[i] != NULL; i++)
        free(v[i]);
    free(v);
}

int acp_split_words(const char *s, char ***out, char *err, size_t errlen)
{
    size_t n = 0, len = strlen(s);
    char **v = calloc(WORDS_MAX + 1, sizeof(*v));
    char *w = malloc(len + 1);
    if (v == NULL || w == NULL) {
        free(v);
        free(w);
        return fail(err, errlen, "out of memory");
    }
    size_t i = 0;
    for (;;) {
        while (s[i] == ' ' || s[i] == '\t' || s[i] == '\n')
            i++;
        if (s[i] == '\0')
            break;
        size_t k = 0;
        while (s[i] != '\0' && s[i] != ' ' && s[i] != '\t' && s[i] != '\n') {
            char c = s[i++];
            if (c == '\\') {
                if (s[i] == '\0')
                    break; /* a trailing backslash: nothing to keep */
                if (s[i] != '\n')
                    w[k++] = s[i];
                i++;
            } else if (c == '\'') {
                const char *end = strchr(s + i, '\'');
                if (end == NULL) {
                    free(w);
                    acp_free_strv(v);
                    return fail(err, errlen, "an unterminated ' in the command");
                }
                memcpy(w + k, s + i, (size_t)(end - (s + i)));
                k += (size_t)(end - (s + i));
                i = (size_t)(end - s) + 1;
            } else if (c == '"') {
                while (s[i] != '\0' && s[i] != '"') {
                    if (s[i] == '\\' && s[i + 1] != '\0' && strchr("\"\\$`\n", s[i + 1])) {
                        if (s[i + 1] != '\n')
                            w[k++] = s[i + 1];
                        i += 2;
                    } else {
                        w[k++] = s[i++];
                    }
                }
                if (s[i] != '"') {
                    free(w);
                    acp_free_strv(v);
                    return fail(err, errlen, "an unterminated \" in the command");
                }
                i++;
            } else {
                w[k++] = c;
            }
        }
        if (n == WORDS_MAX) {
            free(w);
            acp_free_strv(v);
            return fail(err, errlen, "more than %d words in the command", WORDS_MAX);
        }
        if ((v[n++] = strndup(w, k)) == NULL) {
            free(w);
            acp_free_strv(v);
            return fail(err, errlen, "out of memory");
        }
    }
    free(w);
    if (n == 0) {
        acp_free_strv(v);
        return fail(err, errlen, "the command is empty");
    }
    *out = v;
    return 0;
}

static bool good_name(const char *s, size_t n)
{
    if (n == 0 || n > NAME_MAX_)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '-' || c == '_' || c == '.'))
            return false;
    }
    return true;
}

const acp_agent_spec *acp_registry_find(const acp_registry *r, const char *name)
{
    for (size_t i = 0; r != NULL && name != NULL && i < r->n; i++)
        if (strcmp(r->agents[i].name, name) == 0)
            return &r->agents[i];
    return NULL;
}

static char **copy_strv(char *const *v)
{
    size_t n = 0;
    while (v != NULL && v[n] != NULL)
        n++;
    char **c = calloc(n + 1, sizeof(*c));
    for (size_t i = 0; c != NULL && i < n; i++)
        if ((c[i] = strdup(v[i])) == NULL) {
            acp_free_strv(c);
            return NULL;
        }
    return c;
}

static void spec_clear(acp_agent_spec *a)
{
    free(a->name);
    acp_free_strv(a->argv);
    acp_free_strv(a->env);
    free(a->cwd);
}

int acp_registry_add(acp_registry *r, const acp_agent_spec *spec, char *err, size_t errlen)
{
    if (spec->name == NULL || !good_name(spec->name, strlen(spec->name)))
        return fail(err, errlen,
                    "an agent's name is 1 to 64 letters, digits, '-', '_' or '.', not '%.64s'",
                    spec->name != NULL ? spec->name : "");
    if (acp_registry_find(r, spec->name) != NULL)
        return fail(err, errlen, "agent '%s' is registered twice", spec->name);
    if (spec->argv == NULL || spec->argv[0] == NULL || spec->argv[0][0] == '\0')
        return fail(err, errlen, "agent '%s' has no command", spec->name);
    acp_agent_spec *na = realloc(r->agents, (r->n + 1) * sizeof(*na));
    if (na == NULL)
        return fail(err, errlen, "out of memory");
    r->agents = na;
    acp_agent_spec *a = &r->agents[r->n];
    memset(a, 0, sizeof(*a));
    a->name = strdup(spec->name);
    a->argv = copy_strv(spec->argv);
    a->env = copy_strv(spec->env);
    a->cwd = spec->cwd != NULL ? strdup(spec->cwd) : NULL;
    if (a->name == NULL || a->argv == NULL || a->env == NULL ||
        (spec->cwd != NULL && a->cwd == NULL)) {
        spec_clear(a);
        return fail(err, errlen, "out of memory");
    }
    r->n++;
    return 0;
}

int acp_registry_add_arg(acp_registry *r, const char *arg, char *err, size_t errlen)
{
    const char *eq = strchr(arg, '=');
    if (eq == NULL || !good_name(arg, (size_t)(eq - arg)))
        return fail(err, errlen,
                    "--agent wants NAME=COMMAND, NAME of letters, digits, '-', '_', '.'");
    char name[NAME_MAX_ + 1];
    memcpy(name, arg, (size_t)(eq - arg));
    name[eq - arg] = '\0';
    acp_agent_spec s = {.name = name};
    char why[200];
    if (acp_split_words(eq + 1, &s.argv, why, sizeof(why)) != 0)
        return fail(err, errlen, "--agent %s: %s", name, why);
    int rc = acp_registry_add(r, &s, err, errlen);
    acp_free_strv(s.argv);
    return rc;
}

static int strv_of(json_t *a, char ***out)
{
    size_t i, n = json_array_size(a);
    json_t *x;
    char **v = calloc(n + 1, sizeof(*v));
    if (v == NULL)
        return -1;
    json_array_foreach(a, i, x)
    {
        if (!json_is_string(x) || (v[i] = strdup(json_string_value(x))) == NULL) {
            acp_free_strv(v);
            return -1;
        }
    }
    *out = v;
    return 0;
}

static int env_of(json_t *o, char ***out)
{
    char **v = calloc(json_object_size(o) + 1, sizeof(*v));
    size_t n = 0;
    const char *k;
    json_t *x;
    if (v == NULL)
        return -1;
    json_object_foreach(o, k, x)
    {
        if (!json_is_string(x) || k[0] == '\0' || strchr(k, '=') != NULL) {
            acp_free_strv(v);
            return -1;
        }
        size_t len = strlen(k) + json_string_length(x) + 2;
        if ((v[n] = malloc(len)) == NULL) {
            acp_free_strv(v);
            return -1;
        }
        snprintf(v[n++], len, "%s=%s", k, json_string_value(x));
    }
    *out = v;
    return 0;
}

int acp_registry_add_json(acp_registry *r, const char *text, size_t len, char *err, size_t errlen)
{
    json_error_t je;
    json_t *root = rt_json_read(text, len, JSON_REJECT_DUPLICATES, &je);
    if (!json_is_object(root)) {
        json_decref(root);
        return root == NULL ? fail(err, errlen, "not JSON: %s (line %d)", je.text, je.line)
                            : fail(err, errlen, "must be a JSON object: name -> agent");
    }
    const char *name;
    json_t *a;
    int rc = 0;
    json_object_foreach(root, name, a)
    {
        json_t *cmd = json_object_get(a, "command"), *env = json_object_get(a, "env");
        json_t *cwd = json_object_get(a, "cwd");
        acp_agent_spec s = {.name = (char *)name};
        if (!json_is_object(a) || !json_is_array(cmd) || json_array_size(cmd) == 0 ||
            strv_of(cmd, &s.argv) != 0) {
            rc = fail(err, errlen, "agent '%.64s': \"command\" must be a list of strings", name);
        } else if (env != NULL && (!json_is_object(env) || env_of(env, &s.env) != 0)) {
            rc = fail(err, errlen,
                      "agent '%.64s': \"env\" must be an object of strings (names without '=')",
                      name);
        } else if (cwd != NULL && (!json_is_string(cwd) || json_string_value(cwd)[0] != '/')) {
            rc = fail(err, errlen, "agent '%.64s': \"cwd\" must be an absolute path", name);
        } else {
            s.cwd = (char *)json_string_value(cwd);
            const char *const known[] = {"command", "env", "cwd"};
            const char *k;
            json_t *v;
            json_object_foreach(a, k, v)
            {
                bool ok = false;
                for (size_t i = 0; i < 3; i++)
                    ok = ok || strcmp(k, known[i]) == 0;
                if (!ok && rc == 0)
                    rc = fail(err, errlen, "agent '%.64s': unknown member \"%.64s\"", name, k);
            }
            if (rc == 0)
                rc = acp_registry_add(r, &s, err, errlen);
        }
        acp_free_strv(s.argv);
        acp_free_strv(s.env);
        if (rc != 0)
            break;
    }
    json_decref(root);
    return rc;
}

int acp_registry_set_default(acp_registry *r, const char *name, char *err, size_t errlen)
{
    if (acp_registry_find(r, name) == NULL)
        return fail(err, errlen, "--default-agent %.64s: no agent of that name is registered",
                    name);
    free(r->default_agent);
    r->default_agent = strdup(name);
    return r->default_agent != NULL ? 0 : fail(err, errlen, "out of memory");
}

void acp_registry_clear(acp_registry *r)
{
    for (size_t i = 0; i < r->n; i++)
        spec_clear(&r->agents[i]);
    free(r->agents);
    free(r->default_agent);
    memset(r, 0, sizeof(*r));
}

/* "a, b, c" of the registered names, for messages. */
static void names(const acp_registry *r, char *out, size_t cap)
{
    size_t n = 0;
    out[0] = '\0';
    for (size_t i = 0; r != NULL && i < r->n && n < cap; i++)
        n += (size_t)snprintf(out + n, cap - n, "%s%s", i ? ", " : "", r->agents[i].name);
    if (out[0] == '\0')
        snprintf(out, cap, "none");
}

int acp_registry_meta(const acp_registry *r, json_t *meta, const char *name, char *err,
                      size_t errlen)
{
    json_t *agent = json_object_get(meta, "agent"),
           *settings = json_object_get(meta, "agent_settings");
    char known[300];
    names(r, known, sizeof(known));
    if (settings != NULL && !json_is_null(settings)) {
        const char *k = json_string_value(json_object_get(settings, "agent_kind"));
        if (!json_is_object(settings))
            return fail(err, errlen, "agent_settings must be an object");
        if (json_object_get(settings, "agent_kind") != NULL &&
            (k == NULL || (strcmp(k, "openhands") != 0 && strcmp(k, "acp") != 0)))
            return fail(err, errlen, "agent_settings.agent_kind must be \"openhands\" or \"acp\"");
    }
    if (name == NULL && (agent == NULL || json_is_null(agent))) {
        if (r == NULL || r->default_agent == NULL)
            return 0; /* no agent: its producers post its events */
        name = r->default_agent;
    }
    if (name != NULL) {
        if (acp_registry_find(r, name) == NULL)
            return fail(err, errlen,
                        "no agent named '%.64s' is registered on this server (registered: %s)",
                        name, known);
        json_object_set_new(meta, "agent",
                            json_pack("{s:s, s:[s]}", "kind", "ACPAgent", "acp_command", name));
        return 0;
    }
    const char *kind = json_string_value(json_object_get(agent, "kind"));
    if (!json_is_object(agent) || kind == NULL)
        return fail(err, errlen,
                    "agent must be an object with a string \"kind\" (\"Agent\", \"ACPAgent\")");
    if (strcmp(kind, "Agent") == 0) { /* one that runs elsewhere and posts its events */
        json_t *llm = json_object_get(agent, "llm"), *tools = json_object_get(agent, "tools");
        if (llm != NULL && !(json_is_object(llm) && json_is_string(json_object_get(llm, "model"))))
            return fail(err, errlen, "agent.llm must be an object with a string \"model\"");
        if (tools != NULL && !json_is_array(tools))
            return fail(err, errlen, "agent.tools must be a list");
        return 0;
    }
    if (strcmp(kind, "ACPAgent") != 0)
        return fail(err, errlen, "agent.kind must be \"Agent\" or \"ACPAgent\", not \"%.40s\"",
                    kind);
    json_t *cmd = json_object_get(agent, "acp_command");
    const char *word = json_string_value(json_array_get(cmd, 0));
    if (!json_is_array(cmd) || json_array_size(cmd) != 1 || word == NULL ||
        acp_registry_find(r, word) == NULL)
        return fail(err, errlen,
                    "agent.acp_command must be [NAME], NAME an agent registered on this server "
                    "(registered: %s); parley runs no command an API client names",
                    known);
    return 0;
}
