/*
 * cmd_lint.c - `parley lint`: check a recorded conversation offline, and
 * say what a live conversation would have said about every event.
 *
 * The ordering rules are not here: the events are played through the
 * same sequencer a live conversation uses, with the stuck rules fed as the
 * live detector feeds them (actors/replay.h). This file reads the input
 * (lint/lint_input.c) and reports: one finding per decision on an input
 * event (ok, deferred, held, committed once released, rejected, observed,
 * retry, refused), one per event the conversation adds itself (status
 * updates, StuckPatternDetected, nudges, ComplianceViolation,
 * DeferredMessageExpired: "+" lines), and the stuck findings and nudges.
 *
 * Decisions:
 * - Arrival times are not in a recorded conversation, so nothing expires
 *   on the way: whatever waits, waits until the end, where it expires (as
 *   the vectors' "after the last step" says). The bounds on how many wait
 *   apply (--defer-max, --hold-max, as for serve): past them a live
 *   producer is answered 503, reported "refused".
 * - A test vector's restart step restarts the conversation: held events
 *   are refused (their producers would retry), and recovery runs.
 * - Positions count input events from 1 (test vectors: append steps only);
 *   an event that came without an id is named by its position alone, even
 *   once stamped. What the conversation adds is reported at the position
 *   of the input event that caused it.
 * - A stuck finding is reported when the conversation acts on it (its
 *   status goes stuck), and its end when the status leaves stuck.
 */
#include "cli.h"
#include "lint/lint.h"

#include "actors/replay.h"
#include "actors/visual.h"

#include "runtime/json.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A live conversation's bounds on waiting events: the ranges of `parley
 * serve --defer-max/--hold-max`. */
enum { LINT_WAIT_MAX = 10000, DETAIL_MAX = 1536, PENDING_SHOWN = 8, TEXT_SHOWN = 160 };

static const char lint_usage[] =
    "usage: parley lint [--json|--pretty] [--policy reject|observe] [--thresholds AO,AE,M,ALT]\n"
    "                   [--defer-max N] [--hold-max N] FILE|DIR|-\n\n"
    "Check a recorded conversation offline, as a live conversation checks it: every event\n"
    "is validated and ordered by the same rules (the compliance gate, holds, deferrals,\n"
    "the status), and every committed event is fed to the stuck detector. One line per\n"
    "finding, in the order a live conversation would produce them, then a summary.\n\n"
    "Input (detected; at most " LINT_MAX_INPUT_TEXT "):\n"
    "  FILE   a JSON array of events, NDJSON (one event object per line), a test vector\n"
    "         (an object with \"steps\" or \"events\"), or an agent transcript, converted\n"
    "         to the events its agent would have posted: a Claude Code session (JSONL) or\n"
    "         an OpenCode export (opencode export); findings then name the source line\n"
    "         (\"(line 12)\"), or the message and part\n"
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
    "events waiting); \"+\" lines are events the conversation adds itself (added).\n"
    "Colour on a terminal, unless NO_COLOR is set.\n"
    "Exit status: 0 clean (nothing rejected, no stuck finding), 1 violations found,\n"
    "2 bad usage or unreadable input (the reason on stderr).\n";

typedef struct counts {
    uint64_t events, committed, rejected, observed, refused, retries;
    uint64_t deferred, held, stuck, nudges, added;
} counts;

/* How a finding names its event. */
typedef struct view {
    uint64_t pos;
    bool own;       /* the conversation's own event */
    const char *id; /* NULL: the input gave none */
    const char *kind, *source;
    char where[48]; /* its place in the source ("line 12"), or "" */
} view;


typedef struct lint {
    replay *rp;
    stuck_thresholds th;
    bool json, color;
    view cur; /* the input event being played, for what it causes */
    bool stuck_now;
    counts n;
    int fatal;    /* an errno that stopped the replay (allocation failure) */
    const input *in; /* where positions came from */
} lint;

/* An input event's token: its position, and whether it came with an id. */
static void *token_of(uint64_t pos, bool had_id)
{
    return (void *)(uintptr_t)(pos << 1 | (had_id ? 1 : 0));
}

static uint64_t pos_of(void *token)
{
    return (uint64_t)(uintptr_t)token >> 1;
}

static void where_of(const lint *l, uint64_t pos, char *out, size_t cap)
{
    if (l->in != NULL)
        in_where(l->in, pos, out, cap);
    else if (cap > 0)
        out[0] = '\0';
}

static view view_of(const lint *l, const ev *e, void *token)
{
    view v = {l->cur.pos, true, NULL, ev_kind_name(e->kind), ev_source_name(e->source), ""};
    if (token != NULL) {
        bool had_id = ((uintptr_t)token & 1) != 0;
        v = (view){pos_of(token),
                   false,
                   had_id ? e->id : NULL,
                   ev_kind_name(e->kind),
                   ev_source_name(e->source),
                   ""};
    }
    where_of(l, v.pos, v.where, sizeof(v.where));
    return v;
}

/* ------------------------------------------------------------ output --- */

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
    if (v->where[0] != '\0')
        printf("(%s) ", v->where);
    if (v->own)
        fputs("+ ", stdout);
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
    char *s = o != NULL ? rt_json_dumps(o, NULL) : NULL;
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
        if (v->own)
            json_object_set_new(o, "own", json_true());
        set_string(o, "id", v->id);
        set_string(o, "kind", v->kind);
        set_string(o, "source", v->source);
        if (v->where[0] != '\0')
            set_string(o, "at", v->where);
    }
    return o;
}

static const gate *live_gate(lint *l)
{
    return seq_gate(replay_seq(l->rp));
}

static json_t *pending_json(lint *l)
{
    const gate *g = live_gate(l);
    json_t *a = json_array();
    for (size_t i = 0; a != NULL && i < gate_pending_count(g); i++)
        json_array_append_new(a, json_string(gate_pending_call(g, i, NULL, NULL)));
    return a;
}

/* "1 tool call pending (c1)", "3 tool calls <how> (c1, c2, c3)". */
static void pending_phrase(lint *l, const char *how, char *out, size_t cap)
{
    const gate *g = live_gate(l);
    size_t n = gate_pending_count(g), o = 0;
    o += (size_t)snprintf(out, cap, "%zu tool call%s %s (", n, n == 1 ? "" : "s", how);
    for (size_t i = 0; i < n && i < PENDING_SHOWN && o < cap; i++)
        o += (size_t)snprintf(out + o, cap - o, "%s%s", i ? ", " : "",
                              gate_pending_call(g, i, NULL, NULL));
    if (n > PENDING_SHOWN && o < cap)
        o += (size_t)snprintf(out + o, cap - o, ", and %zu more", n - PENDING_SHOWN);
    if (o < cap)
        snprintf(out + o, cap - o, ")");
}

typedef struct finding {
    const char *word; /* ok, committed, added, deferred, held, rejected, observed, retry, refused */
    int color;
    const char *rule;   /* rejected, observed */
    const char *detail; /* NULL or a sentence */
    seq_was was;
    bool pending;      /* report the pending tool calls */
    int64_t log_index; /* committed: its place in the log; else -1 */
} finding;

static const char *const was_names[] = {[SEQ_WAS_HELD] = "held", [SEQ_WAS_DEFERRED] = "deferred"};

static void report(lint *l, const view *v, const finding *d)
{
    bool was = d->was == SEQ_WAS_HELD || d->was == SEQ_WAS_DEFERRED;
    if (l->json) {
        json_t *o = json_view(v);
        if (o != NULL) {
            json_object_set_new(o, "verdict", json_string(d->word));
            if (d->rule != NULL)
                json_object_set_new(o, "rule", json_string(d->rule));
            if (d->detail != NULL)
                set_string(o, "detail", d->detail);
            if (was)
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
    if (was)
        printf(" (was %s)", was_names[d->was]);
    putchar('\n');
}

/* What an event of the conversation's own says, in a few words. */
static void own_detail(const ev *e, char *out, size_t cap)
{
    json_t *o = ev_json(e); /* NULL (a slim event) reads as no member */
    const char *code = json_string_value(json_object_get(o, "code"));
    json_t *content = json_object_get(json_object_get(o, "llm_message"), "content");
    const char *text = json_string_value(json_object_get(json_array_get(content, 0), "text"));
    if (e->kind == EV_STATE_UPDATE && e->state_key != NULL)
        snprintf(out, cap, "%s %s", e->state_key,
                 json_string_value(json_object_get(o, "value")) != NULL
                     ? json_string_value(json_object_get(o, "value"))
                     : "(a value)");
    else if (code != NULL)
        snprintf(out, cap, "%s: %s", code,
                 json_string_value(json_object_get(o, "detail")) != NULL
                     ? json_string_value(json_object_get(o, "detail"))
                     : "");
    else if (text != NULL)
        snprintf(out, cap, "%.*s%s", TEXT_SHOWN, text, strlen(text) > TEXT_SHOWN ? "..." : "");
    else if (e->kind == EV_AGENT_ERROR && e->tool_call_id != NULL)
        snprintf(out, cap, "tool call %s: %s", e->tool_call_id,
                 json_string_value(json_object_get(o, "error")) != NULL
                     ? json_string_value(json_object_get(o, "error"))
                     : "");
    else
        out[0] = '\0';
    json_decref(o);
    lint_utf8_tidy(out);
}

/* ---------------------------------------------------------- the hooks --- */

static void status_moved(lint *l, const ev *e)
{
    int st = conv_status_of(e);
    if (st < 0 || !l->stuck_now || st == CONV_STUCK)
        return;
    l->stuck_now = false;
    char detail[128];
    snprintf(detail, sizeof(detail), "the conversation is %s again",
             conv_status_name((conv_status)st));
    if (l->json) {
        json_t *o = json_pack("{s:I, s:s?}", "position", (json_int_t)l->cur.pos, "id", l->cur.id);
        if (o != NULL) {
            set_string(o, "stuck", NULL);
            set_string(o, "detail", detail);
        }
        emit(l, o);
        return;
    }
    put_prefix(&l->cur);
    put_colored(l, C_GREEN, "not stuck any more");
    printf(": %s\n", detail);
}

static void decided(void *ctx, const ev *e, const seq_verdict *v, seq_was was, uint64_t index,
                    void *tag)
{
    lint *l = ctx;
    view vw = view_of(l, e, tag);
    char detail[DETAIL_MAX];
    finding d = {.was = was, .log_index = -1};
    void *first;
    switch (v->kind) {
    case SEQ_ACCEPTED:
        d.word = was == SEQ_OWN ? "added" : was == SEQ_NEW ? "ok" : "committed";
        d.color = C_GREEN;
        d.log_index = (int64_t)index;
        if (v->rule != GATE_OK) {
            d.word = "observed";
            d.color = C_RED;
            d.rule = gate_rule_name(v->rule);
            d.detail = v->detail;
            l->n.observed++;
        } else if (was == SEQ_OWN) {
            own_detail(e, detail, sizeof(detail));
            d.detail = detail[0] != '\0' ? detail : NULL;
        }
        if (was == SEQ_OWN)
            l->n.added++;
        else
            l->n.committed++;
        report(l, &vw, &d);
        status_moved(l, e);
        return;
    case SEQ_DEFERRED:
        if (seq_deferred_tag(replay_seq(l->rp), e->id, &first) && first != tag && first != NULL) {
            snprintf(detail, sizeof(detail),
                     "the same message as #%" PRIu64 ", which is deferred: not deferred twice",
                     pos_of(first));
            d = (finding){"retry", C_CYAN, NULL, detail, was, false, -1};
            l->n.retries++;
        } else {
            pending_phrase(l, "pending", detail, sizeof(detail));
            d = (finding){"deferred", C_YELLOW, NULL, detail, was, true, -1};
            l->n.deferred++;
        }
        break;
    case SEQ_HELD:
        snprintf(detail, sizeof(detail), "waiting for its parent %s", e->parent_id);
        d = (finding){"held", C_YELLOW, NULL, detail, was, false, -1};
        l->n.held++;
        break;
    case SEQ_DUPLICATE:
        if (replay_token_of(l->rp, e->id, &first) && first != NULL)
            snprintf(detail, sizeof(detail), "the same event as #%" PRIu64 ", not added twice",
                     pos_of(first));
        else
            snprintf(detail, sizeof(detail), "the same event as one in the log, not added twice");
        d = (finding){"retry", C_CYAN, NULL, detail, was, false, -1};
        l->n.retries++;
        break;
    case SEQ_REJECTED:
        d = (finding){"rejected", C_RED, gate_rule_name(v->rule), v->detail, was, true, -1};
        l->n.rejected++;
        break;
    case SEQ_INVALID:
        snprintf(detail, sizeof(detail), "%s (a live producer gets 422)", v->detail);
        d = (finding){"rejected", C_RED, NULL, detail, was, false, -1};
        l->n.rejected++;
        break;
    case SEQ_BUSY:
        snprintf(detail, sizeof(detail), "%s (a live producer gets 503)", v->detail);
        d = (finding){"refused", C_RED, NULL, detail, was, false, -1};
        l->n.refused++;
        break;
    default:
        l->fatal = ENOMEM;
        return;
    }
    lint_utf8_tidy(detail);
    report(l, &vw, &d);
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
    default:
        snprintf(out, cap, "two actions and their observations alternate, %d of each",
                 l->th.alternating_pattern);
    }
}

static void stuck_found(void *ctx, uint64_t index, const stuck_verdict *sv, bool acted)
{
    (void)index;
    lint *l = ctx;
    const view *v = &l->cur;
    if (sv->nudge) {
        l->n.nudges++;
        if (l->json) {
            emit(l, json_pack("{s:I, s:s?, s:s}", "position", (json_int_t)v->pos, "id", v->id,
                              "nudge", sv->nudge_text));
        } else {
            put_prefix(v);
            put_colored(l, C_YELLOW, "nudge");
            fputs(": ", stdout);
            put_clean(sv->nudge_text);
            putchar('\n');
        }
        return;
    }
    if (!acted)
        return;
    l->stuck_now = true;
    l->n.stuck++;
    char detail[256];
    stuck_phrase(l, sv->rule, detail, sizeof(detail));
    if (l->json) {
        json_t *o = json_pack("{s:I, s:s?, s:s, s:s}", "position", (json_int_t)v->pos, "id", v->id,
                              "stuck", stuck_rule_name(sv->rule), "detail", detail);
        emit(l, o);
        return;
    }
    put_prefix(v);
    put_colored(l, C_RED, "stuck");
    fputs(": ", stdout);
    put_colored(l, C_RED, stuck_rule_name(sv->rule));
    printf(": %s\n", detail);
}

/* ------------------------------------------------------------- input --- */

static const char *str_member(json_t *o, const char *key)
{
    return json_string_value(json_object_get(o, key));
}

/* One value from the input (takes v). why: a reason the framing found it
 * invalid ("duplicate object key"), or "". */
static void lint_value(lint *l, json_t *v, const char *why)
{
    uint64_t pos = ++l->n.events;
    char err[512];
    const char *reason = why[0] != '\0' ? why : NULL;
    ev e;
    if (reason == NULL && seq_event(v, &e, err, sizeof(err)) != 0)
        reason = err;
    if (reason != NULL) {
        view vw = {pos, false, str_member(v, "id"), str_member(v, "kind"), str_member(v, "source"),
                   ""};
        where_of(l, pos, vw.where, sizeof(vw.where));
        finding d = {"rejected", C_RED, gate_rule_name(GATE_INVALID_EVENT), reason, SEQ_NEW,
                     false,      -1};
        l->n.rejected++;
        report(l, &vw, &d);
        json_decref(v);
        return;
    }
    json_decref(v); /* the ev holds its own reference */
    l->cur = (view){pos, false, e.id, ev_kind_name(e.kind), ev_source_name(e.source), ""};
    where_of(l, pos, l->cur.where, sizeof(l->cur.where));
    char id[256] = "";
    if (e.id != NULL) { /* the view outlives the event */
        snprintf(id, sizeof(id), "%s", e.id);
        l->cur.id = id;
    }
    replay_offer(l->rp, &e, token_of(pos, e.id != NULL));
    l->cur.id = NULL;
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
        emit(l, json_pack("{s:{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I}}",
                          "summary", "events", (json_int_t)n->events, "committed",
                          (json_int_t)n->committed, "rejected", (json_int_t)n->rejected, "observed",
                          (json_int_t)n->observed, "refused", (json_int_t)n->refused, "retries",
                          (json_int_t)n->retries, "deferred", (json_int_t)n->deferred, "held",
                          (json_int_t)n->held, "stuck", (json_int_t)n->stuck, "nudges",
                          (json_int_t)n->nudges, "added", (json_int_t)n->added, "violations",
                          (json_int_t)bad));
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
    printf("; %" PRIu64 " stuck finding%s, %" PRIu64 " nudge%s", n->stuck, n->stuck == 1 ? "" : "s",
           n->nudges, n->nudges == 1 ? "" : "s");
    if (n->added)
        printf(", %" PRIu64 " event%s added by the conversation", n->added,
               n->added == 1 ? "" : "s");
    fputs(": ", stdout);
    if (bad == 0)
        put_colored(l, C_GREEN, "clean");
    else
        printf("%s%" PRIu64 " violation%s%s", l->color ? "\033[1;31m" : "", bad,
               bad == 1 ? "" : "s", l->color ? "\033[0m" : "");
    putchar('\n');
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

/* Play the input through the replay, value by value; 0, or -1 (in->err). */
static int play(lint *l, input *in, bool pretty)
{
    while (l->fatal == 0) {
        json_t *v = NULL;
        char why[256];
        int r = in_next(in, &v, why, sizeof(why));
        if (r <= 0)
            return r;
        if (r == 2) { /* a vector's restart step */
            replay_restart(l->rp);
            continue;
        }
        if (pretty) { /* the event as a terminal shows it, then its findings */
            rt_text t = {0};
            visual_opts vo = {.color = l->color};
            if (visual_event(&t, v, &vo))
                fwrite(t.p, 1, t.len, stdout);
            free(t.p);
        }
        lint_value(l, v, why);
    }
    return in_fail(in, "stopped: %s", strerror(l->fatal));
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
    lint l = {0};
    replay_opts ro = {.seq = {.defer_max = 64, .hold_max = 64}};
    int defer_max = 64, hold_max = 64;
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
            ro.seq.policy = strcmp(optarg, "observe") == 0 ? CONV_OBSERVE : CONV_REJECT;
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
                               LINT_WAIT_MAX, c == 'D' ? &defer_max : &hold_max))
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
    l.in = in;
    if (!has_th && in->has_th)
        th = in->th;
    else if (!has_th)
        stuck_defaults(&th);
    l.th = th;
    ro.stuck = th;
    ro.seq.defer_max = (uint32_t)defer_max;
    ro.seq.hold_max = (uint32_t)hold_max;
    replay_hooks hooks = {.ctx = &l, .decided = decided, .stuck = stuck_found};
    if (rc == 0 && (l.rp = replay_new(&ro, &hooks)) == NULL)
        rc = in_fail(in, "out of memory");
    if (rc == 0)
        rc = play(&l, in, pretty);
    if (rc == 0) {
        replay_end(l.rp);
        summary(&l);
        if (in->sub_skipped > 0)
            fprintf(stderr,
                    "parley lint: %" PRIu64 " event%s of subagents (sidechain lines) not "
                    "checked: each is a conversation of its own\n",
                    in->sub_skipped, in->sub_skipped == 1 ? "" : "s");
    }
    if (fflush(stdout) != 0 && rc == 0)
        rc = in_fail(in, "cannot write the report: %s", strerror(errno));
    int status = rc != 0 ? CLI_USAGE : violations(&l) > 0 ? CLI_FAIL : CLI_OK;
    if (rc != 0)
        fprintf(stderr, "parley lint: %s\n", in->err);
    replay_free(l.rp);
    in_close(in);
    free(in);
    return status;
}
