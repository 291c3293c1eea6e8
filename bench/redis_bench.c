/*
 * redis_bench.c - the Redis side of bench/side_by_side.py: a load client for
 * Redis Streams on libuv, with its own RESP2 encoder and parser.
 *
 *   bench_redis xadd    closed-loop XADD from C connections (durable append)
 *   bench_redis fanout  1 producer, N consumers looping XREAD BLOCK (fan-out)
 *   bench_redis xrange  XRANGE pages at random exclusive cursors (paging)
 *   bench_redis idle    N connections blocked in XREAD, or N streams of K
 *                       events: the server's RSS per connection or per stream
 *
 * Each mode prints one JSON object on stdout and exits 0, or says what went
 * wrong on stderr and exits 1 (2 for bad usage). Every run is bounded in
 * time: a server that stops answering fails the run instead of hanging it.
 *
 * Design decisions:
 * - It mirrors parley load, which drives parley in the same benchmark:
 *   closed loop with one request outstanding per connection, the same
 *   thread counts, the producer's send time on CLOCK_MONOTONIC (uv_hrtime)
 *   written in the event's text with parley load's marker, the same event
 *   JSON bytes, and parley load's latency histogram (tools/load_stats.c),
 *   so that both sides' percentiles are computed alike.
 * - The parser is strict: anything that is not RESP2 as Redis 7 sends it
 *   (CRLF line ends, no leading '+' or zeros in lengths, bounded nesting and
 *   sizes) is a protocol error, and so is any error reply. A reply is parsed
 *   into a flat array of tokens in pre-order pointing into the connection's
 *   input buffer, valid until the next read.
 * - Results are checked, not just timed: every XADD answers an id, every
 *   page starts right after its cursor with as many entries as there are,
 *   and every fan-out consumer must see every entry once, in order.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "load_stats.h" /* tools/: parley load's pure parts */

/* ---- small helpers ---------------------------------------------------------------- */

static const char *mode_name = "";

static void die(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));
static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "bench_redis %s: ", mode_name);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(1);
}

static void *xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);
    if (q == NULL)
        die("out of memory (%zu bytes)", n);
    return q;
}

static void *xcalloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (p == NULL)
        die("out of memory (%zu x %zu bytes)", n, size);
    return p;
}

typedef struct buf {
    char *p;
    size_t len, cap;
} buf;

static void buf_reserve(buf *b, size_t more)
{
    if (b->cap - b->len >= more)
        return;
    size_t cap = b->cap ? b->cap : 256;
    while (cap - b->len < more)
        cap *= 2;
    b->p = xrealloc(b->p, cap);
    b->cap = cap;
}

static void buf_put(buf *b, const void *p, size_t n)
{
    buf_reserve(b, n);
    memcpy(b->p + b->len, p, n);
    b->len += n;
}

static void buf_printf(buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void buf_printf(buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    buf_reserve(b, (size_t)n + 1);
    va_start(ap, fmt);
    vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

static uint64_t xorshift(uint64_t *x)
{
    *x ^= *x << 13, *x ^= *x >> 7, *x ^= *x << 17;
    return *x;
}

/* The server's resident set, KiB, from /proc/PID/status; -1 when unknown. */
static long rss_kib(int pid)
{
    char path[64], line[256];
    snprintf(path, sizeof(path), "/proc/%d/status", pid);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return -1;
    long kib = -1;
    while (fgets(line, sizeof(line), f) != NULL)
        if (strncmp(line, "VmRSS:", 6) == 0)
            kib = strtol(line + 6, NULL, 10);
    fclose(f);
    return kib;
}

/* ---- RESP2 ------------------------------------------------------------------------ */

enum {
    RESP_MAX_DEPTH = 8,       /* XREAD's answer nests 5 deep */
    RESP_MAX_BULK = 64 << 20, /* bytes of one bulk string */
    RESP_MAX_ARRAY = 1 << 22, /* elements of one array */
};

/* One value of a reply. type: '+' simple string, '-' error, ':' integer,
 * '$' bulk string, '*' array. n: the integer, the bulk's length or the
 * array's count (-1 for a null bulk or array). p, len: the string's bytes. */
typedef struct resp_tok {
    char type;
    long long n;
    const char *p;
    size_t len;
} resp_tok;

typedef struct resp_toks {
    resp_tok *t;
    int n, cap;
} resp_toks;

/* A decimal as RESP writes it: an optional '-', then digits, no leading zero. */
static int resp_int(const char *p, size_t n, long long *v)
{
    bool neg = n > 0 && p[0] == '-';
    size_t i = neg ? 1 : 0;
    if (i == n || n - i > 18 || (p[i] == '0' && n - i > 1))
        return -1;
    long long x = 0;
    for (; i < n; i++) {
        if (p[i] < '0' || p[i] > '9')
            return -1;
        x = x * 10 + (p[i] - '0');
    }
    *v = neg ? -x : x;
    return 0;
}

/* Parses one value at b[*pos]: 1 when complete (*pos past it), 0 when more
 * bytes are needed, -1 when it is not RESP2. */
static int resp_value(const char *b, size_t len, size_t *pos, int depth, resp_toks *out)
{
    if (depth > RESP_MAX_DEPTH)
        return -1;
    if (*pos >= len)
        return 0;
    const char *line = b + *pos + 1;
    const char *cr = memchr(line, '\r', len - *pos - 1);
    if (cr == NULL || cr + 1 >= b + len)
        return 0;
    if (cr[1] != '\n')
        return -1;
    resp_tok t = {.type = b[*pos], .n = 0, .p = line, .len = (size_t)(cr - line)};
    size_t next = (size_t)(cr + 2 - b);
    switch (t.type) {
    case '+':
    case '-':
        break;
    case ':':
        if (resp_int(t.p, t.len, &t.n) != 0)
            return -1;
        break;
    case '$':
        if (resp_int(t.p, t.len, &t.n) != 0 || t.n < -1 || t.n > RESP_MAX_BULK)
            return -1;
        t.p = NULL, t.len = 0;
        if (t.n >= 0) {
            if (len - next < (size_t)t.n + 2)
                return 0;
            if (b[next + (size_t)t.n] != '\r' || b[next + (size_t)t.n + 1] != '\n')
                return -1;
            t.p = b + next, t.len = (size_t)t.n;
            next += (size_t)t.n + 2;
        }
        break;
    case '*':
        if (resp_int(t.p, t.len, &t.n) != 0 || t.n < -1 || t.n > RESP_MAX_ARRAY)
            return -1;
        t.p = NULL, t.len = 0;
        break;
    default:
        return -1;
    }
    if (out->n == out->cap) {
        out->cap = out->cap ? 2 * out->cap : 256;
        out->t = xrealloc(out->t, (size_t)out->cap * sizeof(*out->t));
    }
    out->t[out->n++] = t;
    *pos = next;
    for (long long i = 0; t.type == '*' && i < t.n; i++) {
        int r = resp_value(b, len, pos, depth + 1, out);
        if (r != 1)
            return r;
    }
    return 1;
}

/* One whole reply from b: the bytes it took, 0 if incomplete, -1 if not RESP2. */
static long resp_parse(const char *b, size_t len, resp_toks *out)
{
    size_t pos = 0;
    out->n = 0;
    int r = resp_value(b, len, &pos, 0, out);
    return r == 1 ? (long)pos : r;
}

static void cmd_begin(buf *b, int argc)
{
    buf_printf(b, "*%d\r\n", argc);
}

static void cmd_arg(buf *b, const char *p, size_t n)
{
    buf_printf(b, "$%zu\r\n", n);
    buf_put(b, p, n);
    buf_put(b, "\r\n", 2);
}

static void cmd_str(buf *b, const char *s)
{
    cmd_arg(b, s, strlen(s));
}

/* A stream entry id, "ms-seq". */
typedef struct sid {
    uint64_t ms, seq;
} sid;

static int sid_parse(const char *p, size_t n, sid *id)
{
    const char *dash = memchr(p, '-', n);
    long long a, b;
    if (dash == NULL || resp_int(p, (size_t)(dash - p), &a) != 0 || a < 0 ||
        resp_int(dash + 1, n - (size_t)(dash + 1 - p), &b) != 0 || b < 0)
        return -1;
    id->ms = (uint64_t)a, id->seq = (uint64_t)b;
    return 0;
}

static bool sid_after(sid a, sid b)
{
    return a.ms > b.ms || (a.ms == b.ms && a.seq > b.seq);
}

/* Walks a list of stream entries (XRANGE's answer, or the second element of
 * each of XREAD's streams) at t[i]: each entry must be [id, [field, value]].
 * Calls fn(arg, id token, value token) per entry; returns the index past the
 * list, or -1 if it does not have that shape. */
static int resp_entries(const resp_tok *t, int n, int i,
                        void (*fn)(void *arg, const resp_tok *id, const resp_tok *val), void *arg)
{
    if (i >= n || t[i].type != '*' || t[i].n < 0)
        return -1;
    long long k = t[i++].n;
    for (long long e = 0; e < k; e++, i += 5) {
        if (i + 5 > n || t[i].type != '*' || t[i].n != 2 || t[i + 1].type != '$' ||
            t[i + 1].n < 0 || t[i + 2].type != '*' || t[i + 2].n != 2 || t[i + 3].type != '$' ||
            t[i + 4].type != '$' || t[i + 4].n < 0)
            return -1;
        fn(arg, &t[i + 1], &t[i + 4]);
    }
    return i;
}

/* ---- latency ---------------------------------------------------------------------- */

/* parley load's histogram (tools/load_stats.c): both sides of a line get
 * their percentiles by the same buckets and the same rank. */
static double pct_ms(const load_hist *h, double p)
{
    return (double)load_hist_pct(h, p) / 1e6;
}

static void print_hist(const char *name, const load_hist *h)
{
    printf("\"%s\": {\"p50\": %.3f, \"p90\": %.3f, \"p99\": %.3f, \"max\": %.3f}", name,
           pct_ms(h, 0.5), pct_ms(h, 0.9), pct_ms(h, 0.99), (double)h->max / 1e6);
}

/* ---- options ---------------------------------------------------------------------- */

typedef struct cfg {
    const char *host;
    int port;
    int connections, threads, streams, subscribers, batch, count, event_size, fill, runs;
    int picks, server_pid, idle_streams;
    long long events;
    double duration, hold, timeout;
    const char *payload, *key;
} cfg;

static cfg C = {
    .host = "127.0.0.1",
    .connections = 64,
    .threads = 2,
    .streams = 64,
    .subscribers = 1000,
    .batch = 50,
    .count = 1000,
    .event_size = 100,
    .fill = 100000,
    .runs = 1,
    .picks = 5000,
    .events = 0,
    .duration = 5,
    .hold = 2,
    .timeout = 60,
    .key = "bench",
};

typedef struct opt {
    const char *name;
    char kind; /* 'i' int, 'l' long long, 'd' seconds, 's' string */
    void *to;
    long long lo, hi;
} opt;

static const opt OPTS[] = {
    {"host", 's', &C.host, 0, 0},
    {"port", 'i', &C.port, 1, 65535},
    {"connections", 'i', &C.connections, 1, 100000},
    {"threads", 'i', &C.threads, 1, 64},
    {"streams", 'i', &C.streams, 1, 10000000},
    {"subscribers", 'i', &C.subscribers, 1, 100000},
    {"batch", 'i', &C.batch, 1, 10000},
    {"count", 'i', &C.count, 1, 100000},
    {"event-size", 'i', &C.event_size, 22, 1 << 20},
    {"fill", 'i', &C.fill, 2, 10000000},
    {"runs", 'i', &C.runs, 1, 100},
    {"picks", 'i', &C.picks, 1, 1000000},
    {"server-pid", 'i', &C.server_pid, 1, 1 << 30},
    {"events", 'l', &C.events, 1, 1000000000},
    {"duration", 'd', &C.duration, 0, 3600},
    {"hold", 'd', &C.hold, 0, 3600},
    {"timeout", 'd', &C.timeout, 1, 3600},
    {"payload", 's', &C.payload, 0, 0},
    {"key", 's', &C.key, 0, 0},
};

typedef struct mode {
    const char *name;
    const char *opts; /* the options it takes, ",a,b," */
    const char *help;
    void (*run)(void);
} mode;

static bool takes(const mode *m, const char *name)
{
    char k[64];
    snprintf(k, sizeof(k), ",%s,", name);
    return strstr(m->opts, k) != NULL || strstr(",host,port,timeout,", k) != NULL;
}

static void parse_opts(const mode *m, int argc, char **argv)
{
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            printf("%s", m->help);
            exit(0);
        }
        const opt *o = NULL;
        for (size_t j = 0; j < sizeof(OPTS) / sizeof(OPTS[0]); j++)
            if (strncmp(argv[i], "--", 2) == 0 && strcmp(argv[i] + 2, OPTS[j].name) == 0)
                o = &OPTS[j];
        if (o == NULL || !takes(m, o->name) || i + 1 >= argc) {
            fprintf(stderr, "bench_redis %s: %s '%s' (see bench_redis %s --help)\n", m->name,
                    o == NULL || !takes(m, o->name) ? "unknown option" : "no value for", argv[i],
                    m->name);
            exit(2);
        }
        const char *v = argv[++i];
        char *end;
        errno = 0;
        if (o->kind == 's') {
            *(const char **)o->to = v;
            continue;
        }
        if (o->kind == 'd') {
            double d = strtod(v, &end);
            if (errno || end == v || *end || d < (double)o->lo || d > (double)o->hi) {
                fprintf(stderr, "bench_redis %s: --%s wants seconds in [%lld, %lld], not '%s'\n",
                        m->name, o->name, o->lo, o->hi, v);
                exit(2);
            }
            *(double *)o->to = d;
            continue;
        }
        long long x = strtoll(v, &end, 10);
        if (errno || end == v || *end || x < o->lo || x > o->hi) {
            fprintf(stderr, "bench_redis %s: --%s wants an integer in [%lld, %lld], not '%s'\n",
                    m->name, o->name, o->lo, o->hi, v);
            exit(2);
        }
        if (o->kind == 'l')
            *(long long *)o->to = x;
        else
            *(int *)o->to = (int)x;
    }
    if (C.port == 0) {
        fprintf(stderr, "bench_redis %s: --port is required (see bench_redis %s --help)\n", m->name,
                m->name);
        exit(2);
    }
}

/* ---- event payloads --------------------------------------------------------------- */

/* An agent message as parley is sent it, compact, with a text of exactly
 * size bytes: text[] is filled by the caller. Returns the offset of the text. */
static size_t event_json(buf *b, int size)
{
    static const char head[] =
        "{\"source\":\"agent\",\"kind\":\"MessageEvent\",\"llm_message\":"
        "{\"role\":\"assistant\",\"content\":[{\"type\":\"text\",\"text\":\"";
    b->len = 0;
    buf_put(b, head, sizeof(head) - 1);
    size_t at = b->len;
    buf_reserve(b, (size_t)size);
    memset(b->p + b->len, 'x', (size_t)size);
    b->len += (size_t)size;
    buf_put(b, "\"}]}}", 5);
    return at;
}

/* parley's search benchmark's events: "event N " padded with x to size. */
static void numbered_event(buf *b, int size, long long i)
{
    size_t at = event_json(b, size);
    char n[32];
    int k = snprintf(n, sizeof(n), "event %lld ", i);
    memcpy(b->p + at, n, (size_t)k < (size_t)size ? (size_t)k : (size_t)size);
}

/* The send time is parley load's marker (LOAD_MARK: "@t=" + 19 digits);
 * a sequence number of SEQ_LEN digits comes right before it. */
enum { MARK_LEN = LOAD_MARK_LEN, SEQ_LEN = 10 };

static void put_seq(char *at, uint64_t seq)
{
    for (int i = SEQ_LEN - 1; i >= 0; i--, seq /= 10)
        at[i] = (char)('0' + seq % 10);
}

static int get_digits(const char *p, int n, uint64_t *v)
{
    uint64_t x = 0;
    for (int i = 0; i < n; i++) {
        if (p[i] < '0' || p[i] > '9')
            return -1;
        x = x * 10 + (uint64_t)(p[i] - '0');
    }
    *v = x;
    return 0;
}

/* ---- connections ------------------------------------------------------------------ */

typedef struct worker worker;
typedef struct conn conn;

struct conn {
    uv_tcp_t tcp;
    uv_connect_t connect;
    worker *w;
    int idx;
    bool open, closing;
    char *in;
    size_t in_len, in_cap;
    resp_toks toks;
    void (*on_reply)(conn *c, const resp_tok *t, int n);
    buf cmd;       /* the request this connection repeats, or scratch */
    uint64_t sent; /* when its request went out */
    uint64_t rng;  /* its own random numbers */
    int pick;      /* xrange: the cursor it asked for */
    int pending;   /* replies it still waits for */
    uint64_t got;  /* fanout: entries received */
    sid last;      /* fanout: the last entry's id */
    char last_id[48];
};

/* What one loop runs: its connections, their counts and latencies. */
struct worker {
    uv_loop_t loop;
    uv_timer_t timer;
    uv_thread_t thread;
    conn *conns;
    int nconns, dialed, connected, closed;
    void (*on_all_connected)(worker *w);
    void (*on_connected)(conn *c);
    bool stopping;
    uint64_t t0, t_end, ops;
    load_hist lat;
    int phase;
};

typedef struct wreq {
    uv_write_t req;
    uv_buf_t b;
    char data[];
} wreq;

static void wrote(uv_write_t *req, int status)
{
    conn *c = req->handle->data;
    if (status < 0 && !c->closing)
        die("writing to redis (connection %d): %s", c->idx, uv_strerror(status));
    free(req);
}

static void conn_send(conn *c, const char *p, size_t n)
{
    uv_buf_t b = uv_buf_init((char *)p, (unsigned)n);
    int r = uv_try_write((uv_stream_t *)&c->tcp, &b, 1);
    if (r < 0 && r != UV_EAGAIN)
        die("writing to redis (connection %d): %s", c->idx, uv_strerror(r));
    size_t done = r > 0 ? (size_t)r : 0;
    if (done == n)
        return;
    wreq *q = xrealloc(NULL, sizeof(*q) + n - done);
    memcpy(q->data, p + done, n - done);
    q->b = uv_buf_init(q->data, (unsigned)(n - done));
    r = uv_write(&q->req, (uv_stream_t *)&c->tcp, &q->b, 1, wrote);
    if (r < 0)
        die("writing to redis (connection %d): %s", c->idx, uv_strerror(r));
}

static void conn_closed(uv_handle_t *h)
{
    conn *c = h->data;
    free(c->in);
    free(c->toks.t);
    free(c->cmd.p);
    c->in = NULL, c->toks.t = NULL, c->cmd.p = NULL;
    c->w->closed++;
}

static void conn_close(conn *c)
{
    if (c->closing)
        return;
    c->closing = true;
    uv_close((uv_handle_t *)&c->tcp, conn_closed);
}

static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *b)
{
    (void)hint;
    conn *c = h->data;
    /* room for at least half of what is pending: a long reply arrives in
     * reads that grow with it, and is parsed again only a few times */
    size_t want = c->in_len / 2 > 16384 ? c->in_len / 2 : 16384;
    if (c->in_cap - c->in_len < want) {
        c->in_cap = c->in_len + want;
        c->in = xrealloc(c->in, c->in_cap);
    }
    *b = uv_buf_init(c->in + c->in_len, (unsigned)(c->in_cap - c->in_len));
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *b)
{
    (void)b;
    conn *c = s->data;
    if (n == 0 || c->closing)
        return;
    if (n < 0)
        die("redis closed connection %d: %s", c->idx, uv_strerror((int)n));
    c->in_len += (size_t)n;
    size_t off = 0;
    while (!c->closing) {
        long used = resp_parse(c->in + off, c->in_len - off, &c->toks);
        if (used < 0)
            die("connection %d: the answer is not RESP2 near '%.40s'", c->idx, c->in + off);
        if (used == 0)
            break;
        if (c->toks.t[0].type == '-')
            die("redis answered an error: %.*s", (int)c->toks.t[0].len, c->toks.t[0].p);
        off += (size_t)used;
        if (c->pending <= 0)
            die("connection %d: an answer that nothing asked for", c->idx);
        c->pending--;
        c->on_reply(c, c->toks.t, c->toks.n);
    }
    if (c->in != NULL) {
        memmove(c->in, c->in + off, c->in_len - off);
        c->in_len -= off;
    }
}

static void dial(worker *w);

static void on_connect(uv_connect_t *req, int status)
{
    conn *c = req->handle->data;
    worker *w = c->w;
    if (status < 0)
        die("connecting to redis at %s:%d: %s (is redis-server running there?)", C.host, C.port,
            uv_strerror(status));
    uv_tcp_nodelay(&c->tcp, 1);
    int r = uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
    if (r < 0)
        die("reading: %s", uv_strerror(r));
    c->open = true;
    w->connected++;
    if (w->on_connected != NULL)
        w->on_connected(c);
    dial(w);
    if (w->connected == w->nconns && w->on_all_connected != NULL)
        w->on_all_connected(w);
}

/* Opens the worker's connections, at most 256 handshakes at a time so that
 * redis' accept backlog (511) never drops one into a SYN retry. */
static void dial(worker *w)
{
    while (w->dialed < w->nconns && w->dialed - w->connected < 256) {
        conn *c = &w->conns[w->dialed++];
        struct sockaddr_in sa;
        int r = uv_ip4_addr(C.host, C.port, &sa);
        if (r < 0)
            die("--host %s: %s (an IPv4 address)", C.host, uv_strerror(r));
        uv_tcp_init(&w->loop, &c->tcp);
        c->tcp.data = c;
        r = uv_tcp_connect(&c->connect, &c->tcp, (const struct sockaddr *)&sa, on_connect);
        if (r < 0)
            die("connecting to redis: %s", uv_strerror(r));
    }
}

static void worker_init(worker *w, int nconns, void (*on_reply)(conn *, const resp_tok *, int))
{
    memset(w, 0, sizeof(*w));
    if (uv_loop_init(&w->loop) != 0)
        die("uv_loop_init failed");
    uv_timer_init(&w->loop, &w->timer);
    w->timer.data = w;
    w->nconns = nconns;
    w->conns = xcalloc((size_t)nconns, sizeof(conn));
    for (int i = 0; i < nconns; i++) {
        w->conns[i].w = w;
        w->conns[i].idx = i;
        w->conns[i].on_reply = on_reply;
        w->conns[i].rng = 0x9e3779b97f4a7c15ull * (uint64_t)(i + 1);
    }
}

static void worker_free(worker *w)
{
    uv_loop_close(&w->loop);
    free(w->conns);
}

static void close_all(worker *w)
{
    for (int i = 0; i < w->dialed; i++)
        conn_close(&w->conns[i]);
    if (!uv_is_closing((uv_handle_t *)&w->timer))
        uv_close((uv_handle_t *)&w->timer, NULL);
}

/* A single request on connection c, answered once. */
static void request(conn *c, buf *cmd)
{
    c->pending++;
    c->sent = uv_hrtime();
    conn_send(c, cmd->p, cmd->len);
}

/* "field:value" of an INFO answer, as a number; -1 if missing. */
static long long info_field(const resp_tok *t, const char *field)
{
    if (t->type != '$' || t->n < 0)
        die("INFO did not answer a bulk string");
    size_t fl = strlen(field);
    for (const char *p = t->p, *end = t->p + t->len; p < end;) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        if (nl == NULL)
            nl = end;
        if ((size_t)(nl - p) > fl && memcmp(p, field, fl) == 0 && p[fl] == ':')
            return strtoll(p + fl + 1, NULL, 10);
        p = nl + 1;
    }
    return -1;
}

/* ---- closed loop: xadd and xrange ------------------------------------------------- */

typedef struct page_pick {
    const char *id; /* the cursor */
    int pos;        /* its place in the stream */
} page_pick;

static char (*fill_ids)[48]; /* xrange: every entry's id, in order */
static int nfill;
static page_pick *picks;
static buf xadd_payload;

static void xadd_cmd(conn *c)
{
    char key[256];
    snprintf(key, sizeof(key), "%s:%d", C.key, c->idx % C.streams);
    c->cmd.len = 0;
    cmd_begin(&c->cmd, 5);
    cmd_str(&c->cmd, "XADD");
    cmd_str(&c->cmd, key);
    cmd_str(&c->cmd, "*");
    cmd_str(&c->cmd, "data");
    cmd_arg(&c->cmd, xadd_payload.p, xadd_payload.len);
}

static void xrange_cmd(conn *c)
{
    c->pick = (int)(xorshift(&c->rng) % (uint64_t)C.picks);
    char from[64];
    snprintf(from, sizeof(from), "(%s", picks[c->pick].id);
    c->cmd.len = 0;
    cmd_begin(&c->cmd, 6);
    cmd_str(&c->cmd, "XRANGE");
    cmd_str(&c->cmd, C.key);
    cmd_str(&c->cmd, from);
    cmd_str(&c->cmd, "+");
    cmd_str(&c->cmd, "COUNT");
    char n[16];
    snprintf(n, sizeof(n), "%d", C.count);
    cmd_str(&c->cmd, n);
}

static bool closed_loop_xrange; /* which of the two the workers run */

static void cl_next(conn *c)
{
    if (closed_loop_xrange)
        xrange_cmd(c);
    request(c, &c->cmd);
}

static void cl_timer(uv_timer_t *t)
{
    worker *w = t->data;
    if (w->stopping) /* the grace period is over */
        die("%d of %d connections had no answer %.0f s after the run", w->nconns - w->closed,
            w->nconns, C.timeout);
    w->stopping = true;
    w->t_end = uv_hrtime();
    uv_timer_start(&w->timer, cl_timer, (uint64_t)(C.timeout * 1000), 0);
}

static void cl_maybe_done(worker *w)
{
    int open = 0;
    for (int i = 0; i < w->nconns; i++)
        open += !w->conns[i].closing;
    if (open == 0)
        close_all(w);
}

typedef struct page_seen {
    const char *first_id;
    size_t first_len;
    int entries;
} page_seen;

static void count_entry(void *arg, const resp_tok *id, const resp_tok *val)
{
    (void)val;
    page_seen *pg = arg;
    if (pg->entries++ == 0)
        pg->first_id = id->p, pg->first_len = id->len;
}

static void cl_reply(conn *c, const resp_tok *t, int n)
{
    worker *w = c->w;
    uint64_t now = uv_hrtime();
    if (closed_loop_xrange) {
        const page_pick *pk = &picks[c->pick];
        int want = nfill - pk->pos - 1 < C.count ? nfill - pk->pos - 1 : C.count;
        const char *next = want > 0 ? fill_ids[pk->pos + 1] : "";
        page_seen pg = {"", 0, 0};
        if (resp_entries(t, n, 0, count_entry, &pg) != n)
            die("XRANGE did not answer a list of entries");
        if (pg.entries != want ||
            (want > 0 && (pg.first_len != strlen(next) || memcmp(pg.first_id, next, pg.first_len))))
            die("XRANGE (%s answered %d entries from '%.*s'; %d from '%s' expected", pk->id,
                pg.entries, (int)pg.first_len, pg.first_id, want, next);
    } else if (n != 1 || t[0].type != '$' || t[0].n <= 0) {
        die("XADD did not answer an entry id");
    }
    load_hist_add(&w->lat, now - c->sent);
    if (!w->stopping) {
        w->ops++;
        cl_next(c);
        return;
    }
    conn_close(c);
    cl_maybe_done(w);
}

static void cl_start(worker *w)
{
    w->t0 = uv_hrtime();
    uv_timer_start(&w->timer, cl_timer, (uint64_t)(C.duration * 1000), 0);
    for (int i = 0; i < w->nconns; i++)
        cl_next(&w->conns[i]);
}

static void cl_thread(void *arg)
{
    worker *w = arg;
    dial(w);
    uv_run(&w->loop, UV_RUN_DEFAULT);
}

typedef struct cl_result {
    double ops_per_s;
    uint64_t ops;
    load_hist lat;
    double cpu_s; /* this process's, user and system, over the run */
} cl_result;

/* Runs C.connections over C.threads loops for C.duration; connection i of
 * thread k is connection k + i * threads overall (its stream, its seed). */
static void closed_loop(cl_result *res)
{
    double cpu0 = load_self_cpu_s();
    worker *ws = xcalloc((size_t)C.threads, sizeof(worker));
    for (int k = 0; k < C.threads; k++) {
        int n = C.connections / C.threads + (k < C.connections % C.threads);
        if (n == 0) {
            ws[k].nconns = 0;
            continue;
        }
        worker_init(&ws[k], n, cl_reply);
        ws[k].on_all_connected = cl_start;
        for (int i = 0; i < n; i++) {
            conn *c = &ws[k].conns[i];
            c->idx = k + i * C.threads;
            c->rng = 0x9e3779b97f4a7c15ull * (uint64_t)(c->idx + 1) ^ (uint64_t)uv_hrtime();
            if (!closed_loop_xrange)
                xadd_cmd(c);
        }
        if (uv_thread_create(&ws[k].thread, cl_thread, &ws[k]) != 0)
            die("cannot start a thread");
    }
    memset(res, 0, sizeof(*res));
    for (int k = 0; k < C.threads; k++) {
        if (ws[k].nconns == 0)
            continue;
        uv_thread_join(&ws[k].thread);
        res->ops += ws[k].ops;
        res->ops_per_s += (double)ws[k].ops / ((double)(ws[k].t_end - ws[k].t0) / 1e9);
        load_hist_merge(&res->lat, &ws[k].lat);
        worker_free(&ws[k]);
    }
    free(ws);
    res->cpu_s = load_self_cpu_s() - cpu0;
}

static void read_file(const char *path, buf *b)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        die("--payload %s: %s", path, strerror(errno));
    char tmp[65536];
    size_t n;
    while ((n = fread(tmp, 1, sizeof(tmp), f)) > 0)
        buf_put(b, tmp, n);
    fclose(f);
    if (b->len == 0)
        die("--payload %s is empty", path);
}

static void run_xadd(void)
{
    if (C.payload != NULL)
        read_file(C.payload, &xadd_payload);
    else
        numbered_event(&xadd_payload, C.event_size, 0);
    cl_result r;
    closed_loop(&r);
    printf("{\"mode\": \"xadd\", \"connections\": %d, \"threads\": %d, \"streams\": %d, "
           "\"payload_bytes\": %zu, \"duration_s\": %.3f, \"ops\": %" PRIu64
           ", \"ops_per_s\": %.0f, \"client_cpu_s\": %.3f, ",
           C.connections, C.threads, C.streams, xadd_payload.len, C.duration, r.ops, r.ops_per_s,
           r.cpu_s);
    print_hist("latency_ms", &r.lat);
    printf("}\n");
}

/* ---- xrange: the fill, then the pages --------------------------------------------- */

static long long filled;

static void fill_send(conn *c)
{
    buf ev = {0};
    c->cmd.len = 0;
    for (int i = 0; i < 500 && filled + c->pending < nfill; i++) {
        numbered_event(&ev, C.event_size, filled + c->pending);
        cmd_begin(&c->cmd, 5);
        cmd_str(&c->cmd, "XADD");
        cmd_str(&c->cmd, C.key);
        cmd_str(&c->cmd, "*");
        cmd_str(&c->cmd, "data");
        cmd_arg(&c->cmd, ev.p, ev.len);
        c->pending++;
    }
    free(ev.p);
    conn_send(c, c->cmd.p, c->cmd.len);
}

static void fill_reply(conn *c, const resp_tok *t, int n)
{
    if (c->w->phase == 0) { /* DEL */
        if (n != 1 || t[0].type != ':')
            die("DEL did not answer an integer");
        c->w->phase = 1;
        fill_send(c);
        return;
    }
    if (n != 1 || t[0].type != '$' || t[0].n <= 0 || t[0].len >= sizeof(fill_ids[0]))
        die("XADD did not answer an entry id");
    memcpy(fill_ids[filled], t[0].p, t[0].len);
    fill_ids[filled][t[0].len] = '\0';
    filled++;
    if (c->pending > 0)
        return;
    if (filled < nfill)
        fill_send(c);
    else
        close_all(c->w);
}

static void fill_connected(worker *w)
{
    conn *c = &w->conns[0];
    buf *b = &c->cmd;
    b->len = 0;
    cmd_begin(b, 2);
    cmd_str(b, "DEL");
    cmd_str(b, C.key);
    request(c, b);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void run_xrange(void)
{
    nfill = C.fill;
    if (C.picks > nfill)
        C.picks = nfill;
    fill_ids = xcalloc((size_t)nfill, sizeof(*fill_ids));
    worker fw;
    worker_init(&fw, 1, fill_reply);
    fw.on_all_connected = fill_connected;
    uint64_t t = uv_hrtime();
    dial(&fw);
    uv_run(&fw.loop, UV_RUN_DEFAULT);
    worker_free(&fw);
    double fill_s = (double)(uv_hrtime() - t) / 1e9;
    fprintf(stderr, "bench_redis xrange: filled %s with %d events in %.1f s\n", C.key, nfill,
            fill_s);

    /* the cursors: picks distinct ids at random, as parley's search bench does */
    picks = xcalloc((size_t)C.picks, sizeof(*picks));
    int *order = xcalloc((size_t)nfill, sizeof(int));
    for (int i = 0; i < nfill; i++)
        order[i] = i;
    uint64_t x = 1;
    for (int i = 0; i < C.picks; i++) {
        int j = i + (int)(xorshift(&x) % (uint64_t)(nfill - i));
        int tmp = order[i];
        order[i] = order[j], order[j] = tmp;
        picks[i].pos = order[i];
        picks[i].id = fill_ids[order[i]];
    }
    free(order);

    closed_loop_xrange = true;
    cl_result *rs = xcalloc((size_t)C.runs, sizeof(cl_result));
    double *rates = xcalloc((size_t)C.runs, sizeof(double));
    for (int i = 0; i < C.runs; i++) {
        closed_loop(&rs[i]);
        rates[i] = rs[i].ops_per_s;
        fprintf(stderr, "bench_redis xrange: run %d/%d: %.0f pages/s\n", i + 1, C.runs,
                rs[i].ops_per_s);
    }
    printf("{\"mode\": \"xrange\", \"connections\": %d, \"threads\": %d, \"fill\": %d, "
           "\"event_size\": %d, \"count\": %d, \"picks\": %d, \"fill_s\": %.3f, "
           "\"duration_s\": %.3f, \"runs\": [",
           C.connections, C.threads, nfill, C.event_size, C.count, C.picks, fill_s, C.duration);
    for (int i = 0; i < C.runs; i++) {
        printf("%s{\"pages\": %" PRIu64 ", \"pages_per_s\": %.0f, ", i ? ", " : "", rs[i].ops,
               rs[i].ops_per_s);
        print_hist("latency_ms", &rs[i].lat);
        printf("}");
    }
    qsort(rates, (size_t)C.runs, sizeof(double), cmp_double);
    printf("], \"pages_per_s\": %.0f}\n", rates[C.runs / 2]);
    free(rates);
    free(rs);
    free(picks);
    free(fill_ids);
}

/* ---- fanout ----------------------------------------------------------------------- */

/* Connection 0 of the worker is the producer (and asks INFO while the
 * consumers settle); 1..N are the consumers. */
typedef struct fan {
    worker w;
    uv_timer_t poll;
    uint64_t t_run, t_last, t_last_ack, t_stop;
    uint64_t sent, acked, final, done_consumers, delivered;
    bool producing, producer_done;
    load_hist delivery, ack;
    buf ev;
    size_t text_at;
} fan;

static fan F;

static void consumer_read(conn *c)
{
    char count[16];
    snprintf(count, sizeof(count), "%d", C.count);
    c->cmd.len = 0;
    cmd_begin(&c->cmd, 8);
    cmd_str(&c->cmd, "XREAD");
    cmd_str(&c->cmd, "BLOCK");
    cmd_str(&c->cmd, "0");
    cmd_str(&c->cmd, "COUNT");
    cmd_str(&c->cmd, count);
    cmd_str(&c->cmd, "STREAMS");
    cmd_str(&c->cmd, C.key);
    cmd_str(&c->cmd, c->last_id);
    request(c, &c->cmd);
}

static void consumer_finish(conn *c)
{
    F.done_consumers++;
    conn_close(c);
    if (F.done_consumers == (uint64_t)C.subscribers)
        close_all(&F.w);
}

static void fan_entry(void *arg, const resp_tok *id, const resp_tok *val)
{
    conn *c = arg;
    uint64_t now = uv_hrtime();
    sid s;
    if (sid_parse(id->p, id->len, &s) != 0 || id->len >= sizeof(c->last_id))
        die("consumer %d: '%.*s' is not an entry id", c->idx, (int)id->len, id->p);
    if (c->got > 0 && !sid_after(s, c->last))
        die("consumer %d: entry %.*s after %s, out of order", c->idx, (int)id->len, id->p,
            c->last_id);
    const char *mark = memmem(val->p, val->len, LOAD_MARK, strlen(LOAD_MARK));
    uint64_t seq, ns;
    if (mark == NULL || mark - val->p < SEQ_LEN || (size_t)(mark - val->p) + MARK_LEN > val->len ||
        get_digits(mark - SEQ_LEN, SEQ_LEN, &seq) != 0 || get_digits(mark + 3, 19, &ns) != 0)
        die("consumer %d: entry %.*s has no sequence number and time", c->idx, (int)id->len, id->p);
    if (seq != c->got)
        die("consumer %d: got event %" PRIu64 " where %" PRIu64 " was due (%s)", c->idx, seq,
            c->got, seq < c->got ? "a repeat" : "a gap");
    c->got++;
    c->last = s;
    memcpy(c->last_id, id->p, id->len);
    c->last_id[id->len] = '\0';
    load_hist_add(&F.delivery, now - ns);
    F.delivered++;
    F.t_last = now;
}

static void consumer_reply(conn *c, const resp_tok *t, int n)
{
    /* [[key, [entries]]] */
    if (n < 3 || t[0].type != '*' || t[0].n != 1 || t[1].type != '*' || t[1].n != 2 ||
        t[2].type != '$' || t[2].len != strlen(C.key) || memcmp(t[2].p, C.key, t[2].len) != 0 ||
        resp_entries(t, n, 3, fan_entry, c) != n)
        die("consumer %d: XREAD did not answer [[%s, [entries]]]", c->idx, C.key);
    if (F.producer_done && c->got == F.final)
        consumer_finish(c);
    else
        consumer_read(c);
}

static void fan_all_connected(worker *w);

static void produce(conn *p)
{
    uint64_t now = uv_hrtime();
    if (now >= F.t_stop || (C.events > 0 && F.sent >= (uint64_t)C.events)) {
        F.producer_done = true;
        F.final = F.sent;
        /* the consumers that have everything wait in XREAD for more */
        for (int i = 1; i < F.w.nconns; i++)
            if (!F.w.conns[i].closing && F.w.conns[i].got == F.final)
                consumer_finish(&F.w.conns[i]);
        return;
    }
    p->cmd.len = 0;
    for (int i = 0; i < C.batch && (C.events == 0 || F.sent < (uint64_t)C.events); i++) {
        put_seq(F.ev.p + F.text_at + C.event_size - MARK_LEN - SEQ_LEN, F.sent++);
        load_mark_put(F.ev.p + F.text_at + C.event_size - MARK_LEN, now);
        cmd_begin(&p->cmd, 5);
        cmd_str(&p->cmd, "XADD");
        cmd_str(&p->cmd, C.key);
        cmd_str(&p->cmd, "*");
        cmd_str(&p->cmd, "data");
        cmd_arg(&p->cmd, F.ev.p, F.ev.len);
        p->pending++;
    }
    p->sent = now;
    conn_send(p, p->cmd.p, p->cmd.len);
}

static void producer_reply(conn *p, const resp_tok *t, int n)
{
    if (!F.producing) { /* DEL, then INFO clients until every consumer blocks */
        if (n != 1 || (t[0].type != ':' && t[0].type != '$'))
            die("DEL or INFO did not answer as expected");
        if (t[0].type == ':') { /* the stream is gone: now the consumers */
            F.w.nconns = C.subscribers + 1;
            F.w.on_all_connected = fan_all_connected;
            dial(&F.w);
            return;
        }
        long long blocked = info_field(&t[0], "blocked_clients");
        if (blocked >= C.subscribers) {
            uv_timer_stop(&F.poll);
            uv_close((uv_handle_t *)&F.poll, NULL);
            F.producing = true;
            F.t_run = uv_hrtime();
            F.t_stop = F.t_run + (uint64_t)(C.duration * 1e9);
            produce(p);
        }
        return;
    }
    if (n != 1 || t[0].type != '$' || t[0].n <= 0)
        die("XADD did not answer an entry id");
    F.acked++;
    F.t_last_ack = uv_hrtime();
    if (p->pending == 0) {
        load_hist_add(&F.ack, uv_hrtime() - p->sent);
        produce(p);
    }
}

static void fan_reply(conn *c, const resp_tok *t, int n)
{
    if (c->idx == 0)
        producer_reply(c, t, n);
    else
        consumer_reply(c, t, n);
}

static void fan_poll(uv_timer_t *t)
{
    (void)t;
    conn *p = &F.w.conns[0];
    if (p->pending > 0)
        return;
    p->cmd.len = 0;
    cmd_begin(&p->cmd, 2);
    cmd_str(&p->cmd, "INFO");
    cmd_str(&p->cmd, "clients");
    request(p, &p->cmd);
}

static void fan_connected(conn *c)
{
    if (c->idx == 0) {
        c->cmd.len = 0;
        cmd_begin(&c->cmd, 2);
        cmd_str(&c->cmd, "DEL");
        cmd_str(&c->cmd, C.key);
        request(c, &c->cmd);
        return;
    }
    snprintf(c->last_id, sizeof(c->last_id), "0-0");
    consumer_read(c);
}

static void fan_all_connected(worker *w)
{
    (void)w;
    uv_timer_start(&F.poll, fan_poll, 0, 10);
}

static void fan_deadline(uv_timer_t *t)
{
    (void)t;
    uint64_t behind = 0;
    for (int i = 1; i < F.w.nconns; i++)
        behind += !F.w.conns[i].closing;
    if (!F.producing)
        die("only %d of %d consumers connected and blocked in XREAD after %.0f s",
            F.w.connected - 1, C.subscribers, C.timeout);
    die("%" PRIu64 " of %d consumers still lack entries %.0f s after the run (sent %" PRIu64
        ", acked %" PRIu64 ")",
        behind, C.subscribers, C.timeout, F.sent, F.acked);
}

static void run_fanout(void)
{
    if (C.event_size < MARK_LEN + SEQ_LEN)
        die("--event-size must be at least %d (a sequence number and a time)", MARK_LEN + SEQ_LEN);
    F.text_at = event_json(&F.ev, C.event_size);
    worker_init(&F.w, C.subscribers + 1, fan_reply);
    F.w.on_connected = fan_connected;
    uv_timer_init(&F.w.loop, &F.poll);
    uv_timer_start(&F.w.timer, fan_deadline, (uint64_t)((C.duration + C.timeout) * 1000), 0);
    F.w.nconns = 1; /* the producer alone, until its DEL is answered */
    dial(&F.w);
    uv_run(&F.w.loop, UV_RUN_DEFAULT);
    /* as parley load counts: to the last ack, to the last delivery */
    double run_s = (double)(F.t_last - F.t_run) / 1e9;
    double ack_s = (double)(F.t_last_ack - F.t_run) / 1e9;
    printf("{\"mode\": \"fanout\", \"verdict\": \"pass\", \"subscribers\": %d, \"batch\": %d, "
           "\"count\": %d, \"event_size\": %d, \"event_bytes\": %zu, \"duration_s\": %.3f, "
           "\"events\": %" PRIu64 ", \"events_per_s\": %.0f, \"entries\": %" PRIu64
           ", \"entries_per_s\": %.0f, ",
           C.subscribers, C.batch, C.count, C.event_size, F.ev.len, C.duration, F.final,
           ack_s > 0 ? (double)F.final / ack_s : 0, F.delivered,
           run_s > 0 ? (double)F.delivered / run_s : 0);
    print_hist("delivery_ms", &F.delivery);
    printf(", ");
    print_hist("ack_ms", &F.ack);
    printf("}\n");
    worker_free(&F.w);
    free(F.ev.p);
}

/* ---- idle ------------------------------------------------------------------------- */

/* Connection 0 asks INFO; 1..N are the idle ones (connections) or unused
 * (streams: connection 0 writes them). */
typedef struct idle {
    worker w;
    uv_timer_t poll;
    long rss_before, rss_after;
    long long mem_before, mem_after;
    int phase; /* 0 INFO memory before, 1 waiting for blocks or fills, 2 held, 3 INFO after */
    long long written;
    buf ev;
} idle_state;

static idle_state I;

static void idle_info(conn *p, const char *section)
{
    p->cmd.len = 0;
    cmd_begin(&p->cmd, 2);
    cmd_str(&p->cmd, "INFO");
    cmd_str(&p->cmd, section);
    request(p, &p->cmd);
}

/* streams: each stream i gets C.events events, pipelined 500 at a time */
static void idle_fill(conn *p)
{
    long long total = (long long)C.idle_streams * C.events;
    p->cmd.len = 0;
    for (int i = 0; i < 500 && I.written < total; i++, I.written++) {
        char key[256];
        snprintf(key, sizeof(key), "%s:%lld", C.key, I.written / C.events);
        numbered_event(&I.ev, C.event_size, I.written % C.events);
        cmd_begin(&p->cmd, 5);
        cmd_str(&p->cmd, "XADD");
        cmd_str(&p->cmd, key);
        cmd_str(&p->cmd, "*");
        cmd_str(&p->cmd, "data");
        cmd_arg(&p->cmd, I.ev.p, I.ev.len);
        p->pending++;
    }
    conn_send(p, p->cmd.p, p->cmd.len);
}

static void idle_held(uv_timer_t *t)
{
    (void)t;
    I.rss_after = C.server_pid ? rss_kib(C.server_pid) : -1;
    I.phase = 3;
    idle_info(&I.w.conns[0], "memory");
}

static void idle_poll(uv_timer_t *t)
{
    (void)t;
    if (I.w.conns[0].pending == 0)
        idle_info(&I.w.conns[0], "clients");
}

/* INFO's and XADD's answers are bulk strings */
static void idle_control(conn *p, const resp_tok *t, int n)
{
    if (n != 1 || t[0].type != '$' || t[0].n <= 0)
        die("INFO or XADD did not answer a bulk string");
    switch (I.phase) {
    case 0:
        I.mem_before = info_field(&t[0], "used_memory");
        I.phase = 1;
        if (C.idle_streams > 0) {
            idle_fill(p);
        } else {
            I.w.nconns = C.connections + 1;
            dial(&I.w);
            uv_timer_start(&I.poll, idle_poll, 10, 10);
        }
        return;
    case 1:
        if (C.idle_streams > 0) { /* an XADD's id */
            if (p->pending > 0)
                return;
            if (I.written < (long long)C.idle_streams * C.events) {
                idle_fill(p);
                return;
            }
        } else if (info_field(&t[0], "blocked_clients") < C.connections) {
            return;
        } else {
            uv_timer_stop(&I.poll);
        }
        I.phase = 2;
        uv_timer_start(&I.w.timer, idle_held, (uint64_t)(C.hold * 1000), 0);
        return;
    case 3:
        I.mem_after = info_field(&t[0], "used_memory");
        uv_close((uv_handle_t *)&I.poll, NULL);
        close_all(&I.w);
        return;
    }
}

static void idle_reply(conn *c, const resp_tok *t, int n)
{
    if (c->idx == 0) {
        idle_control(c, t, n);
        return;
    }
    die("connection %d: XREAD BLOCK 0 answered while nothing was written", c->idx);
}

static void idle_connected(conn *c)
{
    if (c->idx == 0) {
        I.rss_before = C.server_pid ? rss_kib(C.server_pid) : -1;
        if (C.server_pid && I.rss_before < 0)
            die("--server-pid %d: no /proc/%d/status to read", C.server_pid, C.server_pid);
        idle_info(c, "memory");
        return;
    }
    c->cmd.len = 0;
    cmd_begin(&c->cmd, 6);
    cmd_str(&c->cmd, "XREAD");
    cmd_str(&c->cmd, "BLOCK");
    cmd_str(&c->cmd, "0");
    cmd_str(&c->cmd, "STREAMS");
    cmd_str(&c->cmd, C.key);
    cmd_str(&c->cmd, "$");
    request(c, &c->cmd);
}

static void idle_deadline(uv_timer_t *t)
{
    (void)t;
    die("not settled after %.0f s (%d of %d connections open)", C.timeout, I.w.connected,
        I.w.nconns);
}

static void run_idle(void)
{
    if (C.idle_streams > 0 && C.events == 0)
        C.events = 10;
    worker_init(&I.w, C.idle_streams > 0 ? 1 : C.connections + 1, idle_reply);
    I.w.on_connected = idle_connected;
    uv_timer_init(&I.w.loop, &I.poll);
    uv_timer_t deadline;
    uv_timer_init(&I.w.loop, &deadline);
    uv_timer_start(&deadline, idle_deadline, (uint64_t)((C.hold + C.timeout) * 1000), 0);
    uv_unref((uv_handle_t *)&deadline);
    /* the control connection alone first: the memory before, then the rest */
    I.w.nconns = 1;
    dial(&I.w);
    uv_run(&I.w.loop, UV_RUN_DEFAULT);
    uv_close((uv_handle_t *)&deadline, NULL);
    uv_run(&I.w.loop, UV_RUN_DEFAULT);
    long long per = C.idle_streams > 0 ? C.idle_streams : C.connections;
    printf("{\"mode\": \"idle\", \"%s\": %lld, ", C.idle_streams > 0 ? "streams" : "connections",
           per);
    if (C.idle_streams > 0)
        printf("\"events\": %lld, \"event_bytes\": %zu, ", C.events, I.ev.len);
    printf("\"hold_s\": %.3f, \"used_memory_before\": %lld, \"used_memory\": %lld, "
           "\"used_memory_per_%s\": %.0f",
           C.hold, I.mem_before, I.mem_after, C.idle_streams > 0 ? "stream" : "connection",
           (double)(I.mem_after - I.mem_before) / (double)per);
    if (C.server_pid)
        printf(", \"server\": {\"pid\": %d, \"rss_before_kib\": %ld, \"rss_kib\": %ld}, "
               "\"bytes_per_%s\": %.0f",
               C.server_pid, I.rss_before, I.rss_after,
               C.idle_streams > 0 ? "stream" : "connection",
               (double)(I.rss_after - I.rss_before) * 1024 / (double)per);
    printf("}\n");
    worker_free(&I.w);
    free(I.ev.p);
}

/* ---- main ------------------------------------------------------------------------- */

#define COMMON_HELP                                                                                \
    "  --port P            redis-server's port on --host (required)\n"                             \
    "  --host ADDR         an IPv4 address (default 127.0.0.1)\n"                                  \
    "  --timeout S         how long a server may keep the run waiting past its end "               \
    "(default 60)\n"                                                                               \
    "  -h, --help          show this help\n"

static const mode MODES[] = {
    {"xadd", ",connections,threads,streams,duration,payload,event-size,key,",
     "usage: bench_redis xadd --port P [--connections C] [--threads T] [--streams S]\n"
     "                        [--duration S] [--payload FILE] [--key PREFIX]\n\n"
     "Durable appends, as wrk drives parley's: C connections (default 64) over T loops\n"
     "(default 2), each with one request outstanding (closed loop) for --duration seconds\n"
     "(default 5): XADD PREFIX:<i % S> * data <payload>, connection i on stream i % S\n"
     "(default 64 streams). The payload is FILE's bytes (the event parley is sent), or\n"
     "an agent message with --event-size bytes of text. Prints ops_per_s and\n"
     "latency_ms {p50, p90, p99, max}.\n\n" COMMON_HELP,
     run_xadd},
    {"fanout", ",subscribers,events,duration,batch,count,event-size,key,",
     "usage: bench_redis fanout --port P [--subscribers N] [--duration S] [--events E]\n"
     "                          [--batch B] [--count K] [--event-size BYTES] [--key KEY]\n\n"
     "Fan-out: N consumers (default 1000) each loop XREAD BLOCK 0 COUNT K STREAMS KEY\n"
     "<last id> (K default 1000) from the start of a fresh stream; once all are blocked,\n"
     "one producer XADDs agent messages with BYTES of text (default 100; its sequence\n"
     "number and send time, CLOCK_MONOTONIC, inside), B pipelined per round trip\n"
     "(default 50), as fast as acknowledged, for --duration seconds (default 5) or E\n"
     "events. Every consumer must get every entry once and in order (exit 1\n"
     "otherwise). Prints events_per_s (from the first send to the last ack),\n"
     "entries_per_s (all consumers, from the first send to the last delivery), and\n"
     "delivery_ms and ack_ms (a batch) percentiles.\n\n" COMMON_HELP,
     run_fanout},
    {"xrange", ",connections,threads,duration,fill,event-size,count,runs,picks,key,",
     "usage: bench_redis xrange --port P [--connections C] [--threads T] [--duration S]\n"
     "                          [--fill N] [--event-size BYTES] [--count K] [--runs R]\n"
     "                          [--picks M] [--key KEY]\n\n"
     "Paging: replaces KEY with N events (default 100000; agent messages \"event i \"\n"
     "padded to BYTES of text, default 100; parley's search bench uses 300), XADDed 500\n"
     "a round trip, keeping their ids; then R runs (default 1) of C connections\n"
     "(default 64) over T loops (default 2), closed loop for --duration seconds each:\n"
     "XRANGE KEY (<id> + COUNT K (default 100) with id one of M (default 5000) picked\n"
     "at random from the fill. Every page is checked to start right after its cursor\n"
     "and to hold min(K, what follows) entries. Prints each run's pages_per_s and\n"
     "latency_ms, and the median pages_per_s.\n\n" COMMON_HELP,
     run_xrange},
    {"idle", ",connections,streams,events,event-size,hold,server-pid,key,",
     "usage: bench_redis idle --port P [--connections N | --streams N [--events K]\n"
     "                        [--event-size BYTES]] [--hold S] [--server-pid PID]\n"
     "                        [--key KEY]\n\n"
     "Memory. With --connections (default 1000): opens N connections, each blocked in\n"
     "XREAD BLOCK 0 STREAMS KEY $, waits until redis counts them all blocked, holds\n"
     "them --hold seconds (default 2). With --streams: XADDs K events (default 10;\n"
     "agent messages of BYTES of text, default 100) to each of N streams KEY:<i>, then\n"
     "holds. Prints redis' used_memory before and after, and with --server-pid the\n"
     "server's RSS (/proc/PID/status VmRSS) before and after and bytes_per_connection\n"
     "or bytes_per_stream.\n\n" COMMON_HELP,
     run_idle},
};

int main(int argc, char **argv)
{
    const mode *m = NULL;
    for (size_t i = 0; argc > 1 && i < sizeof(MODES) / sizeof(MODES[0]); i++)
        if (strcmp(argv[1], MODES[i].name) == 0)
            m = &MODES[i];
    if (m == NULL) {
        bool help = argc > 1 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0);
        fprintf(help ? stdout : stderr,
                "usage: bench_redis MODE --port P [options]   (bench_redis MODE --help)\n\n"
                "Redis Streams load for bench/side_by_side.py; one JSON object on stdout.\n"
                "  xadd     closed-loop XADD from C connections (durable append)\n"
                "  fanout   1 producer, N consumers in XREAD BLOCK (fan-out)\n"
                "  xrange   XRANGE pages at random exclusive cursors (paging)\n"
                "  idle     N blocked connections or N idle streams (memory)\n");
        return help ? 0 : 2;
    }
    mode_name = m->name;
    if (strcmp(m->name, "idle") == 0)
        C.connections = 1000;
    if (strcmp(m->name, "xrange") == 0)
        C.count = 100;
    parse_opts(m, argc, argv);
    if (strcmp(m->name, "idle") == 0) {
        /* --streams is xadd's streams, or the idle mode's idle streams */
        for (int i = 2; i < argc; i++)
            if (strcmp(argv[i], "--streams") == 0)
                C.idle_streams = C.streams;
        if (C.idle_streams == 0 && C.events > 0) {
            fprintf(stderr, "bench_redis idle: --events goes with --streams\n");
            return 2;
        }
    }
    m->run();
    return 0;
}
