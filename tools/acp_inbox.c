/*
 * acp_inbox.c - one queue for stdin lines and conversation events, and
 * the thread that reads stdin (acp_inbox.h).
 */
#include "acp_inbox.h"

#include "acp_agent.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { CUT_MAX = 64 }; /* conversations remembered as cut off */

struct acp_inbox {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    acp_item *head, *tail;
    size_t held, max; /* bytes of events waiting, and the bound */
    char cut[CUT_MAX][64];
    size_t ncut;
    pthread_t reader;
    bool reading;
    int fd;
};

acp_inbox *acp_inbox_new(size_t max)
{
    acp_inbox *in = calloc(1, sizeof(*in));
    if (in == NULL)
        return NULL;
    in->max = max;
    pthread_mutex_init(&in->mu, NULL);
    pthread_cond_init(&in->cv, NULL);
    return in;
}

void acp_inbox_free(acp_inbox *in)
{
    if (in == NULL)
        return;
    /* the reader ends at EOF, which came before the inbox is freed; a
     * reader still in read() (an early exit) is left to the process's end */
    if (in->reading)
        pthread_detach(in->reader);
    for (acp_item *i = in->head, *n; i != NULL; i = n) {
        n = i->next;
        free(i);
    }
    pthread_mutex_destroy(&in->mu);
    pthread_cond_destroy(&in->cv);
    free(in);
}

static bool is_cut(const acp_inbox *in, const char *cid)
{
    for (size_t k = 0; k < in->ncut; k++)
        if (strcmp(in->cut[k], cid) == 0)
            return true;
    return false;
}

/* An event (lock held): false to drop it; past the bound, the first of a
 * conversation becomes its end instead (i, made with room for the reason,
 * is rewritten in place). */
static bool admit(acp_inbox *in, acp_item *i)
{
    if (is_cut(in, i->cid))
        return false;
    if (in->held + i->len <= in->max) {
        in->held += i->len;
        return true;
    }
    if (in->ncut < CUT_MAX)
        snprintf(in->cut[in->ncut++], sizeof(in->cut[0]), "%s", i->cid);
    char why[160];
    int n = snprintf(why, sizeof(why),
                     "the editor is not reading: more than %zu bytes of updates wait for it; "
                     "load the session again to go on",
                     in->max);
    fprintf(stderr, "parley acp: conversation %s: %s\n", i->cid, why);
    i->kind = ACPI_ENDED;
    memcpy(i->data, why, (size_t)n + 1);
    i->len = (size_t)n;
    return true;
}

int acp_inbox_push(acp_inbox *in, acp_item_kind kind, const char *cid, const void *data, size_t len)
{
    /* an event has room for the reason that may replace it (admit) */
    acp_item *i = malloc(sizeof(*i) + (kind == ACPI_EVENT && len < 160 ? 160 : len) + 1);
    if (i == NULL)
        return -1;
    i->next = NULL;
    i->kind = kind;
    i->cid[0] = '\0';
    if (cid != NULL) {
        strncpy(i->cid, cid, sizeof(i->cid) - 1);
        i->cid[sizeof(i->cid) - 1] = '\0';
    }
    i->len = len;
    if (len > 0)
        memcpy(i->data, data, len);
    i->data[len] = '\0';
    pthread_mutex_lock(&in->mu);
    if (kind == ACPI_EVENT && !admit(in, i)) {
        pthread_mutex_unlock(&in->mu);
        free(i);
        return 0;
    }
    if (in->tail != NULL)
        in->tail->next = i;
    else
        in->head = i;
    in->tail = i;
    pthread_cond_signal(&in->cv);
    pthread_mutex_unlock(&in->mu);
    return 0;
}

acp_item *acp_inbox_pop(acp_inbox *in)
{
    pthread_mutex_lock(&in->mu);
    while (in->head == NULL)
        pthread_cond_wait(&in->cv, &in->mu);
    acp_item *i = in->head;
    in->head = i->next;
    if (in->head == NULL)
        in->tail = NULL;
    if (i->kind == ACPI_EVENT)
        in->held -= i->len;
    pthread_mutex_unlock(&in->mu);
    return i;
}

/* Lines of fd, each pushed whole; a line over ACPA_LINE_MAX is dropped as
 * it comes (at most the bound is ever held) and said once. */
static void *reader(void *arg)
{
    acp_inbox *in = arg;
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    bool skipping = false;
    while (buf != NULL) {
        if (len == cap) {
            if (cap > ACPA_LINE_MAX) { /* no newline within the bound */
                acp_inbox_push(in, ACPI_TOO_LONG, NULL, NULL, 0);
                skipping = true;
                len = 0;
            } else {
                char *t = realloc(buf, cap * 2);
                if (t == NULL)
                    break;
                buf = t;
                cap *= 2;
            }
        }
        ssize_t got = read(in->fd, buf + len, cap - len);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            break;
        size_t from = 0, end = len + (size_t)got;
        for (size_t k = len; k < end; k++) {
            if (buf[k] != '\n')
                continue;
            if (!skipping && k - from <= ACPA_LINE_MAX)
                acp_inbox_push(in, ACPI_LINE, NULL, buf + from, k - from);
            else if (!skipping)
                acp_inbox_push(in, ACPI_TOO_LONG, NULL, NULL, 0);
            skipping = false;
            from = k + 1;
        }
        memmove(buf, buf + from, end - from);
        len = end - from;
    }
    if (buf != NULL && len > 0 && !skipping && len <= ACPA_LINE_MAX)
        acp_inbox_push(in, ACPI_LINE, NULL, buf, len); /* a last line without newline */
    free(buf);
    acp_inbox_push(in, ACPI_EOF, NULL, NULL, 0);
    return NULL;
}

int acp_inbox_read(acp_inbox *in, int fd)
{
    in->fd = fd;
    if (pthread_create(&in->reader, NULL, reader, in) != 0)
        return -1;
    in->reading = true;
    return 0;
}
