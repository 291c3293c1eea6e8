/*
 * replay.c - a conversation played offline (replay.h).
 *
 * The log is two open-addressing sets: committed ids (each with its
 * print and the token it came with) and the keys ("a:<call>", "o:<call>")
 * of actions and results. The strings live in records the sets point to.
 */
#include "actors/replay.h"

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ the sets --- */

typedef struct tab {
    char **slot; /* NULL when empty */
    size_t cap, n;
} tab;

typedef struct id_rec {
    void *token;
    seq_print print;
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

/* ---------------------------------------------------------- the replay --- */

struct replay {
    replay_hooks h;
    sequencer *sq;
    stuck *sk; /* NULL: stuck detection is off */
    tab ids, keys;
    size_t bytes; /* what the records hold */
    void **tags;  /* the tags of the events accepted and not durable yet, in order */
    size_t ntags, tags_cap;
};

static int find(void *ctx, const char *id, seq_print *print)
{
    replay *r = ctx;
    char *k = tab_get(&r->ids, id, strlen(id));
    if (k == NULL)
        return 0;
    if (print != NULL)
        *print = rec_of(k)->print;
    return 1;
}

static bool has_key(void *ctx, const char *key, size_t len)
{
    replay *r = ctx;
    return tab_get(&r->keys, key, len) != NULL;
}

static void decided(void *ctx, const ev *e, const seq_verdict *v, seq_was was, uint64_t index,
                    void *tag)
{
    replay *r = ctx;
    if (v->kind == SEQ_ACCEPTED) { /* accepted in log order: tags[k] is index count + k */
        if (r->ntags == r->tags_cap) {
            size_t cap = r->tags_cap ? 2 * r->tags_cap : 16;
            void **t = realloc(r->tags, cap * sizeof(*t));
            if (t != NULL) {
                r->tags = t;
                r->tags_cap = cap;
            }
        }
        if (r->ntags < r->tags_cap)
            r->tags[r->ntags++] = tag;
    }
    if (r->h.decided != NULL)
        r->h.decided(r->h.ctx, e, v, was, index, tag);
}

replay *replay_new(const replay_opts *o, const replay_hooks *h)
{
    replay *r = calloc(1, sizeof(*r));
    if (r == NULL)
        return NULL;
    r->h = *h;
    seq_log lg = {r, find, has_key};
    r->sq = seq_new(&o->seq, &lg, NULL, CONV_IDLE, 0);
    stuck_thresholds th = o->stuck;
    if (r->sq == NULL || (!o->stuck_off && (r->sk = stuck_new(&th)) == NULL)) {
        seq_free(r->sq);
        free(r);
        return NULL;
    }
    seq_on_decided(r->sq, decided, r);
    return r;
}

void replay_free(replay *r)
{
    if (r == NULL)
        return;
    seq_free(r->sq);
    stuck_free(r->sk);
    tab_free(&r->ids, true);
    tab_free(&r->keys, false);
    free(r->tags);
    free(r);
}

/* What became durable, as the gate will ask about it. */
static int remember(replay *r, const seq_item *it, void *token)
{
    size_t n = strlen(it->e.id);
    if (tab_get(&r->ids, it->e.id, n) == NULL) { /* observe mode can commit an id twice */
        id_rec *rec = calloc(1, sizeof(*rec) + n + 1);
        if (rec == NULL || seq_print_of(&it->e, &rec->print) != 0) {
            free(rec);
            return -ENOMEM;
        }
        rec->token = token;
        memcpy(rec->id, it->e.id, n + 1);
        if (tab_add(&r->ids, rec->id) != 0) {
            free(rec);
            return -ENOMEM;
        }
        r->bytes += sizeof(*rec) + n + 1;
    }
    if (it->keylen > 0 && tab_get(&r->keys, it->key, it->keylen) == NULL) {
        char *k = strdup(it->key);
        if (k == NULL || tab_add(&r->keys, k) != 0) {
            free(k);
            return -ENOMEM;
        }
        r->bytes += it->keylen + 1;
    }
    return 0;
}

/* Answers, then units, one by one durable, the detector asked after each
 * event, until nothing is left to do. */
static void run(replay *r)
{
    for (;;) {
        void *token;
        seq_verdict v;
        while (seq_answer(r->sq, &token, &v)) {
            if (r->h.answered != NULL)
                r->h.answered(r->h.ctx, token, &v);
            seq_verdict_clear(&v);
        }
        while (seq_take(r->sq) != NULL)
            ; /* handed to the "store": they stay the sequencer's until durable */
        uint64_t first = seq_count(r->sq);
        seq_unit *u = seq_durable(r->sq);
        if (u == NULL)
            return;
        for (size_t i = 0; i < u->n; i++)
            remember(r, &u->items[i], i < r->ntags ? r->tags[i] : NULL);
        size_t used = u->n < r->ntags ? u->n : r->ntags;
        memmove(r->tags, r->tags + used, (r->ntags - used) * sizeof(*r->tags));
        r->ntags -= used;
        if (r->h.durable != NULL)
            r->h.durable(r->h.ctx, u, first);
        for (size_t i = 0; r->sk != NULL && i < u->n; i++) {
            stuck_verdict sv;
            stuck_feed(r->sk, &u->items[i].e);
            stuck_check(r->sk, &sv);
            /* as seq_stuck decides: a finding changes a status that can go stuck */
            conv_status st = seq_status(r->sq);
            bool acted = !sv.nudge && sv.rule != STUCK_NONE && st != CONV_STUCK &&
                         conv_transition_ok(st, CONV_STUCK);
            if (r->h.stuck != NULL)
                r->h.stuck(r->h.ctx, first + i, &sv, acted);
            if (sv.nudge)
                seq_nudge(r->sq, sv.nudge_text);
            else if (sv.rule != STUCK_NONE)
                seq_stuck(r->sq, sv.rule);
        }
        if (u->token != NULL && r->h.answered != NULL) {
            seq_verdict ok = {.kind = u->success ? SEQ_DONE : SEQ_ACCEPTED};
            r->h.answered(r->h.ctx, u->token, &ok);
        }
        for (seq_echo *x = u->echoes; x != NULL && r->h.answered != NULL; x = x->next) {
            seq_verdict dup = {.kind = SEQ_DUPLICATE, .ids = x->ids};
            r->h.answered(r->h.ctx, x->token, &dup);
        }
        seq_unit_free(u);
    }
}

void replay_offer(replay *r, ev *e, void *token)
{
    seq_offer(r->sq, e, token);
    run(r);
}

void replay_offer_array(replay *r, ev *evs, size_t n, void *token)
{
    seq_offer_array(r->sq, evs, n, token);
    run(r);
}

void replay_restart(replay *r)
{
    seq_refuse_holds(r->sq, "the conversation is restarting: retry", false);
    seq_recover(r->sq);
    run(r);
}

void replay_end(replay *r)
{
    seq_expire(r->sq, true);
    run(r);
}

sequencer *replay_seq(replay *r)
{
    return r->sq;
}

bool replay_token_of(const replay *r, const char *id, void **token)
{
    char *k = tab_get(&r->ids, id, strlen(id));
    if (k != NULL)
        *token = rec_of(k)->token;
    return k != NULL;
}

size_t replay_memory(const replay *r)
{
    return r->bytes + (r->ids.cap + r->keys.cap) * sizeof(char *);
}
