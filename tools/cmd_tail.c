/*
 * cmd_tail.c - `parley tail URL CONVERSATION_ID`: a conversation's events
 * as they arrive, through the follower actor (net/follower.h), shown
 * with the terminal visualizer or as NDJSON.
 *
 * The follower runs on a runtime of one loop; this thread waits for its
 * end or for SIGINT/SIGTERM with sigwait (the signals are blocked in every
 * thread, so they wait for it; the follower's end raises SIGUSR1 the same
 * way). Printing happens on the loop's thread only.
 */
#include "actors/visual.h"
#include "cli.h"
#include "net/follower.h"
#include "remote.h"
#include "tail_blocks.h"
#include "runtime/units.h"

#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char usage[] =
    "usage: parley tail URL CONVERSATION_ID [--follow [--until-done]] [--json | --blocks]\n"
    "                   [--from-start | --last N] [--cache FILE] [--no-index]\n"
    "                   [--check-interval D] [--stats] [--api-key KEY]\n"
    "                   [--ca-file FILE] [--insecure]\n\n"
    "Print a conversation's events from a server of the OpenHands agent-server API\n"
    "(parley serve, or another): the last ones there, then, with --follow, each new one\n"
    "as it comes. The local copy is exact: every event once, in log order, however\n"
    "frames are lost, repeated or reordered and connections cut; missed events are\n"
    "fetched by REST from the last one held, 100 a page, never the whole history.\n\n"
    "  URL                 http[s]://HOST:PORT[/PREFIX]\n"
    "  --follow            keep following (a WebSocket, REST to repair) until\n"
    "                      SIGINT/SIGTERM\n"
    "  --until-done        with --follow: end once the conversation's status is\n"
    "                      finished, error or stuck and the copy equals the log\n"
    "  --json              each event as one line of JSON (NDJSON), not as the\n"
    "                      visualizer shows it\n"
    "  --blocks            show the conversation as blocks, as the server's visualizer\n"
    "                      folds it (from the first event): each tool call with its\n"
    "                      result, subagents' blocks indented, thinking folded; a block\n"
    "                      is printed once settled (what is pending at the end, as is)\n"
    "  --from-start        print every event, from the first\n"
    "  --last N            print the last N events already there (default 10); up to\n"
    "                      100 without a cache, only those are fetched\n"
    "  --cache FILE        start from the copy in FILE (NDJSON, as written before),\n"
    "                      fetch only what is newer, write the copy back at the end;\n"
    "                      what the cache held is not printed again unless asked by\n"
    "                      --from-start or --last\n"
    "  --no-index          do not use parley's envelope=index: find lost events by\n"
    "                      /events/count, as against an upstream server\n"
    "  --check-interval D  an idle follower's count check, e.g. 200ms, 5s (default)\n"
    "  --fold N            content lines shown per block (default 40; 0: all)\n"
    "  --stats             at the end, one line of JSON counters on stderr\n" REMOTE_HELP
    "  -h, --help          show this help\n\n"
    "Exit status: 0 done (or stopped by a signal), 1 the server refused or the copy\n"
    "could not be made equal (no such conversation, bad key, TLS, divergence), 2 bad\n"
    "usage.\n";

typedef struct tail {
    bool json, from_start, color;
    long last;
    int fold;
    uint64_t cached; /* events the cache held */
    bool live;       /* printing each new event */
    int status;
    char why[300];
    follower_stats st;
    const char *cache;
    long cache_bytes; /* its whole lines */
    int cache_err;
    tail_blocks *blocks; /* --blocks */
} tail;

/* --blocks: fold the event, print what it settled. */
static void print_blocks(tail *t, uint64_t index, const rt_buf *b, bool flush)
{
    rt_text out = {0};
    if (b != NULL)
        tail_blocks_event(t->blocks, index, b, &out);
    if (flush)
        tail_blocks_flush(t->blocks, &out);
    if (out.len > 0 && !out.failed)
        fwrite(out.p, 1, out.len, stdout);
    free(out.p);
}

static void print_event(tail *t, const rt_buf *b)
{
    if (t->json) {
        fwrite(rt_buf_data(b), 1, rt_buf_len(b), stdout);
        fputc('\n', stdout);
    } else {
        json_error_t je;
        json_t *ev = json_loadb((const char *)rt_buf_data(b), rt_buf_len(b), 0, &je);
        rt_text out = {0};
        visual_opts vo = {.color = t->color, .fold_lines = t->fold};
        if (ev != NULL && visual_event(&out, ev, &vo))
            fwrite(out.p, 1, out.len, stdout);
        free(out.p);
        json_decref(ev);
    }
}

static void on_event(void *ud, uint64_t index, const char *id, const rt_buf *bytes)
{
    (void)id;
    tail *t = ud;
    if (t->live && t->blocks != NULL) {
        print_blocks(t, index, bytes, false);
        fflush(stdout);
    } else if (t->live) {
        print_event(t, bytes);
        fflush(stdout);
    }
}

/* The copy is there: print what the options ask of it, then go live. */
static void on_synced(void *ud, const fl *copy)
{
    tail *t = ud;
    uint64_t n = fl_count(copy), from = t->cache != NULL ? t->cached : n; /* the new ones */
    if (t->from_start) {
        from = 0;
    } else if (t->last >= 0) { /* and the last N, for context */
        uint64_t l = n > (uint64_t)t->last ? n - (uint64_t)t->last : 0;
        from = l < from ? l : from;
    }
    for (uint64_t i = t->blocks != NULL ? 0 : from; i < n; i++) {
        if (t->blocks != NULL)
            print_blocks(t, i, fl_bytes(copy, i), false);
        else
            print_event(t, fl_bytes(copy, i));
    }
    fflush(stdout);
    t->live = true;
}

static void on_status(void *ud, const char *status, const char *rule)
{
    tail *t = ud;
    if (t->live && !t->json) {
        rt_text out = {0};
        visual_opts vo = {.color = t->color};
        visual_status(&out, status, rule, &vo);
        fwrite(out.p, 1, out.len, stdout);
        free(out.p);
        fflush(stdout);
    }
}

/* Write lines [from, count) of the copy to f, then sync. */
static int write_lines(FILE *f, const fl *copy, uint64_t from)
{
    for (uint64_t i = from; i < fl_count(copy); i++) {
        const rt_buf *b = fl_bytes(copy, i);
        fwrite(rt_buf_data(b), 1, rt_buf_len(b), f);
        fputc('\n', f);
    }
    return fflush(f) != 0 || fsync(fileno(f)) != 0 ? errno : 0;
}

/* The copy to the cache file. The cache is a prefix of the copy, so only
 * the new events are appended (a line cut by a crash has no newline and is
 * dropped when read); a new cache is written whole and renamed in place. */
static int write_cache(const char *path, const fl *copy, uint64_t cached, long whole)
{
    if (cached > 0) {
        if (fl_count(copy) == cached)
            return 0;
        if (truncate(path, whole) != 0) /* a cut last line goes */
            return errno;
        FILE *f = fopen(path, "a");
        if (f == NULL)
            return errno;
        int e = write_lines(f, copy, cached);
        if (fclose(f) != 0 && e == 0)
            e = errno;
        return e;
    }
    char tmp[4096];
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (f == NULL)
        return errno;
    int e = write_lines(f, copy, 0);
    if (fclose(f) != 0 && e == 0)
        e = errno;
    if (e == 0 && rename(tmp, path) != 0)
        e = errno;
    if (e != 0)
        unlink(tmp);
    return e;
}

static void on_done(void *ud, int status, const char *why, const fl *copy, const follower_stats *st)
{
    tail *t = ud;
    t->status = status;
    snprintf(t->why, sizeof(t->why), "%s", why);
    t->st = *st;
    t->st.fetched = st->fetched;
    if (t->cache != NULL && (status == 0 || fl_count(copy) > t->cached))
        t->cache_err = write_cache(t->cache, copy, t->cached, t->cache_bytes);
    t->st.requests = st->requests;
    t->cached = fl_count(copy);
    if (t->blocks != NULL && t->live) {
        print_blocks(t, 0, NULL, true);
        fflush(stdout);
    }
    kill(getpid(), SIGUSR1);
}

/* The cache: each line an event with an id, in log order. */
static int read_cache(const char *path, fl *copy, long *whole, char *err, size_t errlen)
{
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        if (errno == ENOENT)
            return 0; /* a first run: made at the end */
        snprintf(err, errlen, "cannot open the cache %s: %s", path, strerror(errno));
        return -1;
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    long lineno = 0;
    int r = 0;
    while (r == 0 && (n = getline(&line, &cap, f)) > 0) {
        lineno++;
        if (line[n - 1] != '\n')
            break; /* a last line cut by a crash while it was appended: not in the copy */
        while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
            line[--n] = '\0';
        if (n == 0)
            continue;
        json_error_t je;
        json_t *ev = json_loadb(line, (size_t)n, 0, &je);
        const char *id = json_string_value(json_object_get(ev, "id"));
        rt_buf *b = id != NULL ? rt_buf_copy(line, (size_t)n) : NULL;
        if (id == NULL || b == NULL || fl_live_unindexed(copy, id, b) != FL_ADDED) {
            snprintf(err, errlen, "the cache %s, line %ld: not a new event with an id", path,
                     lineno);
            r = -1;
        }
        rt_buf_unref(b);
        json_decref(ev);
        *whole = ftell(f);
    }
    free(line);
    fclose(f);
    return r;
}

int cmd_tail(int argc, char **argv)
{
    enum { FOLLOW = 0x100, UNTIL, JSON, START, LAST, CACHE, NOINDEX, CHECK, FOLD, STATS, BLOCKS };
    static const struct option opts[] = {
        {"follow", no_argument, NULL, FOLLOW},
        {"until-done", no_argument, NULL, UNTIL},
        {"json", no_argument, NULL, JSON},
        {"from-start", no_argument, NULL, START},
        {"last", required_argument, NULL, LAST},
        {"cache", required_argument, NULL, CACHE},
        {"no-index", no_argument, NULL, NOINDEX},
        {"check-interval", required_argument, NULL, CHECK},
        {"fold", required_argument, NULL, FOLD},
        {"stats", no_argument, NULL, STATS},
        {"blocks", no_argument, NULL, BLOCKS},
        REMOTE_OPTIONS,
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *cmd = "tail";
    tail t = {.last = -1, .fold = 0};
    remote_opts ro = {0};
    bool follow = false, until = false, index = true, stats = false, blocks = false;
    uint64_t check_ms = 0;
    int o, last = 0;
    optind = 1;
    opterr = 0; /* our own one-line errors */
    while ((o = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        bool ok = true;
        switch (o) {
        case 'h':
            fputs(usage, stdout);
            return CLI_OK;
        case FOLLOW:
            follow = true;
            break;
        case UNTIL:
            until = true;
            break;
        case JSON:
            t.json = true;
            break;
        case START:
            t.from_start = true;
            break;
        case LAST:
            ok = cli_parse_int(cmd, "--last", optarg, 0, 1 << 30, &last);
            t.last = last;
            break;
        case CACHE:
            t.cache = optarg;
            break;
        case NOINDEX:
            index = false;
            break;
        case CHECK:
            if (rt_parse_duration_ms(optarg, 1000, &check_ms) != 0 || check_ms < 10 ||
                check_ms > 3600000)
                return cli_usage_error(cmd, "--check-interval: a duration from 10ms to 1h");
            break;
        case FOLD:
            ok = cli_parse_int(cmd, "--fold", optarg, 0, 1 << 20, &t.fold);
            if (ok && t.fold == 0)
                t.fold = -1;
            break;
        case STATS:
            stats = true;
            break;
        case BLOCKS:
            blocks = true;
            break;
        default:
            if (!remote_option(&ro, o, optarg))
                return cli_usage_error(cmd, "unknown option %s, or its value is missing",
                                       argv[optind - 1]);
        }
        if (!ok)
            return CLI_USAGE;
    }
    if (argc - optind != 2)
        return cli_usage_error(cmd, "a URL and a conversation id are needed");
    if (t.from_start && t.last >= 0)
        return cli_usage_error(cmd, "--from-start and --last do not go together");
    if (blocks && (t.json || t.last >= 0 || t.from_start))
        return cli_usage_error(cmd,
                               "--blocks shows the whole conversation: no --json, --last or "
                               "--from-start with it (GET .../state gives the blocks as JSON)");
    if (until && !follow)
        return cli_usage_error(cmd, "--until-done needs --follow");
    if (t.last < 0 && !t.from_start && t.cache == NULL && !blocks)
        t.last = 10;
    const char *cid = argv[optind + 1];
    if (cid[0] == '\0' || strlen(cid) > 64 || strspn(cid, "0123456789abcdefABCDEF-") != strlen(cid))
        return cli_usage_error(cmd, "%s is not a conversation id", cid);

    follower_opts fo = {.conversation_id = cid,
                        .follow = follow,
                        .use_index = index,
                        .until_done = until,
                        .check_interval_ms = check_ms,
                        .on_event = on_event,
                        .on_status = on_status,
                        .on_synced = on_synced,
                        .on_done = on_done,
                        .ud = &t};
    if (remote_setup(cmd, argv[optind], &ro, &fo.url, &fo.tls) != 0)
        return CLI_USAGE;
    fo.api_key = ro.api_key;
    if (!t.from_start && t.cache == NULL && t.last >= 0 && t.last <= FL_PAGE)
        fo.start_last = t.last > 0 ? (uint32_t)t.last : 1; /* not the whole history */
    t.color = !t.json && visual_color_ok(stdout);
    visual_opts vo = {.color = t.color, .fold_lines = t.fold};
    if (blocks && (t.blocks = tail_blocks_new(&vo)) == NULL) {
        fprintf(stderr, "parley tail: out of memory\n");
        net_tls_config_free(fo.tls);
        return CLI_FAIL;
    }
    char err[400];
    fo.copy = fl_new();
    if (fo.copy == NULL ||
        (t.cache != NULL && read_cache(t.cache, fo.copy, &t.cache_bytes, err, sizeof(err)))) {
        fprintf(stderr, "parley tail: %s\n", fo.copy == NULL ? "out of memory" : err);
        fl_free(fo.copy);
        tail_blocks_free(t.blocks);
        net_tls_config_free(fo.tls);
        return CLI_FAIL;
    }
    t.cached = fl_count(fo.copy);

    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGUSR1);
    pthread_sigmask(SIG_BLOCK, &set, NULL); /* before the runtime's threads exist */
    rt_runtime *rt = NULL;
    rt_actor *a = NULL;
    rt_opts rto = {.loops = 1};
    if (rt_runtime_new(&rto, &rt) != 0 || follower_start(rt, &fo, &a) != 0) {
        fprintf(stderr, "parley tail: cannot start the follower\n");
        tail_blocks_free(t.blocks);
        if (rt != NULL)
            rt_runtime_free(rt);
        net_tls_config_free(fo.tls);
        return CLI_FAIL;
    }
    int sig = 0;
    bool stopping = false;
    while (sigwait(&set, &sig) == 0 && sig != SIGUSR1)
        if (!stopping) { /* the follower ends, and says so with SIGUSR1 */
            stopping = true;
            if (rt_send(a, FOLLOWER_STOP, 0, NULL) != 0)
                break;
        }
    rt_actor_unref(a);
    rt_runtime_shutdown(rt);
    rt_runtime_wait(rt);
    rt_runtime_free(rt);
    net_tls_config_free(fo.tls);
    tail_blocks_free(t.blocks);
    fflush(stdout);
    if (stats)
        fprintf(stderr,
                "parley tail: stats {\"requests\": %llu, \"events\": %llu, \"fetched\": %llu, "
                "\"frames\": %llu, \"reconnects\": %llu, \"ws_lost\": %llu}\n",
                (unsigned long long)t.st.requests, (unsigned long long)t.cached,
                (unsigned long long)t.st.fetched, (unsigned long long)t.st.frames,
                (unsigned long long)t.st.reconnects, (unsigned long long)t.st.ws_lost);
    if (t.cache_err != 0)
        fprintf(stderr, "parley tail: cannot write the cache %s: %s\n", t.cache,
                strerror(t.cache_err));
    if (t.status != 0) {
        fprintf(stderr, "parley tail: %s\n", t.why);
        return CLI_FAIL;
    }
    return t.cache_err != 0 ? CLI_FAIL : CLI_OK;
}
