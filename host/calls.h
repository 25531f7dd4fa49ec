/* calls.h - the call slot: each worker thread's perform calls in flight as
 * the main thread sees them (the running one and the parked ones), their
 * deadlines and lease bounds, the watch that signals a call past its
 * deadline and marks a thread stuck, and the records that let the main VM
 * fail a stuck call's jobs. The design note is in calls.c. */
#ifndef LUAKIQ_CALLS_H
#define LUAKIQ_CALLS_H
#include <signal.h>
#include <stddef.h>
#include <stdio.h>

/* The signal a call past its deadline gets; its handler is core.c's. */
#define CALLS_TIMEOUT_SIGNAL SIGURG

/* Bytes that may hold any byte (ids); p NULL: none (a nil field). */
struct calls_str {
    const char *p;
    size_t len;
};

/* A perform call's record: what the main VM needs to fail its jobs should
 * the call never come back (core.call_begin's arguments). Every string is
 * also NUL-terminated. Made by calls_set (then done is empty: the done ids
 * are kept per shard, calls_done) and by calls_take_stuck (with them). */
struct calls_record {
    struct calls_str worker, batch, token; /* batch, token: p NULL when none */
    struct calls_str key;                  /* its shard's key prefix (lease renewal); p NULL: none */
    struct calls_str hook;                 /* a bounded hook (luakiq.lib.hooks), not perform: its name; p NULL: perform */
    int shard;
    int njobs;
    const struct calls_str *ids;           /* the jobs' ids ... */
    const double *retry_counts;            /* ... and retry counts, njobs each */
    int ndone;
    const struct calls_str *done;          /* the ids done before the call in its fetch */
    int parked;                            /* stuck records: the call was waiting, not running */
    int ack;                               /* stuck records: no call, a finished fetch of key whose ack
                                            * (batch) the thread had not sent yet (calls_ack_pending) */
};

struct calls; /* one worker thread's slot */

/* --- main thread: the slots' lifetime ------------------------------------- */

/* Before the worker threads start: n slots, one per thread (-1: no memory). */
int calls_open(int n);
struct calls *calls_slot(int i);
/* After the threads that are not stuck were joined: frees their slots and
 * keeps copies of the stuck threads' records for calls_take_stuck (a stuck
 * thread still runs: its slot is left to it). */
void calls_close(void);

/* --- worker thread ---------------------------------------------------------- */

/* The calling thread is c's (runner.c, as a worker thread starts): it takes
 * CALLS_TIMEOUT_SIGNAL from now on, and calls_self() returns c. */
void calls_bind(struct calls *c);
struct calls *calls_self(void); /* NULL on a thread that is no worker */
/* The thread's body returned: the watch leaves it alone from now on.
 * Returns 1 when it had been marked stuck (nobody waits for it any more). */
int calls_over(struct calls *c);

/* A call runs on the thread's CPU now (monotonic seconds; lease_until: when
 * its shard's lease surely runs out), and rec is its record, copied (NULL:
 * none; out of memory: a call without a record, whose jobs a stuck thread
 * leaves to lease_ttl). done: the ids done before the call in its fetch,
 * kept per shard key because a fetch's calls run one after another and each
 * adds only the ids done since the one before: its entry is emptied when
 * done->reset (another fetch's list starts over), then done->ids appended
 * (NULL: no key, no done ids). Returns done's slot, -1 without one; -2 out
 * of memory (then nothing changed). calls_clear: no call runs. */
struct calls_delta {
    const char *key;              /* its shard's key prefix */
    int slot;                     /* key's entry as calls_done_have just found it (trusted), -1: a new one */
    int reset, n;
    const struct calls_str *ids;  /* n ids done since the last call of key */
};
int calls_set(struct calls *c, double started, double deadline, double lease_until, const struct calls_record *rec,
              const struct calls_delta *done);
void calls_clear(struct calls *c);
/* How many done ids key's entry holds (0 when reset), for calls_set's
 * delta; *slot: a hint (key's entry the last time, -1: search), set to
 * key's entry (-1: none yet). Reads only what this thread writes: no lock. */
int calls_done_have(struct calls *c, const char *key, int *slot, int reset);
/* A fetch of key (batch, len bytes) ended with every call done and its ack
 * deferred (it rides on the thread's next Redis call): kept in key's entry
 * (hint: as for calls_done_have) until the key's next call of another fetch
 * (whose fetch.lua sent it), so that a stuck thread's unsent acks reach the
 * main VM (calls_take_stuck, ack = 1). Returns key's slot, -1 out of memory. */
int calls_ack_pending(struct calls *c, const char *key, int hint, const char *batch, size_t len);
/* The running call waits in luakiq's I/O (it parks) while the thread runs
 * others: its record, deadline and lease bound move to the parked list, where
 * the main thread still renews its lease, lists it and, if the thread gets
 * stuck, hands it to the main VM. calls_unpark(c, started, ...) makes the
 * parked call that started at `started` the running one again and gives its
 * deadline, lease bound and record (valid until it ends; NULL: none). Both
 * -1 on failure (out of memory; no such call). */
int calls_park(struct calls *c);
int calls_unpark(struct calls *c, double started, double *deadline, double *lease_until,
                 const struct calls_record **rec);
/* in_io: the running call waits in luakiq's own I/O, which ends itself at
 * the deadline (no signal is sent). calls_set_ending: the thread ends a child
 * process past its call's deadline (TERM, `seconds` of grace, KILL): no
 * signal, and it counts as stuck only that much later (0: done). */
void calls_set_in_io(struct calls *c, int in_io);
void calls_set_ending(struct calls *c, double seconds);
/* The running call's lease bound, as the renewals left it. */
double calls_lease_until(struct calls *c);

/* Writes the record's ids joined by ',' (as the runner's state names them)
 * into out (cap > 0, always terminated, cut to fit); returns the full length. */
size_t calls_ids_text(const struct calls_record *rec, char *out, size_t cap);

/* --- main thread ------------------------------------------------------------ */

/* Every ~100 ms: sends CALLS_TIMEOUT_SIGNAL to each thread whose call is past
 * its deadline (not while it waits in luakiq's I/O; again every 250 ms while
 * it runs on), and marks a thread stuck when its call is still running grace
 * seconds after the deadline. Returns how many threads are stuck; *newly is
 * set when this look found a new one. */
int calls_watch(double now, double grace, int *newly);
int calls_stuck(void);                 /* how many threads are stuck */
int calls_is_stuck(const struct calls *c);
/* After calls_close: the records of the stuck calls, of the calls parked
 * on the stuck threads (parked = 1: never ran out of time; their jobs go
 * back unchanged) and of those threads' unsent acks (ack = 1: key, batch
 * and the thread's token only), each one block: the caller frees each and
 * the array. */
int calls_take_stuck(struct calls_record ***out);

/* Lease fencing (docs/guarantees.md): calls_each_leased calls fn(thread,
 * key) for every call in flight, running or parked, without holding a lock
 * (fn renews the lease: Redis I/O). calls_lease_renewed: a renewal of key's
 * lease for thread `thread`, sent at `sent`, held it until `until` (0: lost);
 * the calls of that thread and key that began before `sent` take it. */
void calls_each_leased(void (*fn)(int thread, const char *key, void *arg), void *arg);
void calls_lease_renewed(int thread, const char *key, double sent, double until);

/* Thread i's calls at `now` (GET /metrics, the dashboard): the one on its
 * CPU, then the parked ones, each with how long it has run and its timeout.
 * Fills at most max and returns how many there are (call again with more
 * room if that is more). */
struct calls_info {
    char worker[128];
    int shard, parked;
    double age, timeout;
};
int calls_list(int i, double now, struct calls_info *out, int max);
/* Thread i's calls for the TTIN dump, at monotonic `now`. */
void calls_dump(int i, FILE *f, double now);

/* Calls failed by their timeout, per worker name, in this process (any
 * thread counts; the main thread reads with calls_timeouts(k, ...) for
 * k = 0.. until it returns 0). */
void calls_count_timeout(const char *worker);
int calls_timeouts(int k, char *worker, size_t len, long long *n);

#endif
