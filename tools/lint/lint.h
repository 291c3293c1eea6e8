/*
 * lint.h - `parley lint`'s (and `parley import`'s) input: a recorded
 * conversation read one JSON value at a time, whatever its form
 * (detected): a JSON array, NDJSON or a sequence of values, a test vector
 * (shared/vectors), an OpenHands conversation directory
 * (DIR/events/event-<index>-<id>.json, or DIR/event-*.json, in index
 * order), or an agent transcript converted to events (actors/transcript.h):
 * a Claude Code session JSONL (line by line) or an OpenCode export. An
 * array is split into its elements without building the whole tree, so
 * memory is one event at a time (an OpenCode export is one value, held
 * whole). Bad framing, and a transcript line that cannot be converted, is
 * an input error with its line; a framed value that is not a valid event
 * is the caller's to judge.
 */
#ifndef LINT_H
#define LINT_H

#include "actors/stuck.h"
#include "actors/transcript.h"

#include <jansson.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

/* The largest input read, in bytes: far beyond any real conversation, and
 * what one process can hold while the gate's tables grow. */
#define LINT_MAX_INPUT      (1ULL << 30)
#define LINT_MAX_INPUT_TEXT "1 GiB"

enum { NO_BYTE = -2 };

/* Bytes in, one JSON value at a time, with the line and column of each. */
typedef struct reader {
    FILE *f;
    uint64_t *total; /* bytes read from every file of the input */
    bool too_big;
    int io_err;
    int ahead;      /* a byte peeked, NO_BYTE if none */
    long line, col; /* of the next byte taken */
    long vline, vcol;
    char *buf; /* the value last read */
    size_t len, cap;
} reader;

typedef enum in_mode { IN_ARRAY, IN_SEQ, IN_VECTOR, IN_DIR, IN_CLAUDE, IN_OPENCODE } in_mode;

typedef struct ev_file {
    unsigned long long index;
    char *name;
} ev_file;

typedef struct input {
    in_mode mode;
    char name[PATH_MAX + 512]; /* for messages: the path, or "stdin" */
    FILE *f;
    reader r;
    uint64_t total;
    bool started, done;
    json_t *first; /* IN_SEQ, IN_CLAUDE: the first value, read ahead */
    char first_why[256];
    long first_line;
    tr_claude *claude; /* IN_CLAUDE */
    json_t *recs;      /* IN_CLAUDE, IN_OPENCODE: records converted, not given yet */
    size_t ri;
    bool ended;
    uint64_t sub_skipped; /* events of subagents left out (their own conversations) */
    /* Where the transcript event in_next gave last came from: a line (0:
     * not a transcript), or an OpenCode message and part (0: none). */
    long at_line, at_msg, at_part;
    /* The same for every value given so far, by position from 1
     * (transcripts only: 12 bytes an event). */
    struct in_src {
        int32_t line, msg, part;
    } *src;
    size_t nsrc, capsrc;
    json_t *vec; /* IN_VECTOR */
    size_t vi;
    bool steps;
    bool has_th;
    stuck_thresholds th;
    char *dir; /* IN_DIR: the folder holding the event files */
    ev_file *files;
    size_t nfiles, fi;
    char err[PATH_MAX + 1024];
} input;

/* Open path ("-": stdin) and find what it holds: 0, or -1 with in->err. */
int in_open(input *in, const char *path);
/* The next value: 1 (*v set, *why "" or a reason it is invalid), 2 a test
 * vector's restart step (*v NULL), 0 at the end, -1 on an input error
 * (in->err). */
int in_next(input *in, json_t **v, char *why, size_t whylen);
void in_close(input *in);
/* "line 12", "message 3, part 2", or "": where the value in_next gave as
 * its pos-th came from (from 1; 0: the last one). */
void in_where(const input *in, uint64_t pos, char *out, size_t cap);
/* Say why the input cannot be read (into in->err); returns -1. */
int in_fail(input *in, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* snprintf may cut in the middle of a character; JSON wants whole ones:
 * drop a last character that was cut. */
void lint_utf8_tidy(char *s);

#endif
