/* runner.h - worker threads: one per splitter group. Each runs the body it is
 * handed (entry.c's, which makes the thread's own Lua VM, Redis connection and
 * scheduler); this module owns what is shared between a worker and the main
 * thread: the wake-up mailbox, the stop flag, the state and counters of each
 * thread (TTIN, lease renewal, GET /metrics) and the fatal message. */
#ifndef LUAKIQ_RUNNER_H
#define LUAKIQ_RUNNER_H
#include <signal.h>
#include <stdio.h>

struct runner;

/* Starts n threads; thread i runs body(boots[i]) (the boot string is copied)
 * and its return value is its exit code. on_exit(arg) is called from a worker
 * thread when it finishes. Signals are blocked in the new threads. Returns 0,
 * or -1 if a thread could not start. */
int runner_start_all(int n, const char *const *boots, int (*body)(const char *boot),
                     void (*on_exit)(void *), void *arg);
int runner_count(void);
int runner_finished(void);        /* how many threads have returned or are stuck (main thread) */
void runner_join_all(void);       /* joins every thread and frees them (not stuck ones) */
int runner_exit_code(void);       /* max of the threads' codes (0 ok, 1 fatal) */

/* Graceful stop: no new fetches; every waiting thread wakes. Any thread. */
void runner_request_stop(void);
int runner_stopping(void);
/* Sets the stop flag only; async-signal-safe (see host_catch_signals). */
void runner_note_stop(void);

/* Reload (SIGHUP; see runner.c's design note). runner_request_reload: main
 * thread, once the new code has been checked: bumps the generation, wakes
 * every thread and returns the new generation. runner_reload_wanted: worker
 * thread, whether a generation it has not taken yet is asked for.
 * runner_reload_take: the worker starts acting on the newest generation
 * (returned); runner_reload_done: it has, and switched (1) or kept its old
 * code (0). runner_reloaded: main thread, whether every running thread is
 * done with generation gen; *switched: how many run its code. */
int runner_request_reload(void);
int runner_reload_wanted(const struct runner *r);
int runner_reload_take(struct runner *r);
void runner_reload_done(struct runner *r, int gen, int switched);
int runner_reloaded(int gen, int *switched);

/* Wake-ups. runner_wake: thread i has work (msg = the shard prefix, copied);
 * index -1 wakes every thread. Called on the main thread. */
void runner_wake(int index, const char *msg);
/* Worker side: sleeps up to timeout_s or until woken or stopping. Fills msgs
 * (caller frees each and the array) with pending wake messages; *all is set when
 * a broad wake-up happened (re-probe everything). Returns the count. */
int runner_wait(struct runner *r, double timeout_s, char ***msgs, int *all);

/* An fd that becomes readable when thread r is woken (mail, stop): a worker
 * waiting on other fds too (HTTP) polls it beside them, then calls
 * runner_wait(r, 0, ...) to read the mailbox. */
int runner_wake_fd(const struct runner *r);

/* The calling worker thread's runner, or NULL on the main thread. */
struct runner *runner_self(void);
int runner_index(const struct runner *r);

/* Process-wide fatal error (luakiq.fatal, a host bug): the first message wins;
 * it also requests a stop. */
void runner_set_fatal(const char *msg);
const char *runner_fatal(void); /* NULL when none; valid until exit */

/* What a worker thread is doing. RUNNER_PERFORMING is the one state with a
 * meaning beyond the dump: its shard's lease is renewed by the main thread,
 * and its jobs count as performed when the thread leaves it. */
enum runner_state {
    RUNNER_STARTING, RUNNER_IDLE, RUNNER_FETCHING, RUNNER_PERFORMING, RUNNER_WAITING, RUNNER_ERROR,
    RUNNER_STOPPED,
    RUNNER_NSTATES /* how many there are */
};
/* The state's name ("performing"): the one definition of each name. Lua sets
 * states by number, through core.states (host/core.c), built from these names. */
const char *runner_state_name(enum runner_state s);

/* Set by the thread itself between steps: its state, the worker, shard, ids
 * (for the dump) and the shard's key prefix (for lease renewal). */
void runner_set_state(struct runner *r, enum runner_state state, const char *worker, int shard,
                      const char *ids, const char *prefix);
/* A call of n jobs ended (GET /metrics counts jobs performed per thread). */
void runner_add_jobs(struct runner *r, long long n);
/* The thread's Lua memory in bytes, as last reported by the thread itself. */
void runner_set_lua_bytes(struct runner *r, long long bytes);
/* Thread i as GET /metrics and the dashboard see it (main thread): jobs
 * performed so far and its last Lua memory (may be one batch old). */
struct runner_stat {
    long long jobs, lua_bytes;
};
void runner_stats(int i, struct runner_stat *out);
/* Thread i's calls now (main thread): the one on its CPU, then the parked
 * ones, each with how long it has run and its timeout. Fills at most max and
 * returns how many there are (call again with more room if that is more). */
struct runner_call {
    char worker[128];
    int shard, parked;
    double age, timeout;
};
int runner_calls(int i, struct runner_call *out, int max);
/* Calls failed by their timeout, per worker name, in this process (any
 * thread counts; the main thread reads with runner_timeouts(k, &name, &n)
 * for k = 0.. until it returns 0). */
void runner_count_timeout(const char *worker);
int runner_timeouts(int k, char *worker, size_t len, long long *n);
/* Call deadlines (docs/architecture.md, "Timeouts"). A worker thread sets its
 * running call's deadline (CLOCK_MONOTONIC seconds; 0 when no call runs) and
 * a record of it (an opaque string: what the main VM needs to fail the call's
 * jobs if the call cannot be stopped). in_io: the call now waits in luakiq's
 * own I/O, which ends itself at the deadline (no signal needed). */
void runner_set_call(struct runner *r, double started, double deadline, double lease_until, const char *record);
/* The call about to begin (before runner_set_call) is of the shard named key:
 * the ids done before it in its fetch, which a stuck call's record ends with,
 * are key's after this: emptied when reset (a new fetch), then delta (len
 * bytes, no byte 0) appended. Returns key's slot, which the caller passes as
 * hint next time (one comparison instead of a search over the thread's
 * shards; any other hint, -1 included, searches). Worker thread. -1 when out
 * of memory. */
int runner_call_done(struct runner *r, const char *key, int hint, const char *delta, size_t len, int reset);
void runner_set_in_io(struct runner *r, int in_io);
/* The calling thread is ending a child process past its call's deadline
 * (TERM, up to `seconds` of grace, KILL): no timeout signal, and the thread
 * counts as stuck only that much later. 0 when done. Worker thread. */
void runner_set_ending(struct runner *r, double seconds);
/* Calls in flight (docs/architecture.md): the running call waits in luakiq's
 * I/O and the thread goes on with others. runner_park moves the thread's
 * current call (its state, ids, record, deadline) aside, leaving no call on
 * the CPU; its shard's lease is still renewed by the main thread, TTIN and
 * the dashboard still list it, and a stuck thread's parked records come back
 * from runner_take_stuck (marked parked). runner_unpark(r, started) makes the
 * parked call that started at `started` the running one again and gives its
 * deadline. Both -1 on failure (out of memory; no such call). */
int runner_park(struct runner *r);
int runner_unpark(struct runner *r, double started, double *deadline, double *lease_until);
/* Lease fencing of calls (docs/guarantees.md): each call carries a bound
 * (monotonic seconds) until which its shard's lease is surely held: the
 * fetch's send time + lease_ttl, raised by every renewal the main thread
 * sends while the call runs or is parked (runner_lease_renewed: held until
 * `until`, or lost: until = 0). A call resumed past its bound is stopped. */
void runner_lease_renewed(int thread, const char *prefix, double sent, double until);
double runner_lease_until(struct runner *r);
/* Main thread, every ~100 ms: sends RUNNER_TIMEOUT_SIGNAL to each thread
 * whose call is past its deadline (not while it waits in luakiq's I/O; again
 * every 250 ms while it runs on), and marks a thread stuck when its call is
 * still running grace seconds after the deadline. Returns how many threads
 * are stuck; *newly is set when this look found a new one. */
int runner_watch(double now, double grace, int *newly);
int runner_stuck(void);
/* After runner_join_all: the records of the calls that were stuck (a stuck
 * thread is neither joined nor freed: the process is replaced or exits), and
 * of the calls parked on the stuck threads (parked[i] = 1: never ran out of
 * time; their jobs go back unchanged). The caller frees each string and both
 * arrays. */
int runner_take_stuck(char ***records, int **parked);
double runner_monotonic(void);
/* The signal a call past its deadline gets; its handler is core.c's. */
#define RUNNER_TIMEOUT_SIGNAL SIGURG

/* Main thread: calls fn(thread, prefix, arg) for every call now performing or
 * parked (thread = its thread's index, prefix = its shard's key prefix), for
 * lease renewal. */
void runner_each_performing(void (*fn)(int thread, const char *prefix, void *arg), void *arg);
/* Elastic hosts: a worker thread says which shards it holds now (an opaque
 * string, JSON from runner/init.lua; NULL clears it); the main thread copies it
 * (runner_held returns the length + 1, 0 when none was set; call again with
 * more room when that exceeds cap). */
void runner_set_held(struct runner *r, const char *text);
size_t runner_held(int i, char *out, size_t cap);
/* TTIN tracebacks, taken safely: the main thread asks (runner_request_traces);
 * each worker thread, at its next safe point (any call into luakiq.core from
 * its own VM), stores its own Lua traceback (runner_set_trace). No thread ever
 * touches another thread's VM. */
void runner_request_traces(void);
int runner_trace_wanted(struct runner *r);
void runner_set_trace(struct runner *r, const char *traceback);
/* Writes every thread's state (and traceback, when one came in) to f (main thread). */
void runner_dump(FILE *f);

#endif
