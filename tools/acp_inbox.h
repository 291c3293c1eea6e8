/*
 * acp_inbox.h - what `parley acp`'s one thread waits on: the editor's
 * lines (read from stdin by a thread of their own) and the conversations'
 * events (pushed by a follower's loop or by parley's callback thread), in
 * one queue, so the protocol core (acp_agent.h) runs on one thread and
 * needs no locks. The lines are bounded (ACPA_LINE_MAX), and so are the
 * events waiting: the core turns them into lines for stdout, and an editor
 * that stops reading stops it. Past `max` bytes of events waiting, a
 * conversation's next event is replaced by its end (ACPI_ENDED, saying
 * why, also on stderr at once), and its later ones are dropped: the
 * editor loads the session again to go on, and memory stays bounded.
 */
#ifndef PARLEY_ACP_INBOX_H
#define PARLEY_ACP_INBOX_H

#include <stddef.h>

typedef enum acp_item_kind {
    ACPI_LINE,     /* data: a line from stdin, without its newline */
    ACPI_TOO_LONG, /* a line over the bound was dropped */
    ACPI_EOF,      /* stdin ended (or failed): the last of stdin */
    ACPI_EVENT,    /* cid's event (data: JSON) */
    ACPI_SYNCED,   /* cid's history is all delivered */
    ACPI_ENDED,    /* cid's events stopped (data: why) */
} acp_item_kind;

typedef struct acp_item {
    struct acp_item *next;
    acp_item_kind kind;
    char cid[64];
    size_t len;
    char data[]; /* NUL-terminated */
} acp_item;

typedef struct acp_inbox acp_inbox;

/* Events a conversation may have waiting before it is cut off. */
#define ACP_PENDING_DEFAULT (256u << 20)

acp_inbox *acp_inbox_new(size_t max);
/* Free it and what it holds (the reader stopped first). */
void acp_inbox_free(acp_inbox *in);
/* Any thread. Data copied; cid may be NULL. 0, or -1 out of memory. */
int acp_inbox_push(acp_inbox *in, acp_item_kind kind, const char *cid, const void *data,
                   size_t len);
/* The next item (free() it), waiting for one. */
acp_item *acp_inbox_pop(acp_inbox *in);
/* Start reading fd line by line into the inbox, until its end. */
int acp_inbox_read(acp_inbox *in, int fd);

#endif
