/* calls.c - the call slot: how a perform call is bounded by its deadline and
 * its shard's lease, and what happens to one that cannot be stopped.
 *
 * Design (docs/architecture.md, "Timeouts" and "Calls in flight"). Each
 * worker thread runs its perform calls one at a time on its CPU; a call that
 * waits in luakiq's I/O parks and the thread runs others meanwhile. Each
 * thread has one `struct calls`, behind its own mutex: the running call
 * (started, deadline, lease bound, its record) and the parked ones, the ids
 * done before each call in its fetch (per shard key), and the flags the
 * watch reads (in_io, ending). The worker thread writes it as its calls
 * begin, park, resume and end (core.call_* in core.c, where the VM's side
 * lives: the deadline in thread-locals, the hook the timeout signal arms);
 * the main thread reads it:
 *  - the watch (calls_watch, host.c's timer, every 100 ms) sends
 *    CALLS_TIMEOUT_SIGNAL to a thread whose running call is past its
 *    deadline; the handler, on that thread, arms a hook that raises the
 *    timeout error in the call. JIT-compiled code and blocking foreign calls
 *    never see the hook: a call still running grace seconds after its
 *    deadline makes its thread *stuck*, and the host replaces the process;
 *  - lease renewal (calls_each_leased, calls_lease_renewed): every call in
 *    flight, running or parked, has its shard's lease renewed, and each call
 *    carries a bound until which that lease is surely held, so that a call
 *    resumed past it is stopped (the fence) instead of running beside the
 *    shard's next holder;
 *  - at exit (calls_close, calls_take_stuck): a stuck thread is never joined;
 *    the records of its calls go to the main VM, which fails the running
 *    call's jobs with the timeout error and puts the parked ones back.
 *
 * The record (struct calls_record) is one block: the worker, shard, batch,
 * lease token, each job's id and retry count, copied from core.call_begin's
 * arguments, so only bytes cross threads. The ids done before the call in
 * its fetch are not in it: a fetch's calls run one after another, so the
 * slot keeps them per shard key and each call appends those done since the
 * one before (calls_done): a fetch of n calls copies each id once. An entry
 * changes only when its shard's next call begins, never while that shard's
 * call is parked; a stuck record gets them at exit. A running call's block
 * is kept for the thread's next call (spare): no malloc a call when none
 * parks. A shard key's entry also keeps the batch of its last fetch whose
 * ack the thread deferred (calls_ack_pending), until the key's next fetch
 * begins its calls: a stuck thread's other shards are acked and released by
 * the main VM before the process is replaced.
 *
 * The process-wide counts of calls failed by their timeout (per worker, for
 * GET /metrics) live here too, under a mutex of their own. */
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "calls.h"
#include "log.h"

/* A call and its record: the running one, or a parked one. */
struct calls_call {
    struct calls_record *rec; /* NULL: none */
    size_t cap;               /* bytes of rec's block */
    double started, deadline, lease_until; /* monotonic */
    int done;                 /* its entry of the slot's dones, -1: none */
};

/* The ids done before a shard key's call in its fetch, back to back in text
 * (ends[i]: where id i ends). Written by the worker thread under mu. */
struct calls_done {
    char *key;
    char *text;
    size_t len, cap;
    size_t *ends;
    int n, capn;
    char *ack;                    /* the batch whose ack is deferred (ack_len 0: none) */
    size_t ack_len, ack_cap;
};

struct calls {
    int index;
    pthread_t tid;                /* set by calls_bind */
    pthread_mutex_t mu;
    struct calls_call run;        /* the call on the CPU (run.deadline 0: none) */
    double signalled;             /* when the running call last got the signal */
    double ending;                /* seconds added to the stuck grace while a child is ended (proc.c) */
    struct calls_call *parked;    /* calls waiting in luakiq's I/O */
    int nparked, capparked;
    struct calls_done *dones;
    int ndones;
    atomic_int in_io;
    int stuck;                    /* written by the main thread only, under mu */
    int over;                     /* the thread's body returned */
    /* worker thread only, no lock: */
    struct calls_record *spare;   /* the last call's block, for the next one */
    size_t spare_cap;
};

static struct calls **slots;
static int nslots;
static _Thread_local struct calls *self;
static struct calls_record **stuck_records; /* kept by calls_close */
static int nstuck_records;

/* --- records -------------------------------------------------------------- */

/* The bytes a record of in's fields takes in one block, with d's ids as its
 * done ids (d NULL: none). */
static size_t calls_size(const struct calls_record *in, const struct calls_done *d) {
    size_t n = sizeof *in + (size_t)in->njobs * (sizeof *in->retry_counts + sizeof *in->ids);
    n += in->worker.len + in->batch.len + in->token.len + in->key.len + in->hook.len + 5;
    for (int i = 0; i < in->njobs; i++) n += in->ids[i].len + 1;
    if (d) n += (size_t)d->n * sizeof *in->done + d->len + (size_t)d->n;
    return n;
}

/* Copies s into the text at *o (terminated): its place in the block. */
static struct calls_str calls_put(char **o, struct calls_str s) {
    struct calls_str out = {NULL, s.len};
    if (!s.p) return out;
    out.p = *o;
    if (s.len) memcpy(*o, s.p, s.len);
    (*o)[s.len] = 0;
    *o += s.len + 1;
    return out;
}

/* Lays a record of in's fields (and d's ids as its done ids) out in block,
 * of calls_size bytes at least: the header, the retry counts, the ids, the
 * done ids, then every string's bytes. */
static struct calls_record *calls_pack(void *block, const struct calls_record *in, const struct calls_done *d,
                                       int parked) {
    struct calls_record *r = block;
    int nd = d ? d->n : 0;
    double *rc = (double *)(r + 1);
    struct calls_str *ids = (struct calls_str *)(rc + in->njobs), *done = ids + in->njobs;
    char *o = (char *)(done + nd);
    *r = (struct calls_record){.shard = in->shard, .njobs = in->njobs, .ids = ids, .retry_counts = rc,
                               .ndone = nd, .done = done, .parked = parked, .ack = in->ack};
    r->worker = calls_put(&o, in->worker);
    r->batch = calls_put(&o, in->batch);
    r->token = calls_put(&o, in->token);
    r->key = calls_put(&o, in->key);
    r->hook = calls_put(&o, in->hook);
    for (int i = 0; i < in->njobs; i++) {
        rc[i] = in->retry_counts[i];
        ids[i] = calls_put(&o, in->ids[i]);
    }
    for (int i = 0; i < nd; i++) {
        size_t from = i ? d->ends[i - 1] : 0;
        done[i] = calls_put(&o, (struct calls_str){d->text + from, d->ends[i] - from});
    }
    return r;
}

size_t calls_ids_text(const struct calls_record *rec, char *out, size_t cap) {
    size_t n = 0;
    for (int i = 0; i < rec->njobs; i++) {
        const struct calls_str *s = &rec->ids[i];
        if (i) {
            if (n + 1 < cap) out[n] = ',';
            n++;
        }
        if (n + 1 < cap) memcpy(out + n, s->p, s->len < cap - 1 - n ? s->len : cap - 1 - n);
        n += s->len;
    }
    out[n < cap ? n : cap - 1] = 0;
    return n;
}

/* --- lifetime --------------------------------------------------------------- */

int calls_open(int n) {
    slots = calloc((size_t)n + 1, sizeof *slots);
    if (!slots) return -1;
    for (nslots = 0; nslots < n; nslots++) {
        struct calls *c = calloc(1, sizeof *c);
        if (!c) return -1;
        c->index = nslots;
        c->run.done = -1;
        pthread_mutex_init(&c->mu, NULL);
        slots[nslots] = c;
    }
    return 0;
}

struct calls *calls_slot(int i) { return i >= 0 && i < nslots ? slots[i] : NULL; }

/* Keeps a copy of rec (with d's ids as its done ids) for calls_take_stuck. */
static void calls_keep(const struct calls_record *rec, const struct calls_done *d, int parked) {
    struct calls_record **grown = realloc(stuck_records, sizeof *grown * (size_t)(nstuck_records + 1));
    if (!grown) return;
    stuck_records = grown;
    void *block = malloc(calls_size(rec, d));
    if (block) stuck_records[nstuck_records++] = calls_pack(block, rec, d, parked);
}

/* Keeps a copy of a stuck thread's call, with the ids done before it in its
 * fetch, for calls_take_stuck. Under c->mu. */
static void calls_keep_stuck(struct calls *c, const struct calls_call *call, int parked) {
    if (call->rec) calls_keep(call->rec, call->done >= 0 ? &c->dones[call->done] : NULL, parked);
}

/* Keeps a stuck thread's deferred acks (calls_ack_pending) as ack records,
 * under its lease token (its calls' own: an elastic thread's; NULL: the
 * host's). Under c->mu. */
static void calls_keep_acks(struct calls *c) {
    const struct calls_record *any = c->run.rec ? c->run.rec : c->nparked ? c->parked[0].rec : NULL;
    for (int i = 0; i < c->ndones; i++) {
        const struct calls_done *d = &c->dones[i];
        if (!d->ack_len) continue;
        struct calls_record in = {.worker = {"", 0}, .batch = {d->ack, d->ack_len},
                                  .key = {d->key, strlen(d->key)}, .shard = -1, .ack = 1};
        if (any) in.token = any->token;
        calls_keep(&in, NULL, 0);
    }
}

static void calls_free(struct calls *c) {
    free(c->run.rec);
    for (int j = 0; j < c->nparked; j++) free(c->parked[j].rec);
    free(c->parked);
    for (int i = 0; i < c->ndones; i++) {
        free(c->dones[i].key);
        free(c->dones[i].text);
        free(c->dones[i].ends);
        free(c->dones[i].ack);
    }
    free(c->dones);
    free(c->spare);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

void calls_close(void) {
    for (int i = 0; i < nslots; i++) {
        struct calls *c = slots[i];
        if (!c->stuck) {
            calls_free(c);
            continue;
        }
        /* still in its call: never freed (the process is replaced or ends) */
        pthread_mutex_lock(&c->mu);
        calls_keep_stuck(c, &c->run, 0);
        for (int j = 0; j < c->nparked; j++) calls_keep_stuck(c, &c->parked[j], 1);
        calls_keep_acks(c);
        pthread_mutex_unlock(&c->mu);
    }
    free(slots);
    slots = NULL;
    nslots = 0;
}

int calls_take_stuck(struct calls_record ***out) {
    int n = nstuck_records;
    *out = stuck_records;
    stuck_records = NULL;
    nstuck_records = 0;
    return n;
}

/* --- worker thread ------------------------------------------------------------ */

void calls_bind(struct calls *c) {
    self = c;
    pthread_mutex_lock(&c->mu);
    c->tid = pthread_self();
    pthread_mutex_unlock(&c->mu);
    /* the one signal a worker thread takes (runner.c blocks every other) */
    sigset_t tmo;
    sigemptyset(&tmo);
    sigaddset(&tmo, CALLS_TIMEOUT_SIGNAL);
    pthread_sigmask(SIG_UNBLOCK, &tmo, NULL);
}

struct calls *calls_self(void) { return self; }

int calls_over(struct calls *c) {
    pthread_mutex_lock(&c->mu);
    c->over = 1;
    int stuck = c->stuck;
    pthread_mutex_unlock(&c->mu);
    return stuck;
}

/* The entry of key: the hint when it names it (one comparison, the usual
 * case), else a search; ndones when there is none. Worker thread. */
static int calls_find(const struct calls *c, const char *key, int hint) {
    if (hint >= 0 && hint < c->ndones && strcmp(c->dones[hint].key, key) == 0) return hint;
    int i = 0;
    while (i < c->ndones && strcmp(c->dones[i].key, key) != 0) i++;
    return i;
}

int calls_done_have(struct calls *c, const char *key, int *slot, int reset) {
    int i = calls_find(c, key, *slot);
    *slot = i < c->ndones ? i : -1;
    return i < c->ndones && !reset ? c->dones[i].n : 0;
}

/* Room in d for n more ids of len bytes in all. Under mu. */
static int calls_done_grow(struct calls_done *d, int n, size_t len) {
    if (d->len + len > d->cap) {
        size_t cap = d->cap ? d->cap : 256;
        while (cap < d->len + len) cap *= 2;
        char *text = realloc(d->text, cap);
        if (!text) return -1;
        d->text = text;
        d->cap = cap;
    }
    if (d->n + n > d->capn) {
        int cap = d->capn ? d->capn : 16;
        while (cap < d->n + n) cap *= 2;
        size_t *ends = realloc(d->ends, sizeof *ends * (size_t)cap);
        if (!ends) return -1;
        d->ends = ends;
        d->capn = cap;
    }
    return 0;
}

/* A new entry for key: its slot, -1 out of memory. Under mu. */
static int calls_done_new(struct calls *c, const char *key) {
    struct calls_done *grown = realloc(c->dones, sizeof *grown * (size_t)(c->ndones + 1));
    char *k = strdup(key);
    if (grown) c->dones = grown;
    if (!grown || !k) {
        free(k);
        return -1;
    }
    c->dones[c->ndones] = (struct calls_done){.key = k};
    return c->ndones++;
}

/* calls_set's done ids: the entry of in->key (in->slot, which
 * calls_done_have found on this thread, or a new one) emptied on reset
 * (with its deferred ack: the fetch that begins its calls sent it), then
 * in->ids appended. Its slot, -1 out of memory. Under mu. */
static int calls_done_add(struct calls *c, const struct calls_delta *in) {
    int i = in->slot;
    if (i < 0 && (i = calls_done_new(c, in->key)) < 0) return -1;
    struct calls_done *d = &c->dones[i];
    size_t len = 0;
    for (int k = 0; k < in->n; k++) len += in->ids[k].len;
    if (in->reset) d->len = 0, d->n = 0, d->ack_len = 0;
    if (calls_done_grow(d, in->n, len) < 0) return -1;
    for (int k = 0; k < in->n; k++) {
        if (in->ids[k].len) memcpy(d->text + d->len, in->ids[k].p, in->ids[k].len);
        d->len += in->ids[k].len;
        d->ends[d->n++] = d->len;
    }
    return i;
}

int calls_ack_pending(struct calls *c, const char *key, int hint, const char *batch, size_t len) {
    int i = calls_find(c, key, hint); /* (this thread's writes only: no lock to read) */
    pthread_mutex_lock(&c->mu);
    if (i == c->ndones) i = calls_done_new(c, key);
    struct calls_done *d = i >= 0 ? &c->dones[i] : NULL;
    if (d && len + 1 > d->ack_cap) {
        char *grown = realloc(d->ack, len + 1 < 32 ? 32 : len + 1);
        if (grown) d->ack = grown, d->ack_cap = len + 1 < 32 ? 32 : len + 1;
        else d->ack_len = 0, d = NULL, i = -1;
    }
    if (d) {
        memcpy(d->ack, batch, len);
        d->ack[len] = 0;
        d->ack_len = len;
    }
    pthread_mutex_unlock(&c->mu);
    return i;
}

/* A record's block (of cap bytes) no call holds any more: kept for the
 * thread's next call when it is larger than the one kept, else freed.
 * Worker thread. */
static void calls_spare(struct calls *c, struct calls_record *rec, size_t cap) {
    if (rec && cap >= c->spare_cap) {
        free(c->spare);
        c->spare = rec;
        c->spare_cap = cap;
    } else {
        free(rec);
    }
}

int calls_set(struct calls *c, double started, double deadline, double lease_until, const struct calls_record *rec,
              const struct calls_delta *done) {
    /* the record is copied before the lock, into the last call's block
     * when it is large enough (the thread's own: no lock needed) */
    struct calls_record *copy = NULL;
    size_t cap = 0;
    if (rec) {
        size_t need = calls_size(rec, NULL);
        copy = c->spare;
        cap = c->spare_cap;
        if (!copy || cap < need) {
            cap = need < 256 ? 256 : need;
            copy = malloc(cap);
        } else {
            c->spare = NULL;
            c->spare_cap = 0;
        }
        if (copy) copy = calls_pack(copy, rec, NULL, 0);
    }
    pthread_mutex_lock(&c->mu);
    int slot = done ? calls_done_add(c, done) : -1;
    if (done && slot < 0) {
        pthread_mutex_unlock(&c->mu);
        calls_spare(c, copy, cap);
        return -2;
    }
    struct calls_call old = c->run;
    c->run = (struct calls_call){copy, copy ? cap : 0, started, deadline, lease_until, copy ? slot : -1};
    c->signalled = 0;
    pthread_mutex_unlock(&c->mu);
    free(old.rec); /* (none: the last call cleared its record) */
    return slot;
}

void calls_clear(struct calls *c) {
    pthread_mutex_lock(&c->mu);
    struct calls_call old = c->run;
    c->run = (struct calls_call){NULL, 0, 0, 0, 0, -1};
    c->signalled = 0;
    pthread_mutex_unlock(&c->mu);
    calls_spare(c, old.rec, old.cap);
}

int calls_park(struct calls *c) {
    pthread_mutex_lock(&c->mu);
    if (c->nparked == c->capparked) {
        int cap = c->capparked ? c->capparked * 2 : 8;
        struct calls_call *grown = realloc(c->parked, sizeof *grown * (size_t)cap);
        if (!grown) {
            pthread_mutex_unlock(&c->mu);
            return -1;
        }
        c->parked = grown;
        c->capparked = cap;
    }
    c->parked[c->nparked++] = c->run;
    c->run = (struct calls_call){NULL, 0, 0, 0, 0, -1};
    c->signalled = 0;
    pthread_mutex_unlock(&c->mu);
    return 0;
}

/* A parked call's clock never stops: it resumes with the deadline it had,
 * and its lease bound as the renewals left it. */
int calls_unpark(struct calls *c, double started, double *deadline, double *lease_until,
                 const struct calls_record **rec) {
    pthread_mutex_lock(&c->mu);
    int j = 0;
    while (j < c->nparked && c->parked[j].started != started) j++;
    if (j == c->nparked) {
        pthread_mutex_unlock(&c->mu);
        return -1;
    }
    struct calls_call old = c->run;
    c->run = c->parked[j];
    c->parked[j] = c->parked[--c->nparked];
    c->signalled = 0;
    *deadline = c->run.deadline;
    *lease_until = c->run.lease_until;
    *rec = c->run.rec;
    pthread_mutex_unlock(&c->mu);
    free(old.rec); /* (none: a parked call leaves no call on the CPU) */
    return 0;
}

void calls_set_in_io(struct calls *c, int in_io) { atomic_store(&c->in_io, in_io); }

void calls_set_ending(struct calls *c, double seconds) {
    pthread_mutex_lock(&c->mu);
    c->ending = seconds;
    pthread_mutex_unlock(&c->mu);
    atomic_store(&c->in_io, seconds > 0);
}

double calls_lease_until(struct calls *c) {
    pthread_mutex_lock(&c->mu);
    double until = c->run.lease_until;
    pthread_mutex_unlock(&c->mu);
    return until;
}

/* --- main thread ---------------------------------------------------------------- */

int calls_watch(double now, double grace, int *newly) {
    int stuck = 0;
    *newly = 0;
    for (int i = 0; i < nslots; i++) {
        struct calls *c = slots[i];
        pthread_mutex_lock(&c->mu);
        const struct calls_call *run = &c->run;
        if (run->deadline > 0 && now >= run->deadline && !c->over) {
            if (!atomic_load(&c->in_io) && now - c->signalled >= 0.25) {
                c->signalled = now;
                pthread_kill(c->tid, CALLS_TIMEOUT_SIGNAL);
            }
            if (!c->stuck && now >= run->deadline + grace + c->ending) {
                c->stuck = 1;
                *newly = 1;
                char ids[512] = "";
                if (run->rec) calls_ids_text(run->rec, ids, sizeof ids);
                log_fmt(LOG_ERROR, "t%d: a call of %s (shard %d, ids %s) runs %.1f s past its timeout and cannot be "
                        "stopped (JIT-compiled code or a foreign call)", c->index, run->rec ? run->rec->worker.p : "",
                        run->rec ? run->rec->shard : -1, ids, now - run->deadline);
            }
        }
        stuck += c->stuck;
        pthread_mutex_unlock(&c->mu);
    }
    return stuck;
}

int calls_stuck(void) {
    int n = 0;
    for (int i = 0; i < nslots; i++) n += slots[i]->stuck;
    return n;
}

int calls_is_stuck(const struct calls *c) { return c->stuck; }

void calls_each_leased(void (*fn)(int thread, const char *key, void *arg), void *arg) {
    char key[512];
    for (int i = 0; i < nslots; i++) {
        struct calls *c = slots[i];
        /* j = -1: the call on the CPU; j >= 0: the parked ones. Copied out one
         * at a time: fn does Redis I/O and is called without the lock (a call
         * that ends meanwhile gets one renewal too many: harmless, renew.lua
         * never takes a lease another holds). */
        for (int j = -1;; j++) {
            pthread_mutex_lock(&c->mu);
            int more = j < c->nparked;
            const struct calls_call *call = j < 0 ? &c->run : more ? &c->parked[j] : NULL;
            int busy = call && call->rec && call->rec->key.p && call->rec->key.p[0];
            if (busy) snprintf(key, sizeof key, "%s", call->rec->key.p);
            pthread_mutex_unlock(&c->mu);
            if (!more) break;
            if (busy) fn(i, key, arg);
        }
    }
}

/* Only calls that started before the renewal was sent take it: a call that
 * began later fetched, and so leased, on its own. Only that thread's calls:
 * with elastic hosts a shard can move between threads of one host (each has
 * a token of its own), and another thread's renewal says nothing of this
 * one's lease. */
static void calls_renewed(struct calls_call *call, const char *key, double sent, double until) {
    if (call->rec && call->rec->key.p && call->started <= sent && strcmp(call->rec->key.p, key) == 0)
        call->lease_until = until == 0 || until > call->lease_until ? until : call->lease_until;
}

void calls_lease_renewed(int thread, const char *key, double sent, double until) {
    if (thread < 0 || thread >= nslots) return;
    struct calls *c = slots[thread];
    pthread_mutex_lock(&c->mu);
    if (c->run.deadline > 0) calls_renewed(&c->run, key, sent, until);
    for (int j = 0; j < c->nparked; j++) calls_renewed(&c->parked[j], key, sent, until);
    pthread_mutex_unlock(&c->mu);
}

/* A call's timeout from its start and deadline (deadline = start + timeout
 * on the monotonic clock), to the microsecond: the subtraction alone gives
 * 599.9999999999995 for 600 once the clock is large enough that start +
 * timeout rounds. */
static double calls_span(double started, double deadline) {
    return round((deadline - started) * 1e6) / 1e6;
}

int calls_list(int i, double now, struct calls_info *out, int max) {
    if (i < 0 || i >= nslots) return 0;
    struct calls *c = slots[i];
    int n = 0;
    pthread_mutex_lock(&c->mu);
    for (int j = -1; j < c->nparked; j++) {
        const struct calls_call *call = j < 0 ? &c->run : &c->parked[j];
        if (j < 0 && !(call->deadline > 0)) continue;
        if (n < max) {
            struct calls_info *o = &out[n];
            snprintf(o->worker, sizeof o->worker, "%s", call->rec ? call->rec->worker.p : "");
            o->shard = call->rec ? call->rec->shard : -1;
            o->age = now - call->started;
            o->timeout = calls_span(call->started, call->deadline);
            o->parked = j >= 0;
        }
        n++;
    }
    pthread_mutex_unlock(&c->mu);
    return n;
}

void calls_dump(int i, FILE *f, double now) {
    if (i < 0 || i >= nslots) return;
    struct calls *c = slots[i];
    char ids[4096];
    pthread_mutex_lock(&c->mu);
    if (c->run.deadline > 0)
        fprintf(f, "call: running %.3f s of its timeout %.3f s%s\n", now - c->run.started,
                c->run.deadline - c->run.started, c->stuck ? " (stuck: the process is being replaced)" : "");
    for (int j = 0; j < c->nparked; j++) {
        const struct calls_call *p = &c->parked[j];
        ids[0] = 0;
        if (p->rec) calls_ids_text(p->rec, ids, sizeof ids);
        fprintf(f, "parked: %s shard %d, ids %s: running %.3f s of its timeout %.3f s (waiting in luakiq's I/O)\n",
                p->rec ? p->rec->worker.p : "", p->rec ? p->rec->shard : -1, ids, now - p->started,
                p->deadline - p->started);
    }
    pthread_mutex_unlock(&c->mu);
}

/* Per-worker timeout counts: a handful of workers, so a small array under
 * one mutex (a timeout is rare: no need for anything faster). */
#define CALLS_TIMEOUT_NAMES 256
static pthread_mutex_t timeouts_mu = PTHREAD_MUTEX_INITIALIZER;
static struct { char worker[128]; long long n; } timeouts[CALLS_TIMEOUT_NAMES];
static int ntimeouts;

void calls_count_timeout(const char *worker) {
    pthread_mutex_lock(&timeouts_mu);
    int k = 0;
    while (k < ntimeouts && strcmp(timeouts[k].worker, worker) != 0) k++;
    if (k == ntimeouts && ntimeouts < CALLS_TIMEOUT_NAMES)
        snprintf(timeouts[ntimeouts++].worker, sizeof timeouts[0].worker, "%s", worker);
    if (k < ntimeouts) timeouts[k].n++;
    pthread_mutex_unlock(&timeouts_mu);
}

int calls_timeouts(int k, char *worker, size_t len, long long *n) {
    pthread_mutex_lock(&timeouts_mu);
    int ok = k >= 0 && k < ntimeouts;
    if (ok) { snprintf(worker, len, "%s", timeouts[k].worker); *n = timeouts[k].n; }
    pthread_mutex_unlock(&timeouts_mu);
    return ok;
}
