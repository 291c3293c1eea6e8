/*
 * nats_log.c - the writer of a conversation's log on JetStream: take-over,
 * appends fenced by the expected last sequence and the per-slot message
 * id, and the resolution of answers that were lost or ambiguous by reading
 * the log back (nats_log.h says why each piece is there).
 */
#include "nats_impl.h"

#include "store.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

bool (*st_nats_drop_ack)(const st_nats_event *sent);

/* Headers other than the id, key and node name, generously. */
enum { HEADERS_BOUND = 512 };

int st_nats_log_open(st_nats *n, const rt_uuid *id, st_nats_log **out)
{
    *out = NULL;
    st_nats_log *l = calloc(1, sizeof *l);
    if (!l)
        return -ENOMEM;
    l->n = n;
    l->id = *id;
    rt_uuid_hex(id, l->hex);
    l->shard = st_nats_shard(n, id);
    snprintf(l->subject, sizeof l->subject, "parley.ev.%u.%s", l->shard, l->hex);
    snprintf(l->stream, sizeof l->stream, ST_NATS_STREAM "%u", l->shard);
    snprintf(l->direct, sizeof l->direct, "$JS.API.DIRECT.GET.%s", l->stream);
    *out = l;
    return 0;
}

void st_nats_log_close(st_nats_log *l)
{
    if (!l)
        return;
    stn_index_free(l);
    free(l->owed);
    free(l);
}

const char *st_nats_log_error(const st_nats_log *l)
{
    return l->err;
}

uint64_t st_nats_log_epoch(const st_nats_log *l)
{
    return l->owner ? l->epoch : 0;
}

bool st_nats_log_fenced(const st_nats_log *l)
{
    return l->fenced;
}

const char *st_nats_log_subject(const st_nats_log *l)
{
    return l->subject;
}

const char *st_nats_log_stream(const st_nats_log *l)
{
    return l->stream;
}

int st_nats_log_count(st_nats_log *l, uint64_t *count)
{
    *count = 0;
    int r = stn_ensure_stream(l->n, l->shard, l->err, sizeof l->err);
    natsMsg *m = NULL;
    st_nats_event last;
    if (r == 0)
        r = stn_get_last(l, &m, &last);
    if (r == -ENOENT)
        return 0;
    if (r == 0)
        *count = stn_visible(&last);
    natsMsg_Destroy(m);
    return r;
}

/* A header value: printable ASCII without edge spaces. */
static bool header_safe(const char *s, uint32_t len)
{
    if (len == 0 || len > 255 || s[0] == ' ' || s[len - 1] == ' ')
        return false;
    for (uint32_t i = 0; i < len; i++)
        if (s[i] < 0x20 || s[i] > 0x7e)
            return false;
    return true;
}

/* What a record is, besides its bytes. */
typedef struct rec {
    uint64_t slot, index, epoch, prev;
    const char *writer;
    bool take_over;
    const st_nats_item *items; /* events: count of them */
    uint32_t count;
    uint64_t batch_first, batch_total; /* a part of a larger append: Parley-Batch */
} rec;

/* The header bytes an event adds to its record, generously. */
static size_t event_overhead(const st_nats_item *it)
{
    return it->idlen + it->keylen + 48;
}

size_t st_nats_max_event(const st_nats *n)
{
    const st_nats_item longest = {.idlen = 255, .keylen = 255};
    int64_t room = st_nats_max_payload(n) - HEADERS_BOUND - (int64_t)event_overhead(&longest);
    return room > 0 ? (size_t)room : 0;
}

static int build(st_nats_log *l, const rec *c, const void *data, size_t len, natsMsg **out)
{
    natsMsg *m = NULL;
    char v[24];
    natsStatus s = natsMsg_Create(&m, l->subject, NULL, data, (int)len);
#define SETU(k, x)                                                                                 \
    if (s == NATS_OK) {                                                                            \
        snprintf(v, sizeof v, "%llu", (unsigned long long)(x));                                    \
        s = natsMsgHeader_Set(m, k, v);                                                            \
    }
    SETU(STN_H_SLOT, c->slot)
    SETU(STN_H_INDEX, c->index)
    SETU(STN_H_COUNT, c->count)
    SETU(STN_H_EPOCH, c->epoch)
    SETU(STN_H_PREV, c->prev)
#undef SETU
    if (s == NATS_OK)
        s = natsMsgHeader_Set(m, STN_H_WRITER, c->writer);
    if (s == NATS_OK) /* the node that wrote it: its lease says whether it is alive */
        s = natsMsgHeader_Set(m, STN_H_OWNER, l->n->token);
    if (s == NATS_OK && c->take_over)
        s = natsMsgHeader_Set(m, STN_H_KIND, STN_TAKE_OVER);
    if (s == NATS_OK && c->batch_total > 0) {
        char bv[48];
        snprintf(bv, sizeof bv, "%llu %llu", (unsigned long long)c->batch_first,
                 (unsigned long long)c->batch_total);
        s = natsMsgHeader_Set(m, STN_H_BATCH, bv);
    }
    char hv[272], lens[ST_NATS_BATCH_MAX * 21];
    size_t ll = 0;
    for (uint32_t i = 0; s == NATS_OK && i < c->count; i++) {
        const st_nats_item *it = &c->items[i];
        snprintf(hv, sizeof hv, "%.*s", (int)it->idlen, it->id);
        s = natsMsgHeader_Add(m, STN_H_ID, hv);
        if (s == NATS_OK && it->keylen) {
            snprintf(hv, sizeof hv, "%u %.*s", i, (int)it->keylen, it->key);
            s = natsMsgHeader_Add(m, STN_H_KEY, hv);
        }
        ll += (size_t)snprintf(lens + ll, sizeof lens - ll, "%s%zu", i ? "," : "", it->len);
    }
    if (s == NATS_OK && c->count > 1)
        s = natsMsgHeader_Set(m, STN_H_LENS, lens);
    if (s != NATS_OK) {
        natsMsg_Destroy(m);
        return stn_fail(l, stn_errno(s, 0), "making a record of %s: %s", l->subject,
                        stn_last_error(s));
    }
    *out = m;
    return 0;
}

/* An answer was lost or ambiguous (a duplicate, or 10071 "wrong last
 * sequence"): the record at `c->slot` is read back from the leader. 0: it
 * is ours, *seq is where; -ESTALE: another writer's; -EAGAIN: the slot is
 * still free and the log unchanged, send again. */
static int resolve(st_nats_log *l, const rec *c, uint64_t *seq)
{
    natsMsg *m = NULL;
    st_nats_event cur;
    int r = stn_get_last(l, &m, &cur);
    if (r == -ENOENT)
        return c->slot == 0 ? stn_fail(l, -EAGAIN,
                                       "%s: the append was refused, yet the log is "
                                       "still empty",
                                       l->subject)
                            : stn_fail(l, -EBADMSG, "%s is empty, yet slot %llu was expected",
                                       l->subject, (unsigned long long)c->slot);
    if (r)
        return r;
    uint64_t last_slot = cur.slot;
    if (cur.slot < c->slot) {
        if (cur.seq == c->prev)
            r = stn_fail(l, -EAGAIN,
                         "%s: the append was refused, yet the log still ends at "
                         "slot %llu",
                         l->subject, (unsigned long long)cur.slot);
        else
            r = stn_fail(l, -EBADMSG, "%s ends at slot %llu (record %llu), not at record %llu",
                         l->subject, (unsigned long long)cur.slot, (unsigned long long)cur.seq,
                         (unsigned long long)c->prev);
        natsMsg_Destroy(m);
        return r;
    }
    for (int hops = 0; r == 0 && cur.slot > c->slot; hops++) {
        uint64_t prev = cur.prev, slot = cur.slot;
        natsMsg_Destroy(m);
        m = NULL;
        if (hops >= stn_walk_max)
            r = stn_fail(l, -EIO, "%s: slot %llu is more than %d records back", l->subject,
                         (unsigned long long)c->slot, stn_walk_max);
        else if (prev == 0 || (r = stn_get_seq(l, prev, &m, &cur)) == 0) {
            if (prev == 0 || cur.slot + 1 != slot)
                r = stn_fail(l, -EBADMSG, "%s: the chain breaks before slot %llu", l->subject,
                             (unsigned long long)slot);
        }
    }
    if (r == 0) {
        if (cur.epoch == c->epoch && strcmp(cur.writer, c->writer) == 0) {
            *seq = cur.seq;
            if (last_slot > c->slot)
                l->fenced = true; /* ours landed, and another wrote after it */
        } else {
            r = stn_fail(l, -ESTALE,
                         "fenced: slot %llu of %s was written by epoch %llu (writer %.8s), not "
                         "by epoch %llu: another node took the conversation over",
                         (unsigned long long)c->slot, l->hex, (unsigned long long)cur.epoch,
                         cur.writer, (unsigned long long)c->epoch);
        }
    }
    natsMsg_Destroy(m);
    return r;
}

static void observe_since(const struct timespec *t0)
{
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    rt_hist_observe(&st_nats_append_seconds, (uint64_t)((t1.tv_sec - t0->tv_sec) * 1000000000LL +
                                                        (t1.tv_nsec - t0->tv_nsec)));
}

/* Publish record c (message m) after the record at stream sequence c->prev.
 * 0 with *seq, -ESTALE (fenced), -EIO with "outcome unknown", or another
 * error (nothing stored). */
static int publish(st_nats_log *l, const rec *c, natsMsg *m, uint64_t *seq)
{
    char msgid[48];
    snprintf(msgid, sizeof msgid, "%s:%llu", l->hex, (unsigned long long)c->slot);
    jsPubOptions po;
    jsPubOptions_Init(&po);
    po.MsgId = msgid;
    po.MaxWait = l->n->request_ms;
    if (c->prev == 0)
        po.ExpectNoMessage = true;
    else
        po.ExpectLastSubjectSeq = c->prev;
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int64_t until = stn_now_ms() + l->n->deadline_ms;
    bool unsure = false; /* sent at least once without an answer */
    l->cause = 0;
    for (int attempt = 0;; attempt++) {
        jsPubAck *pa = NULL;
        jsErrCode jerr = 0;
        stn_waits("an append");
        natsStatus s = js_PublishMsg(&pa, l->n->js, m, &po, &jerr);
        int r;
        /* every answer the server gives to this record can be lost */
        bool answered = s == NATS_OK || jerr == JSStreamWrongLastSequenceErr;
        st_nats_event sent = {.slot = c->slot,
                              .index = c->index,
                              .epoch = c->epoch,
                              .seq = s == NATS_OK ? pa->Sequence : 0,
                              .prev = c->prev,
                              .count = c->count,
                              .take_over = c->take_over,
                              .batch_first = c->batch_first,
                              .batch_total = c->batch_total,
                              .writer = c->writer};
        if (answered && st_nats_drop_ack && st_nats_drop_ack(&sent)) {
            jsPubAck_Destroy(pa);
            unsure = true;
            r = stn_fail(l, -ETIMEDOUT, "NATS timed out: appending to %s: ack dropped", l->subject);
        } else if (s == NATS_OK) {
            bool dup = pa->Duplicate;
            *seq = pa->Sequence;
            jsPubAck_Destroy(pa);
            if (!dup) {
                observe_since(&t0);
                return 0;
            }
            r = resolve(l, c, seq);
        } else if (jerr == JSStreamWrongLastSequenceErr) {
            r = resolve(l, c, seq);
        } else {
            r = stn_errno(s, jerr);
            if (r == -ETIMEDOUT || r == -ENOTCONN)
                unsure = true;
            if (stn_retryable(r))
                stn_fail(l, r, "%s: appending to %s: %s", stn_what(r), l->subject,
                         stn_last_error(s));
            else
                stn_fail(l, r, "appending to %s: %s", l->subject, stn_last_error(s));
        }
        if (r == 0 || r == -ESTALE)
            return r;
        if (!stn_retryable(r) || stn_now_ms() >= until) {
            char why[sizeof l->err];
            memcpy(why, l->err, sizeof why);
            l->cause = r;
            if (unsure)
                return stn_fail(l, -EIO,
                                "outcome unknown (take over again, then look the "
                                "event up): %s",
                                why);
            return r;
        }
        stn_backoff(attempt, until);
    }
}

/* Store closed page `page`'s entry; on success the ones owed too (oldest
 * first, until one fails), on failure owe it: the writer tries again
 * after the next entry it stores, so a bucket out of reach for a while
 * costs readers no walks once it is back. At most STN_OWED are kept
 * (the oldest go: a reader rebuilds one by a walk from the next page),
 * in memory held only while some are owed. */
static void page_store(st_nats_log *l, uint64_t page, const stn_page *pg)
{
    if (stn_put_page(l, page, pg) == 0) {
        uint32_t paid = 0;
        while (paid < l->nowed && stn_put_page(l, l->owed[paid].page, &l->owed[paid].pg) == 0)
            paid++;
        if (paid == 0)
            return;
        l->nowed -= paid;
        if (l->nowed > 0) {
            memmove(l->owed, l->owed + paid, l->nowed * sizeof(*l->owed));
        } else {
            free(l->owed);
            l->owed = NULL;
        }
        return;
    }
    if (l->nowed == STN_OWED)
        memmove(l->owed, l->owed + 1, --l->nowed * sizeof(*l->owed));
    struct stn_owed *o = realloc(l->owed, (l->nowed + 1) * sizeof(*o));
    if (o == NULL)
        return; /* a walk, then */
    l->owed = o;
    o[l->nowed++] = (struct stn_owed){page, *pg};
}

/* Record e (events e->index .. + e->count, message m) was appended: note
 * its events in the open page and the find index, and when one closes the
 * page, store the page's entry. A writer that took over in the middle of a
 * page learns the page's first events only then, by a walk back (once per
 * page), so that a take-over stays two round trips. */
static void page_note(st_nats_log *l, natsMsg *m, const st_nats_event *e)
{
    for (uint64_t i = e->index; i < e->index + e->count; i++) {
        uint64_t page = i / ST_NATS_PAGE, lo = page * ST_NATS_PAGE;
        uint32_t at = (uint32_t)(i - lo);
        bool noted = l->page_known && page == l->page_no && at == l->page_fill &&
                     stn_note(l, m, e, i, lo, &l->page) == 0;
        if (noted) {
            l->page_fill++;
            stn_index_add(l, i, l->page.idh[at], l->page.keyh[at]);
        } else {
            l->page_known = false;
        }
        if (at != ST_NATS_PAGE - 1)
            continue;
        if (l->page_known || stn_collect(l, m, e, lo, lo + ST_NATS_PAGE, &l->page) == 0)
            page_store(l, page, &l->page);
        l->page_no = page + 1;
        l->page_fill = 0;
        l->page_known = true;
    }
}

/* How many of the n items (at least 1) go into one record. */
static uint32_t batch(const st_nats_log *l, const st_nats_item *items, size_t n)
{
    size_t bytes = HEADERS_BOUND, k = 0;
    while (k < n && k < ST_NATS_BATCH_MAX) {
        bytes += items[k].len + event_overhead(&items[k]);
        if (k > 0 && (int64_t)bytes > l->n->max_payload)
            break;
        k++;
    }
    return (uint32_t)k;
}

/* Record m, stored at seq by this writer, into the open page and the find
 * index. */
static void note(st_nats_log *l, natsMsg *m, uint64_t seq)
{
    st_nats_event e;
    if (stn_parse(l, m, seq, &e) == 0)
        page_note(l, m, &e);
    else
        l->page_known = false;
}

int st_nats_log_append(st_nats_log *l, const st_nats_item *items, size_t n, uint64_t *first,
                       size_t *stored)
{
    *stored = 0;
    *first = l->next_index;
    if (l->fenced)
        return stn_fail(l, -ESTALE, "fenced: another node took conversation %s over", l->hex);
    if (!l->owner)
        return stn_fail(l, -EPERM, "not the writer of conversation %s: take it over first", l->hex);
    for (size_t i = 0; i < n; i++) {
        const st_nats_item *it = &items[i];
        if (!header_safe(it->id, it->idlen) || (it->keylen && !header_safe(it->key, it->keylen)))
            return stn_fail(l, -EINVAL,
                            "event %zu: an id or key must be 1..255 printable ASCII bytes", i);
        if (it->len > st_nats_max_event(l->n))
            return stn_fail(l, -EMSGSIZE,
                            "event %zu: %zu bytes, more than a record of the cluster holds (%zu "
                            "bytes: its max_payload less headers)",
                            i, it->len, st_nats_max_event(l->n));
    }
    /* a batch of several records is noted (open page, page entries, find
     * index) once all are stored: before, it may yet be left behind */
    bool whole = batch(l, items, n) == n;
    size_t nparts = 0;
    natsMsg **parts = whole ? NULL : calloc(n, sizeof *parts);
    uint64_t *seqs = whole ? NULL : calloc(n, sizeof *seqs);
    if (!whole && (!parts || !seqs)) {
        free(parts);
        free(seqs);
        return stn_fail(l, -ENOMEM, "out of memory");
    }
    uint64_t start = l->next_index;
    int r = 0;
    for (size_t i = 0; i < n && r == 0;) {
        rec c = {.slot = l->next_slot,
                 .index = l->next_index,
                 .epoch = l->epoch,
                 .prev = l->last_seq,
                 .writer = l->writer,
                 .items = &items[i],
                 .count = batch(l, &items[i], n - i),
                 .batch_first = whole ? 0 : start,
                 .batch_total = whole ? 0 : n};
        const void *data = items[i].data;
        size_t len = items[i].len;
        char *joined = NULL;
        if (c.count > 1) {
            len = 0;
            for (uint32_t k = 0; k < c.count; k++)
                len += items[i + k].len;
            if (!(joined = malloc(len ? len : 1))) {
                r = stn_fail(l, -ENOMEM, "out of memory");
                break;
            }
            for (size_t k = 0, off = 0; k < c.count; off += items[i + k].len, k++)
                memcpy(joined + off, items[i + k].data, items[i + k].len);
            data = joined;
        }
        natsMsg *m = NULL;
        uint64_t seq = 0;
        r = build(l, &c, data, len, &m);
        free(joined);
        if (r == 0)
            r = publish(l, &c, m, &seq);
        if (r) {
            natsMsg_Destroy(m);
            if (r == -ESTALE)
                l->fenced = true;
            if (r == -ESTALE || r == -EIO || *stored > 0)
                l->owner = false; /* fenced, unsure where the log ends, or parts left */
            break;
        }
        l->last_seq = seq;
        l->next_slot++;
        l->next_index += c.count;
        if (whole) {
            note(l, m, seq);
            natsMsg_Destroy(m);
        } else {
            seqs[nparts] = seq;
            parts[nparts++] = m;
        }
        *stored += c.count;
        i += c.count;
    }
    for (size_t k = 0; k < nparts; k++) {
        if (r == 0)
            note(l, parts[k], seqs[k]);
        natsMsg_Destroy(parts[k]);
    }
    free(parts);
    free(seqs);
    return r;
}

/* After a take-over at event index `index` following record `last`: the
 * entry of the last closed page is written if a crash left it out (the
 * walk back that rebuilds it also gives the open page's sequences).
 * Failing here costs speed, not safety. */
static void load_pages(st_nats_log *l, natsMsg *m, const st_nats_event *last, uint64_t index)
{
    l->page_no = index / ST_NATS_PAGE;
    l->page_fill = (uint32_t)(index % ST_NATS_PAGE);
    l->page_known = l->page_fill == 0;
    if (l->page_no == 0 || !last)
        return;
    stn_page pg[2];
    memset(pg, 0, sizeof pg);
    uint64_t lo = (l->page_no - 1) * ST_NATS_PAGE;
    if (stn_get_page(l, l->page_no - 1, &pg[0]) != -ENOENT)
        return;
    if (stn_collect(l, m, last, lo, index, pg) || stn_put_page(l, l->page_no - 1, &pg[0]))
        return;
    l->page = pg[1];
    l->page_known = true;
}

int st_nats_log_take_over(st_nats_log *l, uint64_t *epoch)
{
    l->owner = false;
    l->fenced = false;
    int r = stn_ensure_stream(l->n, l->shard, l->err, sizeof l->err);
    if (r)
        return r;
    natsMsg *lm = NULL;
    st_nats_event last = {0};
    r = stn_get_last(l, &lm, &last);
    bool empty = r == -ENOENT;
    if (r && !empty)
        return r;
    rt_uuid token;
    if (rt_uuid_v4(&token)) {
        natsMsg_Destroy(lm);
        return stn_fail(l, -EIO, "no random bytes for a writer token");
    }
    char writer[33];
    rt_uuid_hex(&token, writer);
    rec c = {.writer = writer, .take_over = true};
    if (!empty) {
        c.slot = last.slot + 1;
        c.index = stn_visible(&last); /* a batch cut short is left behind */
        c.epoch = last.epoch + 1;
        c.prev = last.seq;
    } else {
        c.epoch = 1;
    }
    char body[224];
    int blen = snprintf(body, sizeof body,
                        "{\"take_over\":{\"node\":\"%s\",\"token\":\"%s\",\"epoch\":%llu}}",
                        l->n->node, l->n->token, (unsigned long long)c.epoch);
    natsMsg *m = NULL;
    uint64_t seq = 0;
    r = build(l, &c, body, (size_t)blen, &m);
    if (r == 0)
        r = publish(l, &c, m, &seq);
    natsMsg_Destroy(m);
    if (r == 0 && l->fenced)
        r = stn_fail(l, -ESTALE, "conversation %s was taken over again right after", l->hex);
    if (r == 0) {
        l->owner = true;
        l->epoch = c.epoch;
        memcpy(l->writer, writer, sizeof writer);
        l->next_slot = c.slot + 1;
        l->next_index = c.index;
        l->last_seq = seq;
        if (epoch)
            *epoch = c.epoch;
        if (empty)
            load_pages(l, NULL, NULL, 0);
        else
            load_pages(l, lm, &last, c.index);
    } else if (r == -ESTALE) {
        l->fenced = false; /* lost this race; l may try again */
    }
    natsMsg_Destroy(lm);
    return r;
}
