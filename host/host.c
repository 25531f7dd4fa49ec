/* host.c - the main thread of `luakiq run`.
 *
 * Design: the main thread owns one libevent event_base and never runs a job.
 * It handles signals (evsignal: TERM/INT stop gracefully, a second INT exits at
 * once, TTIN writes a thread dump), subscribes to the wake channel and routes
 * each message (a shard prefix published by a push) to the one worker thread
 * that owns that shard (a pause's message instead has the plan read the
 * paused queues for the threads and acknowledge: pause.c), and notices when
 * worker threads finish (they call host_thread_done from their own thread,
 * which activates an event: libevent is initialised with pthread support
 * for that). Worker threads have every
 * signal blocked (runner_start_all), so handlers only ever run here. With
 * --web, the HTTP server (web.c) runs on a thread of its own with its own VM:
 * nothing a request does (a listing, a slow client, a flood of connections)
 * delays this loop's wake-ups, renewals, signals or watchdogs; so does the
 * replies listener of --replies, on another thread and VM.
 *
 * Timeouts (the design: calls.c): a watchdog timer (every 100 ms) has
 * calls_watch signal the threads whose call is past its deadline; a call
 * still running HOST_GRACE seconds later makes its thread stuck. Then the
 * host stops the other threads gracefully and leaves the loop without
 * waiting for the stuck one; core.host_run's caller fails the stuck call's
 * jobs and replaces the process. The lease timer renews the lease of every
 * call in flight (calls_each_leased) and tells the calls how long they hold
 * it (calls_lease_renewed).
 *
 * Reload (HUP): the plan's reload function checks the new code in the main
 * VM's thread (in a VM of its own, entry.c) and, when it may run, the
 * threads are asked to switch (runner_request_reload); each does so between
 * two calls, on its own. The watchdog timer notices when every thread is
 * done. A HUP before every thread has started, or while stopping, is
 * ignored with a log line; before host_run it is caught too (never the
 * default action, which ends the process).
 *
 * systemd (notify.c, with NOTIFY_SOCKET set): READY=1 once every worker thread
 * has started, WATCHDOG=1 from a timer on this loop, STOPPING=1 as soon as a
 * stop that ends the process is asked for, RELOADING=1 when a HUP is taken
 * and READY=1 again once it is refused or every thread has switched. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <event2/event.h>
#include <event2/thread.h>
#include "calls.h"
#include "host.h"
#include "log.h"
#include "notify.h"
#include "runner.h"
#include "store.h"
#include "sub.h"
#include "web.h"

struct host_route { const char *prefix; int thread; };

static struct {
    struct event_base *base;
    struct event *done_ev;
    const struct host_plan *plan;
    struct host_route *routes;
    int nroutes;
    int ints, terms;
    int ready;                    /* every worker thread has started */
    int reload_gen;               /* the reload the threads are switching to; 0: none */
    struct event *watch_ev;
    struct event *renew_ev;
    struct event *tick_ev;        /* plan->tick (the hosts heartbeat) */
    store *renew_store;           /* main thread's own connection, for renewals */
    struct sub_sharded *ssub;     /* the sharded wake-up subscriber (a cluster), or NULL */
} host;

static int host_route_cmp(const void *a, const void *b) {
    return strcmp(((const struct host_route *)a)->prefix, ((const struct host_route *)b)->prefix);
}

/* The paused queues may have changed (luakiq pause): the plan reads them,
 * hands them to the worker threads and acknowledges (pause.c). */
static void host_pause(void) {
    if (host.plan->on_pause) host.plan->on_pause(host.plan->pause_ud);
}

/* Wake channel message: a shard prefix, or plan->pause_msg; NULL after a
 * (re)subscribe (messages may have been missed: every thread is woken; a
 * missed pause is read at the next heartbeat, within 2 s, not here: after a
 * failover every sharded subscriber resubscribes, and a Redis call per
 * resubscribe on this loop, to a node that may be gone, would hold the
 * wake-ups behind it). A prefix, a NUL and a job id is a cancel
 * (scripts/redis/cancel.lua): the calls in flight with that job are marked
 * (calls_cancel) and the shard's thread is woken like for a push, so that a
 * parked call is stopped at once. */
static void host_on_wake(const char *msg, size_t len, void *arg) {
    (void)arg;
    if (!msg) { runner_wake(-1, NULL); return; }
    const char *pm = host.plan->pause_msg;
    if (pm && len == strlen(pm) && memcmp(msg, pm, len) == 0) { host_pause(); return; }
    char buf[512];
    const char *nul = memchr(msg, 0, len);
    if (nul) {
        size_t plen = (size_t)(nul - msg);
        if (plen >= sizeof buf) return;
        memcpy(buf, msg, plen);
        buf[plen] = 0;
        calls_cancel(buf, nul + 1, len - plen - 1, runner_monotonic());
        len = plen;
    }
    if (len >= sizeof buf) return;
    memcpy(buf, msg, len);
    buf[len] = 0;
    struct host_route key = {buf, 0};
    struct host_route *r = bsearch(&key, host.routes, (size_t)host.nroutes, sizeof key, host_route_cmp);
    /* A prefix not routed: on an elastic host (per-thread tokens) it may be
     * a shard a reshard created since the start (scripts/luakiq/ops/reshard.lua),
     * which the threads serve now: every thread gets it, as below. */
    if (!r && !host.plan->thread_tokens) return;
    if (r && r->thread >= 0) { runner_wake(r->thread, buf); return; }
    /* thread -1 (elastic hosts): the shard moves between threads, so every
     * thread gets the message; those not holding it ignore it */
    for (int i = 0; i < host.plan->nthreads; i++) runner_wake(i, buf);
}

/* The concurrency key of the queue of a shard prefix "NS:{QUEUE:SHARD}:":
 * "NS:{QUEUE}:running" (scripts/luakiq/lib/keys.lua running()). 0 on success. */
static int host_running_key(const char *prefix, char *out, size_t len) {
    const char *open = strchr(prefix, '{'), *close = open ? strchr(open, '}') : NULL;
    if (!close) return -1;
    const char *colon = NULL;
    for (const char *c = open; c < close; c++) if (*c == ':') colon = c;
    if (!colon) return -1;
    int n = snprintf(out, len, "%.*s}:running", (int)(colon - prefix), prefix);
    return n > 0 && (size_t)n < len ? 0 : -1;
}

/* Renews the lease of one shard whose batch is still performing on thread
 * `thread`, and the concurrency units its call holds (units_renew.lua:
 * nothing when it holds none), in one round trip. The lease is the thread's
 * own token's with elastic hosts (plan->thread_tokens), else the host's. */
static void host_renew_one(int thread, const char *prefix, void *arg) {
    (void)arg;
    char ms[32], err[256], running[600];
    const char *token = host.plan->lease_token;
    if (host.plan->thread_tokens && thread >= 0 && thread < host.plan->nthreads && host.plan->thread_tokens[thread])
        token = host.plan->thread_tokens[thread];
    snprintf(ms, sizeof ms, "%ld", host.plan->lease_ms);
    const char *argv[] = {prefix, token, ms};
    size_t lens[] = {strlen(prefix), strlen(token), strlen(ms)};
    const char *uargv[] = {running, prefix, ms};
    size_t ulens[] = {0, strlen(prefix), strlen(ms)};
    struct store_cmd cmds[2] = {{"renew", 1, 3, argv, lens}, {"units_renew", 1, 3, uargv, ulens}};
    int n = 1;
    if (host_running_key(prefix, running, sizeof running) == 0) {
        ulens[0] = strlen(running);
        n = 2;
    }
    store_reply *r[2] = {NULL, NULL};
    double sent = runner_monotonic();
    if (store_pipeline(host.renew_store, n, cmds, r, err, sizeof err) < 0) {
        log_fmt(LOG_WARN, "lease renewal failed: %s", err);
        return;
    }
    if (store_reply_type(r[0]) == STORE_INTEGER && store_reply_int(r[0]) == 0) {
        log_fmt(LOG_ERROR, "lease of %s lost while its batch runs: another host may take the shard over", prefix);
        calls_lease_renewed(thread, prefix, sent, 0);
    } else if (store_reply_type(r[0]) == STORE_INTEGER) {
        calls_lease_renewed(thread, prefix, sent, sent + (double)host.plan->lease_ms / 1000.0);
    }
    for (int i = 0; i < n; i++) store_reply_free(r[i]);
}

/* Timer, every renew_ms: a batch longer than the lease TTL keeps its shard.
 * Idle shards need no renewal (their holder re-acquires on its next fetch). */
static void host_on_renew(evutil_socket_t fd, short what, void *arg) {
    (void)fd; (void)what; (void)arg;
    char err[256];
    if (!host.renew_store || store_broken(host.renew_store)) {
        if (host.renew_store && store_reconnect(host.renew_store, err, sizeof err) < 0) return;
        if (!host.renew_store && !(host.renew_store = store_open(host.plan->redis_url, 5, err, sizeof err))) {
            log_fmt(LOG_WARN, "lease renewal: %s", err);
            return;
        }
    }
    calls_each_leased(host_renew_one, NULL);
}

/* The TTIN dump: written to a new file of a random name beside the path
 * (mkstemp: created, never opened through a symlink someone planted, mode
 * 0600), then renamed over the path (which replaces a symlink there
 * instead of following it). */
static void host_dump(void) {
    const char *path = host.plan->dump_path;
    if (!path) { log_fmt(LOG_ERROR, "TTIN: no dump_path (the start's log says why)"); return; }
    char tmp[1100];
    snprintf(tmp, sizeof tmp, "%s.XXXXXX", path);
    int fd = mkstemp(tmp);
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (!f) {
        if (fd >= 0) { close(fd); unlink(tmp); }
        log_fmt(LOG_ERROR, "TTIN: cannot write %s", tmp);
        return;
    }
    fprintf(f, "luakiq thread dump, pid %d\n\n", (int)getpid());
    runner_dump(f);
    fclose(f);
    if (rename(tmp, path) != 0) {
        log_fmt(LOG_ERROR, "TTIN: cannot rename to %s", path);
        unlink(tmp);
        return;
    }
    log_fmt(LOG_INFO, "TTIN: thread dump written to %s", path);
}

/* TTIN, step 2 (300 ms later): the threads that reached a safe point have
 * stored their tracebacks; write the dump. */
static void host_on_dump_timer(evutil_socket_t fd, short what, void *arg) {
    (void)fd; (void)what; (void)arg;
    host_dump();
}

/* "running N worker threads": the STATUS of every READY=1. */
static void host_notify_running(void) {
    char status[64];
    snprintf(status, sizeof status, "running %d worker threads", runner_count());
    notify_ready(status);
}

static void host_notify_ready(void);

/* HUP: see the design note. The check runs here, on the loop (loading DIR
 * takes what the start's load took; wake-ups and renewals wait meanwhile). */
static void host_reload(void) {
    if (runner_stopping()) { log_fmt(LOG_INFO, "HUP: ignored: the host is stopping"); return; }
    host_notify_ready(); /* the threads may be up since the last watch tick */
    if (!host.ready) {
        log_fmt(LOG_INFO, "HUP: ignored: the worker threads are still starting (each loads DIR as it is now)");
        return;
    }
    if (!host.plan->reload) { log_fmt(LOG_INFO, "HUP: ignored: nothing to reload"); return; }
    notify_reloading("reloading the script directory");
    if (!host.plan->reload(host.plan->reload_ud)) {
        if (!host.reload_gen) host_notify_running(); /* refused: the old code runs, as before */
        return;
    }
    host.reload_gen = runner_request_reload();
}

/* Watch timer: once every thread has switched (or kept its old code after a
 * failure, which it logged), one line and READY=1. */
static void host_notify_reloaded(void) {
    int switched;
    if (!host.reload_gen || !runner_reloaded(host.reload_gen, &switched)) return;
    host.reload_gen = 0;
    log_fmt(LOG_INFO, "HUP: reload done: %d of %d worker threads run the new code", switched, runner_count());
    host_notify_running();
}

static void host_on_signal(evutil_socket_t sig, short what, void *arg) {
    (void)what; (void)arg;
    if (sig == SIGHUP) { host_reload(); return; }
    if (sig == SIGTTIN) {
        /* step 1: ask every thread for its own traceback */
        runner_request_traces();
        struct timeval tv = {0, 300000};
        event_base_once(host.base, -1, EV_TIMEOUT, host_on_dump_timer, NULL, &tv);
        return;
    }
    if (sig == SIGTERM) host.terms++;
    /* An INT after a TERM is the second one: whoever sends it wants out now. */
    if (sig == SIGINT && (host.ints++ > 0 || host.terms > 0)) {
        log_fmt(LOG_WARN, "second INT: exiting now; in-flight jobs return on the next start");
        _exit(130);
    }
    if (!runner_stopping()) {
        log_fmt(LOG_INFO, "%s: stopping; running batches finish first", sig == SIGTERM ? "TERM" : "INT");
        runner_request_stop();
        notify_stopping(sig == SIGTERM ? "TERM: stopping; running batches finish first"
                                       : "INT: stopping; running batches finish first");
    }
}

/* Any thread: a worker thread has returned. */
static void host_thread_done(void *arg) {
    (void)arg;
    event_active(host.done_ev, EV_READ, 0);
}

#define HOST_GRACE 1.0
#define HOST_FD_RESERVE 32
#define HOST_FD_PER_THREAD 8

/* Whether every worker thread has started: loaded its VM and workers and
 * logged "thread started". A thread reports its Lua memory with each state
 * it sets, the first one just after that line, so a non-zero lua_bytes is
 * that first report. */
static int host_threads_up(void) {
    for (int i = 0; i < runner_count(); i++) {
        struct runner_stat st;
        runner_stats(i, &st);
        if (st.lua_bytes == 0) return 0;
    }
    return runner_count() > 0;
}

/* READY=1 once every worker thread has started (watch timer). */
static void host_notify_ready(void) {
    if (host.ready || !host_threads_up()) return;
    host.ready = 1;
    host_notify_running();
}

/* STOPPING=1 for every stop that ends the process. Not for a stuck call's
 * replacement: it re-executes the binary in place (same pid; the new image
 * sends READY=1 again), and after a STOPPING=1 systemd would take it for a
 * process late to exit and kill it at TimeoutStopSec. A replacement ends the
 * process after all when a signal or a fatal error came too. */
static void host_notify_stopping(void) {
    if (calls_stuck() && !runner_fatal() && !host_signalled()) return;
    notify_stopping(runner_fatal() ? "stopping: fatal error" : "stopping");
}

/* Timer, every 100 ms: call deadlines (see the design note above). */
static void host_on_watch(evutil_socket_t fd, short what, void *arg) {
    (void)fd; (void)what; (void)arg;
    int newly, stuck = calls_watch(runner_monotonic(), HOST_GRACE, &newly);
    if (runner_stopping()) host_notify_stopping();
    else { host_notify_ready(); host_notify_reloaded(); }
    if (!stuck) return;
    if (newly && !runner_stopping()) {
        log_fmt(LOG_ERROR, "replacing the process: the other threads finish and ack first");
        notify_status("replacing the process: a call could not be stopped at its timeout");
        runner_request_stop();
    }
    if (runner_finished() >= runner_count()) event_base_loopbreak(host.base);
}

/* Before host_run (see host.h); async-signal context: one atomic store. A
 * HUP is only noted (host_run logs that it was ignored). */
static volatile sig_atomic_t host_early_sig, host_early_hup;
static void host_on_early_signal(int sig) {
    if (sig == SIGHUP) { host_early_hup = 1; return; }
    if (sig == SIGINT && host_early_sig) _exit(130);
    host_early_sig = sig;
    runner_note_stop();
}

void host_catch_signals(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = host_on_early_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
}

/* Timer, every plan->tick_ms: the plan's periodic main-thread work. */
static void host_on_tick(evutil_socket_t fd, short what, void *arg) {
    (void)fd; (void)what; (void)arg;
    host.plan->tick(host.plan->tick_ud);
}

int host_signalled(void) { return host.terms + host.ints > 0 || host_early_sig != 0; }

static void host_on_done(evutil_socket_t fd, short what, void *arg) {
    (void)fd; (void)what; (void)arg;
    if (runner_finished() < runner_count()) {
        /* One thread ended on its own (fatal error): stop the others too. */
        if (!runner_stopping()) runner_request_stop();
        return;
    }
    event_base_loopbreak(host.base);
}

/* The main thread of `luakiq run`, from start to exit code: one libevent
 * loop owns signals, the wake-up subscriber and the timeout watchdog, so
 * worker threads never handle a signal or a socket of the host's (the HTTP
 * listener has a thread and a loop of its own, web.c). Why one loop: every cross-thread event becomes a callback here, in
 * one thread, with no lock around the plan's Lua state. */
int host_subscribe_shard(const char *prefix) {
    if (!host.ssub) return 0;
    char chan[512];
    if (snprintf(chan, sizeof chan, "%swake", prefix) >= (int)sizeof chan) return -1;
    return sub_sharded_add(host.ssub, chan);
}

int host_run(const struct host_plan *plan) {
    char err[512];
    int code = 1;
    memset(&host, 0, sizeof host);
    host.plan = plan;
    evthread_use_pthreads();
    host.base = event_base_new();
    if (!host.base) { log_fmt(LOG_ERROR, "cannot create the event loop"); return 1; }
    host.routes = calloc((size_t)plan->nroutes + 1, sizeof *host.routes);
    for (int i = 0; i < plan->nroutes; i++)
        host.routes[i] = (struct host_route){plan->route_prefix[i], plan->route_thread[i]};
    host.nroutes = plan->nroutes;
    qsort(host.routes, (size_t)host.nroutes, sizeof *host.routes, host_route_cmp);

    int sigs[] = {SIGTERM, SIGINT, SIGTTIN, SIGHUP};
    enum { NSIGS = sizeof sigs / sizeof sigs[0] };
    struct event *sev[NSIGS];
    if (host_early_hup) log_fmt(LOG_INFO, "HUP: ignored: it came before the start (each thread loads DIR as it is now)");
    host_early_hup = 0;
    for (int i = 0; i < NSIGS; i++) {
        sev[i] = evsignal_new(host.base, sigs[i], host_on_signal, NULL);
        event_add(sev[i], NULL);
    }
    signal(SIGPIPE, SIG_IGN);
    host.done_ev = event_new(host.base, -1, 0, host_on_done, NULL);
    struct web *web = NULL, *replies = NULL;
    int reserve = HOST_FD_RESERVE + HOST_FD_PER_THREAD * plan->nthreads, failed = 0;
    if (plan->web.addr && plan->web.addr[0]) {
        /* Bound before any worker starts: a busy port is a start-up error.
         * Descriptors the web server leaves free: those open now and this
         * reserve, for what worker threads open later (each its Redis
         * connection, eventfd, HTTP transfers, child processes' pipes) and
         * the main thread's reconnects. */
        struct web_opts wo = plan->web;
        wo.name = "web";
        wo.fd_reserve = reserve;
        web = web_start(&wo, &plan->web_app, err, sizeof err);
        failed = !web;
        /* the replies listener also leaves room for every connection the
         * web one may take */
        reserve += wo.max_connections;
    }
    if (!failed && plan->replies.addr && plan->replies.addr[0]) {
        struct web_opts ro = plan->replies;
        ro.name = "replies";
        ro.fd_reserve = reserve;
        replies = web_start(&ro, &plan->replies_app, err, sizeof err);
        failed = !replies;
    }
    if (failed) {
        log_fmt(LOG_ERROR, "%s", err);
        web_stop(web);
        for (int i = 0; i < NSIGS; i++) event_free(sev[i]);
        event_free(host.done_ev);
        event_base_free(host.base);
        free(host.routes);
        return 1;
    }
    struct sub *sub = NULL;
    if (plan->wake_channel && plan->wake_channel[0]) {
        sub = sub_open(host.base, plan->redis_url, plan->wake_channel, host_on_wake, NULL, err, sizeof err);
        if (!sub) log_fmt(LOG_WARN, "no wake-up subscriber (%s): new jobs wait up to poll_interval", err);
    }
    /* On a Redis Cluster the queue scripts SPUBLISH on each shard's own
     * channel, in the shard's slot (the plain subscriber above still hears
     * producers that PUBLISH on the namespace's channel). */
    struct sub_sharded *ssub = NULL;
    if (plan->sharded_wake) {
        char **chans = calloc((size_t)plan->nroutes + 1, sizeof *chans);
        int nch = 0;
        for (int i = 0; chans && i < plan->nroutes; i++) {
            size_t len = strlen(plan->route_prefix[i]);
            if (!(chans[nch] = malloc(len + 5))) break;
            memcpy(chans[nch], plan->route_prefix[i], len);
            memcpy(chans[nch++] + len, "wake", 5);
        }
        if (chans && nch == plan->nroutes)
            ssub = sub_sharded_open(host.base, plan->redis_url, nch, (const char *const *)chans, host_on_wake, NULL,
                                     err, sizeof err);
        else snprintf(err, sizeof err, "out of memory");
        if (!ssub) log_fmt(LOG_WARN, "no sharded wake-up subscriber (%s): new jobs wait up to poll_interval", err);
        host.ssub = ssub;
        for (int i = 0; i < nch; i++) free(chans[i]);
        free(chans);
    }
    if (plan->lease_token && plan->lease_token[0] && plan->renew_ms > 0) {
        struct timeval tv = {plan->renew_ms / 1000, (plan->renew_ms % 1000) * 1000};
        host.renew_ev = event_new(host.base, -1, EV_PERSIST, host_on_renew, NULL);
        event_add(host.renew_ev, &tv);
    }
    notify_open(host.base);
    struct timeval watch_tv = {0, 100000};
    host.watch_ev = event_new(host.base, -1, EV_PERSIST, host_on_watch, NULL);
    event_add(host.watch_ev, &watch_tv);
    if (plan->tick && plan->tick_ms > 0) {
        struct timeval tv = {plan->tick_ms / 1000, (plan->tick_ms % 1000) * 1000};
        host.tick_ev = event_new(host.base, -1, EV_PERSIST, host_on_tick, NULL);
        event_add(host.tick_ev, &tv);
        /* and once at the start: a host shows up at once, not a tick later */
        struct timeval now_tv = {0, 0};
        event_base_once(host.base, -1, EV_TIMEOUT, host_on_tick, NULL, &now_tv);
    }
    if (runner_stopping()) {
        /* a TERM or INT came before the loop (host_catch_signals) */
        log_fmt(LOG_INFO, "%s before the start: stopping; nothing was taken",
                host_early_sig == SIGINT ? "INT" : "TERM");
    } else if (runner_start_all(plan->nthreads, plan->boots, plan->thread_main, host_thread_done, NULL) < 0) {
        log_fmt(LOG_ERROR, "cannot start %d worker threads", plan->nthreads);
        runner_request_stop();
    }
    if (runner_count() > 0) event_base_dispatch(host.base);

    host_notify_stopping();
    notify_close();
    code = runner_exit_code();
    web_stop(web); /* the dashboard served while threads finished; not after */
    web_stop(replies);
    runner_join_all();
    sub_free(sub);
    host.ssub = NULL;
    sub_sharded_free(ssub);
    for (int i = 0; i < NSIGS; i++) event_free(sev[i]);
    event_free(host.done_ev);
    if (host.renew_ev) event_free(host.renew_ev);
    if (host.tick_ev) event_free(host.tick_ev);
    event_free(host.watch_ev);
    store_close(host.renew_store);
    event_base_free(host.base);
    free(host.routes);
    return runner_fatal() ? (code ? code : 1) : code;
}
