/*
 * lint_input.c - reading `parley lint`'s input (lint.h).
 */
#include "lint.h"

#include "runtime/json.h"

#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* ============================================================= the input === */

void lint_utf8_tidy(char *s)
{
    size_t len = strlen(s), i = len;
    while (i > 0 && ((unsigned char)s[i - 1] & 0xc0) == 0x80)
        i--;
    if (i > 0 && ((unsigned char)s[i - 1] & 0x80)) {
        unsigned char lead = (unsigned char)s[i - 1];
        size_t want = lead >= 0xf0 ? 4 : lead >= 0xe0 ? 3 : 2;
        if (len - (i - 1) < want)
            s[i - 1] = '\0';
    }
}

static void rd_start(reader *r, FILE *f, uint64_t *total)
{
    r->f = f;
    r->total = total;
    r->too_big = false;
    r->io_err = 0;
    r->ahead = NO_BYTE;
    r->line = r->col = 1;
}

static int rd_peek(reader *r)
{
    if (r->ahead == NO_BYTE) {
        int c = getc_unlocked(r->f);
        if (c == EOF && ferror(r->f))
            r->io_err = errno ? errno : EIO;
        if (c != EOF && ++*r->total > LINT_MAX_INPUT) {
            r->too_big = true;
            c = EOF;
        }
        r->ahead = c;
    }
    return r->ahead;
}

static int rd_take(reader *r)
{
    int c = rd_peek(r);
    if (c != EOF) {
        r->ahead = NO_BYTE;
        if (c == '\n') {
            r->line++;
            r->col = 1;
        } else {
            r->col++;
        }
    }
    return c;
}

static void rd_skip_ws(reader *r)
{
    int c;
    while ((c = rd_peek(r)) == ' ' || c == '\t' || c == '\n' || c == '\r')
        rd_take(r);
}

static int rd_push(reader *r, int c)
{
    if (r->len + 1 >= r->cap) {
        size_t cap = r->cap ? 2 * r->cap : 4096;
        char *b = realloc(r->buf, cap);
        if (b == NULL)
            return -1;
        r->buf = b;
        r->cap = cap;
    }
    r->buf[r->len++] = (char)c;
    return 0;
}

int in_fail(input *in, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(in->err, sizeof(in->err), fmt, ap);
    va_end(ap);
    return -1;
}

/* The end of input came where it should not: say why it ended. */
static int in_eof(input *in, const char *name, const char *what)
{
    reader *r = &in->r;
    if (r->too_big)
        return in_fail(in, "%s: larger than " LINT_MAX_INPUT_TEXT ", the most parley lint reads",
                       name);
    if (r->io_err)
        return in_fail(in, "cannot read %s: %s", name, strerror(r->io_err));
    return in_fail(in, "%s: line %ld, column %ld: %s", name, r->line, r->col, what);
}

static int in_bom(input *in)
{
    reader *r = &in->r;
    if (rd_peek(r) != 0xef)
        return 0;
    rd_take(r);
    if (rd_take(r) != 0xbb || rd_take(r) != 0xbf)
        return in_fail(in, "%s: line 1: not JSON (a stray byte 0xEF at the start)", in->name);
    r->col = 1;
    return 0;
}

/* The next JSON value's bytes, split off by nesting alone (jansson then
 * parses just them). 1 at the end of input, -1 on error. */
static int read_value(input *in, const char *name)
{
    reader *r = &in->r;
    r->len = 0;
    int c = rd_peek(r);
    if (c == EOF)
        return r->too_big || r->io_err ? in_eof(in, name, "") : 1;
    r->vline = r->line;
    r->vcol = r->col;
    if (c == '{' || c == '[' || c == '"') {
        long depth = 0;
        bool str = false, esc = false;
        do {
            c = rd_take(r);
            if (c == EOF) {
                char what[128];
                snprintf(what, sizeof(what),
                         "the JSON value that starts at line %ld, column %ld is cut short",
                         r->vline, r->vcol);
                return in_eof(in, name, what);
            }
            if (rd_push(r, c) != 0)
                return in_fail(in, "%s: out of memory", name);
            if (str) {
                if (esc)
                    esc = false;
                else if (c == '\\')
                    esc = true;
                else if (c == '"')
                    str = false;
            } else if (c == '"') {
                str = true;
            } else if (c == '{' || c == '[') {
                depth++;
            } else if (c == '}' || c == ']') {
                depth--;
            }
        } while (depth > 0 || str);
    } else {
        while ((c = rd_peek(r)) != EOF && strchr(" \t\r\n,[]{}\"", c) == NULL)
            if (rd_push(r, rd_take(r)) != 0)
                return in_fail(in, "%s: out of memory", name);
        if (r->too_big || r->io_err)
            return in_eof(in, name, "");
        if (r->len == 0)
            return in_fail(in, "%s: line %ld, column %ld: a JSON value was expected, not '%c'",
                           name, r->line, r->col, c);
    }
    r->buf[r->len] = '\0';
    return 0;
}

/* The value read, parsed. A duplicate key leaves the value usable but not
 * a valid event: *why says so. */
static int parse_value(input *in, const char *name, json_t **out, char *why, size_t whylen)
{
    reader *r = &in->r;
    json_error_t je, je2;
    why[0] = '\0';
    json_t *v = rt_json_read(r->buf, r->len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &je);
    if (v == NULL) {
        v = rt_json_read(r->buf, r->len, JSON_DECODE_ANY, &je2);
        if (v != NULL) {
            snprintf(why, whylen, "%s", je.text);
            lint_utf8_tidy(why);
        } else {
            je = je2;
        }
    }
    if (v == NULL) {
        long line = r->vline, col = r->vcol;
        if (je.line >= 1) {
            line += je.line - 1;
            col = je.line == 1 ? r->vcol + (je.column > 0 ? je.column - 1 : 0) : je.column;
        }
        return in_fail(in, "%s: line %ld, column %ld: not valid JSON: %s", name, line, col,
                       je.text);
    }
    *out = v;
    return 0;
}

static bool vector_like(json_t *v)
{
    return json_is_object(v) && json_object_get(v, "kind") == NULL &&
           (json_is_array(json_object_get(v, "steps")) ||
            json_is_array(json_object_get(v, "events")));
}

static void vector_thresholds(input *in)
{
    json_t *t = json_object_get(in->vec, "thresholds");
    static const char *const names[] = {"action_observation", "action_error", "monologue",
                                        "alternating_pattern"};
    int *fields[] = {&in->th.action_observation, &in->th.action_error, &in->th.monologue,
                     &in->th.alternating_pattern};
    stuck_defaults(&in->th);
    in->has_th = json_is_object(t);
    for (int i = 0; i < 4; i++) {
        json_t *v = json_object_get(t, names[i]);
        if (json_is_integer(v) && json_integer_value(v) >= 1 && json_integer_value(v) <= INT_MAX)
            *fields[i] = (int)json_integer_value(v);
    }
}

/* OpenHands names event files event-{index:05d}-{id}.json; the index
 * orders them (it may grow past five digits). */
static bool event_file_name(const char *name, unsigned long long *index)
{
    if (strncmp(name, "event-", 6) != 0 || name[6] < '0' || name[6] > '9')
        return false;
    char *end;
    errno = 0;
    unsigned long long ix = strtoull(name + 6, &end, 10);
    if (errno != 0 || *end != '-')
        return false;
    size_t n = strlen(end + 1);
    if (n <= 5 || strcmp(end + 1 + n - 5, ".json") != 0)
        return false;
    *index = ix;
    return true;
}

static int cmp_files(const void *a, const void *b)
{
    const ev_file *x = a, *y = b;
    if (x->index != y->index)
        return x->index < y->index ? -1 : 1;
    return strcmp(x->name, y->name);
}

static int open_dir(input *in, const char *path)
{
    char sub[PATH_MAX + 8];
    snprintf(sub, sizeof(sub), "%s/events", path);
    DIR *d = opendir(sub);
    bool own = d == NULL;
    if (d == NULL && errno != ENOENT && errno != ENOTDIR)
        return in_fail(in, "cannot open %s: %s", sub, strerror(errno));
    if (d == NULL && (d = opendir(path)) == NULL)
        return in_fail(in, "cannot open %s: %s", path, strerror(errno));
    in->dir = strdup(own ? path : sub);
    size_t cap = 0;
    struct dirent *de;
    int rc = in->dir != NULL ? 0 : in_fail(in, "out of memory");
    while (rc == 0 && (de = readdir(d)) != NULL) {
        unsigned long long ix;
        if (!event_file_name(de->d_name, &ix))
            continue;
        if (in->nfiles == cap) {
            cap = cap ? 2 * cap : 64;
            ev_file *f = realloc(in->files, cap * sizeof(*f));
            if (f == NULL) {
                rc = in_fail(in, "out of memory");
                break;
            }
            in->files = f;
        }
        if ((in->files[in->nfiles].name = strdup(de->d_name)) == NULL)
            rc = in_fail(in, "out of memory");
        else
            in->files[in->nfiles++].index = ix;
    }
    closedir(d);
    if (rc == 0 && own && in->nfiles == 0)
        rc = in_fail(in,
                     "%s has no events/ folder and no event-*.json files: not an OpenHands "
                     "conversation directory",
                     path);
    if (rc == 0 && in->nfiles > 0)
        qsort(in->files, in->nfiles, sizeof(*in->files), cmp_files);
    in->mode = IN_DIR;
    return rc;
}

/* ------------------------------------------------------ transcripts --- */

static int open_claude(input *in)
{
    in->mode = IN_CLAUDE;
    in->claude = tr_claude_new();
    in->recs = json_array();
    return in->claude != NULL && in->recs != NULL ? 0 : in_fail(in, "out of memory");
}

/* An export is one value: the whole of it, converted at once. */
static int open_opencode(input *in)
{
    reader *r = &in->r;
    rd_skip_ws(r);
    if (rd_peek(r) != EOF || r->too_big || r->io_err)
        return r->too_big || r->io_err
                   ? in_eof(in, in->name, "")
                   : in_fail(in,
                             "%s: line %ld, column %ld: more than one JSON value after an "
                             "OpenCode export",
                             in->name, r->line, r->col);
    in->mode = IN_OPENCODE;
    in->recs = json_array();
    char why[256];
    if (in->recs == NULL)
        return in_fail(in, "out of memory");
    int rc = tr_opencode(in->first, in->recs, why, sizeof(why));
    json_decref(in->first);
    in->first = NULL;
    if (rc == -ENOMEM)
        return in_fail(in, "out of memory");
    if (rc != 0)
        return in_fail(in, "%s: %s", in->name, why);
    in->ended = true;
    return 0;
}

/* A transcript's event given: where it came from, kept by position. */
static int keep_source(input *in)
{
    if (in->nsrc == in->capsrc) {
        size_t cap = in->capsrc ? 2 * in->capsrc : 1024;
        struct in_src *p = realloc(in->src, cap * sizeof(*p));
        if (p == NULL)
            return in_fail(in, "out of memory");
        in->src = p;
        in->capsrc = cap;
    }
    in->src[in->nsrc++] =
        (struct in_src){(int32_t)in->at_line, (int32_t)in->at_msg, (int32_t)in->at_part};
    return 1;
}

/* The next record's event, its source noted; 0 when none is left. */
static int next_record(input *in, json_t **v)
{
    while (in->ri < json_array_size(in->recs)) {
        json_t *rec = json_array_get(in->recs, in->ri++);
        if (json_object_get(rec, "sub") != NULL) {
            in->sub_skipped++;
            continue;
        }
        *v = json_incref(json_object_get(rec, "event"));
        in->at_line = (long)json_integer_value(json_object_get(rec, "line"));
        in->at_msg = (long)json_integer_value(json_object_get(rec, "message"));
        in->at_part = (long)json_integer_value(json_object_get(rec, "part"));
        if (keep_source(in) < 0) {
            json_decref(*v);
            return -1;
        }
        return 1;
    }
    json_array_clear(in->recs);
    in->ri = 0;
    return 0;
}

/* Claude Code: line after line converted, until one gives events. */
static int next_claude(input *in, json_t **v, char *why, size_t whylen)
{
    char bad[512];
    for (;;) {
        if (next_record(in, v) == 1)
            return 1;
        if (in->ended)
            return 0;
        json_t *line = NULL;
        long at = in->first_line;
        if (in->first != NULL) {
            line = in->first;
            in->first = NULL;
        } else {
            rd_skip_ws(&in->r);
            int rc = read_value(in, in->name);
            if (rc < 0)
                return -1;
            if (rc > 0) {
                in->ended = true;
                if (tr_claude_end(in->claude, in->recs) != 0)
                    return in_fail(in, "out of memory");
                continue;
            }
            at = in->r.vline;
            if (parse_value(in, in->name, &line, why, whylen) != 0)
                return -1;
        }
        int rc = tr_claude_line(in->claude, line, at, in->recs, bad, sizeof(bad));
        json_decref(line);
        if (rc == -ENOMEM)
            return in_fail(in, "out of memory");
        if (rc != 0)
            return in_fail(in, "%s: line %ld: %s", in->name, at, bad);
    }
}

void in_where(const input *in, uint64_t pos, char *out, size_t cap)
{
    long line = in->at_line, msg = in->at_msg, part = in->at_part;
    if (pos >= 1) {
        const struct in_src *p = pos <= in->nsrc ? &in->src[pos - 1] : NULL;
        line = p != NULL ? p->line : 0;
        msg = p != NULL ? p->msg : 0;
        part = p != NULL ? p->part : 0;
    }
    if (msg > 0 && part > 0)
        snprintf(out, cap, "message %ld, part %ld", msg, part);
    else if (msg > 0)
        snprintf(out, cap, "message %ld", msg);
    else if (line > 0)
        snprintf(out, cap, "line %ld", line);
    else if (cap > 0)
        out[0] = '\0';
}

/* Opens path ("-": stdin) and finds what it holds. */
int in_open(input *in, const char *path)
{
    memset(in, 0, sizeof(*in));
    if (strcmp(path, "-") == 0) {
        snprintf(in->name, sizeof(in->name), "stdin");
        in->f = stdin;
    } else {
        snprintf(in->name, sizeof(in->name), "%s", path);
        struct stat st;
        if (stat(path, &st) != 0)
            return in_fail(in, "cannot open %s: %s", path, strerror(errno));
        if (S_ISDIR(st.st_mode))
            return open_dir(in, path);
        if (S_ISREG(st.st_mode) && (uint64_t)st.st_size > LINT_MAX_INPUT)
            return in_fail(in,
                           "%s is %.1f GiB, larger than " LINT_MAX_INPUT_TEXT
                           ", the most parley lint reads",
                           path, (double)st.st_size / (double)(1ULL << 30));
        if ((in->f = fopen(path, "r")) == NULL)
            return in_fail(in, "cannot open %s: %s", path, strerror(errno));
    }
    reader *r = &in->r;
    rd_start(r, in->f, &in->total);
    if (in_bom(in) != 0)
        return -1;
    rd_skip_ws(r);
    int c = rd_peek(r);
    if (c == EOF)
        return r->too_big || r->io_err ? in_eof(in, in->name, "")
                                       : in_fail(in, "%s is empty: no events", in->name);
    if (c == '[') {
        rd_take(r);
        in->mode = IN_ARRAY;
        return 0;
    }
    in->mode = IN_SEQ;
    if (read_value(in, in->name) != 0 ||
        parse_value(in, in->name, &in->first, in->first_why, sizeof(in->first_why)) != 0)
        return -1;
    in->first_line = r->vline;
    tr_format fmt = tr_detect(in->first);
    if (fmt == TR_CLAUDE)
        return open_claude(in);
    if (fmt == TR_OPENCODE)
        return open_opencode(in);
    if (!vector_like(in->first))
        return 0;
    rd_skip_ws(r);
    if (rd_peek(r) != EOF || r->too_big || r->io_err)
        return r->too_big || r->io_err ? in_eof(in, in->name, "") : 0;
    in->mode = IN_VECTOR;
    in->vec = in->first;
    in->first = NULL;
    in->steps = json_is_array(json_object_get(in->vec, "steps"));
    vector_thresholds(in);
    return 0;
}

static int next_array(input *in, json_t **v, char *why, size_t whylen)
{
    reader *r = &in->r;
    rd_skip_ws(r);
    int c = rd_peek(r);
    if (c == EOF)
        return in_eof(in, in->name, "the array is not closed (no ']')");
    if (c == ']' || in->started) {
        if (c == ']') {
            rd_take(r);
            rd_skip_ws(r);
            if (rd_peek(r) != EOF)
                return in_fail(in, "%s: line %ld, column %ld: unexpected text after the array",
                               in->name, r->line, r->col);
            if (r->too_big || r->io_err)
                return in_eof(in, in->name, "");
            in->done = true;
            return 0;
        }
        if (c != ',')
            return in_fail(in, "%s: line %ld, column %ld: ',' or ']' expected after an element",
                           in->name, r->line, r->col);
        rd_take(r);
        rd_skip_ws(r);
    }
    in->started = true;
    int rc = read_value(in, in->name);
    if (rc > 0)
        return in_eof(in, in->name, "the array is not closed (no ']')");
    return rc < 0 ? -1 : parse_value(in, in->name, v, why, whylen) < 0 ? -1 : 1;
}

static int next_seq(input *in, json_t **v, char *why, size_t whylen)
{
    if (in->first != NULL) {
        *v = in->first;
        in->first = NULL;
        snprintf(why, whylen, "%s", in->first_why);
        return 1;
    }
    rd_skip_ws(&in->r);
    int rc = read_value(in, in->name);
    if (rc != 0)
        return rc > 0 ? 0 : -1;
    return parse_value(in, in->name, v, why, whylen) < 0 ? -1 : 1;
}

static int next_vector(input *in, json_t **v, char *why)
{
    json_t *list = json_object_get(in->vec, in->steps ? "steps" : "events");
    why[0] = '\0';
    while (in->vi < json_array_size(list)) {
        json_t *s = json_array_get(list, in->vi++);
        if (!in->steps) {
            *v = json_incref(s);
            return 1;
        }
        json_t *ap = json_object_get(s, "append");
        if (ap != NULL) {
            *v = json_incref(ap);
            return 1;
        }
        if (!json_is_true(json_object_get(s, "restart")))
            return in_fail(in,
                           "%s: step %zu is neither {\"append\": event} nor {\"restart\": true}",
                           in->name, in->vi);
        *v = NULL; /* a restart */
        return 2;
    }
    return 0;
}

static int next_file(input *in, json_t **v, char *why, size_t whylen)
{
    if (in->fi == in->nfiles)
        return 0;
    /* the name messages use is the file's path from here on */
    snprintf(in->name, sizeof(in->name), "%s/%s", in->dir, in->files[in->fi++].name);
    const char *path = in->name;
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return in_fail(in, "cannot open %s: %s", path, strerror(errno));
    reader *r = &in->r;
    rd_start(r, f, &in->total);
    int rc = in_bom(in);
    if (rc == 0) {
        rd_skip_ws(r);
        rc = read_value(in, path);
        if (rc > 0)
            rc = in_fail(in, "%s: empty file, not an event", path);
    }
    if (rc == 0)
        rc = parse_value(in, path, v, why, whylen);
    if (rc == 0) {
        rd_skip_ws(r);
        if (rd_peek(r) != EOF || r->too_big || r->io_err) {
            rc = r->too_big || r->io_err
                     ? in_eof(in, path, "")
                     : in_fail(in,
                               "%s: line %ld, column %ld: more than one JSON value (an event "
                               "file holds one event)",
                               path, r->line, r->col);
            json_decref(*v);
        }
    }
    fclose(f);
    return rc < 0 ? -1 : 1;
}

/* The next value: 1 (*v set, *why "" or a reason it is invalid), 0 at the
 * end, -1 on an input error (in->err). */
int in_next(input *in, json_t **v, char *why, size_t whylen)
{
    why[0] = '\0';
    if (in->done)
        return 0;
    in->at_line = in->at_msg = in->at_part = 0;
    switch (in->mode) {
    case IN_CLAUDE:
        return next_claude(in, v, why, whylen);
    case IN_OPENCODE:
        return next_record(in, v);
    case IN_ARRAY: {
        int rc = next_array(in, v, why, whylen);
        return in->done ? 0 : rc;
    }
    case IN_SEQ:
        return next_seq(in, v, why, whylen);
    case IN_VECTOR:
        return next_vector(in, v, why);
    default:
        return next_file(in, v, why, whylen);
    }
}

void in_close(input *in)
{
    if (in->f != NULL && in->f != stdin)
        fclose(in->f);
    json_decref(in->first);
    json_decref(in->vec);
    json_decref(in->recs);
    tr_claude_free(in->claude);
    free(in->src);
    for (size_t i = 0; i < in->nfiles; i++)
        free(in->files[i].name);
    free(in->files);
    free(in->dir);
    free(in->r.buf);
}
