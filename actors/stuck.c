/*
 * stuck.c - the stuck detector's rules (spec/checks.md §1), as fingerprints.
 *
 * What it keeps: a ring of the last STUCK_WINDOW (20) events fed, each as a
 * fingerprint (kind, source, a 64-bit hash of the id and one of the fields
 * that kind is compared on), the tool name of the newest ActionEvent and
 * the error text of the newest AgentErrorEvent (both truncated, for the
 * nudge text), and the id hash of the last error nudged about. That is all
 * the rules ever look at, so memory is bounded whatever the length of the
 * conversation or of its events; the ring grows to the window and the
 * texts are kept at their length, because a process holds many detectors
 * and most conversations are short (see struct stuck). stuck_check rebuilds the
 * upstream scan window from the ring on every call; with 20 entries that
 * costs less than keeping incremental counters correct.
 *
 * Decisions:
 * - The window holds every fed event except ConversationStateUpdateEvent
 *   and the transient StreamingDeltaEvent / ServerErrorEvent: none of them
 *   is a node of the conversation tree, so none is in upstream's window. A
 *   CondensationSummaryEvent is kept, because the monologue rule names it.
 * - Equality (§1.5) is "same kind and same hash" for the four kinds with a
 *   field list. The hash covers the source and the structure of each
 *   compared field, walked in place in the event's document (no
 *   serialization): an object as the sum of its members' hashes, so equal
 *   payloads whose producers list keys in another order are equal, as
 *   upstream's typed comparison finds them;
 *   null members left out; strings length-prefixed so boundaries cannot
 *   shift. A missing or null `thought` hashes as the empty list and a
 *   missing `action` as null, as upstream's model defaults make them.
 * - Every other kind is compared by full structural equality upstream,
 *   id included. A log holds one content per id (a second content under an
 *   existing id is refused), so within a log that is exactly "same id":
 *   that is what is compared (as a 64-bit hash of the whole id, like the
 *   fields above), and nothing else of those events is hashed
 *   (a large LLMCompletionLogEvent costs nothing). It makes rejections
 *   (UserRejectObservation) never equal to one another, as upstream.
 * - A fingerprint that could not be computed (allocation failure) equals
 *   nothing, itself included: a failure can only hide a loop, never report
 *   one.
 * - The nudge is evaluated on the same window as the rules, with the lists
 *   collected once with max(action_observation, action_error + 1) entries:
 *   upstream collects action_error + 1 for the nudge, and "streak equals
 *   the threshold" gives the same answer on either list, since both are
 *   prefixes of the same walk. Upstream's early exit does not apply to the
 *   nudge (a streak of T needs 2T events anyway).
 * - Thresholds larger than the window are accepted; the rules they govern
 *   simply cannot fire. Lists never hold more than the window, so the
 *   `+ 1` is computed in a wider type to stay defined at INT_MAX.
 */
#include "actors/stuck.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Longest tool name kept for the nudge (OpenAI-style tool names are at most
 * 64 bytes) and longest error text: together with the fixed wording they
 * must fit the verdict's nudge_text. */
enum { STUCK_TOOL_MAX = 96, STUCK_ERROR_MAX = 640 };
_Static_assert(sizeof(((stuck_note *)0)->text) >= STUCK_ERROR_MAX, "notes carry error texts");

#define NUDGE_FMT                                                                                  \
    "The tool `%s` was called with the same arguments %d time%s in a row, and every call failed "  \
    "with the same error: %s\nRepeating that exact call will not work. Read the error, then fix "  \
    "the arguments or take a different approach."

_Static_assert(sizeof(NUDGE_FMT) + STUCK_TOOL_MAX + STUCK_ERROR_MAX + 16 <=
                   sizeof(((stuck_verdict *)0)->nudge_text),
               "the nudge text must never be cut by snprintf");

/* A fingerprint: 24 bytes. Ids are compared by a 64-bit hash of the whole
 * id, as the four kinds with a field list are by the hash of their fields;
 * no copy of the id is kept. */
typedef struct stuck_fp {
    uint64_t hash;    /* source + compared fields (kinds with a field list) */
    uint64_t id_hash; /* the whole id */
    uint8_t kind;     /* ev_kind */
    uint8_t source;   /* ev_source */
    bool solo;        /* fingerprinting failed: equal to nothing */
} stuck_fp;

/* The ring grows with the conversation up to the window (most conversations
 * hold a few events), and the texts are as long as they are: a detector
 * costs ~100 bytes for a short conversation, ~600 for a full window. The
 * ring wraps only once it holds STUCK_WINDOW entries; until then it is in
 * feeding order, so growing it is a realloc. */
struct stuck {
    stuck_thresholds t;
    stuck_fp *ring; /* cap entries */
    uint8_t cap;    /* <= STUCK_WINDOW */
    uint8_t next;   /* slot the next event goes to */
    uint8_t count;  /* filled slots, <= cap */
    bool nudged;    /* nudged_id_hash is set */
    uint64_t nudged_id_hash;
    char *last_tool;  /* tool_name of the newest ActionEvent, or NULL */
    char *last_error; /* error of the newest AgentErrorEvent, or NULL */
};

/* ------------------------------------------------------------- hashing --- */

/* FNV-1a over the bytes, finished with splitmix64's finalizer so that the
 * last bytes fed reach every bit of the result. */
/* FNV-1a, but 8 bytes a step where there are 8 (a multiply and a fold):
 * events carry kilobytes of output, and one multiply per byte made this
 * hash several percent of an append. Hashes are never stored. */
static void h_bytes(uint64_t *h, const void *p, size_t n)
{
    const unsigned char *b = p;
    uint64_t x = *h;
    size_t i = 0;
    for (uint64_t w; n - i >= 8; i += 8) {
        memcpy(&w, b + i, 8);
        x = (x ^ w) * 0x9e3779b97f4a7c15ULL;
        x ^= x >> 32;
    }
    for (; i < n; i++) {
        x ^= b[i];
        x *= 0x100000001b3ULL;
    }
    *h = x;
}

static uint64_t h_final(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    x ^= x >> 31;
    return x;
}

/* Length first, so that ("ab","c") and ("a","bc") hash apart. */
static void h_str(uint64_t *h, const char *s)
{
    uint64_t n = s ? (uint64_t)strlen(s) : UINT64_MAX;
    h_bytes(h, &n, sizeof n);
    if (s)
        h_bytes(h, s, (size_t)n);
}

/* Hash a JSON value as its structure, without serializing it: strings by
 * length and bytes, an object as the sum of its members' own hashes (so
 * that producers' key order does not matter, with no sort), null members
 * left out (as the canonical form leaves them out). */
static void h_json(uint64_t *h, const rt_jdoc *d, uint32_t v)
{
    const rt_jnode *n = &d->node[v];
    h_bytes(h, &n->type, 1);
    switch ((rt_jtype)n->type) {
    case RT_JOBJ: {
        uint64_t sum = 0, count = 0;
        for (uint32_t k = rt_jdoc_first(d, v); k != RT_JNONE; k = rt_jdoc_next(d, v, k)) {
            if (rt_jdoc_type(d, k + 1) == RT_JNULL)
                continue;
            uint64_t m = 0xcbf29ce484222325ULL;
            h_json(&m, d, k);
            h_json(&m, d, k + 1);
            sum += h_final(m);
            count++;
        }
        h_bytes(h, &count, sizeof(count));
        h_bytes(h, &sum, sizeof(sum));
        return;
    }
    case RT_JARR: {
        uint64_t count = n->len;
        h_bytes(h, &count, sizeof(count));
        for (uint32_t x = rt_jdoc_first(d, v); x != RT_JNONE; x = rt_jdoc_next(d, v, x))
            h_json(h, d, x);
        return;
    }
    case RT_JSTR: {
        uint64_t len = n->len;
        h_bytes(h, &len, sizeof(len));
        h_bytes(h, d->text + n->u.off, n->len);
        return;
    }
    case RT_JINT:
        h_bytes(h, &n->u.i, sizeof(n->u.i));
        return;
    case RT_JREAL:
        h_bytes(h, &n->u.r, sizeof(n->u.r));
        return;
    default: /* true, false, null: the type is all there is */
        return;
    }
}

/* A member of the event. A missing or null one stands for the model's
 * default: null, or an empty list (`list_default`). */
static void h_member(uint64_t *h, const ev *e, const char *key, bool list_default)
{
    uint32_t v = rt_jdoc_get(e->doc, e->at, key);
    if (v != RT_JNONE && rt_jdoc_type(e->doc, v) != RT_JNULL) {
        h_json(h, e->doc, v);
        return;
    }
    uint8_t t = list_default ? RT_JARR : RT_JNULL;
    h_bytes(h, &t, 1);
    if (list_default) {
        uint64_t count = 0;
        h_bytes(h, &count, sizeof(count));
    }
}

static uint64_t h_id(const char *id)
{
    uint64_t h = 0xcbf29ce484222325ULL;
    h_str(&h, id ? id : "");
    return h_final(h);
}

/* Copies at most cap-1 bytes of s, never cutting a UTF-8 sequence, and
 * marks a cut with "..." so the reader knows the text goes on. */
static void copy_text(char *dst, size_t cap, const char *s)
{
    size_t n = s ? strlen(s) : 0;
    if (n < cap) {
        memcpy(dst, s ? s : "", n + 1);
        return;
    }
    size_t keep = cap - 4;
    while (keep > 0 && ((unsigned char)s[keep] & 0xC0) == 0x80)
        keep--; /* s[keep] is the first byte dropped: not a continuation */
    memcpy(dst, s, keep);
    memcpy(dst + keep, "...", 4);
}

/* --------------------------------------------------------- fingerprints --- */

static bool compared_by_fields(ev_kind k)
{
    return k == EV_ACTION || k == EV_OBSERVATION || k == EV_AGENT_ERROR || k == EV_MESSAGE;
}

static void fingerprint(const ev *e, stuck_fp *fp)
{
    memset(fp, 0, sizeof *fp);
    fp->kind = (uint8_t)e->kind;
    fp->source = (uint8_t)e->source;
    fp->id_hash = h_id(e->id);
    if (!compared_by_fields(e->kind))
        return;

    if (e->doc == NULL) { /* a slim event: its fields are gone */
        fp->solo = true;
        return;
    }
    uint64_t h = 0xcbf29ce484222325ULL;
    uint8_t tag[2] = {fp->kind, fp->source};
    h_bytes(&h, tag, sizeof tag);
    switch (e->kind) {
    case EV_ACTION:
        h_member(&h, e, "thought", true);
        h_member(&h, e, "action", false);
        h_str(&h, e->tool_name);
        break;
    case EV_OBSERVATION:
        h_member(&h, e, "observation", false);
        h_str(&h, e->tool_name);
        break;
    case EV_AGENT_ERROR: {
        /* by length: a "\u0000" inside the text must not end it early */
        uint32_t err = rt_jdoc_get(e->doc, e->at, "error");
        bool is_str = rt_jdoc_str(e->doc, err) != NULL;
        uint64_t n = is_str ? (uint64_t)e->doc->node[err].len : UINT64_MAX;
        h_bytes(&h, &n, sizeof n);
        if (is_str)
            h_bytes(&h, rt_jdoc_str(e->doc, err), (size_t)n);
        break;
    }
    default: /* EV_MESSAGE */
        h_member(&h, e, "llm_message", false);
        break;
    }
    fp->hash = h_final(h);
}

static bool fp_eq(const stuck_fp *a, const stuck_fp *b)
{
    if (a->solo || b->solo || a->kind != b->kind || a->source != b->source)
        return false;
    if (compared_by_fields((ev_kind)a->kind))
        return a->hash == b->hash;
    return a->id_hash == b->id_hash;
}

/* ------------------------------------------------------------------ API --- */

void stuck_defaults(stuck_thresholds *t)
{
    t->action_observation = 4;
    t->action_error = 3;
    t->monologue = 3;
    t->alternating_pattern = 6;
}

stuck *stuck_new(const stuck_thresholds *t)
{
    stuck *s = calloc(1, sizeof *s);
    if (s == NULL)
        return NULL;
    stuck_defaults(&s->t);
    if (t != NULL) {
        if (t->action_observation >= 1)
            s->t.action_observation = t->action_observation;
        if (t->action_error >= 1)
            s->t.action_error = t->action_error;
        if (t->monologue >= 1)
            s->t.monologue = t->monologue;
        if (t->alternating_pattern >= 1)
            s->t.alternating_pattern = t->alternating_pattern;
    }
    return s;
}

void stuck_free(stuck *s)
{
    if (s == NULL)
        return;
    free(s->ring);
    free(s->last_tool);
    free(s->last_error);
    free(s);
}

void stuck_note_of(const ev *e, stuck_note *n)
{
    memset(n, 0, sizeof(*n));
    if (e == NULL || e->kind <= EV_INVALID || e->kind >= EV_KIND_COUNT)
        return;
    if (e->kind == EV_STATE_UPDATE || e->kind == EV_STREAMING_DELTA || e->kind == EV_SERVER_ERROR)
        return;
    stuck_fp fp;
    fingerprint(e, &fp);
    n->hash = fp.hash;
    n->id_hash = fp.id_hash;
    n->kind = fp.kind;
    n->source = fp.source;
    n->solo = fp.solo;
    n->counts = true;
    /* The nudge names the newest action and the newest error; a streak
     * exists only when those are its first pair, so keeping the newest of
     * each is enough. */
    if (e->kind == EV_ACTION)
        copy_text(n->text, STUCK_TOOL_MAX, e->tool_name);
    else if (e->kind == EV_AGENT_ERROR)
        copy_text(n->text, STUCK_ERROR_MAX, ev_string(e, "error"));
}

rt_buf *stuck_note_new(const ev *e)
{
    rt_buf *b = rt_buf_new(sizeof(stuck_note));
    if (b != NULL)
        stuck_note_of(e, (stuck_note *)(void *)rt_buf_wdata(b));
    return b;
}

/* The slot for the next event: the ring grows until it holds the window.
 * If it cannot grow, it starts again empty: a failure can only hide a loop,
 * never report one. */
static stuck_fp *slot(stuck *s)
{
    if (s->count == s->cap && s->cap < STUCK_WINDOW) {
        unsigned cap = s->cap == 0 ? 4 : s->cap * 2u;
        if (cap > STUCK_WINDOW)
            cap = STUCK_WINDOW;
        stuck_fp *r = realloc(s->ring, cap * sizeof(*r));
        if (r == NULL) {
            s->count = s->next = 0;
            if (s->cap == 0)
                return NULL;
        } else {
            s->ring = r;
            s->cap = (uint8_t)cap;
            s->next = s->count; /* it was full, not wrapped: next had come round to 0 */
        }
    }
    return &s->ring[s->next];
}

/* A copy of n's text as the detector keeps it (NULL: none, or no memory). */
static void keep_text(char **dst, const char *text, size_t cap)
{
    char buf[STUCK_ERROR_MAX];
    copy_text(buf, cap, text);
    free(*dst);
    *dst = strdup(buf);
}

void stuck_feed_note(stuck *s, const stuck_note *n)
{
    if (s == NULL || n == NULL || !n->counts || n->kind <= EV_INVALID || n->kind >= EV_KIND_COUNT)
        return;
    stuck_fp *fp = slot(s);
    if (fp != NULL) {
        memset(fp, 0, sizeof(*fp));
        fp->hash = n->hash;
        fp->id_hash = n->id_hash;
        fp->kind = n->kind;
        fp->source = n->source;
        fp->solo = n->solo;
        s->next = (uint8_t)((s->next + 1) % s->cap);
        if (s->count < s->cap)
            s->count++;
    }
    if (n->kind == EV_ACTION)
        keep_text(&s->last_tool, n->text, STUCK_TOOL_MAX);
    else if (n->kind == EV_AGENT_ERROR)
        keep_text(&s->last_error, n->text, STUCK_ERROR_MAX);
}

void stuck_feed(stuck *s, const ev *e)
{
    stuck_note n;
    stuck_note_of(e, &n);
    stuck_feed_note(s, &n);
}

const char *stuck_rule_name(stuck_rule r)
{
    switch (r) {
    case STUCK_REPEATING_ACTION_OBSERVATION:
        return "repeating_action_observation";
    case STUCK_REPEATING_ACTION_ERROR:
        return "repeating_action_error";
    case STUCK_MONOLOGUE:
        return "monologue";
    case STUCK_ALTERNATING_ACTION_OBSERVATION:
        return "alternating_action_observation";
    default:
        return "";
    }
}

/* ---------------------------------------------------------------- rules --- */

/* The scan window, newest first: the ring cut strictly after the newest
 * user message, if the ring holds one. */
static size_t window(const stuck *s, const stuck_fp *w[STUCK_WINDOW])
{
    size_t n = 0;
    for (unsigned i = 0; i < s->count; i++) {
        const stuck_fp *f = &s->ring[(s->next + s->cap - 1 - i) % s->cap];
        if (f->kind == EV_MESSAGE && f->source == EV_SRC_USER)
            break;
        w[n++] = f;
    }
    return n;
}

static bool is_observation_base(uint8_t k)
{
    return k == EV_OBSERVATION || k == EV_AGENT_ERROR || k == EV_USER_REJECT;
}

/* Newest-first actions and observations, up to `need` each (§1.3 collects
 * any observation-like event; the alternating rule passes `strict` to take
 * only ObservationEvent and AgentErrorEvent). */
static void collect(const stuck_fp *const *w, size_t n, size_t need, bool strict,
                    const stuck_fp **act, size_t *na, const stuck_fp **obs, size_t *no)
{
    *na = *no = 0;
    for (size_t i = 0; i < n && (*na < need || *no < need); i++) {
        uint8_t k = w[i]->kind;
        if (k == EV_ACTION) {
            if (*na < need)
                act[(*na)++] = w[i];
        } else if (strict ? (k == EV_OBSERVATION || k == EV_AGENT_ERROR) : is_observation_base(k)) {
            if (*no < need)
                obs[(*no)++] = w[i];
        }
    }
}

/* Leading pairs whose action equals the newest action and whose
 * observation is an AgentErrorEvent; the lists are zipped by position. */
static size_t error_streak(const stuck_fp **act, size_t na, const stuck_fp **obs, size_t no)
{
    size_t streak = 0;
    for (size_t i = 0; i < na && i < no; i++) {
        if (!fp_eq(act[0], act[i]) || obs[i]->kind != EV_AGENT_ERROR)
            break;
        streak++;
    }
    return streak;
}

static bool all_equal_first(const stuck_fp **l, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!fp_eq(l[0], l[i]))
            return false;
    return true;
}

static bool monologue(const stuck_fp *const *w, size_t n, int threshold)
{
    long count = 0;
    for (size_t i = 0; i < n; i++) {
        uint8_t k = w[i]->kind;
        if (k == EV_MESSAGE) {
            if (w[i]->source == EV_SRC_AGENT)
                count++;
            else if (w[i]->source == EV_SRC_USER)
                break;
            /* environment and hook messages (nudges, stop-hook feedback)
             * neither count nor interrupt */
        } else if (k != EV_CONDENSATION_SUMMARY) {
            break;
        }
    }
    return count >= threshold;
}

static bool alternating(const stuck_fp *const *w, size_t n, int threshold)
{
    if ((size_t)threshold > n) /* also covers thresholds beyond the window */
        return false;
    const stuck_fp *act[STUCK_WINDOW], *obs[STUCK_WINDOW];
    size_t k = (size_t)threshold, na, no;
    collect(w, n, k, true, act, &na, obs, &no);
    if (na != k || no != k)
        return false;
    for (size_t i = 0; i + 2 < k; i++)
        if (!fp_eq(act[i], act[i + 2]) || !fp_eq(obs[i], obs[i + 2]))
            return false;
    return true;
}

static bool same_as_nudged(const stuck *s, const stuck_fp *err)
{
    return s->nudged && s->nudged_id_hash == err->id_hash;
}

void stuck_check(stuck *s, stuck_verdict *v)
{
    v->rule = STUCK_NONE;
    v->nudge = false;
    v->nudge_text[0] = '\0';
    if (s == NULL)
        return;
    const stuck_thresholds *t = &s->t;

    const stuck_fp *w[STUCK_WINDOW];
    size_t n = window(s, w);

    long long need = t->action_observation > (long long)t->action_error + 1
                         ? t->action_observation
                         : (long long)t->action_error + 1;
    if (need > STUCK_WINDOW)
        need = STUCK_WINDOW;
    const stuck_fp *act[STUCK_WINDOW], *obs[STUCK_WINDOW];
    size_t na, no;
    collect(w, n, (size_t)need, false, act, &na, obs, &no);
    size_t streak = error_streak(act, na, obs, no);

    if (streak == (size_t)t->action_error && !same_as_nudged(s, obs[0])) {
        s->nudged = true;
        s->nudged_id_hash = obs[0]->id_hash;
        snprintf(v->nudge_text, sizeof v->nudge_text, NUDGE_FMT,
                 s->last_tool != NULL ? s->last_tool : "", t->action_error,
                 t->action_error == 1 ? "" : "s", s->last_error != NULL ? s->last_error : "");
        v->nudge = true;
        return;
    }

    int least = t->action_observation;
    if (t->action_error < least)
        least = t->action_error;
    if (t->monologue < least)
        least = t->monologue;
    if (n < (size_t)least)
        return;

    size_t ao = (size_t)t->action_observation;
    if (na >= ao && no >= ao && all_equal_first(act, ao) && all_equal_first(obs, ao))
        v->rule = STUCK_REPEATING_ACTION_OBSERVATION;
    else if (streak > (size_t)t->action_error)
        v->rule = STUCK_REPEATING_ACTION_ERROR;
    else if (monologue(w, n, t->monologue))
        v->rule = STUCK_MONOLOGUE;
    else if (alternating(w, n, t->alternating_pattern))
        v->rule = STUCK_ALTERNATING_ACTION_OBSERVATION;
}
