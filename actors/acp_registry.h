/*
 * acp_registry.h - the agents a server may host: the operator names each
 * command (`parley serve --agent NAME=COMMAND`, `--agents FILE`); an API
 * client only ever names one of them. Pure: parsing and lookup.
 */
#ifndef ACP_REGISTRY_H
#define ACP_REGISTRY_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

typedef struct acp_agent_spec {
    char *name;
    char **argv; /* NULL-terminated */
    char **env;  /* NULL-terminated "K=V", added to parley's environment */
    char *cwd;   /* the process's directory, or NULL: the conversation's workspace */
} acp_agent_spec;

typedef struct acp_registry {
    acp_agent_spec *agents;
    size_t n;
    char *default_agent; /* NULL: none */
} acp_registry;

/* Split a command line into words as a POSIX shell does, without any
 * expansion: blanks separate words; '...' keeps everything; "..." keeps
 * everything but \" \\ \$ \` (and \ newline, removed); \ outside quotes
 * keeps the next character. *argv is NULL-terminated (free with
 * acp_free_strv). 0, or -1 with err saying why (an unterminated quote, no
 * words). */
int acp_split_words(const char *line, char ***argv, char *err, size_t errlen);
void acp_free_strv(char **v);

/* Add NAME=COMMAND. 0, or -1 with err (a bad name, a name given twice, an
 * empty command...). Names: letters, digits, '-', '_', '.', 1 to 64. */
int acp_registry_add_arg(acp_registry *r, const char *arg, char *err, size_t errlen);
/* Add every agent of a JSON object {NAME: {"command": [...], "env": {...},
 * "cwd": "..."}} (the text of an --agents file). */
int acp_registry_add_json(acp_registry *r, const char *text, size_t len, char *err, size_t errlen);
/* Copy spec in (its strings copied). */
int acp_registry_add(acp_registry *r, const acp_agent_spec *spec, char *err, size_t errlen);
/* Set the default: it must be registered. */
int acp_registry_set_default(acp_registry *r, const char *name, char *err, size_t errlen);
const acp_agent_spec *acp_registry_find(const acp_registry *r, const char *name);

/* A new conversation's info (a JSON object), its agent checked and made
 * what the server will host: `name` (NULL: none given) hosts that agent;
 * else an "agent" there must have a string "kind", and an ACPAgent must
 * name a registered agent as its only acp_command word; else, with no
 * agent at all, the default agent (if any) is hosted. Also checks
 * "agent_settings" (an object; agent_kind "openhands" or "acp"). 0, or -1
 * with err saying why (one line, for a 422). */
int acp_registry_meta(const acp_registry *r, json_t *meta, const char *name, char *err,
                      size_t errlen);
void acp_registry_clear(acp_registry *r);

#endif
