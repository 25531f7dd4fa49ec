/* runner.c - worker threads.
 *
 * Design: the main thread starts one pthread per splitter group and runs the
 * body it was handed on each (entry.c's: it builds the thread's own VM, which
 * loads the runtime, config and workers and runs the scheduler loop in Lua);
 * this file never sees a VM. Everything shared between threads lives in
 * `struct runner` behind its own mutex: the wake-up mailbox (written by the
 * main thread when a push makes a shard due, read by the worker in
 * runner_wait, which polls the runner's eventfd: the same fd can be polled
 * next to sockets, e.g. by the HTTP client) and the thread's state (written
 * by the worker, read by the main thread for TTIN). Only bytes cross: strings
 * are copied in and out under the lock. The per-thread counters (jobs
 * performed, Lua memory) are relaxed atomics each worker writes and the main
 * thread reads for GET /metrics. The stop flag and the fatal message are
 * process-wide atomics/once-set values. Each thread's calls in flight are in
 * its call slot (calls.c, behind a lock of its own, which runner_dump takes
 * with this one held; calls.c never takes this one): a thread whose call the
 * watch found stuck is neither waited for nor joined here.
 *
 * Reload (SIGHUP): the main thread, once it has checked the new code, bumps
 * the process-wide generation (runner_request_reload) and wakes every thread.
 * Each worker thread sees it at its next safe point (runner_reload_wanted:
 * the generation is above the one it took last), finishes its calls in
 * flight, acks them, and swaps its VM (entry.c); it takes the generation
 * before building the new VM (runner_reload_take) and reports the outcome
 * after (runner_reload_done). Three relaxed atomics per thread, no lock: the
 * main thread only reads them (runner_reloaded) to tell systemd READY=1 once
 * every thread is done. */
#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include "calls.h"
#include "log.h"
#include "runner.h"

#define RUNNER_MAILBOX 64

struct runner {
    int index;
    pthread_t tid;
    char *boot;
    int (*body)(const char *boot);
    void (*on_exit)(void *);
    void *on_exit_arg;
    int exit_code;
    atomic_int finished;

    pthread_mutex_t mu;
    int wake_fd;                  /* eventfd: written on every wake-up, polled by the worker */
    char *mail[RUNNER_MAILBOX];
    int nmail;
    int wake_all;

    enum runner_state state;
    char worker[128], prefix[512], *ids;
    atomic_llong jobs, lua_bytes; /* GET /metrics */
    struct calls *calls;          /* its calls in flight (calls.c: a lock of their own) */
    atomic_int want_trace;
    char *trace;
    atomic_int reload_taken;      /* the last generation this thread acted on */
    atomic_int reload_done;       /* ... and finished acting on (new VM or not) */
    atomic_int reload_code;       /* the generation of the code it runs (0: the start's) */
    int shard;
    double since;
    char *held;                   /* elastic: the shards the thread holds now, as its Lua set them
                                   * (JSON, opaque here; runner_set_held); NULL: none said */
};

static struct runner **runners;
static int nrunners;
static atomic_int stopping;
static atomic_int reload_gen;  /* bumped by every accepted reload (main thread) */
static _Thread_local struct runner *self;
static pthread_mutex_t fatal_mu = PTHREAD_MUTEX_INITIALIZER;
static char *fatal_msg;

static double runner_now(void) {
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (double)tv.tv_sec + (double)tv.tv_usec / 1e6;
}

static void *runner_main(void *arg) {
    struct runner *r = arg;
    char name[16];
    self = r;
    calls_bind(r->calls); /* the one signal a worker takes: a call past its deadline */
    snprintf(name, sizeof name, "t%d", r->index);
    log_set_thread_name(name);
    r->exit_code = r->body(r->boot);
    /* A thread marked stuck that comes back after all is no longer waited for
     * (the host may be gone): only an unstuck one reports its end. */
    int stuck = calls_over(r->calls);
    atomic_store(&r->finished, 1);
    if (r->on_exit && !stuck) r->on_exit(r->on_exit_arg);
    return NULL;
}

int runner_start_all(int n, const char *const *boots, int (*body)(const char *boot),
                     void (*on_exit)(void *), void *arg) {
    sigset_t all, old;
    sigfillset(&all);
    runners = calloc((size_t)n, sizeof *runners);
    if (!runners || calls_open(n) < 0) return -1;
    /* Block signals while creating threads so that they inherit a full mask:
     * only the main thread's event loop handles signals. */
    pthread_sigmask(SIG_BLOCK, &all, &old);
    for (int i = 0; i < n; i++) {
        struct runner *r = calloc(1, sizeof *r);
        if (!r) break;
        r->index = i;
        r->boot = strdup(boots[i]);
        r->body = body;
        r->on_exit = on_exit;
        r->on_exit_arg = arg;
        r->shard = -1;
        r->calls = calls_slot(i);
        r->state = RUNNER_STARTING;
        atomic_init(&r->jobs, 0);
        atomic_init(&r->lua_bytes, 0);
        atomic_init(&r->reload_taken, atomic_load(&reload_gen));
        atomic_init(&r->reload_done, atomic_load(&reload_gen));
        atomic_init(&r->reload_code, atomic_load(&reload_gen));
        r->since = runner_now();
        pthread_mutex_init(&r->mu, NULL);
        r->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (pthread_create(&r->tid, NULL, runner_main, r) != 0) {
            free(r->boot);
            free(r);
            break;
        }
        runners[nrunners++] = r;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return nrunners == n ? 0 : -1;
}

int runner_count(void) { return nrunners; }

int runner_finished(void) {
    int n = 0;
    for (int i = 0; i < nrunners; i++) n += atomic_load(&runners[i]->finished) || calls_is_stuck(runners[i]->calls);
    return n;
}

int runner_exit_code(void) {
    int code = 0;
    for (int i = 0; i < nrunners; i++)
        if (runners[i]->exit_code > code) code = runners[i]->exit_code;
    return code;
}

/* Main thread, at exit: joins every thread that is not stuck (a stuck one
 * may never return: it is left behind, and calls_close keeps its calls'
 * records for calls_take_stuck, so its jobs can be failed before the
 * process goes). */
void runner_join_all(void) {
    for (int i = 0; i < nrunners; i++) {
        struct runner *r = runners[i];
        /* Still running its call: leave it be (never join, never free);
         * the process is replaced or ends. */
        if (calls_is_stuck(r->calls)) continue;
        pthread_join(r->tid, NULL);
        for (int j = 0; j < r->nmail; j++) free(r->mail[j]);
        free(r->boot);
        free(r->ids);
        free(r->trace);
        free(r->held);
        pthread_mutex_destroy(&r->mu);
        if (r->wake_fd >= 0) close(r->wake_fd);
        free(r);
    }
    calls_close();
    free(runners);
    runners = NULL;
    nrunners = 0;
}

void runner_request_stop(void) {
    atomic_store(&stopping, 1);
    runner_wake(-1, NULL);
}

/* Async-signal-safe (a lock-free atomic store): the stop flag alone, for a
 * signal that comes before any thread runs (host_catch_signals). */
void runner_note_stop(void) { atomic_store(&stopping, 1); }

int runner_stopping(void) { return atomic_load(&stopping); }

void runner_wake(int index, const char *msg) {
    for (int i = 0; i < nrunners; i++) {
        if (index >= 0 && i != index) continue;
        struct runner *r = runners[i];
        pthread_mutex_lock(&r->mu);
        if (!msg || r->nmail == RUNNER_MAILBOX) r->wake_all = 1;
        else {
            int dup = 0;
            for (int j = 0; j < r->nmail && !dup; j++) dup = strcmp(r->mail[j], msg) == 0;
            char *m = dup ? NULL : strdup(msg);
            if (m) r->mail[r->nmail++] = m;
            else if (!dup) r->wake_all = 1;
        }
        pthread_mutex_unlock(&r->mu);
        uint64_t one = 1;
        if (r->wake_fd >= 0 && write(r->wake_fd, &one, sizeof one) < 0) {} /* full counter: already awake */
    }
}

int runner_wake_fd(const struct runner *r) { return r->wake_fd; }

static void runner_drain(struct runner *r) {
    uint64_t n;
    if (r->wake_fd >= 0 && read(r->wake_fd, &n, sizeof n) < 0) {} /* EAGAIN: nothing pending */
}

/* Worker thread: sleeps on its own mailbox (the eventfd) until a wake-up,
 * the stop flag or the timeout, then hands over the queued messages. Why an
 * eventfd and not a condition variable: the same fd is polled beside
 * libcurl's sockets and children's pidfds while calls are parked. */
int runner_wait(struct runner *r, double timeout_s, char ***msgs, int *all) {
    if (!(timeout_s >= 0)) timeout_s = 0;
    double until = runner_monotonic() + timeout_s;
    /* timeout 0 is a poll (a busy thread looking for wake-ups): no wait at all */
    for (;;) {
        runner_drain(r);
        pthread_mutex_lock(&r->mu);
        int ready = r->nmail || r->wake_all || atomic_load(&stopping);
        pthread_mutex_unlock(&r->mu);
        double left = until - runner_monotonic();
        if (ready || left <= 0) break;
        struct pollfd p = {r->wake_fd, POLLIN, 0};
        int ms = (int)ceil(left * 1000);
        if (r->wake_fd < 0) { struct timespec ts = {0, 1000000}; nanosleep(&ts, NULL); }
        else poll(&p, 1, ms);
    }
    pthread_mutex_lock(&r->mu);
    int n = r->nmail;
    *msgs = NULL;
    if (n) {
        *msgs = malloc(sizeof **msgs * (size_t)n);
        if (*msgs) memcpy(*msgs, r->mail, sizeof **msgs * (size_t)n);
        else { for (int j = 0; j < n; j++) free(r->mail[j]); n = 0; r->wake_all = 1; }
    }
    *all = r->wake_all;
    r->nmail = 0;
    r->wake_all = 0;
    pthread_mutex_unlock(&r->mu);
    return n;
}

int runner_request_reload(void) {
    int gen = atomic_fetch_add(&reload_gen, 1) + 1;
    runner_wake(-1, NULL);
    return gen;
}

int runner_reload_wanted(const struct runner *r) {
    return atomic_load(&reload_gen) > atomic_load(&r->reload_taken);
}

int runner_reload_take(struct runner *r) {
    int gen = atomic_load(&reload_gen);
    atomic_store(&r->reload_taken, gen);
    return gen;
}

void runner_reload_done(struct runner *r, int gen, int switched) {
    if (switched) atomic_store(&r->reload_code, gen);
    atomic_store(&r->reload_done, gen);
}

/* Main thread: a thread that has returned counts as done (it runs nothing). */
int runner_reloaded(int gen, int *switched) {
    int all = 1, n = 0;
    for (int i = 0; i < nrunners; i++) {
        struct runner *r = runners[i];
        if (atomic_load(&r->finished) || calls_is_stuck(r->calls)) continue;
        if (atomic_load(&r->reload_done) < gen) all = 0;
        else if (atomic_load(&r->reload_code) >= gen) n++;
    }
    if (switched) *switched = n;
    return all;
}

struct runner *runner_self(void) { return self; }
int runner_index(const struct runner *r) { return r->index; }

void runner_set_fatal(const char *msg) {
    pthread_mutex_lock(&fatal_mu);
    if (!fatal_msg) fatal_msg = strdup(msg ? msg : "fatal error");
    pthread_mutex_unlock(&fatal_mu);
    runner_request_stop();
}

const char *runner_fatal(void) {
    pthread_mutex_lock(&fatal_mu);
    const char *m = fatal_msg;
    pthread_mutex_unlock(&fatal_mu);
    return m;
}

static const char *const runner_state_names[RUNNER_NSTATES] = {
    [RUNNER_STARTING] = "starting", [RUNNER_IDLE] = "idle", [RUNNER_FETCHING] = "fetching",
    [RUNNER_PERFORMING] = "performing", [RUNNER_WAITING] = "waiting", [RUNNER_ERROR] = "error",
    [RUNNER_STOPPED] = "stopped"};

const char *runner_state_name(enum runner_state s) { return runner_state_names[s]; }

/* Copies s (NULL: "") into dst of cap > 0 bytes, cut to fit: snprintf's
 * formatting was ~1 % of a blank job's host CPU (two states a perform call). */
static void runner_copy(char *dst, size_t cap, const char *s) {
    size_t n = s ? strnlen(s, cap - 1) : 0;
    if (n) memcpy(dst, s, n);
    dst[n] = 0;
}

void runner_set_state(struct runner *r, enum runner_state state, const char *worker, int shard,
                      const char *ids, const char *prefix) {
    char *copy = ids ? strdup(ids) : NULL;
    pthread_mutex_lock(&r->mu);
    r->state = state;
    runner_copy(r->worker, sizeof r->worker, worker);
    r->shard = shard;
    runner_copy(r->prefix, sizeof r->prefix, prefix);
    free(r->ids);
    r->ids = copy;
    r->since = runner_now();
    pthread_mutex_unlock(&r->mu);
}

void runner_add_jobs(struct runner *r, long long n) {
    atomic_fetch_add_explicit(&r->jobs, n, memory_order_relaxed);
}

void runner_set_lua_bytes(struct runner *r, long long bytes) {
    atomic_store_explicit(&r->lua_bytes, bytes, memory_order_relaxed);
}

/* Worker thread (elastic hosts, scripts/luakiq/runner/init.lua): what it holds
 * now, a string of its own making; the main thread reads a copy for the
 * hosts heartbeat (runner_held). A failed copy keeps the old text. */
void runner_set_held(struct runner *r, const char *text) {
    char *copy = text ? strdup(text) : NULL;
    if (text && !copy) return;
    pthread_mutex_lock(&r->mu);
    free(r->held);
    r->held = copy;
    pthread_mutex_unlock(&r->mu);
}

/* Main thread: copies thread i's held text into out (cap bytes, always
 * terminated when cap > 0). Returns its length + 1 (0: none set), so a
 * caller whose cap was too small can ask again with more room. */
size_t runner_held(int i, char *out, size_t cap) {
    if (i < 0 || i >= nrunners) return 0;
    struct runner *r = runners[i];
    pthread_mutex_lock(&r->mu);
    size_t need = r->held ? strlen(r->held) + 1 : 0;
    if (need && cap >= need) memcpy(out, r->held, need);
    else if (cap > 0) out[0] = 0;
    pthread_mutex_unlock(&r->mu);
    return need;
}

void runner_stats(int i, struct runner_stat *out) {
    memset(out, 0, sizeof *out);
    if (i < 0 || i >= nrunners) return;
    struct runner *r = runners[i];
    out->jobs = atomic_load_explicit(&r->jobs, memory_order_relaxed);
    out->lua_bytes = atomic_load_explicit(&r->lua_bytes, memory_order_relaxed);
}

double runner_monotonic(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

void runner_request_traces(void) {
    for (int i = 0; i < nrunners; i++) {
        struct runner *r = runners[i];
        pthread_mutex_lock(&r->mu);
        free(r->trace);
        r->trace = NULL;
        pthread_mutex_unlock(&r->mu);
        atomic_store(&r->want_trace, 1);
    }
}

int runner_trace_wanted(struct runner *r) { return atomic_load(&r->want_trace); }

void runner_set_trace(struct runner *r, const char *traceback) {
    char *copy = strdup(traceback);
    pthread_mutex_lock(&r->mu);
    free(r->trace);
    r->trace = copy;
    pthread_mutex_unlock(&r->mu);
    atomic_store(&r->want_trace, 0);
}

/* Main thread, on TTIN: every thread's state, running and parked calls and
 * the Lua tracebacks the threads stored at their last safe point. */
void runner_dump(FILE *f) {
    double now = runner_now();
    for (int i = 0; i < nrunners; i++) {
        struct runner *r = runners[i];
        pthread_mutex_lock(&r->mu);
        fprintf(f, "== thread t%d ==\nstate: %s\n", r->index, runner_state_name(r->state));
        if (r->worker[0]) fprintf(f, "worker: %s\nshard: %d\n", r->worker, r->shard);
        if (r->ids) fprintf(f, "ids: %s\n", r->ids);
        fprintf(f, "since: %.3f (%.3f s ago)\n", r->since, now - r->since);
        calls_dump(i, f, runner_monotonic());
        if (r->trace) fprintf(f, "%s\n\n", r->trace);
        else fprintf(f, "traceback: none (the thread reached no safe point in time: waiting, "
                        "or busy in C or JIT-compiled code)\n\n");
        pthread_mutex_unlock(&r->mu);
    }
}
