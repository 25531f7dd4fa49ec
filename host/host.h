/* host.h - the main thread of `luakiq run`: event loop, signals, wake-ups. */
#ifndef LUAKIQ_HOST_H
#define LUAKIQ_HOST_H
#include <stddef.h>
#include "web.h"

struct host_plan {
    int nthreads;
    const char *const *boots;     /* per thread, handed to thread_main */
    int (*thread_main)(const char *boot); /* each worker thread's body */
    const char *redis_url;
    const char *wake_channel;     /* "" disables the subscriber */
    int sharded_wake;             /* Redis Cluster: SSUBSCRIBE to each route's PREFIX "wake" too */
    int nroutes;                  /* shard prefix -> thread that owns it (-1: every thread) */
    const char *const *route_prefix;
    const int *route_thread;
    const char *dump_path;        /* TTIN dump file */
    const char *lease_token;      /* this host's lease token */
    const char *const *thread_tokens; /* elastic hosts: thread i's own lease token (renewals);
                                   * NULL: every thread leases with lease_token */
    long lease_ms, renew_ms;      /* lease TTL; how often busy threads' leases are renewed */
    struct web_opts web;          /* web.addr: "ADDR:PORT" to serve HTTP on; NULL or "" for none
                                   * (fd_reserve: host_run sets it) */
    struct web_app web_app;       /* what answers the requests, on the web thread */
    struct web_opts replies;      /* the replies listener (--replies: the reply routes only, on a web
                                   * thread of its own); replies.addr NULL or "" for none */
    struct web_app replies_app;
    void (*tick)(void *ud);       /* called on the main thread every tick_ms (NULL: never) */
    void *tick_ud;
    long tick_ms;                 /* also once right after the threads start */
    const char *pause_msg;        /* a wake-up channel message that is no shard prefix: the paused
                                   * queues changed (luakiq pause); NULL: none */
    void (*on_pause)(void *ud);   /* then called on the main thread, and after each (re)subscribe */
    void *pause_ud;
    int (*reload)(void *ud);      /* SIGHUP, main thread: 1 when the threads may switch to the
                                   * new code, 0 when refused (it logged why); NULL: no reload */
    void *reload_ud;
};

/* Runs the worker threads until they stop (TERM/INT, fatal error, or all of
 * them returning). Blocks the calling (main) thread. Returns the exit code;
 * 1 without starting any thread when the web or replies address cannot be
 * bound. */
int host_run(const struct host_plan *plan);
/* Main thread, while host_run runs (from the tick): the shard of prefix P
 * appeared (a reshard to more shards): on a Redis Cluster, its wake-up
 * channel P "wake" is subscribed too. 0 also when there is nothing to do. */
int host_subscribe_shard(const char *prefix);
/* Main thread, before host_run: a TERM or INT from now on asks for a stop
 * (runner_stopping) instead of killing the process, so a host stopped while
 * it still waits for Redis or registers exits 0 having taken nothing. A second
 * INT exits 130 at once. host_run's own handlers replace these. SIGPIPE is
 * ignored from here on: a Redis that resets the connection while the host
 * starts is an error to retry, not the end of the process (exit 141). */
void host_catch_signals(void);
/* After host_run: whether a TERM or INT asked it to stop. */
int host_signalled(void);

#endif
