/*
 * cmd_blocks.c - `parley blocks FILE`: the view state a conversation
 * reduces to (actors/reducer.h), printed as one JSON object {"blocks",
 * "subagents"}, for scripts and tests.
 *
 * FILE is one of (detected):
 * - a reducer test vector (an object with "source" and "input"), run as
 *   shared/vectors/reducer/README.md says, "finalize" included;
 * - a Claude Code session (JSONL). Its subagents' transcripts are read
 *   too when Claude Code's layout has them: SESSION/subagents/agent-*.jsonl
 *   beside SESSION.jsonl (in name order);
 * - an OpenCode export (`opencode export`);
 * - parley's own events: an OpenHands conversation directory, a JSON
 *   array or NDJSON of events (read as `parley lint` reads them,
 *   lint/lint.h), each converted by actors/reducer_parley.h.
 * A line that cannot be converted is skipped and said on stderr with its
 * line number (as the reducer's F2 wants: the rest still counts); a file
 * that is not JSON at all, or larger than 1 GiB, is an input error.
 */
#include "cli.h"

#include "lint/lint.h"

#include "actors/reducer.h"
#include "actors/reducer_claude.h"
#include "actors/reducer_opencode.h"
#include "actors/reducer_parley.h"
#include "runtime/json.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define BLOCKS_MAX_INPUT (1ULL << 30)

static const char blocks_usage[] =
    "usage: parley blocks FILE\n\n"
    "Print the view state FILE reduces to, {\"blocks\": [...], \"subagents\": [...]}, as one\n"
    "line of JSON: the user's messages, the assistant's text and thinking, each tool call\n"
    "and its result, subagents with their own blocks.\n\n"
    "FILE (detected; at most 1 GiB):\n"
    "  a Claude Code session (JSONL); SESSION/subagents/agent-*.jsonl beside\n"
    "  SESSION.jsonl are its subagents' transcripts, read too\n"
    "  an OpenCode export (opencode export)\n"
    "  parley events: an OpenHands conversation directory (DIR), a JSON array or NDJSON\n"
    "  a reducer test vector ({\"source\", \"input\", \"finalize\"?}), run as the vectors'\n"
    "  README says\n\n"
    "A line that cannot be converted is skipped, and said on stderr.\n"
    "Exit status: 0 printed, 2 bad usage or unreadable input.\n";

/* The whole file, NUL-terminated; NULL after a message. */
static char *slurp(const char *path, size_t *len)
{
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) {
        fprintf(stderr, "parley blocks: cannot read %s: %s\n", path,
                errno != 0 && !S_ISDIR(st.st_mode) ? strerror(errno) : "not a file");
        return NULL;
    }
    if ((unsigned long long)st.st_size > BLOCKS_MAX_INPUT) {
        fprintf(stderr, "parley blocks: %s is larger than 1 GiB, the most parley blocks reads\n",
                path);
        return NULL;
    }
    FILE *f = fopen(path, "r");
    char *buf = f != NULL ? malloc((size_t)st.st_size + 1) : NULL;
    size_t n = buf != NULL ? fread(buf, 1, (size_t)st.st_size, f) : 0;
    if (f == NULL || buf == NULL || ferror(f)) {
        fprintf(stderr, "parley blocks: cannot read %s: %s\n", path, strerror(errno));
        free(buf);
        buf = NULL;
    } else {
        buf[n] = '\0';
        *len = n;
    }
    if (f != NULL)
        fclose(f);
    return buf;
}

/* JSONL: every line parsed (blank ones skipped); a bad one said and left
 * out. NULL if out of memory. */
static json_t *lines_of(const char *path, char *buf, size_t len)
{
    json_t *lines = json_array();
    long no = 0;
    for (char *p = buf; lines != NULL && p < buf + len;) {
        char *end = memchr(p, '\n', (size_t)(buf + len - p));
        size_t n = end != NULL ? (size_t)(end - p) : (size_t)(buf + len - p);
        no++;
        if (strspn(p, " \t\r") < n) {
            json_error_t je;
            json_t *v = json_loadb(p, n, 0, &je);
            if (v == NULL)
                fprintf(stderr, "parley blocks: %s: line %ld: not JSON (%s): skipped\n", path, no,
                        je.text);
            else
                json_array_append_new(lines, v);
        }
        p += n + 1;
    }
    return lines;
}

static int cmp_names(const void *a, const void *b)
{
    return strcmp(json_string_value(*(json_t *const *)a), json_string_value(*(json_t *const *)b));
}

/* Claude Code keeps a session's subagents in SESSION/subagents/. */
static json_t *subagents_of(const char *path)
{
    json_t *subs = json_array();
    size_t n = strlen(path);
    if (subs == NULL || n < 7 || strcmp(path + n - 6, ".jsonl") != 0)
        return subs;
    char dir[4096];
    snprintf(dir, sizeof(dir), "%.*s/subagents", (int)(n - 6), path);
    DIR *d = opendir(dir);
    json_t *names = json_array();
    for (struct dirent *e; d != NULL && names != NULL && (e = readdir(d)) != NULL;) {
        size_t k = strlen(e->d_name);
        if (strncmp(e->d_name, "agent-", 6) == 0 && k > 12 &&
            strcmp(e->d_name + k - 6, ".jsonl") == 0)
            json_array_append_new(names, json_string(e->d_name));
    }
    if (d != NULL)
        closedir(d);
    size_t count = json_array_size(names);
    json_t **v = count > 0 ? malloc(count * sizeof(*v)) : NULL;
    for (size_t i = 0; v != NULL && i < count; i++)
        v[i] = json_array_get(names, i);
    if (v != NULL)
        qsort(v, count, sizeof(*v), cmp_names);
    for (size_t i = 0; v != NULL && i < count; i++) {
        const char *name = json_string_value(v[i]);
        char file[4400];
        size_t len;
        snprintf(file, sizeof(file), "%s/%s", dir, name);
        char *buf = slurp(file, &len);
        if (buf == NULL)
            continue;
        json_t *lines = lines_of(file, buf, len);
        free(buf);
        json_array_append_new(
            subs, json_pack("{s:s%, s:o}", "id", name + 6, strlen(name) - 12, "transcript", lines));
    }
    free(v);
    json_decref(names);
    return subs;
}

static int idle(reducer *r, const char *conv)
{
    json_t *e = json_pack("{s:s, s:{}, s:{s:s, s:s}}", "type", "session:idle", "payload", "context",
                          "sessionId", "blocks", "conversationId", conv);
    int rc = e != NULL ? reducer_apply(r, e, NULL) : -ENOMEM;
    json_decref(e);
    return rc;
}

typedef int (*reduce_fn)(reducer *r, const json_t *session, size_t *skipped);

/* A whole session (taken) reduced by fn; what it skipped said. */
static int reduce_session(reducer *r, const char *path, json_t *session, reduce_fn fn,
                          const char *what)
{
    size_t skipped = 0;
    int rc = session != NULL ? fn(r, session, &skipped) : -ENOMEM;
    if (skipped > 0)
        fprintf(stderr, "parley blocks: %s: %zu %s%s cannot be converted: skipped\n", path, skipped,
                what, skipped == 1 ? "" : "s");
    json_decref(session);
    return rc;
}

/* A Claude Code session (and its subagents' transcripts). */
static int run_claude(reducer *r, const char *path, char *buf, size_t len)
{
    json_t *main_lines = lines_of(path, buf, len);
    if (main_lines != NULL && json_array_size(main_lines) == 0 && len > 0) {
        fprintf(stderr, "parley blocks: %s: no line is JSON: not a Claude Code session\n", path);
        json_decref(main_lines);
        return -EINVAL;
    }
    json_t *session = json_pack("{s:o, s:o}", "main", main_lines, "subagents", subagents_of(path));
    return reduce_session(r, path, session, claude_reduce, "line");
}

/* An OpenCode export, alone (its children's exports are not at hand). */
static int run_opencode(reducer *r, const char *path, json_t *x)
{
    json_t *session = json_pack("{s:O, s:[]}", "main", x, "subagents");
    return reduce_session(r, path, session, opencode_reduce, "message");
}

/* A reducer test vector, run as its README says. */
static int run_vector(reducer *r, const json_t *v, const char *path)
{
    const char *src = json_string_value(json_object_get(v, "source"));
    json_t *in = json_object_get(v, "input");
    size_t i;
    json_t *e;
    int rc = 0;
    if (strcmp(src, "claude") == 0) {
        rc = reduce_session(r, path, json_incref(in), claude_reduce, "line");
    } else if (strcmp(src, "opencode") == 0) {
        rc = reduce_session(r, path, json_incref(in), opencode_reduce, "message");
    } else if (strcmp(src, "opencode-live") == 0) {
        rc = reduce_session(r, path, json_incref(in), opencode_live_reduce, "event");
    } else if (strcmp(src, "events") == 0) {
        json_array_foreach(in, i, e)
        {
            int k = reducer_apply(r, e, NULL);
            if (k == -ENOMEM)
                return k;
            if (k != 0)
                fprintf(stderr, "parley blocks: %s: event %zu cannot be reduced: skipped\n", path,
                        i + 1);
        }
    } else {
        fprintf(stderr,
                "parley blocks: %s: unknown source '%s' (claude, opencode, opencode-live, "
                "events)\n",
                path, src);
        return -EINVAL;
    }
    if (rc == 0 && json_is_true(json_object_get(v, "finalize"))) {
        rc = idle(r, "main");
        for (i = 0; rc == 0 && i < reducer_subagent_count(r); i++)
            rc =
                idle(r, json_string_value(json_object_get(reducer_subagent_at(r, i), "toolUseId")));
    }
    return rc;
}

/* parley's own events, read as lint reads them, one at a time. */
static int run_events(reducer *r, input *in)
{
    parley_conv *pc = parley_conv_new();
    json_t *out = json_array();
    int rc = pc != NULL && out != NULL ? 0 : -ENOMEM;
    for (unsigned long n = 1; rc == 0; n++) {
        json_t *v = NULL;
        char why[256];
        int k = in_next(in, &v, why, sizeof(why));
        if (k < 0) {
            fprintf(stderr, "parley blocks: %s\n", in->err);
            rc = -EINVAL;
        }
        if (k <= 0)
            break;
        if (k == 2) /* a test vector's restart: the state goes on */
            continue;
        k = parley_conv_event(pc, v, out, why, sizeof(why));
        if (k == -EINVAL)
            fprintf(stderr, "parley blocks: %s: event %lu: %s: skipped\n", in->name, n, why);
        rc = k == -ENOMEM ? k : 0;
        size_t i;
        json_t *e;
        json_array_foreach(out, i, e) if (rc == 0 && reducer_apply(r, e, NULL) == -ENOMEM) rc =
            -ENOMEM;
        json_array_clear(out);
        json_decref(v);
    }
    json_decref(out);
    parley_conv_free(pc);
    return rc;
}

/* What FILE is, and its state reduced into r. */
static int run_file(reducer *r, const char *path)
{
    struct stat st;
    input *in = calloc(1, sizeof(*in));
    int rc = in != NULL ? 0 : -ENOMEM;
    if (rc == 0 && stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        if (in_open(in, path) != 0) {
            fprintf(stderr, "parley blocks: %s\n", in->err);
            rc = -EINVAL;
        } else {
            rc = run_events(r, in);
        }
        in_close(in);
        free(in);
        return rc;
    }
    size_t len = 0;
    char *buf = rc == 0 ? slurp(path, &len) : NULL;
    json_t *whole = buf != NULL ? json_loadb(buf, len, 0, NULL) : NULL;
    if (buf == NULL)
        rc = rc != 0 ? rc : -EINVAL;
    else if (json_is_object(whole) && json_is_string(json_object_get(whole, "source")) &&
             json_object_get(whole, "input") != NULL)
        rc = run_vector(r, whole, path);
    else if (tr_detect(whole) == TR_OPENCODE)
        rc = run_opencode(r, path, whole);
    else if (in_open(in, path) != 0)
        rc = (fprintf(stderr, "parley blocks: %s\n", in->err), -EINVAL);
    else if (in->mode == IN_CLAUDE)
        rc = run_claude(r, path, buf, len);
    else
        rc = run_events(r, in);
    if (in != NULL)
        in_close(in);
    free(in);
    json_decref(whole);
    free(buf);
    return rc;
}

int cmd_blocks(int argc, char **argv)
{
    const char *cmd = "blocks";
    if (argc == 2 && (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0)) {
        fputs(blocks_usage, stdout);
        return CLI_OK;
    }
    if (argc != 2 || argv[1][0] == '-')
        return cli_usage_error(cmd, argc < 2 ? "which file? give one FILE"
                                             : "one FILE, and no options but --help");
    reducer *r = reducer_new(NULL, NULL);
    int rc = r != NULL ? run_file(r, argv[1]) : -ENOMEM;
    json_t *state = rc == 0 ? reducer_state(r) : NULL;
    char *s = state != NULL ? rt_json_dumps(state, NULL) : NULL;
    if (s != NULL)
        printf("%s\n", s);
    else if (rc != -EINVAL)
        fprintf(stderr, "parley blocks: out of memory\n");
    free(s);
    json_decref(state);
    reducer_free(r);
    return s != NULL && fflush(stdout) == 0 ? CLI_OK : CLI_USAGE;
}
