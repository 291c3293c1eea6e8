/*
 * demo_agent.c - `parley demo-agent`: a scripted Agent Client Protocol
 * agent on stdio that needs no LLM, so that the quick start shows a live
 * conversation and a benchmark can run a thousand of them without the
 * agents being what it measures.
 *
 * This file: the command line, the loop, and the methods other than
 * session/prompt (demo_agent_turn.c). Each session keeps its history, the
 * `update` objects of its turns one a line, in
 * <cwd>/.demo-agent/<sessionId>.ndjson, so that another process can
 * session/load it: the history is replayed, then the load is answered.
 */
#include "demo_agent.h"

#include "cli.h"
#include "runtime/grow.h"
#include "runtime/log.h"
#include "runtime/uuid.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char usage[] =
    "usage: parley demo-agent [--tool-calls N] [--chunks N] [--no-fs] [--delay-ms N]\n"
    "                         [--stamp]\n\n"
    "A scripted ACP agent (Agent Client Protocol, version 1) on stdin and stdout, one\n"
    "JSON-RPC message a line, for demos and benchmarks: no LLM. A client spawns it.\n"
    "Each prompt turn sends a thought, a tool call that appends the prompt's text to\n"
    "<cwd>/notes.md through the client's fs/read_text_file and fs/write_text_file\n"
    "(when the client offers them), then the reply in chunks, and ends with\n"
    "end_turn (cancelled after a session/cancel). Sessions can be loaded by a later\n"
    "process: their history is kept in <cwd>/.demo-agent/. Logs go to stderr; it\n"
    "exits when stdin ends.\n\n"
    "  --tool-calls N  tool calls a turn, 0..1000 (default 1); more than one are\n"
    "                  `execute` calls that need nothing of the client\n"
    "  --chunks N      message chunks of the reply, 0..1000 (default 3)\n"
    "  --no-fs         never call the client's fs/* methods\n"
    "  --delay-ms N    pause between the updates of a turn, 0..60000 ms (default 0)\n"
    "  --stamp         end the text of each message chunk with \" [t=NS]\", NS the\n"
    "                  CLOCK_REALTIME nanoseconds at which it is sent (for latency\n"
    "                  benchmarks: bench/hosted_agents.py)\n"
    "  -h, --help      show this help\n\n"
    "Exit status: 0 when stdin ends, 1 if stdout fails, 2 bad usage.\n";

da_session *da_find(da_agent *a, const char *id)
{
    for (size_t i = 0; id != NULL && i < a->nsessions; i++)
        if (strcmp(a->sessions[i]->id, id) == 0)
            return a->sessions[i];
    return NULL;
}

char *da_path(const char *cwd, const char *name)
{
    size_t n = strlen(cwd);
    bool slash = n > 0 && cwd[n - 1] == '/';
    char *p = malloc(n + strlen(name) + 2);
    if (p != NULL)
        sprintf(p, "%s%s%s", cwd, slash ? "" : "/", name);
    return p;
}

char *da_history_path(const da_session *s)
{
    char name[300];
    snprintf(name, sizeof(name), ".demo-agent/%s.ndjson", s->id);
    return da_path(s->cwd, name);
}

/* A session id names a file: letters, digits, '-', '_', '.' (not first). */
static bool safe_id(const char *id)
{
    size_t n = strlen(id);
    if (n == 0 || n > 128 || id[0] == '.')
        return false;
    return strspn(id, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.") == n;
}

/* The session `id` with this cwd: the one held, or a new one (NULL if out
 * of memory). */
static da_session *hold_session(da_agent *a, const char *id, const char *cwd)
{
    char *c = strdup(cwd);
    if (c == NULL)
        return NULL;
    da_session *s = da_find(a, id);
    if (s == NULL) {
        if (rt_grow((void **)&a->sessions, &a->cap, a->nsessions + 1, sizeof(*a->sessions), 8) !=
                0 ||
            (s = calloc(1, sizeof(*s))) == NULL || (s->id = strdup(id)) == NULL) {
            free(s);
            free(c);
            return NULL;
        }
        a->sessions[a->nsessions++] = s;
    }
    free(s->cwd);
    s->cwd = c;
    return s;
}

/* cwd an absolute path and mcpServers an array (we ignore them), or an
 * answer saying which is wrong and false. */
static bool check_place(da_agent *a, json_t *id, json_t *params, const char **cwd)
{
    *cwd = json_string_value(json_object_get(params, "cwd"));
    if (*cwd == NULL || (*cwd)[0] != '/') {
        da_error(a, id, DA_INVALID_PARAMS, "Invalid params: cwd must be an absolute path");
        return false;
    }
    if (!json_is_array(json_object_get(params, "mcpServers"))) {
        da_error(a, id, DA_INVALID_PARAMS, "Invalid params: mcpServers must be an array");
        return false;
    }
    return true;
}

static void on_initialize(da_agent *a, json_t *id, json_t *params)
{
    if (!json_is_integer(json_object_get(params, "protocolVersion"))) {
        da_error(a, id, DA_INVALID_PARAMS, "Invalid params: protocolVersion must be a number");
        return;
    }
    /* an absent capability is one the client does not have */
    json_t *fs = json_object_get(json_object_get(params, "clientCapabilities"), "fs");
    a->can_read = json_is_true(json_object_get(fs, "readTextFile"));
    a->can_write = json_is_true(json_object_get(fs, "writeTextFile"));
    /* we speak version 1 only: a client asking for another may disconnect */
    da_result(a, id,
              json_pack("{s:i,s:{s:b,s:{s:b,s:b,s:b}},s:[],s:{s:s,s:s,s:s}}", "protocolVersion", 1,
                        "agentCapabilities", "loadSession", 1, "promptCapabilities", "image", 0,
                        "audio", 0, "embeddedContext", 0, "authMethods", "agentInfo", "name",
                        "parley-demo-agent", "title", "parley demo agent", "version",
                        PARLEY_VERSION));
}

static void on_new(da_agent *a, json_t *id, json_t *params)
{
    const char *cwd;
    if (!check_place(a, id, params, &cwd))
        return;
    rt_uuid u;
    char hex[33], sid[40];
    if (rt_uuid_v4(&u) != 0) {
        da_error(a, id, DA_INTERNAL, "Internal error: no randomness for a session id");
        return;
    }
    rt_uuid_hex(&u, hex);
    snprintf(sid, sizeof(sid), "demo-%.16s", hex);
    da_session *s = hold_session(a, sid, cwd);
    if (s == NULL) {
        da_error(a, id, DA_INTERNAL, "Internal error: out of memory");
        return;
    }
    /* an empty history now, so that the session can be loaded before its
     * first prompt; without one the session works, but cannot be loaded */
    char *dir = da_path(cwd, ".demo-agent"), *path = da_history_path(s);
    FILE *f = NULL;
    if (dir == NULL || path == NULL || (mkdir(dir, 0777) != 0 && errno != EEXIST) ||
        (f = fopen(path, "a")) == NULL)
        rt_log(RT_LOG_WARN, "demo-agent", "session %s will have no history: %s: %s", sid,
               path ? path : "?", strerror(errno));
    if (f != NULL)
        fclose(f);
    free(dir);
    free(path);
    da_result(a, id, json_pack("{s:s}", "sessionId", sid));
}

static void on_load(da_agent *a, json_t *id, json_t *params)
{
    const char *sid = json_string_value(json_object_get(params, "sessionId")), *cwd;
    if (sid == NULL) {
        da_error(a, id, DA_INVALID_PARAMS, "Invalid params: sessionId must be a string");
        return;
    }
    if (!check_place(a, id, params, &cwd))
        return;
    da_session probe = {.id = (char *)sid, .cwd = (char *)cwd};
    char *path = safe_id(sid) ? da_history_path(&probe) : NULL;
    FILE *f = path != NULL ? fopen(path, "r") : NULL;
    if (f == NULL) {
        da_error(a, id, DA_NOT_FOUND, "Resource not found: no session '%s' in %s", sid, cwd);
        free(path);
        return;
    }
    da_session *s = hold_session(a, sid, cwd);
    if (s == NULL) {
        da_error(a, id, DA_INTERNAL, "Internal error: out of memory");
    } else { /* the history as it was sent, then the answer */
        s->calls = 0;
        char *line = NULL;
        size_t cap = 0;
        ssize_t n;
        for (long no = 1; (n = getline(&line, &cap, f)) > 0; no++) {
            json_t *u = json_loadb(line, (size_t)n, 0, NULL);
            const char *kind = json_string_value(json_object_get(u, "sessionUpdate"));
            if (kind == NULL) { /* a line cut by a crash, say */
                rt_log(RT_LOG_WARN, "demo-agent", "%s: line %ld is not an update: skipped", path,
                       no);
                json_decref(u);
                continue;
            }
            if (strcmp(kind, "tool_call") == 0)
                s->calls++;
            da_send_update(a, sid, u);
        }
        free(line);
        da_result(a, id, json_object());
    }
    fclose(f);
    free(path);
}

static const struct {
    const char *name;
    void (*run)(da_agent *a, json_t *id, json_t *params);
} methods[] = {
    {"initialize", on_initialize},
    {"session/new", on_new},
    {"session/load", on_load},
    {"session/prompt", da_prompt},
};

void da_dispatch(da_agent *a, json_t *msg)
{
    const char *method = json_string_value(json_object_get(msg, "method"));
    json_t *id = json_object_get(msg, "id"), *params = json_object_get(msg, "params");
    for (size_t i = 0; i < sizeof(methods) / sizeof(methods[0]); i++) {
        if (strcmp(method, methods[i].name) != 0)
            continue;
        if (!json_is_object(params)) {
            da_error(a, id, DA_INVALID_PARAMS, "Invalid params: %s wants an object", method);
            return;
        }
        methods[i].run(a, id, params);
        return;
    }
    da_error(a, id, DA_NO_METHOD, "Method not found: %s", method);
}

static void agent_free(da_agent *a)
{
    for (size_t i = 0; i < a->nsessions; i++) {
        free(a->sessions[i]->id);
        free(a->sessions[i]->cwd);
        free(a->sessions[i]);
    }
    free(a->sessions);
    free(a->in.buf);
    json_decref(a->queue);
    json_decref(a->reply);
}

int cmd_demo_agent(int argc, char **argv)
{
    static const struct option opts[] = {{"tool-calls", required_argument, NULL, 't'},
                                         {"chunks", required_argument, NULL, 'c'},
                                         {"no-fs", no_argument, NULL, 'n'},
                                         {"delay-ms", required_argument, NULL, 'd'},
                                         {"stamp", no_argument, NULL, 's'},
                                         {"help", no_argument, NULL, 'h'},
                                         {NULL, 0, NULL, 0}};
    da_agent a = {.tool_calls = 1, .chunks = 3};
    int c;
    optind = 1;
    opterr = 0; /* one line of our own instead of getopt's */
    while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
        switch (c) {
        case 't':
            if (!cli_parse_int("demo-agent", "--tool-calls", optarg, 0, 1000, &a.tool_calls))
                return CLI_USAGE;
            break;
        case 'c':
            if (!cli_parse_int("demo-agent", "--chunks", optarg, 0, 1000, &a.chunks))
                return CLI_USAGE;
            break;
        case 'd':
            if (!cli_parse_int("demo-agent", "--delay-ms", optarg, 0, 60000, &a.delay_ms))
                return CLI_USAGE;
            break;
        case 'n':
            a.no_fs = true;
            break;
        case 's':
            a.stamp = true;
            break;
        case 'h':
            fputs(usage, stdout);
            return CLI_OK;
        case ':':
            return cli_usage_error("demo-agent", "option '%s' wants a value", argv[optind - 1]);
        default:
            return cli_usage_error("demo-agent", "unknown option '%s'", argv[optind - 1]);
        }
    }
    if (optind < argc)
        return cli_usage_error("demo-agent", "unexpected argument '%s'", argv[optind]);

    /* the client stops us with SIGTERM when it closes: go at once, whatever
     * our parent left the signal as */
    signal(SIGTERM, SIG_DFL);
    /* a full pipe makes a write wait for the client, not fail */
    int fl = fcntl(STDOUT_FILENO, F_GETFL);
    if (fl >= 0 && (fl & O_NONBLOCK) != 0)
        fcntl(STDOUT_FILENO, F_SETFL, fl & ~O_NONBLOCK);
    a.queue = json_array();
    while (!a.out_failed) {
        json_t *m = json_array_get(a.queue, 0);
        if (m != NULL) { /* what came during the last turn, in order */
            json_incref(m);
            json_array_remove(a.queue, 0);
        } else if (da_next(&a, -1, &m) < 0) {
            break;
        } else if (m == NULL) {
            continue;
        }
        da_incoming(&a, m);
        json_decref(m);
    }
    int rc = a.out_failed ? CLI_FAIL : CLI_OK;
    agent_free(&a);
    return rc;
}
