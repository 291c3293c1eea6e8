/*
 * conv_follow.c - subscribers of a conversation whose log another node
 * writes (a store shared by nodes, store.h "several nodes"): they get
 * every committed event once, in order, as they would from the writer.
 *
 * While the conversation actor has told subscribers (WebSockets) on such
 * a store, it follows its log (st_conv_follow): each record another node
 * stores is a notice of the log's new count, sent here as CONV_GREW. The
 * events between what subscribers were given (published) and that count
 * are read in the thread pool, a page at a time, and published in order;
 * a lost notice is a gap the next one shows, filled the same way. The
 * node's own commits are published as they are made (conv_stored), so
 * `published` is the one watermark of both: an event is published once.
 *
 * Only told subscribers (WebSockets, views) get events written elsewhere:
 * the stuck detector of a node that does not write the conversation sees
 * none, so it never appends findings that would take the log over.
 */
#include "conv_impl.h"

#include "conv_read.h"
#include "runtime/log.h"

#include <errno.h>
#include <inttypes.h>
#include <string.h>

enum { FOLLOW_PAGE = 100 };

static void on_grew(void *ctx, uint64_t count, bool mine)
{
    rt_actor *self = ctx;
    if (!mine) /* a store thread: to the actor */
        rt_send(self, CONV_GREW, count, NULL);
}

uint64_t conv_next_published(const conv *c)
{
    uint64_t n = c->sq != NULL ? seq_count(c->sq) : 0;
    return c->published > n ? c->published : n;
}

void conv_follow_update(conv *c)
{
    st_store *s = c->ctx->svc->store;
    if (c->ntold > 0 && c->follow == NULL && c->open && c->sc != NULL && st_store_shared(s)) {
        rt_actor_ref(c->self); /* the follow's: released with it */
        int e = st_conv_follow(c->sc, on_grew, c->self, &c->follow);
        if (e < 0) {
            rt_actor_unref(c->self);
            c->follow = NULL;
            rt_log(RT_LOG_WARN, "conversation",
                   "cannot follow the log as other nodes write it (%s): subscribers here see "
                   "only this node's appends",
                   strerror(-e));
        }
        c->published = conv_next_published(c);
    } else if (c->ntold == 0 && c->follow != NULL) {
        conv_follow_stop(c);
    }
}

void conv_follow_stop(conv *c)
{
    if (c->follow == NULL)
        return;
    st_follow_stop(c->follow);
    c->follow = NULL;
    rt_actor_unref(c->self);
}

/* Publish the events of p from `published` on, in order. */
static void publish_page(conv *c, const st_page *p)
{
    for (uint32_t i = 0; i < p->n; i++) {
        const st_event_ref *r = &p->ev[i];
        if (r->index != c->published)
            continue; /* published already (or not next: read again) */
        const char *bytes = (const char *)rt_buf_data(p->bytes) + r->off;
        ev e;
        rt_buf *b = rt_buf_copy(bytes, r->len);
        if (b == NULL || ev_parse(bytes, r->len, &e, NULL, 0) != 0) {
            rt_buf_unref(b);
            rt_log(RT_LOG_WARN, "conversation",
                   "event %" PRIu64 " written by another node cannot be read: skipped", r->index);
            c->published++;
            continue;
        }
        for (size_t k = 0; k < c->nsubs;) { /* told ones only: see above */
            if (c->subs[k].notes || !c->subs[k].told) {
                k++;
                continue;
            }
            if (rt_send(c->subs[k].a, CONV_EVENT, r->index, rt_buf_ref(b)) == 0) {
                k++;
                continue;
            }
            rt_buf_unref(b);
            conv_drop_sub(c, k, 0);
        }
        ev_free(&e);
        rt_buf_unref(b);
        c->published++;
    }
}

void conv_follow_publish(conv *c, const st_page *p)
{
    publish_page(c, p);
}

/* Read what subscribers miss, a page at a time (one read at once). */
static void catch_up(conv *c)
{
    while (!c->follow_reading && c->follow != NULL && c->open && c->log != NULL &&
           c->published < c->follow_to) {
        uint64_t n = c->follow_to - c->published;
        conv_reader rd = {.store = c->ctx->svc->store, .sc = c->sc, .log = c->log};
        st_page *p = NULL;
        pl_outcome why;
        char detail[200];
        int r = conv_read_page_soon(&rd, c->self, CONV_FOLLOWED, c->published,
                                    n < FOLLOW_PAGE ? (uint32_t)n : FOLLOW_PAGE, &p, &why, detail,
                                    sizeof(detail));
        if (r == 1) {
            c->follow_reading = true;
            return;
        }
        if (r < 0) {
            rt_log(RT_LOG_WARN, "conversation", "cannot read what another node appended: %s",
                   detail);
            return; /* the next notice tries again */
        }
        uint64_t before = c->published;
        publish_page(c, p);
        st_page_free(p);
        if (c->published == before)
            return; /* not there yet: the next notice tries again */
    }
}

void conv_follow_msg(conv *c, rt_msg *m)
{
    if (m->kind == CONV_GREW) {
        if (m->arg > c->follow_to)
            c->follow_to = m->arg;
        catch_up(c);
        return;
    }
    /* CONV_FOLLOWED: a page read in the pool */
    c->follow_reading = false;
    const conv_read_answer *a = conv_read_answer_of(m);
    if (a == NULL || a->err != 0) {
        rt_log(RT_LOG_WARN, "conversation", "cannot read what another node appended: %s",
               a != NULL ? a->detail : "out of memory");
        return;
    }
    uint64_t before = c->published;
    if (c->follow != NULL)
        publish_page(c, a->page);
    if (c->published > before)
        catch_up(c);
}
