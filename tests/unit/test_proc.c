/*
 * test_proc.c - child processes owned by actors (runtime/proc.h): lines in
 * order and then the exit, stdin, a line over the bound, flow control, a
 * process that ignores EOF and SIGTERM (killed, and the runtime's shutdown
 * waits for it), and a command that is not there. Real processes (sh, cat,
 * seq); nothing here asserts on durations.
 */
#include "runtime/proc.h"
#include "support_rt.h"

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum {
    K_GO = RT_KIND_USER,
    K_LINE,
    K_EXIT,
    K_WRITE,
    K_CLOSE,
};

enum { LINES_MAX = 2048 };

typedef struct record {
    pthread_mutex_t mu;
    char *line[LINES_MAX]; /* NULL entries: a line over the bound */
    size_t n;
    bool exited;
    rt_proc_exit how;
    int spawn_rc;
    int pid;
    ts_counter events; /* lines and exits */
    /* the scenario */
    const char *const *argv;
    size_t max_line;
    uint32_t max_pending;
    bool ack_late; /* ack only every max_pending lines, all at once */
} record;

typedef struct owner {
    record *rec;
    rt_proc *p;
    uint32_t unacked;
} owner;

static int owner_init(rt_actor *self, void *arg, void **state)
{
    owner *o = calloc(1, sizeof(*o));
    o->rec = arg;
    rt_proc_opts po = {.argv = o->rec->argv,
                       .line_kind = K_LINE,
                       .exit_kind = K_EXIT,
                       .max_line = o->rec->max_line,
                       .max_pending = o->rec->max_pending,
                       .stop_grace_ms = 50,
                       .log_name = "test"};
    o->rec->spawn_rc = rt_proc_spawn(self, &po, &o->p);
    if (o->rec->spawn_rc == 0)
        o->rec->pid = rt_proc_pid(o->p);
    *state = o;
    return 0;
}

static int owner_handle(rt_actor *self, void *state, rt_msg *m)
{
    (void)self;
    owner *o = state;
    record *r = o->rec;
    if (m->kind == K_LINE) {
        TS_CHECK(m->arg == rt_proc_id(o->p));
        pthread_mutex_lock(&r->mu);
        if (r->n < LINES_MAX)
            r->line[r->n++] = m->buf != NULL
                                  ? strndup((const char *)rt_buf_data(m->buf), rt_buf_len(m->buf))
                                  : NULL;
        pthread_mutex_unlock(&r->mu);
        if (!r->ack_late || ++o->unacked == r->max_pending) {
            rt_proc_ack(o->p, r->ack_late ? o->unacked : 1);
            o->unacked = 0;
        }
        ts_counter_add(&r->events, 1);
    } else if (m->kind == K_EXIT) {
        pthread_mutex_lock(&r->mu);
        r->exited = true;
        memcpy(&r->how, rt_buf_data(m->buf), sizeof(r->how));
        pthread_mutex_unlock(&r->mu);
        ts_counter_add(&r->events, 1);
    } else if (m->kind == K_WRITE) {
        TS_CHECK(rt_proc_write(o->p, rt_buf_ref(m->buf)) == 0);
    } else if (m->kind == K_CLOSE) {
        rt_proc_close(o->p);
        o->p = NULL;
        ts_counter_add(&r->events, 1);
    }
    return 0;
}

static void owner_stop(rt_actor *self, void *state)
{
    (void)self;
    owner *o = state;
    rt_proc_close(o->p);
    free(o);
}

static const rt_behaviour owner_beh = {"proc-owner", owner_init, owner_handle, owner_stop, 0};

static void rec_init(record *r, const char *const *argv)
{
    memset(r, 0, sizeof(*r));
    pthread_mutex_init(&r->mu, NULL);
    ts_counter_init(&r->events);
    r->argv = argv;
}

static void rec_free(record *r)
{
    for (size_t i = 0; i < r->n; i++)
        free(r->line[i]);
    ts_counter_destroy(&r->events);
    pthread_mutex_destroy(&r->mu);
}

START_TEST(test_lines_then_exit)
{
    static const char *const argv[] = {"sh", "-c", "printf 'a\\nb\\r\\n\\nc'; exit 3", NULL};
    record r;
    rec_init(&r, argv);
    rt_runtime *rt = rtt_start(1, NULL);
    rt_actor *a = rtt_spawn(rt, &owner_beh, &r, 0, RT_TEMPORARY, 0);
    ck_assert(ts_counter_wait(&r.events, 3));
    ck_assert_int_eq(r.spawn_rc, 0);
    pthread_mutex_lock(&r.mu);
    ck_assert_uint_eq(r.n, 2); /* blank skipped, CR dropped, no line without its newline */
    ck_assert_str_eq(r.line[0], "a");
    ck_assert_str_eq(r.line[1], "b");
    ck_assert(r.exited);
    ck_assert_int_eq(r.how.status, 3);
    ck_assert_int_eq(r.how.signal, 0);
    pthread_mutex_unlock(&r.mu);
    rt_actor_unref(a);
    rtt_free(rt);
    rec_free(&r);
}
END_TEST

START_TEST(test_stdin_and_close)
{
    static const char *const argv[] = {"cat", NULL};
    record r;
    rec_init(&r, argv);
    rt_runtime *rt = rtt_start(1, NULL);
    rt_actor *a = rtt_spawn(rt, &owner_beh, &r, 0, RT_TEMPORARY, 0);
    ck_assert_int_eq(rt_send(a, K_WRITE, 0, rt_buf_copy("hello\nwor", 9)), 0);
    ck_assert_int_eq(rt_send(a, K_WRITE, 0, rt_buf_copy("ld\n", 3)), 0);
    ck_assert(ts_counter_wait(&r.events, 2));
    ck_assert_str_eq(r.line[0], "hello");
    ck_assert_str_eq(r.line[1], "world");
    ck_assert_int_eq(rt_send(a, K_CLOSE, 0, NULL), 0);
    ck_assert(ts_counter_wait(&r.events, 3));
    rt_actor_unref(a);
    rtt_free(rt); /* cat sees EOF and exits; the loop waited for it */
    ck_assert(kill(r.pid, 0) != 0 && errno == ESRCH);
    ck_assert(!r.exited); /* nothing is delivered after close */
    rec_free(&r);
}
END_TEST

START_TEST(test_line_over_bound)
{
    static const char *const argv[] = {"sh", "-c", "echo 0123456789abcdef; echo ok", NULL};
    record r;
    rec_init(&r, argv);
    r.max_line = 10;
    rt_runtime *rt = rtt_start(1, NULL);
    rt_actor *a = rtt_spawn(rt, &owner_beh, &r, 0, RT_TEMPORARY, 0);
    ck_assert(ts_counter_wait(&r.events, 3));
    ck_assert_uint_eq(r.n, 2);
    ck_assert_ptr_null(r.line[0]);
    ck_assert_str_eq(r.line[1], "ok");
    ck_assert(r.exited && r.how.status == 0);
    rt_actor_unref(a);
    rtt_free(rt);
    rec_free(&r);
}
END_TEST

/* The owner acknowledges lines two at a time, when the bound of two is
 * reached: reading pauses and resumes, and every line comes, in order. */
START_TEST(test_flow_control)
{
    static const char *const argv[] = {"seq", "1", "2000", NULL};
    record r;
    rec_init(&r, argv);
    r.max_pending = 2;
    r.ack_late = true;
    rt_runtime *rt = rtt_start(1, NULL);
    rt_actor *a = rtt_spawn(rt, &owner_beh, &r, 0, RT_TEMPORARY, 0);
    ck_assert(ts_counter_wait(&r.events, 2001)); /* 2000 lines and the exit */
    ck_assert_uint_eq(r.n, 2000);
    for (size_t i = 0; i < r.n; i++) {
        char want[24];
        snprintf(want, sizeof(want), "%zu", i + 1);
        ck_assert_str_eq(r.line[i], want);
    }
    ck_assert(r.exited);
    rt_actor_unref(a);
    rtt_free(rt);
    rec_free(&r);
}
END_TEST

/* Whether a process of group pgid is alive (a zombie is not): the
 * group's last members may still be finishing their exit after closing
 * their pipes, so this polls, up to a deadline, for them to be gone. */
static bool group_alive(int pgid)
{
    for (int tries = 0; tries < 5000; tries++) {
        bool alive = false;
        DIR *d = opendir("/proc");
        struct dirent *e;
        while (d != NULL && !alive && (e = readdir(d)) != NULL) {
            char path[300], buf[512];
            snprintf(path, sizeof(path), "/proc/%s/stat", e->d_name);
            FILE *f = fopen(path, "r");
            if (f == NULL)
                continue;
            size_t n = fread(buf, 1, sizeof(buf) - 1, f);
            fclose(f);
            buf[n] = '\0';
            const char *rp = strrchr(buf, ')'); /* after the command name */
            char state;
            int ppid, pgrp;
            if (rp != NULL && sscanf(rp + 1, " %c %d %d", &state, &ppid, &pgrp) == 3)
                alive = pgrp == pgid && state != 'Z' && state != 'X';
        }
        if (d != NULL)
            closedir(d);
        if (!alive)
            return false;
        nanosleep(&(struct timespec){0, 1000000}, NULL);
    }
    return true;
}

/* It ignores EOF and SIGTERM, and has a child: KILL takes the group, and
 * the runtime's shutdown waits for that. */
START_TEST(test_stubborn_process_killed)
{
    static const char *const argv[] = {"sh", "-c",
                                       "trap '' TERM; echo ready; while :; do sleep 1; done", NULL};
    record r;
    rec_init(&r, argv);
    rt_runtime *rt = rtt_start(1, NULL);
    rt_actor *a = rtt_spawn(rt, &owner_beh, &r, 0, RT_TEMPORARY, 0);
    ck_assert(ts_counter_wait(&r.events, 1));
    ck_assert_str_eq(r.line[0], "ready");
    rt_actor_unref(a);
    rtt_free(rt);                   /* the owner stops: close, TERM (ignored), KILL */
    ck_assert(!group_alive(r.pid)); /* the whole group is gone */
    rec_free(&r);
}
END_TEST

START_TEST(test_missing_command)
{
    static const char *const argv[] = {"/nonexistent/parley-agent", NULL};
    record r;
    rec_init(&r, argv);
    rt_runtime *rt = rtt_start(1, NULL);
    rt_actor *a = rtt_spawn(rt, &owner_beh, &r, 0, RT_TEMPORARY, 0);
    rt_actor_unref(a);
    rtt_free(rt);
    ck_assert_int_lt(r.spawn_rc, 0);
    ck_assert_uint_eq(r.n, 0);
    ck_assert(!r.exited);
    rec_free(&r);
}
END_TEST

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    Suite *s = suite_create("proc");
    TCase *tc = tcase_create("proc");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_lines_then_exit);
    tcase_add_test(tc, test_stdin_and_close);
    tcase_add_test(tc, test_line_over_bound);
    tcase_add_test(tc, test_flow_control);
    tcase_add_test(tc, test_stubborn_process_killed);
    tcase_add_test(tc, test_missing_command);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? 0 : 1;
}
