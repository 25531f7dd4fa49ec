/* runner.c - worker threads.
 *
 * Design: the main thread starts one pthread per splitter group and runs the
 * body it was handed on each (entry.c's: it builds the thread's own VM, which
 * loads the runtime, config and workers and runs the scheduler loop in Lua);
 * this file never sees a VM. Everything shared between threads lives in
 * `struct runner` behind its own mutex: the wake-up mailbox (written by the
 * main thread when a push makes a shard due, read by the worker in
 * runner_wait, which polls the runner's eventfd: the same fd can be polled
 * next to sockets, e.g. by the HTTP client) and the thread's state (written by the worker, read by the main
 * thread for TTIN and lease renewal). Only bytes cross: strings are copied in
 * and out under the lock. The per-thread counters (jobs performed, Lua memory)
 * are relaxed atomics each worker writes and the main thread reads for GET
 * /metrics. The stop flag and the fatal message are process-wide
 * atomics/once-set values.
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
    double deadline, signalled;   /* running call's deadline, last timeout signal (monotonic) */
    double ending;                /* seconds added to the stuck grace while a child is ended (proc.c) */
    double call_started;          /* monotonic */
    double lease_until;           /* running call: its shard's lease is surely held until then (monotonic) */
    char *call;                   /* the running call's record */
    struct runner_done *dones;    /* per shard key: the ids done before its call in its fetch */
    int ndones;
    int call_done;                /* the running call's entry of dones, -1: none */
    struct runner_parked *parked; /* calls waiting in luakiq's I/O (runner_park) */
    int nparked, capparked;
    atomic_int in_io;
    int stuck;                    /* main thread only */
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

/* A call that waits in luakiq's I/O while its thread runs other calls: what
 * the thread's state said of it when it parked, restored when it runs on. */
struct runner_parked {
    double started, deadline, lease_until;
    int shard;
    int done; /* its entry of the runner's dones, -1: none */
    char *worker, *prefix, *ids, *record;
};

/* The ids done before a call in its fetch (the runner's netstrings: the
 * tail of the call's record, runner/call.lua call_record), one entry per shard key
 * of the thread. A fetch's calls run one after another, so each call appends
 * only the ids done since the one before (runner_call_done): a fetch of n
 * calls copies O(n) bytes, where a record holding them all copied O(n^2).
 * An entry changes only when its shard's next call begins, never while that
 * shard's call is parked. Written by the worker thread, under mu; the main
 * thread reads a stuck thread's at exit (runner_join_all). */
struct runner_done {
    char *key;
    char *text;
    size_t len, cap;
};

static void runner_dones_free(struct runner *r) {
    for (int i = 0; i < r->ndones; i++) {
        free(r->dones[i].key);
        free(r->dones[i].text);
    }
    free(r->dones);
}

static void runner_parked_free(struct runner_parked *p) {
    free(p->worker);
    free(p->prefix);
    free(p->ids);
    free(p->record);
}

static struct runner **runners;
static int nrunners;
static atomic_int stopping;
static atomic_int reload_gen;  /* bumped by every accepted reload (main thread) */
static _Thread_local struct runner *self;
static pthread_mutex_t fatal_mu = PTHREAD_MUTEX_INITIALIZER;
static char *fatal_msg;
static char **stuck_records; /* moved out of stuck runners by runner_join_all */
static int *stuck_parked;      /* per record: 1 when its call was parked */
static int nstuck_records;

static double runner_now(void) {
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (double)tv.tv_sec + (double)tv.tv_usec / 1e6;
}

static void *runner_main(void *arg) {
    struct runner *r = arg;
    char name[16];
    self = r;
    /* The one signal a worker takes: a call past its deadline (core.c's handler). */
    sigset_t tmo;
    sigemptyset(&tmo);
    sigaddset(&tmo, RUNNER_TIMEOUT_SIGNAL);
    pthread_sigmask(SIG_UNBLOCK, &tmo, NULL);
    snprintf(name, sizeof name, "t%d", r->index);
    log_set_thread_name(name);
    r->exit_code = r->body(r->boot);
    /* A thread marked stuck that comes back after all is no longer waited for
     * (the host may be gone): only an unstuck one reports its end. */
    pthread_mutex_lock(&r->mu);
    atomic_store(&r->finished, 1);
    int stuck = r->stuck;
    pthread_mutex_unlock(&r->mu);
    if (r->on_exit && !stuck) r->on_exit(r->on_exit_arg);
    return NULL;
}

int runner_start_all(int n, const char *const *boots, int (*body)(const char *boot),
                     void (*on_exit)(void *), void *arg) {
    sigset_t all, old;
    sigfillset(&all);
    runners = calloc((size_t)n, sizeof *runners);
    if (!runners) return -1;
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
        r->call_done = -1;
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
    for (int i = 0; i < nrunners; i++) n += atomic_load(&runners[i]->finished) || runners[i]->stuck;
    return n;
}

int runner_exit_code(void) {
    int code = 0;
    for (int i = 0; i < nrunners; i++)
        if (runners[i]->exit_code > code) code = runners[i]->exit_code;
    return code;
}

/* Keeps a copy of a stuck thread's call record, with the ids done before
 * the call in its fetch (entry done of r's dones, -1: none) at its end, for
 * runner_take_stuck (parked: the call was waiting, not running, when its
 * thread got stuck). Under r->mu. */
static void runner_keep_stuck(struct runner *r, const char *record, int done, int parked) {
    if (!record) return;
    char **grown = realloc(stuck_records, sizeof *grown * (size_t)(nstuck_records + 1));
    if (!grown) return;
    stuck_records = grown;
    int *grown_parked = realloc(stuck_parked, sizeof *grown_parked * (size_t)(nstuck_records + 1));
    if (!grown_parked) return;
    stuck_parked = grown_parked;
    size_t n = strlen(record), m = done >= 0 ? r->dones[done].len : 0;
    char *copy = malloc(n + m + 1);
    if (!copy) return;
    memcpy(copy, record, n);
    if (m) memcpy(copy + n, r->dones[done].text, m);
    copy[n + m] = '\0';
    stuck_parked[nstuck_records] = parked;
    stuck_records[nstuck_records++] = copy;
}

/* Main thread, at exit: joins every thread that is not stuck (a stuck one
 * may never return: it is left behind, and its call record kept for
 * runner_take_stuck, so its jobs can be failed before the process goes). */
void runner_join_all(void) {
    for (int i = 0; i < nrunners; i++) {
        struct runner *r = runners[i];
        if (r->stuck) {
            /* Still running its call: leave it be (never join, never free);
             * the process is replaced or ends. Keep what failing it needs. */
            pthread_mutex_lock(&r->mu);
            runner_keep_stuck(r, r->call, r->call_done, 0);
            for (int j = 0; j < r->nparked; j++) runner_keep_stuck(r, r->parked[j].record, r->parked[j].done, 1);
            pthread_mutex_unlock(&r->mu);
            continue;
        }
        pthread_join(r->tid, NULL);
        for (int j = 0; j < r->nmail; j++) free(r->mail[j]);
        free(r->boot);
        free(r->ids);
        free(r->trace);
        free(r->call);
        runner_dones_free(r);
        free(r->held);
        for (int j = 0; j < r->nparked; j++) runner_parked_free(&r->parked[j]);
        free(r->parked);
        pthread_mutex_destroy(&r->mu);
        if (r->wake_fd >= 0) close(r->wake_fd);
        free(r);
    }
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
        if (atomic_load(&r->finished) || r->stuck) continue;
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

/* A call's timeout from its start and deadline (deadline = start + timeout
 * on the monotonic clock), to the microsecond: the subtraction alone gives
 * 599.9999999999995 for 600 once the clock is large enough that start +
 * timeout rounds. */
static double runner_span(double started, double deadline) {
    return round((deadline - started) * 1e6) / 1e6;
}

/* Main thread (dashboard, /metrics): a copy of thread i's running and
 * parked calls, taken under its lock, so the caller reads no shared memory. */
int runner_calls(int i, struct runner_call *out, int max) {
    if (i < 0 || i >= nrunners) return 0;
    struct runner *r = runners[i];
    double now = runner_monotonic();
    int n = 0;
    pthread_mutex_lock(&r->mu);
    if (r->deadline > 0) {
        if (n < max) {
            struct runner_call *c = &out[n];
            snprintf(c->worker, sizeof c->worker, "%s", r->worker);
            c->shard = r->shard;
            c->age = now - r->call_started;
            c->timeout = runner_span(r->call_started, r->deadline);
            c->parked = 0;
        }
        n++;
    }
    for (int j = 0; j < r->nparked; j++, n++) {
        if (n >= max) continue;
        const struct runner_parked *p = &r->parked[j];
        struct runner_call *c = &out[n];
        snprintf(c->worker, sizeof c->worker, "%s", p->worker ? p->worker : "");
        c->shard = p->shard;
        c->age = now - p->started;
        c->timeout = runner_span(p->started, p->deadline);
        c->parked = 1;
    }
    pthread_mutex_unlock(&r->mu);
    return n;
}

/* Per-worker timeout counts: a handful of workers, so a small array under
 * one mutex (a timeout is rare: no need for anything faster). */
#define RUNNER_TIMEOUT_NAMES 256
static pthread_mutex_t timeouts_mu = PTHREAD_MUTEX_INITIALIZER;
static struct { char worker[128]; long long n; } timeouts[RUNNER_TIMEOUT_NAMES];
static int ntimeouts;

void runner_count_timeout(const char *worker) {
    pthread_mutex_lock(&timeouts_mu);
    int k = 0;
    while (k < ntimeouts && strcmp(timeouts[k].worker, worker) != 0) k++;
    if (k == ntimeouts && ntimeouts < RUNNER_TIMEOUT_NAMES)
        snprintf(timeouts[ntimeouts++].worker, sizeof timeouts[0].worker, "%s", worker);
    if (k < ntimeouts) timeouts[k].n++;
    pthread_mutex_unlock(&timeouts_mu);
}

int runner_timeouts(int k, char *worker, size_t len, long long *n) {
    pthread_mutex_lock(&timeouts_mu);
    int ok = k >= 0 && k < ntimeouts;
    if (ok) { snprintf(worker, len, "%s", timeouts[k].worker); *n = timeouts[k].n; }
    pthread_mutex_unlock(&timeouts_mu);
    return ok;
}

double runner_monotonic(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

void runner_set_call(struct runner *r, double started, double deadline, double lease_until, const char *record) {
    char *copy = record ? strdup(record) : NULL;
    pthread_mutex_lock(&r->mu);
    r->deadline = deadline;
    r->lease_until = lease_until;
    r->signalled = 0;
    r->call_started = started;
    free(r->call);
    r->call = copy;
    if (!record) r->call_done = -1;
    pthread_mutex_unlock(&r->mu);
}

int runner_call_done(struct runner *r, const char *key, int hint, const char *delta, size_t len, int reset) {
    pthread_mutex_lock(&r->mu);
    int i = hint;
    if (hint < 0 || hint >= r->ndones || strcmp(r->dones[hint].key, key) != 0)
        for (i = 0; i < r->ndones && strcmp(r->dones[i].key, key) != 0; i++) {}
    if (i == r->ndones) {
        struct runner_done *grown = realloc(r->dones, sizeof *grown * (size_t)(r->ndones + 1));
        char *k = strdup(key);
        if (!grown || !k) {
            if (grown) r->dones = grown;
            free(k);
            pthread_mutex_unlock(&r->mu);
            return -1;
        }
        r->dones = grown;
        r->dones[i] = (struct runner_done){ .key = k };
        r->ndones++;
    }
    struct runner_done *d = &r->dones[i];
    if (reset) d->len = 0;
    if (d->len + len > d->cap) {
        size_t cap = d->cap ? d->cap : 256;
        while (cap < d->len + len) cap *= 2;
        char *grown = realloc(d->text, cap);
        if (!grown) {
            pthread_mutex_unlock(&r->mu);
            return -1;
        }
        d->text = grown;
        d->cap = cap;
    }
    if (len) memcpy(d->text + d->len, delta, len);
    d->len += len;
    r->call_done = i;
    pthread_mutex_unlock(&r->mu);
    return i;
}

/* Worker thread: the running call parks (waits in luakiq's I/O); its record
 * moves to the parked list, where the main thread still renews its shard's
 * lease and can fail it if the thread gets stuck. */
int runner_park(struct runner *r) {
    pthread_mutex_lock(&r->mu);
    if (r->nparked == r->capparked) {
        int cap = r->capparked ? r->capparked * 2 : 8;
        struct runner_parked *grown = realloc(r->parked, sizeof *grown * (size_t)cap);
        if (!grown) {
            pthread_mutex_unlock(&r->mu);
            return -1;
        }
        r->parked = grown;
        r->capparked = cap;
    }
    struct runner_parked *p = &r->parked[r->nparked++];
    p->started = r->call_started;
    p->deadline = r->deadline;
    p->lease_until = r->lease_until;
    p->shard = r->shard;
    p->worker = strdup(r->worker);
    p->prefix = strdup(r->prefix);
    p->ids = r->ids; /* moved */
    p->record = r->call;
    p->done = r->call_done;
    r->ids = NULL;
    r->call = NULL;
    r->call_done = -1;
    r->deadline = 0;
    r->signalled = 0;
    r->state = RUNNER_WAITING;
    r->worker[0] = r->prefix[0] = 0;
    r->since = runner_now();
    pthread_mutex_unlock(&r->mu);
    return 0;
}

/* Worker thread: a parked call resumes; its record becomes the running one
 * again, with the deadline it had (a parked call's clock never stops) and
 * its lease bound as the renewals left it. */
int runner_unpark(struct runner *r, double started, double *deadline, double *lease_until) {
    pthread_mutex_lock(&r->mu);
    int j = 0;
    while (j < r->nparked && r->parked[j].started != started) j++;
    if (j == r->nparked) {
        pthread_mutex_unlock(&r->mu);
        return -1;
    }
    struct runner_parked p = r->parked[j];
    r->parked[j] = r->parked[--r->nparked];
    r->state = RUNNER_PERFORMING;
    runner_copy(r->worker, sizeof r->worker, p.worker);
    runner_copy(r->prefix, sizeof r->prefix, p.prefix);
    r->shard = p.shard;
    free(r->ids);
    r->ids = p.ids;
    free(r->call);
    r->call = p.record;
    r->call_done = p.done;
    r->call_started = p.started;
    r->deadline = p.deadline;
    r->lease_until = p.lease_until;
    r->signalled = 0;
    r->since = runner_now();
    pthread_mutex_unlock(&r->mu);
    free(p.worker);
    free(p.prefix);
    *deadline = p.deadline;
    *lease_until = p.lease_until;
    return 0;
}

void runner_set_in_io(struct runner *r, int in_io) { atomic_store(&r->in_io, in_io); }

void runner_set_ending(struct runner *r, double seconds) {
    pthread_mutex_lock(&r->mu);
    r->ending = seconds;
    pthread_mutex_unlock(&r->mu);
    atomic_store(&r->in_io, seconds > 0);
}

int runner_watch(double now, double grace, int *newly) {
    int stuck = 0;
    *newly = 0;
    for (int i = 0; i < nrunners; i++) {
        struct runner *r = runners[i];
        pthread_mutex_lock(&r->mu);
        if (r->deadline > 0 && now >= r->deadline && !atomic_load(&r->finished)) {
            if (!atomic_load(&r->in_io) && now - r->signalled >= 0.25) {
                r->signalled = now;
                pthread_kill(r->tid, RUNNER_TIMEOUT_SIGNAL);
            }
            if (!r->stuck && now >= r->deadline + grace + r->ending) {
                r->stuck = 1;
                *newly = 1;
                log_fmt(LOG_ERROR, "t%d: a call of %s (shard %d, ids %s) runs %.1f s past its timeout and cannot be "
                        "stopped (JIT-compiled code or a foreign call)", r->index, r->worker, r->shard,
                        r->ids ? r->ids : "", now - r->deadline);
            }
        }
        stuck += r->stuck;
        pthread_mutex_unlock(&r->mu);
    }
    return stuck;
}

int runner_stuck(void) {
    int n = 0;
    for (int i = 0; i < nrunners; i++) n += runners[i]->stuck;
    return n;
}

int runner_take_stuck(char ***records, int **parked) {
    int n = nstuck_records;
    *records = stuck_records;
    *parked = stuck_parked;
    stuck_records = NULL;
    stuck_parked = NULL;
    nstuck_records = 0;
    return n;
}

void runner_each_performing(void (*fn)(int thread, const char *prefix, void *arg), void *arg) {
    char prefix[512];
    for (int i = 0; i < nrunners; i++) {
        struct runner *r = runners[i];
        /* j = -1: the call on the CPU; j >= 0: the parked ones. Copied out one
         * at a time: fn does Redis I/O and is called without the lock (a call
         * that ends meanwhile gets one renewal too many: harmless, renew.lua
         * never takes a lease another holds). */
        for (int j = -1;; j++) {
            pthread_mutex_lock(&r->mu);
            int more = j < r->nparked;
            int busy = 0;
            if (j < 0) {
                busy = r->state == RUNNER_PERFORMING && r->prefix[0];
                memcpy(prefix, r->prefix, sizeof prefix);
            } else if (more && r->parked[j].prefix) {
                busy = r->parked[j].prefix[0] != 0;
                snprintf(prefix, sizeof prefix, "%s", r->parked[j].prefix);
            }
            pthread_mutex_unlock(&r->mu);
            if (!more) break;
            if (busy) fn(i, prefix, arg);
        }
    }
}

/* Main thread, after a renewal of prefix's lease for thread `thread`, sent at
 * `sent` (monotonic): held (until = sent + lease TTL: Redis set the expiry no
 * earlier) or lost (until = 0). Only calls that started before the renewal
 * was sent take it: a call that began later fetched, and so leased, on its
 * own. Only that thread's calls: with elastic hosts a shard can move between
 * threads of one host (each has a token of its own), and another thread's
 * renewal says nothing of this one's lease. */
void runner_lease_renewed(int thread, const char *prefix, double sent, double until) {
    if (thread < 0 || thread >= nrunners) return;
    {
        struct runner *r = runners[thread];
        pthread_mutex_lock(&r->mu);
        if (r->deadline > 0 && r->call_started <= sent && strcmp(r->prefix, prefix) == 0)
            r->lease_until = until == 0 || until > r->lease_until ? until : r->lease_until;
        for (int j = 0; j < r->nparked; j++) {
            struct runner_parked *p = &r->parked[j];
            if (p->started <= sent && p->prefix && strcmp(p->prefix, prefix) == 0)
                p->lease_until = until == 0 || until > p->lease_until ? until : p->lease_until;
        }
        pthread_mutex_unlock(&r->mu);
    }
}

/* Worker thread: the running call's lease bound (see runner_lease_renewed). */
double runner_lease_until(struct runner *r) {
    pthread_mutex_lock(&r->mu);
    double until = r->lease_until;
    pthread_mutex_unlock(&r->mu);
    return until;
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
        if (r->deadline > 0) {
            double mono = runner_monotonic();
            fprintf(f, "call: running %.3f s of its timeout %.3f s%s\n", mono - r->call_started,
                    r->deadline - r->call_started, r->stuck ? " (stuck: the process is being replaced)" : "");
        }
        for (int j = 0; j < r->nparked; j++) {
            const struct runner_parked *p = &r->parked[j];
            fprintf(f, "parked: %s shard %d, ids %s: running %.3f s of its timeout %.3f s (waiting in luakiq's I/O)\n",
                    p->worker ? p->worker : "", p->shard, p->ids ? p->ids : "", runner_monotonic() - p->started,
                    p->deadline - p->started);
        }
        if (r->trace) fprintf(f, "%s\n\n", r->trace);
        else fprintf(f, "traceback: none (the thread reached no safe point in time: waiting, "
                        "or busy in C or JIT-compiled code)\n\n");
        pthread_mutex_unlock(&r->mu);
    }
}
