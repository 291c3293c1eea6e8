/*
 * load.h - the insides of `parley load` (cmd_load.c): a run, its shards,
 * and what the subscriber, producer and report files offer each other.
 *
 * A run goes through phases (load_phase). In each, every shard - a thread
 * with its own libuv loop, holding its share of the subscribers and
 * producers - runs its loop until its part of the phase is done or the
 * phase's deadline passes, and the main thread waits for all of them
 * before it starts the next phase. So what shards share (the run's
 * settings, the conversations and their ack ranges) is written only
 * between phases, by the main thread, and needs no lock; each shard counts
 * into its own results, summed at the end. One shard (--threads 1) is the
 * default: the client's hot path is reading frames, which one loop does at
 * over a million a second.
 *
 * No allocation per frame or per request: a shard reads every socket into
 * one buffer and parses frames where they lie (net_ws_client_scan); only a
 * frame cut by the end of a read is copied, into its socket's carry-over.
 */
#ifndef PARLEY_LOAD_H
#define PARLEY_LOAD_H

#include "load_stats.h"
#include "net/url.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>
#include <uv.h>

enum { LOAD_CPU_PIDS = 16 };

typedef struct load_cfg {
    net_url url;
    struct sockaddr_storage addr; /* the URL's host, resolved */
    int conversations, producers, subscribers, stalled, readers, batch, event_size, threads;
    double rate; /* events per second over all producers; 0: each as fast as acknowledged */
    uint64_t duration_ms;
    bool idle, json, progress, faults, mix; /* mix: --mix realistic */
    int server_pid;                         /* 0: none */
    int cpu_pids[LOAD_CPU_PIDS], ncpu_pids; /* --cpu-pid: more processes' CPU time */
    char conversation[37];                  /* an existing one to load, or "" */
    const char *api_key;
    const char *trace; /* --trace FILE, or NULL */
} load_cfg;

typedef enum load_phase {
    LOAD_SETUP,   /* shard 0 creates the conversations */
    LOAD_CONNECT, /* subscribers upgrade and get their first frame; producers connect */
    LOAD_RUN,     /* producers post until the duration is over */
    LOAD_ACKS,    /* the last answers come */
    LOAD_DRAIN,   /* subscribers read up to the last acked index of their conversation */
    LOAD_FATE,    /* the stalled subscribers read what they were sent */
    LOAD_CLOSE,   /* the verdict of each subscriber; every handle closed */
} load_phase;

typedef struct load_conv {
    char id[40];
    int64_t acked_min, acked_max; /* over every shard, set after LOAD_ACKS; -1: none */
    uint64_t first;               /* events it held before the run (--conversation) */
} load_conv;

/* What became of a subscriber that never read. */
typedef struct load_fate {
    const char *end; /* "open", "closed" (a close frame), "eof", "reset" */
    int close_code;  /* the server's close frame's; 0: none seen */
    char reason[64]; /* its reason */
    double at_s;     /* when the end was seen, from the run's start */
    uint64_t frames; /* log events it held */
    bool gapless;    /* and they were in order */
} load_fate;

/* load_trace.c: --trace FILE, one line per answer. */
enum { LOAD_TRACE_MAX = 8 << 20 }; /* answers kept per run, at most */
typedef struct load_trace_rec {
    uint64_t sent; /* uv_hrtime: CLOCK_MONOTONIC ns */
    uint32_t lat_us, conv;
    uint16_t status;
} load_trace_rec;
typedef struct load_trace {
    load_trace_rec *r;
    size_t n, cap, limit; /* limit 0: no trace */
    uint64_t dropped;
} load_trace;

typedef struct load_sub load_sub;
typedef struct load_prod load_prod;
typedef struct load_reader load_reader;
typedef struct load_run load_run;

typedef struct load_shard {
    int id;
    load_run *run;
    uv_loop_t loop;
    uv_thread_t thread;
    uv_timer_t deadline, tick;
    uint8_t *rbuf; /* LOAD_RBUF bytes: every socket of the loop reads into it */
    load_sub *subs;
    int nsubs, next_sub, upgrading, opened;
    load_fate *fates; /* one per stalled subscriber */
    int nfates;
    load_prod *prods, *setup;
    int nprods;
    load_reader *readers;
    int nreaders;
    int waiting; /* what the phase still waits for; 0: uv_stop */
    uint64_t last_check;
    /* results: this shard's */
    load_hist ack, delivery, read;
    uint64_t frames, others, events, requests, cuts, reads;
    uint64_t t_last_frame, t_last_ack;
    load_errs errs;
    load_trace trace; /* --trace: this shard's answers */
    load_bits *acked; /* per conversation: the indexes acked to this shard's producers */
    int64_t *ack_min, *ack_max;
    _Atomic uint64_t shown_frames, shown_events, shown_errors; /* for the progress line */
} load_shard;

struct load_run {
    load_cfg cfg;
    load_conv *convs;
    load_shard *shards;
    load_phase phase;
    uint64_t t_run;   /* when LOAD_RUN started (uv_hrtime) */
    double connect_s; /* how long LOAD_CONNECT took */
    _Atomic int finished;
    /* load_log.c: the log read back */
    uint64_t log_events, log_acked;
    char log_why[300]; /* "" when it holds what was acked */
};

enum {
    LOAD_RBUF = 256 << 10,
    LOAD_MESSAGE_MAX = 1 << 20, /* a frame's payload, as the server's limit */
    LOAD_WINDOW = 256,          /* upgrades in progress per shard */
};

/* load_shard.c: one shard's phases; helpers for its sockets. */
int load_shard_init(load_shard *sh, load_run *run, int id);
void load_shard_free(load_shard *sh);
void load_shard_phase(load_shard *sh); /* run->phase, on the calling thread */
void load_done(load_shard *sh);        /* one thing the phase waited for is done */
/* Count an error of a kind; the first of each kind is also said on stderr. */
void load_err(load_shard *sh, const char *kind, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
int load_connect(load_shard *sh, uv_tcp_t *t, int rcvbuf, uv_connect_cb cb);
int load_write(uv_stream_t *s, const void *p, size_t n); /* copied if it cannot go at once */
void load_close(uv_handle_t *h);

/* load_sub.c: the subscribers. */
int load_subs_init(load_shard *sh);
void load_subs_phase(load_shard *sh);
void load_subs_tick(load_shard *sh, uint64_t now);
void load_subs_free(load_shard *sh);

/* load_prod.c: the producers, and the connection that creates conversations. */
int load_prods_init(load_shard *sh);
void load_prods_phase(load_shard *sh);
void load_prods_tick(load_shard *sh, uint64_t now);
void load_prods_free(load_shard *sh);

/* load_read.c: the REST readers. */
int load_readers_init(load_shard *sh);
void load_readers_phase(load_shard *sh);
void load_readers_free(load_shard *sh);

void load_trace_add(load_trace *t, uint64_t sent, uint64_t lat, int status, int conv);
void load_trace_free(load_trace *t);
/* Every shard's answers, in send order, into path: 0, or -1 said on stderr. */
int load_trace_write(const load_run *run, const char *path);

/* load_log.c: the events an existing conversation (--conversation) holds
 * before the run, into convs[0].first; -1 with why printed when it cannot
 * be read (no such conversation). */
int load_count_before(load_run *run);
/* load_log.c: read every conversation's log back by REST and check it
 * against the acks (unanswered: some requests got no answer, so the log
 * may hold more of the load's events than were acked). 0, or -1 with
 * run->log_why said. */
int load_check_log(load_run *run, bool unanswered);

/* load_report.c: the results of all shards, said as text or one JSON
 * object on stdout; returns the exit status (1: the verdict is fail). */
typedef struct load_server {
    double cpu_s;                     /* during the run, drain included; <0: unknown */
    long rss_before_kib;              /* before the subscribers connected; -1: unknown */
    long rss_kib, hwm_kib;            /* at the end of the run, and the peak */
    double cpu_each_s[LOAD_CPU_PIDS]; /* of cfg.cpu_pids, over the same time; <0: unknown */
    double self_cpu_s;                /* this load process's, over the same time */
} load_server;
int load_report(const load_run *run, const load_server *srv);

#endif
