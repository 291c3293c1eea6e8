/*
 * cmd_lint.c - `parley lint`: check a recorded conversation offline, the
 * way a live conversation checks it, and say what a live one would have
 * said about every event.
 *
 * The events are replayed in input order through the pure modules the
 * conversation actor uses: each is validated (event.h, plus what the store
 * refuses), offered to the compliance gate (gate.h) with a lookup over
 * what lint has committed so far, and every committed event is fed to the
 * stuck detector (stuck.h). What the actor does around them (offer,
 * settle, expire in actors/conversation.c) is not a module of its own, so
 * it is done again here, in the same order and with the same bounds:
 * deferred messages are committed, in arrival order, as soon as no tool
 * call is pending; held events are offered again once their parent is
 * committed; whatever still waits at the end expires (rejected
 * interleaved_message / unknown_parent), as the vectors' "after the last
 * step" says.
 *
 * Decisions:
 * - Nothing is invented. A live conversation appends events of its own (a
 *   nudge's environment message, StuckPatternDetected and
 *   DeferredMessageExpired errors, status updates); lint reports the
 *   finding instead and feeds none of them to the gate or the detector.
 * - A stuck finding is reported when the detector's answer changes: when
 *   it first names a rule (or names another one), and, with "stuck": null,
 *   when it stops (a user message empties the window). A live conversation
 *   reports once and goes to status stuck; reporting the way out as well
 *   lets a reader know the state after any event. A nudge is reported when
 *   the detector asks for one (it asks once per streak), and is not a
 *   violation; like live, it leaves the stuck state as it was.
 * - Deferral is live's: a deferred message drops the parent it named and
 *   commits after whatever the head is then; an event naming a deferred
 *   message as its parent (upstream logs have them) goes where the message
 *   was deferred; a deferred message's id is taken (the same message again
 *   is a retry, other content a duplicate_event_id). execution_status
 *   updates follow live's transitions (a user message takes finished or
 *   stuck back to idle, as live's own status event would); one live
 *   answers 422 is reported rejected, without a rule.
 * - The policies are the conversation's: observe commits what reject would
 *   refuse (deferrals and holds included) and reports it as "observed",
 *   except a duplicate_event_id, which no policy lets in. The live bounds
 *   on waiting events apply too (64 deferred, 64 held, or what
 *   --defer-max/--hold-max say, as for serve): past them a live
 *   conversation answers 503, so lint reports "refused". The time bounds
 *   do not apply: arrival times are not in a recorded conversation, so
 *   whatever waits, waits until the end.
 * - Memory is what the gate needs, not the conversation: for each
 *   committed id, a SHA-256 digest (cut to 128 bits) of its canonical
 *   bytes without timestamp and parent_id, and digests of those two, which
 *   is exactly what the live idempotent-retry test compares (a retry may
 *   leave the stamps out); the "a:"/"o:" keys of actions and results; the
 *   gate's pending calls; and the waiting events (bounded, above). Input
 *   is read one value at a time: an array is split into its elements
 *   without building the whole tree, so an event's body is freed once
 *   checked. The input may be at most LINT_MAX_INPUT bytes.
 * - Input is detected: a directory is an OpenHands conversation
 *   (DIR/events/event-<index>-<id>.json, or DIR/event-*.json, in index
 *   order); a file starting with '[' is an array of events; anything else
 *   is a sequence of JSON values (NDJSON, or pretty-printed objects one
 *   after the other); a sole object with "steps" or "events" and no "kind"
 *   is a test vector (shared/vectors/), whose restart steps change nothing
 *   here and are skipped, and whose "thresholds" apply unless
 *   --thresholds is given. Bad framing is fatal (exit 2, with the line and
 *   column); a framed value that is not a valid event is a finding
 *   (invalid_event), as it would be for a live producer.
 * - Positions count events from 1 in input order (test vectors: append
 *   steps only); an event that came without an id is named by its
 *   position alone, even once stamped.
 */
#include "cli.h"

#include "actors/visual.h"

#include "actors/conversation.h"
#include "actors/event.h"
#include "actors/gate.h"
#include "actors/stuck.h"

#include "runtime/json.h"

#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <limits.h>
#include <mbedtls/version.h>
#include <mbedtls/sha256.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The largest input read, in bytes: far beyond any real conversation, and
 * what one process can hold while the gate's tables grow. */
#define LINT_MAX_INPUT      (1ULL << 30)
#define LINT_MAX_INPUT_TEXT "1 GiB"

/* A live conversation's bounds on waiting events: the defaults and the
 * ranges of `parley serve --defer-max/--hold-max` (convs.c, cmd_serve.c). */
enum { LINT_DEFER_MAX = 64, LINT_HOLD_MAX = 64, LINT_WAIT_MAX = 10000 };

enum { DIGEST = 16, DETAIL_MAX = 1536, PENDING_SHOWN = 8 };

static const char lint_usage[] =
    "usage: parley lint [--json|--pretty] [--policy reject|observe] [--thresholds AO,AE,M,ALT]\n"
    "                   [--defer-max N] [--hold-max N] FILE|DIR|-\n\n"
    "Check a recorded conversation offline, as a live conversation checks it: every event\n"
    "is validated and offered to the compliance gate in input order, and every committed\n"
    "event is fed to the stuck detector. One line per finding (the gate's verdict on each\n"
    "event, stuck findings, nudges), in the order a live conversation would produce them,\n"
    "then a summary.\n\n"
    "Input (detected; at most " LINT_MAX_INPUT_TEXT "):\n"
    "  FILE   a JSON array of events, NDJSON (one event object per line), or a test vector\n"
    "         (an object with \"steps\" or \"events\")\n"
    "  DIR    an OpenHands conversation: DIR/events/event-NNNNN-<id>.json (or\n"
    "         DIR/event-*.json), in the order of the index in the file names\n"
    "  -      standard input, read as FILE\n\n"
    "  --json                    one JSON object per finding per line (NDJSON), then a\n"
    "                            {\"summary\": ...} object\n"
    "  --pretty                  each event as the terminal visualizer shows it, before\n"
    "                            its findings\n"
    "  --policy POLICY           reject (default): a violation keeps the event out;\n"
    "                            observe: the event is committed and the violation reported\n"
    "  --thresholds AO,AE,M,ALT  the stuck detector's action_observation, action_error,\n"
    "                            monologue and alternating_pattern thresholds (default\n"
    "                            4,3,3,6; an empty field keeps its default). A vector's own\n"
    "                            \"thresholds\" apply unless this is given.\n"
    "  --defer-max N, --hold-max N\n"
    "                            messages deferred, and events waiting for their parent,\n"
    "                            at one time, as `parley serve` bounds them: past them an\n"
    "                            event is refused (default 64 each, 1..10000)\n"
    "  -h, --help                show this help\n\n"
    "Verdicts: ok, deferred, held, committed (was deferred/held), rejected <rule>,\n"
    "observed <rule> (--policy observe), retry (the same event again), refused (too many\n"
    "events waiting). Colour on a terminal, unless NO_COLOR is set.\n"
    "Exit status: 0 clean (nothing rejected, no stuck finding), 1 violations found,\n"
    "2 bad usage or unreadable input (the reason on stderr).\n";

/* ===================================================== the gate's memory === */

/* An open-addressing set of strings; the strings live in records the
 * caller allocates (an id's record, or a bare key). */
typedef struct tab {
    char **slot; /* NULL when empty */
    size_t cap, n;
} tab;

typedef struct id_rec {
    uint64_t pos; /* the input position that committed it */
    uint8_t rest[DIGEST], ts[DIGEST];
    bool has_ts;
    char id[]; /* the set's key */
} id_rec;

static id_rec *rec_of(char *key)
{
    return (id_rec *)(void *)(key - offsetof(id_rec, id));
}

static uint64_t str_hash(const char *s, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= 0x100000001b3ULL;
    }
    h ^= h >> 31; /* FNV's low bits are weak; the mask below uses them */
    h *= 0x94d049bb133111ebULL;
    return h ^ (h >> 29);
}

/* The slot holding key, or the empty slot where it would go. */
static char **tab_slot(const tab *t, const char *key, size_t n)
{
    size_t i = (size_t)str_hash(key, n) & (t->cap - 1);
    for (;; i = (i + 1) & (t->cap - 1)) {
        char *s = t->slot[i];
        if (s == NULL || (strncmp(s, key, n) == 0 && s[n] == '\0'))
            return &t->slot[i];
    }
}

static char *tab_get(const tab *t, const char *key, size_t n)
{
    return t->cap == 0 ? NULL : *tab_slot(t, key, n);
}

/* Adds key (not in the set yet); -ENOMEM leaves the set as it was. */
static int tab_add(tab *t, char *key)
{
    if (2 * (t->n + 1) > t->cap) {
        size_t cap = t->cap ? 2 * t->cap : 1024;
        char **old = t->slot;
        size_t ocap = t->cap;
        if ((t->slot = calloc(cap, sizeof(char *))) == NULL) {
            t->slot = old;
            return -ENOMEM;
        }
        t->cap = cap;
        for (size_t i = 0; i < ocap; i++)
            if (old[i] != NULL)
                *tab_slot(t, old[i], strlen(old[i])) = old[i];
        free(old);
    }
    *tab_slot(t, key, strlen(key)) = key;
    t->n++;
    return 0;
}

static void tab_free(tab *t, bool records)
{
    for (size_t i = 0; i < t->cap; i++)
        if (t->slot[i] != NULL)
            free(records ? (void *)rec_of(t->slot[i]) : (void *)t->slot[i]);
    free(t->slot);
    memset(t, 0, sizeof(*t));
}

static int digest(const char *p, size_t n, uint8_t out[DIGEST])
{
    unsigned char full[32];
#if MBEDTLS_VERSION_NUMBER >= 0x03000000
    int r = mbedtls_sha256((const unsigned char *)p, n, full, 0);
#else
    int r = mbedtls_sha256_ret((const unsigned char *)p, n, full, 0);
#endif
    memcpy(out, full, DIGEST);
    return r == 0 ? 0 : -1;
}

/* What the idempotent-retry test compares (conversation.c same_content):
 * the canonical bytes without parent_id, where a timestamp the retry
 * leaves out is no difference. So the timestamp is digested apart. */
typedef struct parts {
    uint8_t rest[DIGEST], ts[DIGEST];
    int ts_state; /* 0 absent, 1 null, 2 a value */
} parts;

static int member_digest(json_t *obj, const char *key, uint8_t out[DIGEST], int *state)
{
    json_t *v = json_object_get(obj, key);
    memset(out, 0, DIGEST);
    *state = v == NULL ? 0 : json_is_null(v) ? 1 : 2;
    if (*state != 2)
        return 0;
    char *c = ev_canonical_json(v);
    int r = c != NULL ? digest(c, strlen(c), out) : -1;
    free(c);
    return r;
}

static int parts_of(json_t *obj, parts *p)
{
    json_t *rest = json_copy(obj); /* shallow: the members are shared */
    if (rest == NULL)
        return -1;
    json_object_del(rest, "timestamp");
    json_object_del(rest, "parent_id");
    char *c = ev_canonical_json(rest);
    json_decref(rest);
    int r = c != NULL ? digest(c, strlen(c), p->rest) : -1;
    free(c);
    if (r == 0)
        r = member_digest(obj, "timestamp", p->ts, &p->ts_state);
    return r;
}

/* The timestamp of a retry against the stored one: left out matches
 * anything; null matches only its absence (canonical bytes drop nulls). */
static bool stamp_matches(int state, const uint8_t *given, bool stored, const uint8_t *kept)
{
    if (state == 0)
        return true;
    if (state == 1)
        return !stored;
    return stored && memcmp(given, kept, DIGEST) == 0;
}

/* ============================================================ the replay === */

typedef enum was { WAS_NONE, WAS_DEFERRED, WAS_HELD } was;

static const char *const was_names[] = {NULL, "deferred", "held"};

typedef struct item {
    ev e;
    uint64_t pos;
    bool had_id; /* the input gave it an id (else it is named by position) */
} item;

typedef struct waiting { /* a deferred or held event */
    struct waiting *next;
    item it;
    char *after; /* deferred: the head when it was deferred */
} waiting;

typedef struct counts {
    uint64_t events, committed, rejected, observed, refused, retries;
    uint64_t deferred, held, stuck, nudges;
} counts;

typedef struct lint {
    gate *g;
    stuck *sk;
    stuck_thresholds th;
    tab ids;  /* committed ids -> id_rec */
    tab keys; /* "a:<call>", "o:<call>" of committed actions and results */
    waiting *holds, *defs;
    size_t nholds, ndefs;
    bool json, observe, color;
    int defer_max, hold_max;
    conv_status status; /* as live moves it (its own status events aside) */
    stuck_rule stuck_now; /* the detector's last answer reported */
    uint64_t log_len;
    counts n;
    int fatal; /* an errno that stopped the replay (allocation failure) */
} lint;

/* ----------------------------------------------------------- lookups --- */

static waiting *deferred_find(const lint *l, const char *id)
{
    for (waiting *x = l->defs; x != NULL; x = x->next)
        if (strcmp(x->it.e.id, id) == 0)
            return x;
    return NULL;
}

/* An id is taken once committed, or promised to a deferred message. */
static int lk_known(void *ctx, const ev *e)
{
    lint *l = ctx;
    waiting *x = deferred_find(l, e->id);
    char *k = x == NULL ? tab_get(&l->ids, e->id, strlen(e->id)) : NULL;
    if (x == NULL && k == NULL)
        return 0; /* the common case: nothing to digest */
    parts p, d;
    if (parts_of(e->obj, &p) != 0 || (x != NULL && parts_of(x->it.e.obj, &d) != 0))
        return 2; /* as live: what cannot be compared is not the same */
    if (x != NULL)
        return memcmp(p.rest, d.rest, DIGEST) == 0 &&
                       stamp_matches(p.ts_state, p.ts, d.ts_state == 2, d.ts)
                   ? 1
                   : 2;
    id_rec *r = rec_of(k);
    bool same = memcmp(p.rest, r->rest, DIGEST) == 0 &&
                stamp_matches(p.ts_state, p.ts, r->has_ts, r->ts);
    return same ? 1 : 2;
}

static bool lk_has_id(void *ctx, const char *id)
{
    lint *l = ctx;
    return tab_get(&l->ids, id, strlen(id)) != NULL;
}

static bool lk_has_key(void *ctx, const char *key, size_t len)
{
    lint *l = ctx;
    return tab_get(&l->keys, key, len) != NULL;
}

/* What was committed, as the gate will ask about it. */
static int remember(lint *l, const ev *e, uint64_t pos)
{
    size_t n = strlen(e->id);
    id_rec *r = calloc(1, sizeof(*r) + n + 1);
    parts p;
    if (r == NULL || parts_of(e->obj, &p) != 0) {
        free(r);
        return -ENOMEM;
    }
    r->pos = pos;
    memcpy(r->rest, p.rest, DIGEST);
    memcpy(r->ts, p.ts, DIGEST);
    r->has_ts = p.ts_state == 2;
    memcpy(r->id, e->id, n + 1);
    if (tab_get(&l->ids, r->id, n) != NULL) {
        free(r); /* observe mode can commit an id twice; the first stays */
    } else if (tab_add(&l->ids, r->id) != 0) {
        free(r);
        return -ENOMEM;
    }
    char key[256];
    size_t klen = gate_key(e, key, sizeof(key));
    if (klen > 0 && tab_get(&l->keys, key, klen) == NULL) {
        char *k = strdup(key);
        if (k == NULL || tab_add(&l->keys, k) != 0) {
            free(k);
            return -ENOMEM;
        }
    }
    return 0;
}

/* ------------------------------------------------------------ output --- */

typedef struct view { /* how a finding names its event */
    uint64_t pos;
    const char *id; /* NULL: the input gave none */
    const char *kind, *source;
} view;

static view view_of(const item *it)
{
    return (view){it->pos, it->had_id ? it->e.id : NULL, ev_kind_name(it->e.kind),
                  ev_source_name(it->e.source)};
}

static const char *str_member(json_t *o, const char *key)
{
    return json_string_value(json_object_get(o, key));
}

/* Control characters from the input would move the cursor or recolour
 * the terminal: C0, DEL and C1 (UTF-8 C2 80..9F) go out as '?', line
 * breaks and tabs as spaces, so that a finding stays one line. */
static void put_clean(const char *s)
{
    for (const unsigned char *p = (const unsigned char *)s; *p != '\0'; p++) {
        unsigned char c = *p;
        if (c == '\n' || c == '\r' || c == '\t')
            c = ' ';
        else if (c < 0x20 || c == 0x7f)
            c = '?';
        else if (c == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f) {
            c = '?';
            p++;
        }
        putchar(c);
    }
}

enum { C_NONE, C_GREEN, C_YELLOW, C_RED, C_CYAN };

static void put_colored(const lint *l, int color, const char *word)
{
    static const char *const esc[] = {"", "\033[32m", "\033[33m", "\033[1;31m", "\033[36m"};
    if (l->color && color != C_NONE)
        printf("%s%s\033[0m", esc[color], word);
    else
        fputs(word, stdout);
}

static void put_prefix(const view *v)
{
    printf("#%" PRIu64 " ", v->pos);
    if (v->id != NULL) {
        put_clean(v->id);
        putchar(' ');
    }
    put_clean(v->kind != NULL ? v->kind : "(no kind)");
    if (v->source != NULL) {
        fputs(" (", stdout);
        put_clean(v->source);
        putchar(')');
    }
    fputs(": ", stdout);
}

static void set_string(json_t *o, const char *key, const char *s)
{
    json_t *v = s != NULL ? json_string(s) : json_null();
    json_object_set_new(o, key, v != NULL ? v : json_null());
}

static void emit(lint *l, json_t *o)
{
    char *s = o != NULL ? json_dumps(o, JSON_COMPACT) : NULL;
    if (s == NULL) {
        l->fatal = ENOMEM;
    } else {
        puts(s);
        free(s);
    }
    json_decref(o);
}

static json_t *json_view(const view *v)
{
    json_t *o = json_object();
    if (o != NULL) {
        json_object_set_new(o, "position", json_integer((json_int_t)v->pos));
        set_string(o, "id", v->id);
        set_string(o, "kind", v->kind);
        set_string(o, "source", v->source);
    }
    return o;
}

static json_t *pending_json(const lint *l)
{
    json_t *a = json_array();
    for (size_t i = 0; a != NULL && i < gate_pending_count(l->g); i++)
        json_array_append_new(a, json_string(gate_pending_call(l->g, i, NULL, NULL)));
    return a;
}

/* "1 tool call pending (c1)", "3 tool calls <how> (c1, c2, c3)". */
static void pending_phrase(const lint *l, const char *how, char *out, size_t cap)
{
    size_t n = gate_pending_count(l->g), o = 0;
    o += (size_t)snprintf(out, cap, "%zu tool call%s %s (", n, n == 1 ? "" : "s", how);
    for (size_t i = 0; i < n && i < PENDING_SHOWN && o < cap; i++)
        o += (size_t)snprintf(out + o, cap - o, "%s%s", i ? ", " : "",
                              gate_pending_call(l->g, i, NULL, NULL));
    if (n > PENDING_SHOWN && o < cap)
        o += (size_t)snprintf(out + o, cap - o, ", and %zu more", n - PENDING_SHOWN);
    if (o < cap)
        snprintf(out + o, cap - o, ")");
}

/* snprintf may cut in the middle of a character; JSON wants whole ones. */
static void utf8_tidy(char *s)
{
    size_t len = strlen(s), i = len;
    while (i > 0 && ((unsigned char)s[i - 1] & 0xc0) == 0x80)
        i--;
    if (i > 0 && ((unsigned char)s[i - 1] & 0x80)) {
        unsigned char lead = (unsigned char)s[i - 1];
        size_t want = lead >= 0xf0 ? 4 : lead >= 0xe0 ? 3 : 2;
        if (len - (i - 1) < want)
            s[i - 1] = '\0';
    }
}

typedef struct verdict {
    const char *word; /* ok, committed, deferred, held, rejected, observed, retry, refused */
    int color;
    const char *rule;   /* rejected, observed */
    const char *detail; /* NULL or a sentence */
    was was;
    bool pending;      /* report the pending tool calls */
    int64_t log_index; /* committed: its place in the log; else -1 */
} verdict;

static void report(lint *l, const view *v, const verdict *d)
{
    if (l->json) {
        json_t *o = json_view(v);
        if (o != NULL) {
            json_object_set_new(o, "verdict", json_string(d->word));
            if (d->rule != NULL)
                json_object_set_new(o, "rule", json_string(d->rule));
            if (d->detail != NULL)
                set_string(o, "detail", d->detail);
            if (d->was != WAS_NONE)
                json_object_set_new(o, "was", json_string(was_names[d->was]));
            if (d->log_index >= 0)
                json_object_set_new(o, "index", json_integer(d->log_index));
            if (d->pending)
                json_object_set_new(o, "pending_tool_call_ids", pending_json(l));
        }
        emit(l, o);
        return;
    }
    put_prefix(v);
    put_colored(l, d->color, d->word);
    if (d->rule != NULL) {
        fputs(": ", stdout);
        put_colored(l, d->color, d->rule);
    }
    if (d->detail != NULL) {
        fputs(": ", stdout);
        put_clean(d->detail);
    }
    if (d->was != WAS_NONE)
        printf(" (was %s)", was_names[d->was]);
    putchar('\n');
}

static void stuck_phrase(const lint *l, stuck_rule r, char *out, size_t cap)
{
    switch (r) {
    case STUCK_REPEATING_ACTION_OBSERVATION:
        snprintf(out, cap, "the same action got the same observation %d times in a row",
                 l->th.action_observation);
        break;
    case STUCK_REPEATING_ACTION_ERROR:
        snprintf(out, cap, "the same action failed with an error more than %d times in a row",
                 l->th.action_error);
        break;
    case STUCK_MONOLOGUE:
        snprintf(out, cap, "%d or more agent messages in a row, with no user message between",
                 l->th.monologue);
        break;
    case STUCK_ALTERNATING_ACTION_OBSERVATION:
        snprintf(out, cap, "two actions and their observations alternate, %d of each",
                 l->th.alternating_pattern);
        break;
    default:
        snprintf(out, cap, "the latest events break the pattern");
    }
}

/* After each committed event: the nudge, or a change of the stuck state. */
static void check_stuck(lint *l, const view *v)
{
    stuck_verdict sv;
    stuck_check(l->sk, &sv);
    if (sv.nudge) {
        l->n.nudges++;
        if (l->json) {
            json_t *o = json_pack("{s:I, s:s?, s:s}", "position", (json_int_t)v->pos, "id", v->id,
                                  "nudge", sv.nudge_text);
            emit(l, o);
        } else {
            put_prefix(v);
            put_colored(l, C_YELLOW, "nudge");
            fputs(": ", stdout);
            put_clean(sv.nudge_text);
            putchar('\n');
        }
        return; /* as live: the rules are not asked this time */
    }
    if (sv.rule == l->stuck_now)
        return;
    l->stuck_now = sv.rule;
    if (sv.rule != STUCK_NONE)
        l->n.stuck++;
    char detail[256];
    stuck_phrase(l, sv.rule, detail, sizeof(detail));
    if (sv.rule == STUCK_NONE && v->kind != NULL && strcmp(v->kind, "MessageEvent") == 0 &&
        v->source != NULL && strcmp(v->source, "user") == 0)
        snprintf(detail, sizeof(detail), "a user message starts the window again");
    if (l->json) {
        json_t *o = json_pack("{s:I, s:s?}", "position", (json_int_t)v->pos, "id", v->id);
        if (o != NULL) {
            set_string(o, "stuck", sv.rule != STUCK_NONE ? stuck_rule_name(sv.rule) : NULL);
            set_string(o, "detail", detail);
        }
        emit(l, o);
        return;
    }
    put_prefix(v);
    if (sv.rule != STUCK_NONE) {
        put_colored(l, C_RED, "stuck");
        fputs(": ", stdout);
        put_colored(l, C_RED, stuck_rule_name(sv.rule));
    } else {
        put_colored(l, C_GREEN, "not stuck any more");
    }
    printf(": %s\n", detail);
}

/* ------------------------------------------------------- the verdicts --- */

/* One sentence saying why rule r applies to e, in the gate's present state. */
static void rule_detail(const lint *l, gate_rule r, const ev *e, char *out, size_t cap)
{
    char pend[1024];
    pending_phrase(l, "pending", pend, sizeof(pend));
    switch (r) {
    case GATE_INTERLEAVED_MESSAGE:
        snprintf(out, cap, "a message from the %s with %s", ev_source_name(e->source), pend);
        break;
    case GATE_INTERLEAVED_ACTION:
        snprintf(out, cap, "tool call %s is from LLM response %s, another turn than the %s",
                 e->tool_call_id, e->llm_response_id, pend);
        break;
    case GATE_DUPLICATE_TOOL_CALL_ID: {
        bool pending = false;
        for (size_t i = 0; i < gate_pending_count(l->g); i++)
            pending |= strcmp(gate_pending_call(l->g, i, NULL, NULL), e->tool_call_id) == 0;
        snprintf(out, cap, "tool call id %s was used by an earlier action%s", e->tool_call_id,
                 pending ? ", still pending" : "");
        break;
    }
    case GATE_UNMATCHED_TOOL_RESULT:
        snprintf(out, cap, "it answers tool call %s, which no action made", e->tool_call_id);
        break;
    case GATE_DUPLICATE_TOOL_RESULT:
        snprintf(out, cap, "it answers tool call %s, which was answered already", e->tool_call_id);
        break;
    case GATE_UNKNOWN_PARENT:
        snprintf(out, cap, "its parent %s is not in the conversation", e->parent_id);
        break;
    case GATE_STALE_PARENT:
        if (strcmp(e->parent_id, "__root__") == 0)
            snprintf(out, cap, "it starts a new root (__root__) but the conversation has events");
        else
            snprintf(out, cap, "its parent %s is not the head of the conversation (%s)",
                     e->parent_id, gate_head(l->g) != NULL ? gate_head(l->g) : "none");
        break;
    case GATE_DUPLICATE_EVENT_ID: {
        char *k = tab_get(&l->ids, e->id, strlen(e->id));
        snprintf(out, cap,
                 "an event with id %s is in the conversation already (#%" PRIu64
                 "), with other content",
                 e->id, k != NULL ? rec_of(k)->pos : 0);
        break;
    }
    default:
        snprintf(out, cap, "the event is not valid");
    }
    utf8_tidy(out);
}

static void offer(lint *l, item *it, was w);

/* e passed: stamped as live stamps it, the gate moves on, the detector
 * sees it. Takes it. */
static void commit(lint *l, item *it, was w, gate_rule observed, const char *detail)
{
    int r = ev_stamp(&it->e, gate_head(l->g));
    if (r == 0) {
        gate_accept(l->g, &it->e);
        r = remember(l, &it->e, it->pos);
    }
    if (r != 0) {
        l->fatal = -r;
        ev_free(&it->e);
        return;
    }
    view v = view_of(it);
    verdict d = {.word = w == WAS_NONE ? "ok" : "committed",
                 .color = C_GREEN,
                 .was = w,
                 .log_index = (int64_t)l->log_len++};
    if (observed != GATE_OK) {
        d.word = "observed";
        d.color = C_RED;
        d.rule = gate_rule_name(observed);
        d.detail = detail;
        l->n.observed++;
    }
    l->n.committed++;
    report(l, &v, &d);
    int s = conv_status_of(&it->e);
    if (s >= 0)
        l->status = (conv_status)s;
    /* live then appends an idle status of its own */
    if (it->e.kind == EV_MESSAGE && it->e.source == EV_SRC_USER &&
        (l->status == CONV_FINISHED || l->status == CONV_STUCK))
        l->status = CONV_IDLE;
    stuck_feed(l->sk, &it->e);
    check_stuck(l, &v);
    ev_free(&it->e);
}

static void wait_for(lint *l, item *it, was w, bool defer)
{
    size_t *count = defer ? &l->ndefs : &l->nholds;
    view v = view_of(it);
    char detail[DETAIL_MAX];
    int max = defer ? l->defer_max : l->hold_max;
    if (*count >= (size_t)max) {
        snprintf(detail, sizeof(detail),
                 "%d event%s %s already: a live conversation answers 503 (retry later)", max,
                 max == 1 ? " is" : "s are", defer ? "deferred" : "waiting for a parent");
        verdict d = {"refused", C_RED, NULL, detail, w, defer, -1};
        l->n.refused++;
        report(l, &v, &d);
        ev_free(&it->e);
        return;
    }
    waiting *x = calloc(1, sizeof(*x));
    /* live stamps a deferred message's id and timestamp at once (it is
     * kept in deferred.json), and its parent when it commits: the one it
     * named, checked now, is dropped (the message goes after whatever the
     * head is then) and remembered as where it was deferred */
    const char *head = gate_head(l->g);
    if (x == NULL || (defer && ev_stamp(&it->e, NULL) != 0) ||
        (defer && head != NULL && (x->after = strdup(head)) == NULL)) {
        free(x);
        ev_free(&it->e);
        l->fatal = ENOMEM;
        return;
    }
    if (defer)
        ev_set_parent(&it->e, NULL);
    x->it = *it;
    waiting **pp = defer ? &l->defs : &l->holds;
    while (*pp != NULL)
        pp = &(*pp)->next;
    *pp = x;
    ++*count;
    if (defer) {
        l->n.deferred++;
        pending_phrase(l, "pending", detail, sizeof(detail));
    } else {
        l->n.held++;
        snprintf(detail, sizeof(detail), "waiting for its parent %s", it->e.parent_id);
    }
    utf8_tidy(detail);
    verdict d = {defer ? "deferred" : "held", C_YELLOW, NULL, detail, w, defer, -1};
    report(l, &v, &d);
}

/* An event naming a deferred message as its parent goes where that message
 * was deferred (conversation.c reparent()). */
static int reparent(lint *l, ev *e)
{
    waiting *d = e->parent_id != NULL ? deferred_find(l, e->parent_id) : NULL;
    return d != NULL ? ev_set_parent(e, d->after) : 0;
}

/* The way in for every valid event, as conversation.c's offer(). Takes it. */
static void offer(lint *l, item *it, was w)
{
    if (reparent(l, &it->e) < 0) {
        l->fatal = ENOMEM;
        ev_free(&it->e);
        return;
    }
    gate_lookup lk = {l, lk_known, lk_has_id, lk_has_key};
    gate_rule rule;
    gate_verdict gv = gate_check(l->g, &it->e, &lk, &rule);
    char detail[DETAIL_MAX];
    view v = view_of(it);
    int s = conv_status_of(&it->e);
    if (gv != GATE_ALREADY && s >= 0 && !conv_transition_ok(l->status, (conv_status)s)) {
        snprintf(detail, sizeof(detail),
                 "execution_status cannot go from %s to %s (a live producer gets 422)",
                 conv_status_name(l->status), conv_status_name((conv_status)s));
        verdict d = {"rejected", C_RED, NULL, detail, w, false, -1};
        l->n.rejected++;
        report(l, &v, &d);
        ev_free(&it->e);
        return;
    }
    if (l->observe && gv != GATE_ALREADY && gv != GATE_ACCEPT && rule != GATE_DUPLICATE_EVENT_ID) {
        rule_detail(l, rule, &it->e, detail, sizeof(detail));
        commit(l, it, w, rule, detail);
        return;
    }
    switch (gv) {
    case GATE_ACCEPT:
        commit(l, it, w, GATE_OK, NULL);
        return;
    case GATE_DEFER:
        wait_for(l, it, w, true);
        return;
    case GATE_HOLD:
        wait_for(l, it, w, false);
        return;
    case GATE_ALREADY: {
        char *k = tab_get(&l->ids, it->e.id, strlen(it->e.id));
        waiting *x = deferred_find(l, it->e.id);
        if (x != NULL)
            snprintf(detail, sizeof(detail),
                     "the same message as #%" PRIu64 ", which is deferred: not deferred twice",
                     x->it.pos);
        else
            snprintf(detail, sizeof(detail), "the same event as #%" PRIu64 ", not added twice",
                     k != NULL ? rec_of(k)->pos : 0);
        verdict d = {"retry", C_CYAN, NULL, detail, w, false, -1};
        l->n.retries++;
        report(l, &v, &d);
        break;
    }
    case GATE_REJECT: {
        rule_detail(l, rule, &it->e, detail, sizeof(detail));
        verdict d = {"rejected", C_RED, gate_rule_name(rule), detail, w, true, -1};
        l->n.rejected++;
        report(l, &v, &d);
        break;
    }
    }
    ev_free(&it->e);
}

/* Held events whose parent is now committed, then deferred messages once
 * no call is pending, are offered again in arrival order, until nothing
 * moves (conversation.c settle()). */
static void settle(lint *l)
{
    bool moved = true;
    while (moved && l->fatal == 0) {
        moved = false;
        for (waiting **pp = &l->holds; *pp != NULL; pp = &(*pp)->next) {
            waiting *h = *pp;
            if (!lk_has_id(l, h->it.e.parent_id))
                continue;
            *pp = h->next;
            l->nholds--;
            offer(l, &h->it, WAS_HELD);
            free(h);
            moved = true;
            break;
        }
        if (!moved && l->defs != NULL && gate_pending_count(l->g) == 0) {
            waiting *d = l->defs;
            l->defs = d->next;
            l->ndefs--;
            offer(l, &d->it, WAS_DEFERRED);
            free(d->after);
            free(d);
            moved = true;
        }
    }
}

/* After the last event every hold and deferral expires (holds first, as
 * conversation.c expire()). */
static void expire_all(lint *l)
{
    char detail[DETAIL_MAX];
    for (waiting *h = l->holds, *next; h != NULL; h = next) {
        next = h->next;
        view v = view_of(&h->it);
        snprintf(detail, sizeof(detail), "its parent %s never arrived", h->it.e.parent_id);
        utf8_tidy(detail);
        verdict d = {"rejected", C_RED, gate_rule_name(GATE_UNKNOWN_PARENT), detail, WAS_HELD,
                     false,      -1};
        l->n.rejected++;
        report(l, &v, &d);
        ev_free(&h->it.e);
        free(h);
    }
    l->holds = NULL;
    l->nholds = 0;
    for (waiting *x = l->defs, *next; x != NULL; x = next) {
        next = x->next;
        view v = view_of(&x->it);
        pending_phrase(l, "still pending at the end", detail, sizeof(detail));
        utf8_tidy(detail);
        verdict d = {"rejected", C_RED,        gate_rule_name(GATE_INTERLEAVED_MESSAGE),
                     detail,     WAS_DEFERRED, true,
                     -1};
        l->n.rejected++;
        report(l, &v, &d);
        ev_free(&x->it.e);
        free(x->after);
        free(x);
    }
    l->defs = NULL;
    l->ndefs = 0;
}

/* One value from the input (takes v). why: a reason the framing found it
 * invalid ("duplicate object key"), or "". */
static void lint_value(lint *l, json_t *v, const char *why)
{
    item it = {.pos = ++l->n.events};
    char err[512];
    const char *reason = why[0] != '\0' ? why : NULL;
    if (reason == NULL && ev_from_json(v, &it.e, err, sizeof(err)) != 0)
        reason = err;
    else if (reason == NULL && conv_storable(&it.e, err, sizeof(err)) != 0) {
        ev_free(&it.e);
        reason = err;
    }
    if (reason != NULL) {
        view vw = {it.pos, str_member(v, "id"), str_member(v, "kind"), str_member(v, "source")};
        verdict d = {"rejected", C_RED, gate_rule_name(GATE_INVALID_EVENT), reason, WAS_NONE,
                     false,      -1};
        l->n.rejected++;
        report(l, &vw, &d);
        json_decref(v);
        return;
    }
    json_decref(v); /* the ev holds its own reference */
    it.had_id = it.e.id != NULL;
    offer(l, &it, WAS_NONE);
    settle(l);
}

static uint64_t violations(const lint *l)
{
    return l->n.rejected + l->n.observed + l->n.refused + l->n.stuck;
}

static void summary(lint *l)
{
    const counts *n = &l->n;
    uint64_t bad = violations(l);
    if (l->json) {
        json_t *o = json_pack(
            "{s:{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I}}", "summary", "events",
            (json_int_t)n->events, "committed", (json_int_t)n->committed, "rejected",
            (json_int_t)n->rejected, "observed", (json_int_t)n->observed, "refused",
            (json_int_t)n->refused, "retries", (json_int_t)n->retries, "deferred",
            (json_int_t)n->deferred, "held", (json_int_t)n->held, "stuck", (json_int_t)n->stuck,
            "nudges", (json_int_t)n->nudges, "violations", (json_int_t)bad);
        emit(l, o);
        return;
    }
    printf("summary: %" PRIu64 " event%s: %" PRIu64 " committed, %" PRIu64 " rejected", n->events,
           n->events == 1 ? "" : "s", n->committed, n->rejected);
    if (n->observed)
        printf(", %" PRIu64 " observed", n->observed);
    if (n->refused)
        printf(", %" PRIu64 " refused", n->refused);
    if (n->retries)
        printf(", %" PRIu64 " retried", n->retries);
    if (n->deferred)
        printf(", %" PRIu64 " deferred on the way", n->deferred);
    if (n->held)
        printf(", %" PRIu64 " held on the way", n->held);
    printf("; %" PRIu64 " stuck finding%s, %" PRIu64 " nudge%s: ", n->stuck,
           n->stuck == 1 ? "" : "s", n->nudges, n->nudges == 1 ? "" : "s");
    if (bad == 0)
        put_colored(l, C_GREEN, "clean");
    else
        printf("%s%" PRIu64 " violation%s%s", l->color ? "\033[1;31m" : "", bad,
               bad == 1 ? "" : "s", l->color ? "\033[0m" : "");
    putchar('\n');
}

static int lint_init(lint *l, const stuck_thresholds *th)
{
    l->th = *th;
    l->g = gate_new();
    l->sk = stuck_new(th);
    return l->g != NULL && l->sk != NULL ? 0 : -ENOMEM;
}

static void lint_free(lint *l)
{
    /* waiting events left by an input error: freed, not reported */
    for (waiting *lists[2] = {l->holds, l->defs}, **x = lists; x < lists + 2; x++) {
        for (waiting *w = *x, *next; w != NULL; w = next) {
            next = w->next;
            ev_free(&w->it.e);
            free(w->after);
            free(w);
        }
    }
    gate_free(l->g);
    stuck_free(l->sk);
    tab_free(&l->ids, true);
    tab_free(&l->keys, false);
}

/* ============================================================= the input === */

enum { NO_BYTE = -2 };

/* Bytes in, one JSON value at a time, with the line and column of each. */
typedef struct reader {
    FILE *f;
    uint64_t *total; /* bytes read from every file of the input */
    bool too_big;
    int io_err;
    int ahead;      /* a byte peeked, NO_BYTE if none */
    long line, col; /* of the next byte taken */
    long vline, vcol;
    char *buf; /* the value last read */
    size_t len, cap;
} reader;

static void rd_start(reader *r, FILE *f, uint64_t *total)
{
    r->f = f;
    r->total = total;
    r->too_big = false;
    r->io_err = 0;
    r->ahead = NO_BYTE;
    r->line = r->col = 1;
}

static int rd_peek(reader *r)
{
    if (r->ahead == NO_BYTE) {
        int c = getc_unlocked(r->f);
        if (c == EOF && ferror(r->f))
            r->io_err = errno ? errno : EIO;
        if (c != EOF && ++*r->total > LINT_MAX_INPUT) {
            r->too_big = true;
            c = EOF;
        }
        r->ahead = c;
    }
    return r->ahead;
}

static int rd_take(reader *r)
{
    int c = rd_peek(r);
    if (c != EOF) {
        r->ahead = NO_BYTE;
        if (c == '\n') {
            r->line++;
            r->col = 1;
        } else {
            r->col++;
        }
    }
    return c;
}

static void rd_skip_ws(reader *r)
{
    int c;
    while ((c = rd_peek(r)) == ' ' || c == '\t' || c == '\n' || c == '\r')
        rd_take(r);
}

static int rd_push(reader *r, int c)
{
    if (r->len + 1 >= r->cap) {
        size_t cap = r->cap ? 2 * r->cap : 4096;
        char *b = realloc(r->buf, cap);
        if (b == NULL)
            return -1;
        r->buf = b;
        r->cap = cap;
    }
    r->buf[r->len++] = (char)c;
    return 0;
}

typedef enum in_mode { IN_ARRAY, IN_SEQ, IN_VECTOR, IN_DIR } in_mode;

typedef struct ev_file {
    unsigned long long index;
    char *name;
} ev_file;

typedef struct input {
    in_mode mode;
    char name[PATH_MAX + 512]; /* for messages: the path, or "stdin" */
    FILE *f;
    reader r;
    uint64_t total;
    bool started, done;
    json_t *first; /* IN_SEQ: the first value, read ahead */
    char first_why[256];
    json_t *vec; /* IN_VECTOR */
    size_t vi;
    bool steps;
    bool has_th;
    stuck_thresholds th;
    char *dir; /* IN_DIR: the folder holding the event files */
    ev_file *files;
    size_t nfiles, fi;
    char err[PATH_MAX + 1024];
} input;

static int in_fail(input *in, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int in_fail(input *in, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(in->err, sizeof(in->err), fmt, ap);
    va_end(ap);
    return -1;
}

/* The end of input came where it should not: say why it ended. */
static int in_eof(input *in, const char *name, const char *what)
{
    reader *r = &in->r;
    if (r->too_big)
        return in_fail(in, "%s: larger than " LINT_MAX_INPUT_TEXT ", the most parley lint reads",
                       name);
    if (r->io_err)
        return in_fail(in, "cannot read %s: %s", name, strerror(r->io_err));
    return in_fail(in, "%s: line %ld, column %ld: %s", name, r->line, r->col, what);
}

static int in_bom(input *in)
{
    reader *r = &in->r;
    if (rd_peek(r) != 0xef)
        return 0;
    rd_take(r);
    if (rd_take(r) != 0xbb || rd_take(r) != 0xbf)
        return in_fail(in, "%s: line 1: not JSON (a stray byte 0xEF at the start)", in->name);
    r->col = 1;
    return 0;
}

/* The next JSON value's bytes, split off by nesting alone (jansson then
 * parses just them). 1 at the end of input, -1 on error. */
static int read_value(input *in, const char *name)
{
    reader *r = &in->r;
    r->len = 0;
    int c = rd_peek(r);
    if (c == EOF)
        return r->too_big || r->io_err ? in_eof(in, name, "") : 1;
    r->vline = r->line;
    r->vcol = r->col;
    if (c == '{' || c == '[' || c == '"') {
        long depth = 0;
        bool str = false, esc = false;
        do {
            c = rd_take(r);
            if (c == EOF) {
                char what[128];
                snprintf(what, sizeof(what),
                         "the JSON value that starts at line %ld, column %ld is cut short",
                         r->vline, r->vcol);
                return in_eof(in, name, what);
            }
            if (rd_push(r, c) != 0)
                return in_fail(in, "%s: out of memory", name);
            if (str) {
                if (esc)
                    esc = false;
                else if (c == '\\')
                    esc = true;
                else if (c == '"')
                    str = false;
            } else if (c == '"') {
                str = true;
            } else if (c == '{' || c == '[') {
                depth++;
            } else if (c == '}' || c == ']') {
                depth--;
            }
        } while (depth > 0 || str);
    } else {
        while ((c = rd_peek(r)) != EOF && strchr(" \t\r\n,[]{}\"", c) == NULL)
            if (rd_push(r, rd_take(r)) != 0)
                return in_fail(in, "%s: out of memory", name);
        if (r->too_big || r->io_err)
            return in_eof(in, name, "");
        if (r->len == 0)
            return in_fail(in, "%s: line %ld, column %ld: a JSON value was expected, not '%c'",
                           name, r->line, r->col, c);
    }
    r->buf[r->len] = '\0';
    return 0;
}

/* The value read, parsed. A duplicate key leaves the value usable but not
 * a valid event: *why says so. */
static int parse_value(input *in, const char *name, json_t **out, char *why, size_t whylen)
{
    reader *r = &in->r;
    json_error_t je, je2;
    why[0] = '\0';
    json_t *v = rt_json_read(r->buf, r->len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &je);
    if (v == NULL) {
        v = rt_json_read(r->buf, r->len, JSON_DECODE_ANY, &je2);
        if (v != NULL) {
            snprintf(why, whylen, "%s", je.text);
            utf8_tidy(why);
        } else {
            je = je2;
        }
    }
    if (v == NULL) {
        long line = r->vline, col = r->vcol;
        if (je.line >= 1) {
            line += je.line - 1;
            col = je.line == 1 ? r->vcol + (je.column > 0 ? je.column - 1 : 0) : je.column;
        }
        return in_fail(in, "%s: line %ld, column %ld: not valid JSON: %s", name, line, col,
                       je.text);
    }
    *out = v;
    return 0;
}

static bool vector_like(json_t *v)
{
    return json_is_object(v) && json_object_get(v, "kind") == NULL &&
           (json_is_array(json_object_get(v, "steps")) ||
            json_is_array(json_object_get(v, "events")));
}

static void vector_thresholds(input *in)
{
    json_t *t = json_object_get(in->vec, "thresholds");
    static const char *const names[] = {"action_observation", "action_error", "monologue",
                                        "alternating_pattern"};
    int *fields[] = {&in->th.action_observation, &in->th.action_error, &in->th.monologue,
                     &in->th.alternating_pattern};
    stuck_defaults(&in->th);
    in->has_th = json_is_object(t);
    for (int i = 0; i < 4; i++) {
        json_t *v = json_object_get(t, names[i]);
        if (json_is_integer(v) && json_integer_value(v) >= 1 && json_integer_value(v) <= INT_MAX)
            *fields[i] = (int)json_integer_value(v);
    }
}

/* OpenHands names event files event-{index:05d}-{id}.json; the index
 * orders them (it may grow past five digits). */
static bool event_file_name(const char *name, unsigned long long *index)
{
    if (strncmp(name, "event-", 6) != 0 || name[6] < '0' || name[6] > '9')
        return false;
    char *end;
    errno = 0;
    unsigned long long ix = strtoull(name + 6, &end, 10);
    if (errno != 0 || *end != '-')
        return false;
    size_t n = strlen(end + 1);
    if (n <= 5 || strcmp(end + 1 + n - 5, ".json") != 0)
        return false;
    *index = ix;
    return true;
}

static int cmp_files(const void *a, const void *b)
{
    const ev_file *x = a, *y = b;
    if (x->index != y->index)
        return x->index < y->index ? -1 : 1;
    return strcmp(x->name, y->name);
}

static int open_dir(input *in, const char *path)
{
    char sub[PATH_MAX + 8];
    snprintf(sub, sizeof(sub), "%s/events", path);
    DIR *d = opendir(sub);
    bool own = d == NULL;
    if (d == NULL && errno != ENOENT && errno != ENOTDIR)
        return in_fail(in, "cannot open %s: %s", sub, strerror(errno));
    if (d == NULL && (d = opendir(path)) == NULL)
        return in_fail(in, "cannot open %s: %s", path, strerror(errno));
    in->dir = strdup(own ? path : sub);
    size_t cap = 0;
    struct dirent *de;
    int rc = in->dir != NULL ? 0 : in_fail(in, "out of memory");
    while (rc == 0 && (de = readdir(d)) != NULL) {
        unsigned long long ix;
        if (!event_file_name(de->d_name, &ix))
            continue;
        if (in->nfiles == cap) {
            cap = cap ? 2 * cap : 64;
            ev_file *f = realloc(in->files, cap * sizeof(*f));
            if (f == NULL) {
                rc = in_fail(in, "out of memory");
                break;
            }
            in->files = f;
        }
        if ((in->files[in->nfiles].name = strdup(de->d_name)) == NULL)
            rc = in_fail(in, "out of memory");
        else
            in->files[in->nfiles++].index = ix;
    }
    closedir(d);
    if (rc == 0 && own && in->nfiles == 0)
        rc = in_fail(in,
                     "%s has no events/ folder and no event-*.json files: not an OpenHands "
                     "conversation directory",
                     path);
    if (rc == 0 && in->nfiles > 0)
        qsort(in->files, in->nfiles, sizeof(*in->files), cmp_files);
    in->mode = IN_DIR;
    return rc;
}

/* Opens path ("-": stdin) and finds what it holds. */
static int in_open(input *in, const char *path)
{
    memset(in, 0, sizeof(*in));
    if (strcmp(path, "-") == 0) {
        snprintf(in->name, sizeof(in->name), "stdin");
        in->f = stdin;
    } else {
        snprintf(in->name, sizeof(in->name), "%s", path);
        struct stat st;
        if (stat(path, &st) != 0)
            return in_fail(in, "cannot open %s: %s", path, strerror(errno));
        if (S_ISDIR(st.st_mode))
            return open_dir(in, path);
        if (S_ISREG(st.st_mode) && (uint64_t)st.st_size > LINT_MAX_INPUT)
            return in_fail(in,
                           "%s is %.1f GiB, larger than " LINT_MAX_INPUT_TEXT
                           ", the most parley lint reads",
                           path, (double)st.st_size / (double)(1ULL << 30));
        if ((in->f = fopen(path, "r")) == NULL)
            return in_fail(in, "cannot open %s: %s", path, strerror(errno));
    }
    reader *r = &in->r;
    rd_start(r, in->f, &in->total);
    if (in_bom(in) != 0)
        return -1;
    rd_skip_ws(r);
    int c = rd_peek(r);
    if (c == EOF)
        return r->too_big || r->io_err ? in_eof(in, in->name, "")
                                       : in_fail(in, "%s is empty: no events", in->name);
    if (c == '[') {
        rd_take(r);
        in->mode = IN_ARRAY;
        return 0;
    }
    in->mode = IN_SEQ;
    if (read_value(in, in->name) != 0 ||
        parse_value(in, in->name, &in->first, in->first_why, sizeof(in->first_why)) != 0)
        return -1;
    if (!vector_like(in->first))
        return 0;
    rd_skip_ws(r);
    if (rd_peek(r) != EOF || r->too_big || r->io_err)
        return r->too_big || r->io_err ? in_eof(in, in->name, "") : 0;
    in->mode = IN_VECTOR;
    in->vec = in->first;
    in->first = NULL;
    in->steps = json_is_array(json_object_get(in->vec, "steps"));
    vector_thresholds(in);
    return 0;
}

static int next_array(input *in, json_t **v, char *why, size_t whylen)
{
    reader *r = &in->r;
    rd_skip_ws(r);
    int c = rd_peek(r);
    if (c == EOF)
        return in_eof(in, in->name, "the array is not closed (no ']')");
    if (c == ']' || in->started) {
        if (c == ']') {
            rd_take(r);
            rd_skip_ws(r);
            if (rd_peek(r) != EOF)
                return in_fail(in, "%s: line %ld, column %ld: unexpected text after the array",
                               in->name, r->line, r->col);
            if (r->too_big || r->io_err)
                return in_eof(in, in->name, "");
            in->done = true;
            return 0;
        }
        if (c != ',')
            return in_fail(in, "%s: line %ld, column %ld: ',' or ']' expected after an element",
                           in->name, r->line, r->col);
        rd_take(r);
        rd_skip_ws(r);
    }
    in->started = true;
    int rc = read_value(in, in->name);
    if (rc > 0)
        return in_eof(in, in->name, "the array is not closed (no ']')");
    return rc < 0 ? -1 : parse_value(in, in->name, v, why, whylen) < 0 ? -1 : 1;
}

static int next_seq(input *in, json_t **v, char *why, size_t whylen)
{
    if (in->first != NULL) {
        *v = in->first;
        in->first = NULL;
        snprintf(why, whylen, "%s", in->first_why);
        return 1;
    }
    rd_skip_ws(&in->r);
    int rc = read_value(in, in->name);
    if (rc != 0)
        return rc > 0 ? 0 : -1;
    return parse_value(in, in->name, v, why, whylen) < 0 ? -1 : 1;
}

static int next_vector(input *in, json_t **v, char *why)
{
    json_t *list = json_object_get(in->vec, in->steps ? "steps" : "events");
    why[0] = '\0';
    while (in->vi < json_array_size(list)) {
        json_t *s = json_array_get(list, in->vi++);
        if (!in->steps) {
            *v = json_incref(s);
            return 1;
        }
        json_t *ap = json_object_get(s, "append");
        if (ap != NULL) {
            *v = json_incref(ap);
            return 1;
        }
        if (!json_is_true(json_object_get(s, "restart")))
            return in_fail(in,
                           "%s: step %zu is neither {\"append\": event} nor {\"restart\": true}",
                           in->name, in->vi);
        /* a restart: the gate's state comes back whole, so nothing to do */
    }
    return 0;
}

static int next_file(input *in, json_t **v, char *why, size_t whylen)
{
    if (in->fi == in->nfiles)
        return 0;
    /* the name messages use is the file's path from here on */
    snprintf(in->name, sizeof(in->name), "%s/%s", in->dir, in->files[in->fi++].name);
    const char *path = in->name;
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return in_fail(in, "cannot open %s: %s", path, strerror(errno));
    reader *r = &in->r;
    rd_start(r, f, &in->total);
    int rc = in_bom(in);
    if (rc == 0) {
        rd_skip_ws(r);
        rc = read_value(in, path);
        if (rc > 0)
            rc = in_fail(in, "%s: empty file, not an event", path);
    }
    if (rc == 0)
        rc = parse_value(in, path, v, why, whylen);
    if (rc == 0) {
        rd_skip_ws(r);
        if (rd_peek(r) != EOF || r->too_big || r->io_err) {
            rc = r->too_big || r->io_err
                     ? in_eof(in, path, "")
                     : in_fail(in,
                               "%s: line %ld, column %ld: more than one JSON value (an event "
                               "file holds one event)",
                               path, r->line, r->col);
            json_decref(*v);
        }
    }
    fclose(f);
    return rc < 0 ? -1 : 1;
}

/* The next value: 1 (*v set, *why "" or a reason it is invalid), 0 at the
 * end, -1 on an input error (in->err). */
static int in_next(input *in, json_t **v, char *why, size_t whylen)
{
    why[0] = '\0';
    if (in->done)
        return 0;
    switch (in->mode) {
    case IN_ARRAY: {
        int rc = next_array(in, v, why, whylen);
        return in->done ? 0 : rc;
    }
    case IN_SEQ:
        return next_seq(in, v, why, whylen);
    case IN_VECTOR:
        return next_vector(in, v, why);
    default:
        return next_file(in, v, why, whylen);
    }
}

static void in_close(input *in)
{
    if (in->f != NULL && in->f != stdin)
        fclose(in->f);
    json_decref(in->first);
    json_decref(in->vec);
    for (size_t i = 0; i < in->nfiles; i++)
        free(in->files[i].name);
    free(in->files);
    free(in->dir);
    free(in->r.buf);
}

/* ============================================================ the command === */

/* "AO,AE,M,ALT", each 1..1000 (the conversation's own bound) or empty for
 * its default. */
static bool parse_thresholds(const char *s, stuck_thresholds *t)
{
    int *fields[] = {&t->action_observation, &t->action_error, &t->monologue,
                     &t->alternating_pattern};
    stuck_defaults(t);
    for (int i = 0; i < 4; i++) {
        const char *end = strchr(s, ',');
        size_t n = end != NULL ? (size_t)(end - s) : strlen(s);
        if ((end != NULL) != (i < 3))
            return false;
        if (n > 0) {
            char num[16];
            char *e;
            if (n >= sizeof(num))
                return false;
            memcpy(num, s, n);
            num[n] = '\0';
            long v = strtol(num, &e, 10);
            if (*e != '\0' || num[0] < '0' || num[0] > '9' || v < 1 || v > 1000)
                return false;
            *fields[i] = (int)v;
        }
        s += n + (end != NULL);
    }
    return true;
}

int cmd_lint(int argc, char **argv)
{
    static const struct option opts[] = {{"json", no_argument, NULL, 'j'},
                                         {"pretty", no_argument, NULL, 'P'},
                                         {"policy", required_argument, NULL, 'p'},
                                         {"thresholds", required_argument, NULL, 't'},
                                         {"defer-max", required_argument, NULL, 'D'},
                                         {"hold-max", required_argument, NULL, 'H'},
                                         {"help", no_argument, NULL, 'h'},
                                         {NULL, 0, NULL, 0}};
    lint l = {.defer_max = LINT_DEFER_MAX, .hold_max = LINT_HOLD_MAX};
    stuck_thresholds th;
    bool has_th = false, pretty = false;
    int c;
    optind = 1;
    opterr = 0; /* one line of our own instead of getopt's */
    while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
        switch (c) {
        case 'j':
            l.json = true;
            break;
        case 'P':
            pretty = true;
            break;
        case 'p':
            if (strcmp(optarg, "reject") != 0 && strcmp(optarg, "observe") != 0)
                return cli_usage_error("lint", "unknown policy '%s': reject or observe", optarg);
            l.observe = strcmp(optarg, "observe") == 0;
            break;
        case 't':
            if (!parse_thresholds(optarg, &th))
                return cli_usage_error("lint",
                                       "--thresholds wants four whole numbers from 1 to 1000, "
                                       "AO,AE,M,ALT (empty for a default), not '%s'",
                                       optarg);
            has_th = true;
            break;
        case 'D':
        case 'H':
            if (!cli_parse_int("lint", c == 'D' ? "--defer-max" : "--hold-max", optarg, 1,
                               LINT_WAIT_MAX, c == 'D' ? &l.defer_max : &l.hold_max))
                return CLI_USAGE;
            break;
        case 'h':
            fputs(lint_usage, stdout);
            return CLI_OK;
        case ':':
            return cli_usage_error("lint", "option '%s' wants a value", argv[optind - 1]);
        default:
            return cli_usage_error("lint", "unknown option '%s'", argv[optind - 1]);
        }
    }
    if (pretty && l.json)
        return cli_usage_error("lint", "--pretty and --json do not go together");
    if (optind >= argc)
        return cli_usage_error("lint", "which conversation? give a FILE, a DIR or - for stdin");
    if (argc - optind > 1)
        return cli_usage_error("lint", "unexpected argument '%s': one FILE, DIR or - at a time",
                               argv[optind + 1]);
    const char *nc = getenv("NO_COLOR");
    l.color = !l.json && isatty(STDOUT_FILENO) && (nc == NULL || nc[0] == '\0');

    input *in = calloc(1, sizeof(*in));
    if (in == NULL) {
        fprintf(stderr, "parley lint: out of memory\n");
        return CLI_USAGE;
    }
    int rc = in_open(in, argv[optind]);
    if (!has_th && in->has_th)
        th = in->th;
    else if (!has_th)
        stuck_defaults(&th);
    if (rc == 0 && lint_init(&l, &th) != 0)
        rc = in_fail(in, "out of memory");
    while (rc == 0 && l.fatal == 0) {
        json_t *v = NULL;
        char why[256];
        int r = in_next(in, &v, why, sizeof(why));
        if (r <= 0) {
            rc = r;
            break;
        }
        if (pretty) { /* the event as a terminal shows it, then its findings */
            rt_text t = {0};
            visual_opts vo = {.color = l.color};
            if (visual_event(&t, v, &vo))
                fwrite(t.p, 1, t.len, stdout);
            free(t.p);
        }
        lint_value(&l, v, why);
    }
    if (rc == 0 && l.fatal != 0)
        rc = in_fail(in, "stopped: %s", strerror(l.fatal));
    if (rc == 0) {
        expire_all(&l);
        summary(&l);
    }
    if (fflush(stdout) != 0 && rc == 0)
        rc = in_fail(in, "cannot write the report: %s", strerror(errno));
    int status = rc != 0 ? CLI_USAGE : violations(&l) > 0 ? CLI_FAIL : CLI_OK;
    if (rc != 0)
        fprintf(stderr, "parley lint: %s\n", in->err);
    lint_free(&l);
    in_close(in);
    free(in);
    return status;
}
