/*
 * fuzz_acp.c - libFuzzer target for what a hosted agent process controls:
 * the session updates it sends (acp_map.c), each as a hosted agent's line
 * would reach acp_turn_update, then the turn's end; and every event that
 * makes, as `parley acp` would tell an editor of it (acp_map_out.c).
 *
 * Input: the first byte picks small limits (so that floods and cut values
 * happen) and the mode. As text, the rest is lines, each a JSON value (an
 * update), or "!" and a call id: the call answered by someone else
 * (acp_turn_close_call). As structure, every 4 bytes make one update of a
 * well-formed shape (kind, one of 4 call ids, status, content, sizes), so
 * that the calls' lifecycles and their interleavings are explored, not
 * only the JSON reader.
 *
 * Invariants:
 *  - an update is taken (0), a flood (-E2BIG) or not an update (-EINVAL),
 *    and a refusal appends nothing and says why in one line;
 *  - every event made is valid by the event schema (ev_parse), with the
 *    turn's llm_response_id where it carries one: the gate judges the
 *    agent's order, never its shape;
 *  - what is made is bounded by what was sent: no update multiplies its
 *    bytes (at most 4 times the updates' JSON text, and 4 KiB an update
 *    and an event);
 *  - once the turn ends, no call is left open;
 *  - every event maps out (acp_out_event answers 0) into update objects.
 */
#include "actors/acp_map.h"
#include "actors/event.h"

#include <errno.h>
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define RESPONSE "fuzz-response"

static void ids(void *ctx, char out[37])
{
    unsigned *n = ctx;
    snprintf(out, 37, "00000000-0000-4000-8000-%012u", ++*n);
}

static size_t check_events(json_t *evs, size_t from, acp_out *o);

/* One update from 4 bytes (structure mode); NULL: a close instead. */
static json_t *made_update(const uint8_t b[4], char call[8])
{
    static const char *const kinds[] = {
        "agent_message_chunk", "agent_thought_chunk", "tool_call", "tool_call_update", "plan",
        "user_message_chunk",  "usage_update",        NULL};
    static const char *const statuses[] = {"pending", "in_progress", "completed", "failed",
                                           "",        "done",        NULL,        NULL};
    static const char *const tkinds[] = {"read", "edit", "execute", "think", "", "x", NULL, NULL};
    snprintf(call, 8, "c%u", b[1] & 3);
    const char *kind = kinds[b[0] & 7];
    if (kind == NULL)
        return NULL;
    size_t n = (size_t)b[3] * 3; /* up to 765 bytes of text */
    char *text = malloc(n + 1);
    if (text == NULL)
        abort();
    memset(text, 'a' + (b[2] & 7), n);
    text[n] = '\0';
    json_t *block;
    switch ((b[2] >> 3) & 3) {
    case 0:
        block = json_pack("{s:s, s:s}", "type", "text", "text", text);
        break;
    case 1:
        block = json_pack("{s:s, s:s, s:s}", "type", "image", "data", text, "mimeType", "x/y");
        break;
    case 2:
        block = json_pack("{s:s, s:s}", "type", "resource_link", "uri", text);
        break;
    default:
        block = json_string(text);
        break; /* not a block */
    }
    json_t *u = json_pack("{s:s}", "sessionUpdate", kind);
    if (b[0] & 8)
        json_object_set_new(u, "messageId", json_string(call));
    if (strcmp(kind, "tool_call") == 0 || strcmp(kind, "tool_call_update") == 0) {
        json_object_set_new(u, "toolCallId", json_string(call));
        if (statuses[(b[1] >> 2) & 7] != NULL)
            json_object_set_new(u, "status", json_string(statuses[(b[1] >> 2) & 7]));
        if (tkinds[(b[1] >> 5) & 7] != NULL)
            json_object_set_new(u, "kind", json_string(tkinds[(b[1] >> 5) & 7]));
        if (!(b[0] & 16))
            json_object_set_new(u, "title", json_string(text + n / 2));
        if (b[2] & 32) {
            json_t *c = b[0] & 32 ? json_pack("[{s:s, s:O}]", "type", "content", "content", block)
                                  : json_pack("[{s:s, s:s, s:s, s:s}]", "type", "diff", "path",
                                              "/p", "oldText", text, "newText", text + n / 3);
            json_object_set_new(u, "content", c);
        }
        if (b[2] & 64)
            json_object_set_new(u, "rawInput", json_pack("{s:s}", "a", text));
        if (b[2] & 128)
            json_object_set_new(u, "rawOutput", b[0] & 64 ? json_string(text) : json_integer(n));
    } else if (strcmp(kind, "plan") == 0) {
        json_t *entries = json_array();
        for (unsigned i = 0; i < (b[1] & 7u); i++)
            json_array_append_new(entries, json_pack("{s:s, s:s, s:s}", "content", text, "priority",
                                                     "high", "status", statuses[(b[1] + i) & 3]));
        json_object_set_new(u, "entries", entries);
    } else {
        json_object_set(u, "content", block);
    }
    json_decref(block);
    free(text);
    return u;
}

/* One update taken or refused as the invariants say; the events checked. */
static void feed(acp_turn *t, acp_out *o, json_t *u, json_t *evs, size_t *made, size_t *sent)
{
    char *text = json_dumps(u, JSON_COMPACT | JSON_ENCODE_ANY);
    CHECK(text != NULL);
    *sent += strlen(text);
    free(text);
    size_t before = json_array_size(evs);
    char why[256] = "";
    int r = acp_turn_update(t, u, evs, why, sizeof(why));
    CHECK(r == 0 || r == -E2BIG || r == -EINVAL);
    if (r != 0) {
        CHECK(json_array_size(evs) == before);
        fuzz_line(why, sizeof(why));
    }
    *made += check_events(evs, before, o);
}

/* Each event from `from` on: valid, the turn's, and told out. */
static size_t check_events(json_t *evs, size_t from, acp_out *o)
{
    size_t bytes = 0;
    for (size_t i = from; i < json_array_size(evs); i++) {
        json_t *e = json_array_get(evs, i);
        char *text = json_dumps(e, JSON_COMPACT);
        CHECK(text != NULL);
        size_t len = strlen(text);
        bytes += len;
        ev parsed;
        char err[256] = "";
        if (ev_parse(text, len, &parsed, err, sizeof(err)) != 0) {
            fprintf(stderr, "fuzz_acp: an event the schema refuses (%s): %.*s\n", err,
                    (int)(len > 400 ? 400 : len), text);
            abort();
        }
        CHECK(parsed.llm_response_id == NULL || strcmp(parsed.llm_response_id, RESPONSE) == 0);
        ev_free(&parsed);
        free(text);
        json_t *ups = json_array();
        const char *stop = NULL;
        CHECK(acp_out_event(o, e, ups, &stop) == 0);
        for (size_t k = 0; k < json_array_size(ups); k++)
            CHECK(json_is_object(json_array_get(ups, k)));
        json_decref(ups);
    }
    return bytes;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > 64 * 1024)
        return 0;
    acp_limits l = {0};
    if (data[0] & 1)
        l = (acp_limits){.text_max = 64, .value_max = 128, .updates_max = 16};
    unsigned n = 0;
    acp_turn *t = acp_turn_new(RESPONSE, &l, ids, &n);
    acp_out *o = acp_out_new(&l);
    json_t *evs = json_array();
    CHECK(t != NULL && o != NULL && evs != NULL);
    size_t made = 0, sent = 0, updates = 0;
    const char *p = (const char *)data + 1, *end = (const char *)data + size;
    for (const uint8_t *b = data + 1; (data[0] & 2) && b + 4 <= data + size; b += 4) {
        char call[8];
        json_t *u = made_update(b, call);
        if (u == NULL) {
            acp_turn_close_call(t, call);
            continue;
        }
        feed(t, o, u, evs, &made, &sent);
        updates++;
        json_decref(u);
    }
    while (!(data[0] & 2) && p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t len = nl != NULL ? (size_t)(nl - p) : (size_t)(end - p);
        if (len > 0 && p[0] == '!') {
            char id[256];
            size_t k = len - 1 < sizeof(id) - 1 ? len - 1 : sizeof(id) - 1;
            memcpy(id, p + 1, k);
            id[k] = '\0';
            acp_turn_close_call(t, id);
        } else {
            json_t *u = json_loadb(p, len, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
            if (u != NULL) {
                feed(t, o, u, evs, &made, &sent);
                updates++;
                json_decref(u);
            }
        }
        p += len + 1;
    }
    size_t before = json_array_size(evs);
    acp_turn_end(t, "the fuzz input ended", evs);
    CHECK(acp_turn_open_calls(t) == 0);
    made += check_events(evs, before, o);
    size_t bound = 4 * sent + 4096 * (updates + 1 + json_array_size(evs));
    if (made > bound) {
        fprintf(stderr, "fuzz_acp: %zu bytes of events from %zu sent (%zu updates)\n", made, sent,
                updates);
        abort();
    }
    json_decref(evs);
    acp_out_free(o);
    acp_turn_free(t);
    return 0;
}
