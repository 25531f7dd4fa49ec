/* runner.h - worker threads: one per splitter group, each with its own Lua VM
 * (made in vm.c), its own Redis connection and its own scheduler. */
#ifndef LUAKIQ_RUNNER_H
#define LUAKIQ_RUNNER_H
#include <stdio.h>

struct runner;

/* Starts n threads; boots[i] is the opaque boot string handed to thread i's VM
 * (copied). on_exit(arg) is called from a worker thread when it finishes.
 * Signals are blocked in the new threads. Returns 0, or -1 if a thread could not start. */
int runner_start_all(int n, const char *const *boots, void (*on_exit)(void *), void *arg);
int runner_count(void);
int runner_finished(void);        /* how many threads have returned */
void runner_join_all(void);       /* joins every thread and frees them */
int runner_exit_code(void);       /* max of the threads' codes (0 ok, 1 fatal) */

/* Graceful stop: no new fetches; every waiting thread wakes. Any thread. */
void runner_request_stop(void);
int runner_stopping(void);

/* Wake-ups. runner_wake: thread i has work (msg = the shard prefix, copied);
 * index -1 wakes every thread. Called on the main thread. */
void runner_wake(int index, const char *msg);
/* Worker side: sleeps up to timeout_s or until woken or stopping. Fills msgs
 * (caller frees each and the array) with pending wake messages; *all is set when
 * a broad wake-up happened (re-probe everything). Returns the count. */
int runner_wait(struct runner *r, double timeout_s, char ***msgs, int *all);

/* The calling worker thread's runner, or NULL on the main thread. */
struct runner *runner_self(void);
int runner_index(const struct runner *r);

/* Process-wide fatal error (luakiq.fatal, a host bug): the first message wins;
 * it also requests a stop. */
void runner_set_fatal(const char *msg);
const char *runner_fatal(void); /* NULL when none; valid until exit */

/* State for the TTIN dump, set by the thread itself between steps. */
void runner_set_state(struct runner *r, const char *state, const char *worker, int shard, const char *ids,
                      const char *prefix);
/* Main thread: calls fn(prefix, arg) for every thread now performing a batch
 * (prefix = its shard's key prefix), for lease renewal. */
void runner_each_performing(void (*fn)(const char *prefix, void *arg), void *arg);
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
