/*
 * cmd_remote.c - the one-shot client commands: `parley send` (a user
 * message), `parley append` (events through the producer route, a verdict
 * each) and `parley conversations` (the list). Each is a few blocking
 * calls over one kept-alive connection (remote.h).
 */
#include "cli.h"
#include "remote.h"
#include "runtime/json.h"

#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { RUN = 0x100, JSON };

/* Parse the shared options plus those in extra; fills flags; returns the
 * index of the first operand, or -1 (with the exit status in *rc). */
static int parse(int argc, char **argv, const char *cmd, const char *usage, remote_opts *ro,
                 bool *run, bool *json, int *rc)
{
    static const struct option opts[] = {
        {"run", no_argument, NULL, RUN},
        {"json", no_argument, NULL, JSON},
        REMOTE_OPTIONS,
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int o;
    optind = 1;
    opterr = 0; /* our own one-line errors */
    while ((o = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        if (o == 'h') {
            fputs(usage, stdout);
            *rc = CLI_OK;
            return -1;
        }
        if (o == RUN && run != NULL)
            *run = true;
        else if (o == JSON && json != NULL)
            *json = true;
        else if (!remote_option(ro, o, optarg)) {
            *rc = cli_usage_error(cmd, "unknown option %s, or its value is missing",
                                  argv[optind - 1]);
            return -1;
        }
    }
    return optind;
}

static bool conversation_id_ok(const char *cmd, const char *cid, int *rc)
{
    if (cid[0] != '\0' && strlen(cid) <= 64 &&
        strspn(cid, "0123456789abcdefABCDEF-") == strlen(cid))
        return true;
    *rc = cli_usage_error(cmd, "%s is not a conversation id", cid);
    return false;
}

/* A remote for the URL, or NULL after a message, with the exit status in
 * *rc (a bad URL, key or CA file is bad usage). */
static remote *connect_to(const char *cmd, const char *url, remote_opts *ro, net_tls_config **tls,
                          int *rc)
{
    net_url u;
    *rc = CLI_USAGE;
    if (remote_setup(cmd, url, ro, &u, tls) != 0)
        return NULL;
    remote *r = remote_new(&u, *tls, ro->api_key);
    *rc = r != NULL ? CLI_OK : CLI_FAIL;
    if (r == NULL)
        fprintf(stderr, "parley %s: out of memory\n", cmd);
    return r;
}

/* The detail of an error answer, for one line. */
static void say_refusal(const char *cmd, int status, const char *body)
{
    if (status < 0) {
        fprintf(stderr, "parley %s: %s\n", cmd, body);
        return;
    }
    json_error_t je;
    json_t *j = json_loads(body, 0, &je);
    const char *d = json_string_value(json_object_get(j, "detail"));
    fprintf(stderr, "parley %s: the server answered %d: %s\n", cmd, status, d != NULL ? d : body);
    json_decref(j);
}

/* ---- send ---------------------------------------------------------------------- */

static const char send_usage[] =
    "usage: parley send URL CONVERSATION_ID TEXT [--run] [--api-key KEY]\n"
    "                   [--ca-file FILE] [--insecure]\n\n"
    "Post TEXT as a user message (POST /api/conversations/{id}/events) and print the\n"
    "server's answer, one line of JSON.\n\n"
    "  --run               start a run with it (\"run\": true)\n" REMOTE_HELP
    "  -h, --help          show this help\n";

int cmd_send(int argc, char **argv)
{
    const char *cmd = "send";
    remote_opts ro = {0};
    bool run = false;
    int rc = CLI_OK;
    int at = parse(argc, argv, cmd, send_usage, &ro, &run, NULL, &rc);
    if (at < 0)
        return rc;
    if (argc - at != 3)
        return cli_usage_error(cmd, "a URL, a conversation id and the text are needed");
    if (!conversation_id_ok(cmd, argv[at + 1], &rc))
        return rc;
    json_t *msg = json_pack("{s:s,s:[{s:s,s:s}],s:b}", "role", "user", "content", "type", "text",
                            "text", argv[at + 2], "run", run);
    char *body = msg != NULL ? rt_json_dumps(msg, NULL) : NULL;
    json_decref(msg);
    if (body == NULL) {
        fprintf(stderr, "parley send: the text is not UTF-8\n");
        return CLI_USAGE;
    }
    net_tls_config *tls = NULL;
    remote *r = connect_to(cmd, argv[at], &ro, &tls, &rc);
    if (r == NULL) {
        free(body);
        net_tls_config_free(tls);
        return rc;
    }
    char path[200];
    snprintf(path, sizeof(path), "/api/conversations/%s/events", argv[at + 1]);
    const char *answer;
    int st = remote_call(r, "POST", path, body, &answer);
    if (st >= 200 && st < 300) {
        printf("%s\n", answer);
    } else {
        say_refusal(cmd, st, answer);
        rc = CLI_FAIL;
    }
    free(body);
    remote_free(r);
    net_tls_config_free(tls);
    return rc;
}

/* ---- append -------------------------------------------------------------------- */

static const char append_usage[] =
    "usage: parley append URL CONVERSATION_ID FILE|- [--api-key KEY] [--ca-file FILE]\n"
    "                     [--insecure]\n\n"
    "Post each event of FILE (NDJSON: an event object a line; - reads stdin) through\n"
    "the producer route (POST /api/conversations/{id}/events/append), in order, and\n"
    "print a verdict a line: {\"line\": L, \"status\": S, \"answer\": <the server's>}.\n"
    "A refused event does not stop the others. Exit status 0 when every event was\n"
    "taken (201, or 202 for a deferred message), 1 otherwise.\n\n" REMOTE_HELP
    "  -h, --help          show this help\n";

static void verdict(long line, int status, const char *answer)
{
    json_error_t je;
    json_t *a = status >= 0 ? json_loads(answer, 0, &je) : NULL;
    if (a == NULL)
        a = json_string(answer);
    json_t *v = json_pack("{s:I,s:i,s:o}", "line", (json_int_t)line, "status", status, "answer",
                          a != NULL ? a : json_null());
    char *s = v != NULL ? rt_json_dumps(v, NULL) : NULL;
    if (s != NULL)
        printf("%s\n", s);
    fflush(stdout);
    free(s);
    json_decref(v);
}

int cmd_append(int argc, char **argv)
{
    const char *cmd = "append";
    remote_opts ro = {0};
    int rc = CLI_OK;
    int at = parse(argc, argv, cmd, append_usage, &ro, NULL, NULL, &rc);
    if (at < 0)
        return rc;
    if (argc - at != 3)
        return cli_usage_error(cmd, "a URL, a conversation id and a file (or -) are needed");
    if (!conversation_id_ok(cmd, argv[at + 1], &rc))
        return rc;
    const char *file = argv[at + 2];
    FILE *in = strcmp(file, "-") == 0 ? stdin : fopen(file, "r");
    if (in == NULL) {
        fprintf(stderr, "parley append: cannot open %s: %s\n", file, strerror(errno));
        return CLI_USAGE;
    }
    net_tls_config *tls = NULL;
    remote *r = connect_to(cmd, argv[at], &ro, &tls, &rc);
    if (r == NULL) {
        if (in != stdin)
            fclose(in);
        net_tls_config_free(tls);
        return rc;
    }
    char path[200];
    snprintf(path, sizeof(path), "/api/conversations/%s/events/append", argv[at + 1]);
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    long lineno = 0, refused = 0, events = 0;
    while ((n = getline(&line, &cap, in)) > 0) {
        lineno++;
        while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
            line[--n] = '\0';
        if (strspn(line, " \t") == (size_t)n)
            continue;
        events++;
        const char *answer;
        int st = remote_call(r, "POST", path, line, &answer);
        verdict(lineno, st, answer);
        if (st != 201 && st != 202)
            refused++;
        if (st < 0) /* the connection is made again for the next line */
            fprintf(stderr, "parley append: line %ld: %s\n", lineno, answer);
    }
    int rerr = ferror(in);
    free(line);
    if (in != stdin)
        fclose(in);
    remote_free(r);
    net_tls_config_free(tls);
    if (rerr) {
        fprintf(stderr, "parley append: cannot read %s\n", file);
        return CLI_FAIL;
    }
    if (refused > 0) {
        fprintf(stderr, "parley append: %ld of %ld events not taken\n", refused, events);
        return CLI_FAIL;
    }
    return CLI_OK;
}

/* ---- conversations ------------------------------------------------------------- */

static const char conversations_usage[] =
    "usage: parley conversations URL [--json] [--api-key KEY] [--ca-file FILE]\n"
    "                            [--insecure]\n\n"
    "List the conversations on the server (GET /api/conversations/search, paged):\n"
    "a line each, ID STATUS TITLE, or with --json each conversation object as one line\n"
    "of JSON.\n\n"
    "  --json              NDJSON of the conversation objects\n" REMOTE_HELP
    "  -h, --help          show this help\n";

int cmd_conversations(int argc, char **argv)
{
    const char *cmd = "conversations";
    remote_opts ro = {0};
    bool json = false;
    int rc = CLI_OK;
    int at = parse(argc, argv, cmd, conversations_usage, &ro, NULL, &json, &rc);
    if (at < 0)
        return rc;
    if (argc - at != 1)
        return cli_usage_error(cmd, "the server's URL is needed");
    net_tls_config *tls = NULL;
    remote *r = connect_to(cmd, argv[at], &ro, &tls, &rc);
    if (r == NULL) {
        net_tls_config_free(tls);
        return rc;
    }
    char path[400], page[200] = "";
    for (int pages = 0; rc == CLI_OK && pages < 100000; pages++) {
        snprintf(path, sizeof(path), "/api/conversations/search?limit=100%s%s",
                 page[0] ? "&page_id=" : "", page);
        const char *answer;
        int st = remote_call(r, "GET", path, NULL, &answer);
        if (st != 200) {
            say_refusal(cmd, st, answer);
            rc = CLI_FAIL;
            break;
        }
        json_error_t je;
        json_t *j = json_loads(answer, 0, &je), *items = json_object_get(j, "items");
        size_t i;
        json_t *c;
        json_array_foreach(items, i, c)
        {
            if (json) {
                char *s = rt_json_dumps(c, NULL);
                if (s != NULL)
                    printf("%s\n", s);
                free(s);
            } else {
                const char *title = json_string_value(json_object_get(c, "title"));
                const char *status = json_string_value(json_object_get(c, "execution_status"));
                printf("%s  %-10s  %s\n", json_string_value(json_object_get(c, "id")),
                       status != NULL ? status : "-", title != NULL ? title : "");
            }
        }
        const char *next = json_string_value(json_object_get(j, "next_page_id"));
        bool more = next != NULL && strlen(next) < sizeof(page) &&
                    strspn(next, "0123456789abcdefABCDEF-") == strlen(next);
        if (more)
            snprintf(page, sizeof(page), "%s", next);
        if (!json_is_array(items)) {
            fprintf(stderr, "parley conversations: the answer has no items\n");
            rc = CLI_FAIL;
        }
        json_decref(j);
        if (!more)
            break;
    }
    fflush(stdout);
    remote_free(r);
    net_tls_config_free(tls);
    return rc;
}
