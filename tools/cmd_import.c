/*
 * cmd_import.c - `parley import`: a recorded conversation (a Claude Code
 * session, an OpenCode export, an OpenHands conversation directory or
 * events: whatever `parley lint` reads, tools/lint/lint.h) becomes a new
 * parley conversation, its events posted through the compliance gate like
 * any producer's: over HTTP to a server (--url), or in this process
 * through the public API on a data directory (--data).
 *
 * All or nothing, in two passes over the input:
 * 1. offline, the events are played through the same sequencer a live
 *    conversation runs (actors/replay.h), under the conversation's policy
 *    with the stuck detector off (an import is a record, not an agent at
 *    work). Every event that would not be committed as it comes, in
 *    order, is reported on stderr with its source line, rule by rule:
 *    rejected (reject), refused, held for a parent, deferred (a message
 *    while tool calls are pending: it would be reordered). Any of them
 *    and nothing is created: exit 1. Under observe a violation is
 *    reported and the event imported, the violation recorded in the log
 *    as a live conversation records it.
 * 2. the conversation is created (its policy, stuck detection off, tag
 *    "importedfrom") and the events posted in arrays (all or nothing
 *    each, at most BATCH_EVENTS events or BATCH_BYTES bytes). If the
 *    server refuses anything after all, or the connection fails, the
 *    conversation is deleted and the import fails: nothing is left
 *    half-imported.
 * An import cut short (a signal, a lost machine) leaves whole arrays
 * behind; `--into ID` finishes it: the conversation exists, and each
 * array whose last event (by id) it holds already is skipped, one lookup
 * an array, so the import goes on where it stopped (the events keep
 * their ids, so this is exact). A failure then deletes nothing.
 * The new conversation's id goes to stdout, progress to stderr. The
 * input is read twice, so it must be a file or a directory, not stdin.
 */
#include "cli.h"
#include "lint/lint.h"
#include "remote.h"

#include "actors/replay.h"
#include "parley.h"
#include "runtime/log.h"
#include "runtime/json.h"

#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
    BATCH_EVENTS = 500,      /* events in one array post */
    BATCH_BYTES = 4 << 20,   /* and bytes: a quarter of serve's default body limit */
    PROGRESS_FROM = 2000,    /* inputs this long say how far they are */
    SHOWN_VIOLATIONS = 1000, /* rule lines printed; the rest counted */
};

enum { OPT_URL = 0x400, OPT_DATA, OPT_POLICY, OPT_TITLE, OPT_INTO };

static const char import_usage[] =
    "usage: parley import FILE|DIR (--url URL | --data DIR) [--policy reject|observe]\n"
    "                     [--title TITLE] [--into ID] [--api-key KEY] [--ca-file FILE]\n"
    "                     [--insecure]\n\n"
    "Make a recorded conversation a new parley conversation: its events go through the\n"
    "compliance gate like any producer's, keeping their ids and timestamps. Prints the\n"
    "new conversation's id.\n\n"
    "Input (detected, as parley lint reads it; at most " LINT_MAX_INPUT_TEXT "):\n"
    "  a Claude Code session (JSONL), an OpenCode export (opencode export), an OpenHands\n"
    "  conversation directory, or parley events (a JSON array or NDJSON). Subagents'\n"
    "  sidechain lines are left out (each is a conversation of its own).\n\n"
    "  --url URL           a parley server (the producer route, arrays of events)\n"
    "  --data DIR          a data directory, opened in this process (no server may have it)\n"
    "  --policy POLICY     the new conversation's compliance policy: reject (default):\n"
    "                      a transcript that breaks a tool-call rule is not imported at all;\n"
    "                      observe: it is, with each violation recorded\n"
    "  --title TITLE       the conversation's title (default: the input's file name)\n"
    "  --into ID           finish an import that was cut short: the conversation ID it\n"
    "                      printed on stderr exists, and what it holds already is "
    "skipped\n" REMOTE_HELP "  -h, --help          show this help\n\n"
    "All or nothing: the events are checked offline first (each problem reported on\n"
    "stderr with its source line, as parley lint reports it), and a conversation the\n"
    "server refuses part of is deleted again (not one given by --into).\n"
    "Exit status: 0 imported, 1 violations (nothing imported) or the server refused,\n"
    "2 bad usage or unreadable input.\n";

/* ------------------------------------------------------------- pass 1 --- */

typedef struct check {
    const input *in;
    const char *name;
    bool observe;
    uint64_t events, bad, observed, shown;
} check;

static void say(check *c, uint64_t pos, const char *word, const char *rule, const char *detail)
{
    if (c->shown++ >= SHOWN_VIOLATIONS)
        return;
    char where[64];
    in_where(c->in, pos, where, sizeof(where));
    if (where[0] == '\0')
        snprintf(where, sizeof(where), "event %" PRIu64, pos);
    fprintf(stderr, "parley import: %s: %s: %s%s%s%s%s\n", c->name, where, word,
            rule != NULL ? " " : "", rule != NULL ? rule : "", detail != NULL ? ": " : "",
            detail != NULL ? detail : "");
}

static void decided(void *ctx, const ev *e, const seq_verdict *v, seq_was was, uint64_t index,
                    void *tag)
{
    (void)e;
    (void)index;
    check *c = ctx;
    if (was == SEQ_OWN || tag == NULL)
        return;
    uint64_t pos = (uint64_t)(uintptr_t)tag;
    if (v->kind == SEQ_ACCEPTED && v->rule == GATE_OK && was == SEQ_NEW)
        return;
    if (v->kind == SEQ_ACCEPTED && v->rule != GATE_OK) {
        c->observed++;
        say(c, pos, "observed", gate_rule_name(v->rule), v->detail);
        return;
    }
    if (v->kind == SEQ_ACCEPTED) /* once deferred or held: said when it waited */
        return;
    c->bad++;
    switch (v->kind) {
    case SEQ_DEFERRED:
        say(c, pos, "deferred", gate_rule_name(GATE_INTERLEAVED_MESSAGE),
            "a message while tool calls are pending: importing it would reorder it");
        break;
    case SEQ_HELD:
        say(c, pos, "held", gate_rule_name(GATE_UNKNOWN_PARENT), "its parent is not before it");
        break;
    case SEQ_REJECTED:
        say(c, pos, "rejected", gate_rule_name(v->rule), v->detail);
        break;
    default:
        say(c, pos, "refused", NULL, v->detail);
    }
}

/* Plays the input offline: 0 and c's counts, or -1 (in->err). */
static int check_input(input *in, check *c)
{
    replay_opts ro = {.seq = {.policy = c->observe ? CONV_OBSERVE : CONV_REJECT,
                              .defer_max = 10000,
                              .hold_max = 10000},
                      .stuck_off = true};
    replay_hooks h = {.ctx = c, .decided = decided};
    replay *rp = replay_new(&ro, &h);
    if (rp == NULL)
        return in_fail(in, "out of memory");
    int rc;
    for (;;) {
        json_t *v = NULL;
        char why[256], err[512];
        rc = in_next(in, &v, why, sizeof(why));
        if (rc <= 0)
            break;
        if (rc == 2) /* a test vector's restart: an import has none */
            continue;
        uint64_t pos = ++c->events;
        ev e;
        if (why[0] != '\0' || seq_event(v, &e, err, sizeof(err)) != 0) {
            c->bad++;
            say(c, pos, "rejected", gate_rule_name(GATE_INVALID_EVENT), why[0] ? why : err);
        } else {
            replay_offer(rp, &e, (void *)(uintptr_t)pos);
        }
        json_decref(v);
    }
    if (rc == 0)
        replay_end(rp);
    replay_free(rp);
    return rc;
}

/* ------------------------------------------------------ the target --- */

/* Where the conversation is made: a server, or a data directory here. */
typedef struct target {
    remote *rm;
    net_tls_config *tls;
    pl_instance *pl;
    pl_conv *conv;
    char id[64];
} target;

/* The detail of a refusal (the server's JSON answer), for one line. */
static void refusal(int status, const char *body, char *err, size_t cap)
{
    json_t *j = status >= 0 ? json_loads(body, 0, NULL) : NULL;
    const char *d = json_string_value(json_object_get(j, "detail"));
    const char *rule = json_string_value(json_object_get(j, "rule"));
    if (status < 0)
        snprintf(err, cap, "%s", body);
    else
        snprintf(err, cap, "the server answered %d: %s%s%s", status,
                 rule != NULL && rule[0] ? rule : "", rule != NULL && rule[0] ? ": " : "",
                 d != NULL ? d : body);
    json_decref(j);
}

static int target_create(target *t, json_t *meta, bool observe, char *err, size_t cap)
{
    if (t->rm != NULL) {
        json_object_set_new(meta, "compliance_policy", json_string(observe ? "observe" : "reject"));
        char *body = rt_json_dumps(meta, NULL);
        const char *answer;
        int st =
            body != NULL ? remote_call(t->rm, "POST", "/api/conversations", body, &answer) : -1;
        free(body);
        json_t *j = st >= 200 && st < 300 ? json_loads(answer, 0, NULL) : NULL;
        const char *id = json_string_value(json_object_get(j, "id"));
        if (id != NULL)
            snprintf(t->id, sizeof(t->id), "%s", id);
        else
            refusal(st, st < 0 && body == NULL ? "out of memory" : answer, err, cap);
        json_decref(j);
        return id != NULL ? 0 : -1;
    }
    char *m = rt_json_dumps(meta, NULL);
    pl_conv_options o = {.meta_json = m, .observe = observe, .stuck_off = 1};
    int rc = m != NULL ? pl_conv_create(t->pl, &o, &t->conv) : PL_ENOMEM;
    free(m);
    if (rc != 0) {
        snprintf(err, cap, "cannot create the conversation: %s", pl_strerror(rc));
        return -1;
    }
    snprintf(t->id, sizeof(t->id), "%s", pl_conv_id(t->conv));
    return 0;
}

/* --into: the conversation exists. 0, or -1 with why. */
static int target_open(target *t, const char *id, char *err, size_t cap)
{
    snprintf(t->id, sizeof(t->id), "%s", id);
    if (t->rm != NULL) {
        char path[200];
        const char *answer;
        snprintf(path, sizeof(path), "/api/conversations/%.64s", id);
        int st = remote_call(t->rm, "GET", path, NULL, &answer);
        if (st == 200)
            return 0;
        refusal(st, answer, err, cap);
        return -1;
    }
    int rc = pl_conv_open(t->pl, id, &t->conv);
    if (rc != 0)
        snprintf(err, cap, "cannot open conversation %.64s: %s", id, pl_strerror(rc));
    return rc == 0 ? 0 : -1;
}

/* Does the conversation hold the event with this id? 1, 0, or -1 with why. */
static int target_has(target *t, const char *event_id, char *err, size_t cap)
{
    if (t->rm == NULL) {
        uint64_t at;
        return pl_find(t->conv, event_id, &at) == 0;
    }
    char path[600], *q = path;
    q += snprintf(path, sizeof(path), "/api/conversations/%s/events/", t->id);
    for (const unsigned char *c = (const unsigned char *)event_id; *c && q < path + 590; c++)
        q += (size_t)(isalnum(*c) || strchr("-._~", *c) ? snprintf(q, 2, "%c", *c)
                                                        : snprintf(q, 4, "%%%02X", *c));
    const char *answer;
    int st = remote_call(t->rm, "GET", path, NULL, &answer);
    if (st == 200 || st == 404)
        return st == 200;
    refusal(st, answer, err, cap);
    return -1;
}

/* Post an array of events: 0, or -1 with why. */
static int target_append(target *t, const char *json, size_t len, char *err, size_t cap)
{
    if (t->rm != NULL) {
        char path[200];
        const char *answer;
        snprintf(path, sizeof(path), "/api/conversations/%s/events/append", t->id);
        int st = remote_call(t->rm, "POST", path, json, &answer);
        if (st == 201)
            return 0;
        refusal(st, answer, err, cap);
        return -1;
    }
    return cli_pl_wait(t->conv, json, len, 0, err, cap) == PL_COMMITTED ? 0 : -1;
}

/* Take back a conversation that could not be imported whole. */
static void target_delete(target *t, const char *cmd)
{
    int ok;
    if (t->rm != NULL) {
        char path[200];
        const char *answer;
        snprintf(path, sizeof(path), "/api/conversations/%s", t->id);
        int st = remote_call(t->rm, "DELETE", path, NULL, &answer);
        ok = st >= 200 && st < 300;
    } else {
        ok = pl_conv_delete(t->conv) == 0;
    }
    if (!ok)
        fprintf(stderr, "parley %s: could not delete the partly imported conversation %s\n", cmd,
                t->id);
}

/* ------------------------------------------------------------- pass 2 --- */

typedef struct batch {
    char *buf;
    size_t len, cap, n;
    char last[300]; /* the id of its last event ("" if it had none) */
} batch;

static int batch_add(batch *b, json_t *e)
{
    char *s = rt_json_dumps(e, NULL);
    size_t n = s != NULL ? strlen(s) : 0;
    if (s == NULL)
        return -1;
    if (b->len + n + 3 > b->cap) {
        size_t cap = b->cap ? b->cap : 1 << 16;
        while (cap < b->len + n + 3)
            cap *= 2;
        char *p = realloc(b->buf, cap);
        if (p == NULL) {
            free(s);
            return -1;
        }
        b->buf = p;
        b->cap = cap;
    }
    const char *id = json_string_value(json_object_get(e, "id"));
    snprintf(b->last, sizeof(b->last), "%s", id != NULL ? id : "");
    b->buf[b->len++] = b->n++ == 0 ? '[' : ',';
    memcpy(b->buf + b->len, s, n);
    b->len += n;
    free(s);
    return 0;
}

/* Post the array; with *resuming, skip it if the conversation has its
 * last event (arrays are all or nothing: it has all of it), and stop
 * resuming at the first it has not. */
static int batch_post(target *t, batch *b, bool *resuming, char *err, size_t cap)
{
    if (b->n == 0)
        return 0;
    if (*resuming) {
        if (b->last[0] == '\0') {
            snprintf(err, cap, "cannot resume: the input's events have no ids");
            return -1;
        }
        int has = target_has(t, b->last, err, cap);
        if (has < 0)
            return -1;
        *resuming = has == 1;
        if (has == 1) {
            b->len = b->n = 0;
            return 0;
        }
    }
    b->buf[b->len] = ']';
    b->buf[b->len + 1] = '\0';
    int rc = target_append(t, b->buf, b->len + 1, err, cap);
    b->len = b->n = 0;
    return rc;
}

/* Post every event of the input, in arrays: 0, or -1 with why (in->err
 * for the input's). */
static int post_all(input *in, target *t, uint64_t total, bool resuming, char *err, size_t cap)
{
    batch b = {0};
    uint64_t sent = 0;
    double last = cli_now_s();
    int rc = 0;
    while (rc == 0) {
        json_t *v = NULL;
        char why[256];
        int r = in_next(in, &v, why, sizeof(why));
        if (r < 0) {
            snprintf(err, cap, "%.1000s", in->err);
            rc = -1;
            break;
        }
        if (r == 2)
            continue;
        if (r == 1 && batch_add(&b, v) != 0) {
            snprintf(err, cap, "out of memory");
            rc = -1;
        }
        json_decref(v);
        if (rc == 0 && (r == 0 || b.n >= BATCH_EVENTS || b.len >= BATCH_BYTES)) {
            sent += b.n;
            rc = batch_post(t, &b, &resuming, err, cap);
            if (rc == 0 && total >= PROGRESS_FROM && (cli_now_s() - last >= 1 || r == 0)) {
                fprintf(stderr, "parley import: %" PRIu64 " of %" PRIu64 " events\n", sent, total);
                last = cli_now_s();
            }
        }
        if (r == 0)
            break;
    }
    free(b.buf);
    return rc;
}

/* ======================================================== the command === */

static const char *base_name(const char *path)
{
    const char *s = strrchr(path, '/');
    while (s != NULL && s[1] == '\0' && s > path) { /* "dir/" */
        const char *p = s - 1;
        while (p > path && *p != '/')
            p--;
        return *p == '/' ? p + 1 : p;
    }
    return s != NULL ? s + 1 : path;
}

static const char *const mode_names[] = {
    [IN_ARRAY] = "events",  [IN_SEQ] = "events",    [IN_VECTOR] = "vector",
    [IN_DIR] = "openhands", [IN_CLAUDE] = "claude", [IN_OPENCODE] = "opencode"};

static json_t *meta_of(const input *in, const char *path, const char *title)
{
    char t[201];
    if (title == NULL) {
        snprintf(t, sizeof(t), "%s", base_name(path));
        lint_utf8_tidy(t);
        title = t;
    }
    return json_pack("{s:s, s:{s:s}, s:b}", "title", title, "tags", "importedfrom",
                     mode_names[in->mode], "stuck_detection", 0);
}

static int open_target(const char *cmd, target *t, const char *url, const char *data,
                       remote_opts *ro)
{
    if (url != NULL) {
        net_url u;
        if (remote_setup(cmd, url, ro, &u, &t->tls) != 0)
            return CLI_USAGE;
        if ((t->rm = remote_new(&u, t->tls, ro->api_key)) == NULL) {
            fprintf(stderr, "parley %s: out of memory\n", cmd);
            return CLI_FAIL;
        }
        return CLI_OK;
    }
    char err[512];
    if (getenv("PARLEY_LOG") == NULL) /* the store's notes are not the import's */
        rt_log_set_level(RT_LOG_WARN);
    pl_options o = {.workers = 1, .data_dir = data};
    if (pl_open(&o, &t->pl, err, sizeof(err)) != 0) {
        fprintf(stderr, "parley %s: %s\n", cmd, err);
        return CLI_FAIL;
    }
    return CLI_OK;
}

static void close_target(target *t)
{
    remote_free(t->rm);
    net_tls_config_free(t->tls);
    pl_conv_release(t->conv);
    pl_close(t->pl);
}

/* Both passes over an opened input; the exit status. */
static int import(const char *cmd, input *in, const char *path, bool observe, const char *title,
                  const char *into, target *t)
{
    check c = {.in = in, .name = in->name, .observe = observe};
    if (check_input(in, &c) != 0) {
        fprintf(stderr, "parley %s: %s\n", cmd, in->err);
        return CLI_USAGE;
    }
    if (in->sub_skipped > 0)
        fprintf(stderr, "parley %s: %" PRIu64 " event%s of subagents left out (sidechain lines)\n",
                cmd, in->sub_skipped, in->sub_skipped == 1 ? "" : "s");
    if (c.events == 0) {
        fprintf(stderr, "parley %s: %s: no events to import\n", cmd, path);
        return CLI_FAIL;
    }
    if (c.shown > SHOWN_VIOLATIONS)
        fprintf(stderr, "parley %s: ... and %" PRIu64 " more\n", cmd, c.shown - SHOWN_VIOLATIONS);
    if (c.bad > 0) {
        fprintf(stderr,
                "parley %s: %s: %" PRIu64 " of %" PRIu64 " events would not be committed as they "
                "come: nothing imported%s\n",
                cmd, path, c.bad, c.events,
                observe ? "" : " (--policy observe imports what breaks a rule, recorded)");
        return CLI_FAIL;
    }
    /* pass 2: the same events again, posted */
    in_close(in);
    if (in_open(in, path) != 0) {
        fprintf(stderr, "parley %s: %s\n", cmd, in->err);
        return CLI_USAGE;
    }
    char err[1200];
    if (into != NULL) {
        if (target_open(t, into, err, sizeof(err)) != 0) {
            fprintf(stderr, "parley %s: %s\n", cmd, err);
            return CLI_FAIL;
        }
    } else {
        json_t *meta = meta_of(in, path, title);
        if (meta == NULL || target_create(t, meta, observe, err, sizeof(err)) != 0) {
            fprintf(stderr, "parley %s: %s\n", cmd, meta == NULL ? "out of memory" : err);
            json_decref(meta);
            return CLI_FAIL;
        }
        json_decref(meta);
        if (c.events >= PROGRESS_FROM)
            fprintf(stderr, "parley %s: importing into %s (if cut short, --into %s finishes it)\n",
                    cmd, t->id, t->id);
    }
    if (post_all(in, t, c.events, into != NULL, err, sizeof(err)) != 0) {
        fprintf(stderr, "parley %s: %s: %s%s\n", cmd, path, err,
                into != NULL ? "" : ": the conversation is deleted again");
        if (into == NULL)
            target_delete(t, cmd);
        return CLI_FAIL;
    }
    if (c.observed > 0)
        fprintf(stderr, "parley %s: imported with %" PRIu64 " violation%s recorded\n", cmd,
                c.observed, c.observed == 1 ? "" : "s");
    printf("%s\n", t->id);
    return fflush(stdout) == 0 ? CLI_OK : CLI_FAIL;
}

int cmd_import(int argc, char **argv)
{
    static const char *cmd = "import";
    static const struct option opts[] = {{"url", required_argument, NULL, OPT_URL},
                                         {"data", required_argument, NULL, OPT_DATA},
                                         {"policy", required_argument, NULL, OPT_POLICY},
                                         {"title", required_argument, NULL, OPT_TITLE},
                                         {"into", required_argument, NULL, OPT_INTO},
                                         REMOTE_OPTIONS,
                                         {"help", no_argument, NULL, 'h'},
                                         {NULL, 0, NULL, 0}};
    remote_opts ro = {0};
    const char *url = NULL, *data = NULL, *title = NULL, *into = NULL;
    bool observe = false;
    int o;
    optind = 1;
    opterr = 0;
    while ((o = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
        switch (o) {
        case OPT_URL:
            url = optarg;
            break;
        case OPT_DATA:
            data = optarg;
            break;
        case OPT_POLICY:
            if (strcmp(optarg, "reject") != 0 && strcmp(optarg, "observe") != 0)
                return cli_usage_error(cmd, "unknown policy '%s': reject or observe", optarg);
            observe = strcmp(optarg, "observe") == 0;
            break;
        case OPT_TITLE:
            title = optarg;
            break;
        case OPT_INTO:
            into = optarg;
            if (into[0] == '\0' || strlen(into) > 64 ||
                strspn(into, "0123456789abcdefABCDEF-") != strlen(into))
                return cli_usage_error(cmd, "--into wants a conversation id, not '%s'", into);
            break;
        case 'h':
            fputs(import_usage, stdout);
            return CLI_OK;
        case ':':
            return cli_usage_error(cmd, "option '%s' wants a value", argv[optind - 1]);
        default:
            if (!remote_option(&ro, o, optarg))
                return cli_usage_error(cmd, "unknown option '%s'", argv[optind - 1]);
        }
    }
    if (optind >= argc)
        return cli_usage_error(cmd, "what to import? give a FILE or a DIR");
    if (argc - optind > 1)
        return cli_usage_error(cmd, "unexpected argument '%s': one FILE or DIR at a time",
                               argv[optind + 1]);
    if ((url == NULL) == (data == NULL))
        return cli_usage_error(cmd, "say where to: --url URL (a server) or --data DIR");
    const char *path = argv[optind];
    if (strcmp(path, "-") == 0)
        return cli_usage_error(cmd, "the input is read twice (checked, then posted): give a "
                                    "FILE or a DIR, not stdin");
    input *in = calloc(1, sizeof(*in));
    if (in == NULL) {
        fprintf(stderr, "parley %s: out of memory\n", cmd);
        return CLI_FAIL;
    }
    int rc = CLI_USAGE;
    if (in_open(in, path) != 0) {
        fprintf(stderr, "parley %s: %s\n", cmd, in->err);
    } else if (in->mode == IN_VECTOR) {
        fprintf(stderr, "parley %s: %s is a test vector, not a conversation\n", cmd, path);
    } else {
        target t = {0};
        rc = open_target(cmd, &t, url, data, &ro);
        if (rc == CLI_OK)
            rc = import(cmd, in, path, observe, title, into, &t);
        close_target(&t);
    }
    in_close(in);
    free(in);
    return rc;
}
