/*
 * acp_inbox.c - one queue for stdin lines and conversation events, and
 * the thread that reads stdin (acp_inbox.h).
 */
#include "acp_inbox.h"

#include "acp_agent.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct acp_inbox {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    acp_item *head, *tail;
    pthread_t reader;
    bool reading;
    int fd;
};

acp_inbox *acp_inbox_new(void)
{
    acp_inbox *in = calloc(1, sizeof(*in));
    if (in == NULL)
        return NULL;
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

int acp_inbox_push(acp_inbox *in, acp_item_kind kind, const char *cid, const void *data, size_t len)
{
    acp_item *i = malloc(sizeof(*i) + len + 1);
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
