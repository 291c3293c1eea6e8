/*
 * nats_read.c - reading a conversation's records back: one record (from
 * any replica, or the leader), the last one (leader), many by sequence at
 * once (direct gets sent together, answered in any order), walks back
 * through the chain, and dense pages of events through the page bucket.
 */
#include "nats_impl.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int hdr_u64(natsMsg *m, const char *k, uint64_t *v)
{
    const char *s = NULL;
    if (natsMsgHeader_Get(m, k, &s) != NATS_OK || !s || !*s)
        return -1;
    char *end;
    errno = 0;
    unsigned long long x = strtoull(s, &end, 10);
    if (*end || errno || *s == '-')
        return -1;
    *v = x;
    return 0;
}

int stn_parse(st_nats_log *l, natsMsg *m, uint64_t seq, st_nats_event *ev)
{
    memset(ev, 0, sizeof *ev);
    const char *subject = NULL, *kind = NULL;
    if (natsMsgHeader_Get(m, "Nats-Subject", &subject) != NATS_OK)
        subject = natsMsg_GetSubject(m);
    if (!subject || strcmp(subject, l->subject) != 0)
        return stn_fail(l, -EBADMSG, "record %llu of %s is on subject %s, not %s",
                        (unsigned long long)seq, l->stream, subject ? subject : "(none)",
                        l->subject);
    ev->seq = seq;
    uint64_t count;
    if (hdr_u64(m, STN_H_SLOT, &ev->slot) || hdr_u64(m, STN_H_INDEX, &ev->index) ||
        hdr_u64(m, STN_H_COUNT, &count) || hdr_u64(m, STN_H_EPOCH, &ev->epoch) ||
        hdr_u64(m, STN_H_PREV, &ev->prev) ||
        natsMsgHeader_Get(m, STN_H_WRITER, &ev->writer) != NATS_OK || strlen(ev->writer) != 32)
        return stn_fail(l, -EBADMSG, "record %llu of %s (%s) lacks parley's headers",
                        (unsigned long long)seq, l->stream, l->subject);
    ev->take_over =
        natsMsgHeader_Get(m, STN_H_KIND, &kind) == NATS_OK && strcmp(kind, STN_TAKE_OVER) == 0;
    const char *batch = NULL;
    if (natsMsgHeader_Get(m, STN_H_BATCH, &batch) == NATS_OK) {
        unsigned long long bf, bt;
        char extra;
        if (sscanf(batch, "%llu %llu%c", &bf, &bt, &extra) != 2 || bf > ev->index ||
            ev->index + count > bf + bt)
            return stn_fail(l, -EBADMSG, "record %llu of %s: a bad %s header '%s'",
                            (unsigned long long)seq, l->subject, STN_H_BATCH, batch);
        ev->batch_first = bf;
        ev->batch_total = bt;
    }
    ev->data = natsMsg_GetData(m);
    ev->len = (size_t)natsMsg_GetDataLength(m);
    ev->count = (uint32_t)count;
    if (count > ST_NATS_BATCH_MAX || ev->take_over != (count == 0))
        return stn_fail(l, -EBADMSG, "record %llu of %s holds %llu events", (unsigned long long)seq,
                        l->subject, (unsigned long long)count);
    if (ev->take_over)
        return 0;
    const char **ids = NULL;
    int nids = 0;
    if (natsMsgHeader_Values(m, STN_H_ID, &ids, &nids) != NATS_OK || (uint64_t)nids != count) {
        free((void *)ids);
        return stn_fail(l, -EBADMSG, "record %llu of %s: %d ids for %llu events",
                        (unsigned long long)seq, l->subject, nids, (unsigned long long)count);
    }
    ev->id = ids[0];
    ev->idlen = (uint32_t)strlen(ev->id);
    free((void *)ids);
    if (count > 1) {
        /* the lengths must add up to the payload exactly */
        const char *lens = NULL;
        uint64_t sum = 0, k = 0;
        if (natsMsgHeader_Get(m, STN_H_LENS, &lens) == NATS_OK)
            for (const char *p = lens; *p; k++) {
                char *end;
                sum += strtoull(p, &end, 10);
                if (end == p || (*end && *end != ','))
                    break;
                p = *end ? end + 1 : end;
            }
        if (k != count || sum != ev->len)
            return stn_fail(l, -EBADMSG, "record %llu of %s: lengths do not match its payload",
                            (unsigned long long)seq, l->subject);
    }
    return 0;
}

int stn_event(st_nats_log *l, natsMsg *m, const st_nats_event *rec, uint64_t index,
              st_nats_event *ev)
{
    if (rec->take_over || index < rec->index || index - rec->index >= rec->count)
        return stn_fail(l, -EBADMSG, "%s: record %llu holds events %llu+%u, not %llu", l->subject,
                        (unsigned long long)rec->seq, (unsigned long long)rec->index, rec->count,
                        (unsigned long long)index);
    uint32_t at = (uint32_t)(index - rec->index);
    *ev = *rec;
    ev->index = index;
    ev->count = 1;
    const char **v = NULL;
    int nv = 0;
    natsMsgHeader_Values(m, STN_H_ID, &v, &nv); /* checked by stn_parse */
    ev->id = v[at];
    ev->idlen = (uint32_t)strlen(ev->id);
    free((void *)v);
    v = NULL;
    ev->key = NULL;
    ev->keylen = 0;
    if (natsMsgHeader_Values(m, STN_H_KEY, &v, &nv) == NATS_OK) {
        for (int i = 0; i < nv; i++) {
            char *end;
            unsigned long pos = strtoul(v[i], &end, 10);
            if (end != v[i] && *end == ' ' && pos == at) {
                ev->key = end + 1;
                ev->keylen = (uint32_t)strlen(ev->key);
            }
        }
        free((void *)v);
    }
    if (rec->count > 1) {
        const char *p = NULL;
        natsMsgHeader_Get(m, STN_H_LENS, &p); /* checked by stn_parse */
        size_t off = 0, len = 0;
        for (uint32_t i = 0; i <= at; i++) {
            char *end;
            len = (size_t)strtoull(p, &end, 10);
            if (i < at)
                off += len;
            p = *end ? end + 1 : end;
        }
        ev->data = (const char *)rec->data + off;
        ev->len = len;
    }
    return 0;
}

int stn_get_last(st_nats_log *l, natsMsg **m, st_nats_event *ev)
{
    *m = NULL;
    int64_t until = stn_now_ms() + l->n->deadline_ms;
    for (int attempt = 0;; attempt++) {
        jsErrCode jerr = 0;
        stn_waits("reading the last record");
        natsStatus s = js_GetLastMsg(m, l->n->js, l->stream, l->subject, NULL, &jerr);
        if (s == NATS_OK) {
            int r = stn_parse(l, *m, natsMsg_GetSequence(*m), ev);
            if (r) {
                natsMsg_Destroy(*m);
                *m = NULL;
            }
            return r;
        }
        int r = stn_errno(s, jerr);
        if (r == -ENOENT)
            return r; /* no record yet (the stream was made or checked first) */
        if (!stn_retryable(r) || stn_now_ms() >= until)
            return stn_fail(l, r, "%s: last record of %s: %s", stn_what(r), l->subject,
                            stn_last_error(s));
        stn_backoff(attempt, until);
    }
}

int stn_get_seq(st_nats_log *l, uint64_t seq, natsMsg **m, st_nats_event *ev)
{
    *m = NULL;
    int64_t until = stn_now_ms() + l->n->deadline_ms;
    bool leader = false;
    for (int attempt = 0;; attempt++) {
        jsErrCode jerr = 0;
        natsStatus s;
        stn_waits("reading a record");
        if (leader) {
            s = js_GetMsg(m, l->n->js, l->stream, seq, NULL, &jerr);
        } else {
            jsDirectGetMsgOptions dg;
            jsDirectGetMsgOptions_Init(&dg);
            dg.Sequence = seq;
            s = js_DirectGetMsg(m, l->n->js, l->stream, NULL, &dg);
        }
        if (s == NATS_OK) {
            int r = stn_parse(l, *m, seq, ev);
            if (r) {
                natsMsg_Destroy(*m);
                *m = NULL;
            }
            return r;
        }
        int r = stn_errno(s, jerr);
        if (r == -ENOENT && !leader) {
            leader = true; /* a replica that lags: ask the leader */
            continue;
        }
        if (r == -ENOENT)
            return stn_fail(l, -EBADMSG, "record %llu of %s is missing", (unsigned long long)seq,
                            l->stream);
        if (!stn_retryable(r) || stn_now_ms() >= until)
            return stn_fail(l, r, "%s: record %llu of %s: %s", stn_what(r), (unsigned long long)seq,
                            l->stream, stn_last_error(s));
        stn_backoff(attempt, until);
    }
}

/* The records at seqs[0..n) into out[] (parsed into ev[]): all direct gets
 * are sent before the first answer is awaited; each reply subject ends in
 * the request's position, since replicas answer in any order and a "not
 * found" names no sequence. What no replica had is asked at the leader. */
static int fetch(st_nats_log *l, const uint64_t *seqs, size_t n, natsMsg **out, st_nats_event *ev)
{
    stn_replies *rep = NULL;
    natsStatus s = stn_replies_take(l->n, &rep);
    for (size_t i = 0; s == NATS_OK && i < n; i++) {
        char body[48], reply[160];
        int blen = snprintf(body, sizeof body, "{\"seq\":%llu}", (unsigned long long)seqs[i]);
        stn_replies_subject(rep, i, reply, sizeof reply);
        s = natsConnection_PublishRequest(l->n->nc, l->direct, reply, body, blen);
    }
    size_t got = 0;
    stn_waits("reading records");
    int64_t until = stn_now_ms() + l->n->request_ms;
    while (s == NATS_OK && got < n) {
        int64_t left = until - stn_now_ms();
        natsMsg *m = NULL;
        size_t i;
        if (left <= 0 || stn_replies_next(rep, left, &m, &i) != NATS_OK)
            break; /* what is missing is asked at the leader below */
        uint64_t seq = 0;
        const char *status = NULL;
        bool found = natsMsgHeader_Get(m, "Status", &status) != NATS_OK &&
                     hdr_u64(m, "Nats-Sequence", &seq) == 0;
        if (i >= n || out[i] || (found && seq != seqs[i])) {
            natsMsg_Destroy(m);
            continue;
        }
        got++;
        if (!found) {
            natsMsg_Destroy(m); /* a replica without it yet */
            continue;
        }
        out[i] = m;
    }
    stn_replies_give(l->n, rep);
    if (s != NATS_OK) {
        int r = stn_errno(s, 0);
        return stn_fail(l, r, "%s: reading %s: %s", stn_what(r), l->subject, stn_last_error(s));
    }
    for (size_t i = 0; i < n; i++) {
        int r;
        if (out[i])
            r = stn_parse(l, out[i], seqs[i], &ev[i]);
        else
            r = stn_get_seq(l, seqs[i], &out[i], &ev[i]);
        if (r)
            return r;
    }
    return 0;
}

int stn_note(st_nats_log *l, natsMsg *m, const st_nats_event *rec, uint64_t index, uint64_t lo,
             stn_page *pg)
{
    st_nats_event ev = {0};
    int r = stn_event(l, m, rec, index, &ev);
    if (r)
        return r;
    stn_page *p = &pg[(index - lo) / ST_NATS_PAGE];
    size_t at = (index - lo) % ST_NATS_PAGE;
    p->seq[at] = rec->seq;
    p->idh[at] = stn_hash(ev.id, ev.idlen);
    p->keyh[at] = ev.keylen ? stn_hash(ev.key, ev.keylen) : 0;
    return 0;
}

uint64_t stn_visible(const st_nats_event *e)
{
    uint64_t end = e->index + e->count;
    return e->batch_total != 0 && end < e->batch_first + e->batch_total ? e->batch_first : end;
}

int stn_collect(st_nats_log *l, natsMsg *m, const st_nats_event *from, uint64_t lo, uint64_t hi,
                stn_page *pg)
{
    st_nats_event cur = *from;
    natsMsg *own = NULL; /* the records this walk read */
    int r = 0;
    /* a record's events count below the first index of the records after
     * it: above, they are parts of a batch that a take-over left behind */
    uint64_t limit = UINT64_MAX;
    for (int hops = 0;; hops++) {
        uint64_t end = cur.index + cur.count < limit ? cur.index + cur.count : limit;
        for (uint64_t i = cur.index > lo ? cur.index : lo; r == 0 && i < end && i < hi; i++)
            r = stn_note(l, m, &cur, i, lo, pg);
        if (cur.index < limit)
            limit = cur.index;
        /* what comes before holds only events below limit */
        if (r || limit <= lo || cur.prev == 0)
            break;
        if (hops >= stn_walk_max) {
            r = stn_fail(l, -EIO, "walking back %s: more than %d records", l->subject,
                         stn_walk_max);
            break;
        }
        uint64_t slot = cur.slot, prev = cur.prev;
        natsMsg_Destroy(own);
        if ((r = stn_get_seq(l, prev, &own, &cur)))
            break;
        m = own;
        if (cur.slot + 1 != slot) {
            r = stn_fail(l, -EBADMSG, "%s: record %llu has slot %llu before slot %llu", l->subject,
                         (unsigned long long)prev, (unsigned long long)cur.slot,
                         (unsigned long long)slot);
            break;
        }
    }
    natsMsg_Destroy(own);
    return r;
}

static void page_key(const st_nats_log *l, uint64_t page, char *key, size_t cap)
{
    snprintf(key, cap, "%s.%llu", l->hex, (unsigned long long)page);
}

/* An entry: 100 sequences (8 bytes), 100 id hashes, 100 key hashes (4
 * bytes), little-endian. */
static void put_le(unsigned char *p, uint64_t v, int bytes)
{
    for (int b = 0; b < bytes; b++)
        p[b] = (unsigned char)(v >> (8 * b));
}

static uint64_t get_le(const unsigned char *p, int bytes)
{
    uint64_t v = 0;
    for (int b = 0; b < bytes; b++)
        v |= (uint64_t)p[b] << (8 * b);
    return v;
}

int stn_fail_page_puts;

int stn_put_page(st_nats_log *l, uint64_t page, const stn_page *pg)
{
    if (stn_fail_page_puts > 0) {
        stn_fail_page_puts--;
        return stn_fail(l, -EIO, "page entry of page %llu: failed as the test asks",
                        (unsigned long long)page);
    }
    unsigned char v[STN_ENTRY_BYTES];
    for (int i = 0; i < ST_NATS_PAGE; i++) {
        put_le(v + i * 8, pg->seq[i], 8);
        put_le(v + ST_NATS_PAGE * 8 + i * 4, pg->idh[i], 4);
        put_le(v + ST_NATS_PAGE * 12 + i * 4, pg->keyh[i], 4);
    }
    char key[64];
    page_key(l, page, key, sizeof key);
    uint64_t rev;
    stn_waits("writing a page entry");
    natsStatus s = kvStore_Put(&rev, l->n->pages, key, v, (int)sizeof v);
    if (s != NATS_OK) {
        int r = stn_errno(s, 0);
        return stn_fail(l, r, "%s: page entry %s: %s", stn_what(r), key, stn_last_error(s));
    }
    return 0;
}

int stn_get_page(st_nats_log *l, uint64_t page, stn_page *pg)
{
    char key[64];
    page_key(l, page, key, sizeof key);
    int64_t until = stn_now_ms() + l->n->deadline_ms;
    for (int attempt = 0;; attempt++) {
        kvEntry *e = NULL;
        stn_waits("reading a page entry");
        natsStatus s = kvStore_Get(&e, l->n->pages, key);
        if (s == NATS_OK) {
            const unsigned char *v = kvEntry_Value(e);
            int r = 0;
            if (kvEntry_ValueLen(e) != STN_ENTRY_BYTES)
                r = stn_fail(l, -EBADMSG, "page entry %s has %d bytes, not %d", key,
                             kvEntry_ValueLen(e), STN_ENTRY_BYTES);
            for (int i = 0; r == 0 && i < ST_NATS_PAGE; i++) {
                pg->seq[i] = get_le(v + i * 8, 8);
                pg->idh[i] = (uint32_t)get_le(v + ST_NATS_PAGE * 8 + i * 4, 4);
                pg->keyh[i] = (uint32_t)get_le(v + ST_NATS_PAGE * 12 + i * 4, 4);
            }
            kvEntry_Destroy(e);
            return r;
        }
        int r = stn_errno(s, 0);
        if (r == -ENOENT)
            return r;
        if (!stn_retryable(r) || stn_now_ms() >= until)
            return stn_fail(l, r, "%s: page entry %s: %s", stn_what(r), key, stn_last_error(s));
        stn_backoff(attempt, until);
    }
}

int stn_walk_max = STN_WALK_MAX;

/* The first record of the nearest page after `page` that has its entry,
 * among those closed below `count` and within a walk's reach: 0 and *m
 * (NULL if there is none), or an error. An entry is missing where its
 * writer could not store it (the bucket unreachable meanwhile) and no
 * reader walked it again: a walk from the last record could then be
 * longer than any walk may be. */
static int later_page_start(st_nats_log *l, uint64_t page, uint64_t count, natsMsg **m,
                            st_nats_event *ev)
{
    *m = NULL;
    uint64_t reach = (uint64_t)stn_walk_max / ST_NATS_PAGE;
    for (uint64_t k = page + 1; (k + 1) * ST_NATS_PAGE <= count && k - page <= reach; k++) {
        stn_page next;
        int r = stn_get_page(l, k, &next);
        if (r != -ENOENT)
            return r == 0 ? stn_get_seq(l, next.seq[0], m, ev) : r;
    }
    return 0;
}

int stn_page_get(st_nats_log *l, uint64_t page, stn_page *pg, uint32_t *have, bool *closed)
{
    if (l->owner && !l->fenced && l->page_known && page == l->page_no) {
        *pg = l->page;
        *have = l->page_fill;
        *closed = false;
        return 0;
    }
    int r = stn_get_page(l, page, pg);
    if (r != -ENOENT) {
        *have = r == 0 ? ST_NATS_PAGE : 0;
        *closed = r == 0;
        return r;
    }
    natsMsg *m = NULL;
    st_nats_event last;
    r = stn_get_last(l, &m, &last);
    *have = 0;
    *closed = false;
    if (r == -ENOENT)
        return 0;
    if (r)
        return r;
    uint64_t count = stn_visible(&last);
    uint64_t lo = page * ST_NATS_PAGE, hi = lo + ST_NATS_PAGE;
    if (hi > count)
        hi = count;
    natsMsg *from = NULL;
    st_nats_event at;
    if (lo < hi && (r = later_page_start(l, page, count, &from, &at)) == 0)
        r = stn_collect(l, from != NULL ? from : m, from != NULL ? &at : &last, lo, hi, pg);
    if (lo < hi && r == 0) {
        *have = (uint32_t)(hi - lo);
        *closed = *have == ST_NATS_PAGE;
        if (*closed)
            stn_put_page(l, page, pg); /* best effort: the next reader walks again */
    }
    natsMsg_Destroy(from);
    natsMsg_Destroy(m);
    return r;
}

void st_nats_page_free(st_nats_page *p)
{
    if (!p)
        return;
    for (uint32_t i = 0; i < p->nmsgs; i++)
        natsMsg_Destroy(p->msgs[i]);
    free(p->msgs);
    free(p);
}

int st_nats_log_read(st_nats_log *l, uint64_t first, uint32_t max, st_nats_page **out)
{
    *out = NULL;
    if (max > ST_NATS_READ_MAX)
        max = ST_NATS_READ_MAX;
    int r = stn_ensure_stream(l->n, l->shard, l->err, sizeof l->err);
    if (r)
        return r;
    st_nats_page *p = calloc(1, sizeof *p + (size_t)max * sizeof p->ev[0]);
    if (p)
        p->msgs = calloc(max ? max : 1, sizeof *p->msgs);
    if (!p || !p->msgs) {
        free(p);
        return stn_fail(l, -ENOMEM, "out of memory");
    }
    uint64_t idx = first;
    while (r == 0 && p->n < max && idx < UINT64_MAX - ST_NATS_PAGE) {
        uint64_t page = idx / ST_NATS_PAGE, lo = page * ST_NATS_PAGE;
        stn_page pg;
        uint64_t *seqs = pg.seq, uniq[ST_NATS_PAGE];
        st_nats_event recs[ST_NATS_PAGE];
        uint32_t have, nu = 0;
        bool closed;
        if ((r = stn_page_get(l, page, &pg, &have, &closed)) || idx - lo >= have)
            break;
        uint32_t from = (uint32_t)(idx - lo), want = have - from;
        if (want > max - p->n)
            want = max - p->n;
        /* a record's events are consecutive: one get per record */
        for (uint32_t j = from; j < from + want; j++)
            if (nu == 0 || uniq[nu - 1] != seqs[j])
                uniq[nu++] = seqs[j];
        natsMsg **got = (natsMsg **)p->msgs + p->nmsgs;
        if ((r = fetch(l, uniq, nu, got, recs))) {
            for (uint32_t j = 0; j < nu; j++)
                natsMsg_Destroy(got[j]);
            break;
        }
        p->nmsgs += nu;
        for (uint32_t j = 0, u = 0; r == 0 && j < want; j++) {
            while (uniq[u] != seqs[from + j])
                u++;
            r = stn_event(l, got[u], &recs[u], idx + j, &p->ev[p->n + j]);
        }
        if (r)
            break;
        p->n += want;
        idx += want;
        if (!closed)
            break;
    }
    if (r) {
        st_nats_page_free(p);
        return r;
    }
    *out = p;
    return 0;
}

int st_nats_log_walk(st_nats_log *l, st_nats_walk_fn fn, void *ctx)
{
    int r = stn_ensure_stream(l->n, l->shard, l->err, sizeof l->err);
    natsMsg *m = NULL;
    st_nats_event cur;
    if (r == 0)
        r = stn_get_last(l, &m, &cur);
    if (r == -ENOENT)
        return 0;
    while (r == 0) {
        if ((r = fn(ctx, &cur)) || cur.prev == 0)
            break;
        uint64_t slot = cur.slot, prev = cur.prev;
        natsMsg_Destroy(m);
        if ((r = stn_get_seq(l, prev, &m, &cur)))
            break;
        if (cur.slot + 1 != slot)
            r = stn_fail(l, -EBADMSG, "%s: record %llu has slot %llu before slot %llu", l->subject,
                         (unsigned long long)prev, (unsigned long long)cur.slot,
                         (unsigned long long)slot);
    }
    natsMsg_Destroy(m);
    return r;
}
