/* core.c - the basic services of `luakiq.core`: the clock, logging, and the
 * services of the calling worker thread (stop flag, wake-up mailbox, state for
 * TTIN, per-thread counters, fatal stop), and a perform call's side in the
 * thread's own VM.
 *
 * Threads: every function runs on the thread whose VM calls it and touches
 * only that thread's runner (runner_self(); NULL on the main thread, where the
 * thread services are no-ops or errors) and process-wide values that runner.c
 * guards. The TTIN safe point (core_safe_point) is the one place a worker's
 * own traceback is taken: only the thread itself ever looks into its VM.
 *
 * Timeouts (the design: calls.c): the runner runs each perform call in a
 * coroutine between core.call_begin and core.call_end. The call, its
 * deadline and its record are published in the thread's call slot (calls.c,
 * for the main thread's watch) and the deadline kept here in thread-locals:
 * this file is the VM's side. Past the deadline, the watch sends
 * CALLS_TIMEOUT_SIGNAL to this thread; the handler runs on this thread and
 * arms a count-1 hook on its own VM (what LuaJIT's profiler does: no other
 * thread ever touches the VM). The hook raises "timeout: ..." in every
 * coroutine but the runner's own until call_end disarms it, so a user pcall
 * cannot swallow it. LuaJIT checks no hook inside compiled traces, and a
 * blocking foreign call does not return: those calls are ended by replacing
 * the process (calls.c). luakiq's own waits (sleep, redis, http) bound
 * themselves by the deadline instead. The lease fence (core.fence) and a
 * cancel (core.cancel) raise their own errors through the same hook. */
#include <errno.h>
#include <stdio.h>
#include <signal.h>
#include <math.h>
#include <stdlib.h>
#include <pthread.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>
#include <lua.h>
#include <lauxlib.h>
#include "calls.h"
#include "core.h"
#include "log.h"
#include "pause.h"
#include "runner.h"
#include "vm.h"

void core_safe_point(lua_State *L) {
    struct runner *r = runner_self();
    if (!r || !runner_trace_wanted(r)) return;
    luaL_traceback(L, L, "traceback (at a safe point):", 1);
    runner_set_trace(r, lua_tostring(L, -1));
    lua_pop(L, 1);
}

/* --- call deadlines ------------------------------------------------------ */

static _Thread_local lua_State *volatile core_call_main; /* the runner's state while a call runs */
static _Thread_local volatile sig_atomic_t core_call_expired;
static _Thread_local double core_call_deadline;          /* monotonic; 0: no call */
static _Thread_local double core_call_timeout;           /* seconds, for messages */
static _Thread_local volatile sig_atomic_t core_call_fenced; /* stopped: its lease ran out */
static _Thread_local volatile sig_atomic_t core_call_cancel;  /* stopped: one of its jobs was cancelled */

/* The error the lease fence raises (core.fence), instead of the timeout's. */
static const char core_fenced_text[] =
    "lease lost: the shard's lease may have expired while this call waited (Redis unreachable, or the "
    "host stalled, longer than lease_ttl); the call was stopped so that the shard's next holder runs its jobs alone";

/* The error a cancel raises (core.cancel). */
static const char core_cancelled_text[] = "cancelled: a job of this call was cancelled (luakiq cancel)";

void core_timeout_text(char *buf, size_t len) {
    if (core_call_fenced) snprintf(buf, len, "%s", core_fenced_text);
    else if (core_call_cancel) snprintf(buf, len, "%s", core_cancelled_text);
    else snprintf(buf, len, "timeout: the call ran past its timeout of %g s", core_call_timeout);
}

/* core.raise_timeout(): raises the running call's timeout error (a wait the
 * runner ended at the call's deadline). */
static int core_raise_timeout_l(lua_State *L) { return core_raise_timeout(L); }

int core_raise_timeout(lua_State *L) {
    char msg[sizeof core_fenced_text];
    core_timeout_text(msg, sizeof msg);
    lua_pushstring(L, msg);
    return lua_error(L);
}

/* Count hook armed by the signal handler: raises in the call's coroutines
 * (again at every instruction, so a user pcall cannot keep the call going);
 * silent in the runner's own state; gone once no call has expired. */
static void core_timeout_hook(lua_State *L, lua_Debug *ar) {
    (void)ar;
    if (!core_call_expired) { lua_sethook(L, NULL, 0, 0); return; }
    if (L == core_call_main) return;
    core_raise_timeout(L);
}

/* CALLS_TIMEOUT_SIGNAL, on the worker thread it was sent to. Async-signal
 * context: only sets thread-locals and the hook (LuaJIT's profiler arms its
 * hook from a signal handler the same way). A stray signal, or one that comes
 * after the call ended, finds no call and does nothing. */
static void core_on_timeout_signal(int sig) {
    (void)sig;
    lua_State *L = core_call_main;
    if (!L || core_call_deadline <= 0) return;
    core_call_expired = 1;
    lua_sethook(L, core_timeout_hook, LUA_MASKCOUNT, 1);
}

void core_install_timeouts(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = core_on_timeout_signal;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(CALLS_TIMEOUT_SIGNAL, &sa, NULL);
}

double core_call_remaining(void) {
    if (core_call_deadline <= 0) return -1;
    double left = core_call_deadline - runner_monotonic();
    return left > 0 ? left : 0;
}

double core_io_begin(void) {
    double left = core_call_remaining();
    struct calls *c = calls_self();
    if (left > 0 && c) calls_set_in_io(c, 1);
    return left;
}

void core_io_end(void) {
    struct calls *c = calls_self();
    if (core_call_deadline > 0 && c) calls_set_in_io(c, 0);
}

/* Makes a call (its deadline, its timeout for messages) the one this
 * thread's VM runs now: its thread-locals (its slot is calls.c's). */
static void core_call_enter(lua_State *L, double deadline, double timeout) {
    core_call_timeout = timeout;
    core_call_deadline = deadline;
    core_call_expired = 0;
    core_call_fenced = 0;
    core_call_cancel = 0;
    core_call_main = L;
}

/* Nothing runs on this thread's CPU for a call any more (it ended, or waits:
 * then its slot keeps it as parked, and the thread's state says waiting).
 * Returns whether its deadline passed (or the lease fence stopped it). */
static int core_call_leave(lua_State *L, int parked) {
    int expired = core_call_expired || (core_call_deadline > 0 && runner_monotonic() >= core_call_deadline);
    core_call_main = NULL;
    core_call_deadline = 0;
    core_call_expired = 0;
    core_call_fenced = 0;
    core_call_cancel = 0;
    lua_sethook(L, NULL, 0, 0);
    struct calls *c = calls_self();
    if (c && parked && calls_park(c) == 0) runner_set_state(runner_self(), RUNNER_WAITING, NULL, -1, NULL, NULL);
    else if (c) calls_clear(c);
    return expired;
}

/* How many jobs and done ids core_call_record reads into arrays on the C
 * stack; more go into a userdata. */
#define CORE_CALL_SMALL 16

/* Publishes the call core.call_begin starts in the thread's slot, with its
 * record read from the arguments 3.. (see core.call_begin). Every call of
 * the thread pays for this, so it reads with as few Lua API calls as it
 * can: the strings in place (an argument stays anchored for the whole
 * call, a job's id in its job, a done id in done) until calls_set has
 * copied them; of the done list only what is new; a job's fields with the
 * keys core_register interned (upvalues 1 and 2: "id", "retry_count"),
 * where lua_getfield would hash the key every time; and a call of one job
 * from its two arguments, with no table to read. Returns the done ids'
 * slot (-1: no key). Raises on a bad argument or out of memory, before
 * anything is published. */
static int core_call_record(lua_State *L, struct calls *c, double started, double deadline, double lease) {
    struct calls_record rec = {0};
    struct calls_delta done = {0};
    if (!(rec.worker.p = lua_tolstring(L, 3, &rec.worker.len))) return luaL_argerror(L, 3, "worker expected");
    rec.shard = (int)luaL_checkinteger(L, 4);
    rec.batch.p = lua_tolstring(L, 5, &rec.batch.len); /* (NULL: nil) */
    rec.token.p = lua_tolstring(L, 6, &rec.token.len);
    done.key = rec.key.p = lua_tolstring(L, 7, &rec.key.len);
    if (lua_gettop(L) >= 13) rec.hook.p = lua_tolstring(L, 13, &rec.hook.len);
    done.reset = lua_toboolean(L, 9);
    done.slot = lua_isnumber(L, 10) ? (int)lua_tointeger(L, 10) : -1;
    int have = 0, ndone = 0;
    if (done.key) {
        have = calls_done_have(c, done.key, &done.slot, done.reset);
        ndone = lua_type(L, 8) == LUA_TTABLE ? (int)lua_objlen(L, 8) : 0;
    }
    done.n = ndone > have ? ndone - have : 0;
    int one = lua_type(L, 11) == LUA_TSTRING;
    if (!one) luaL_checktype(L, 11, LUA_TTABLE);
    rec.njobs = one ? 1 : (int)lua_objlen(L, 11);
    int n = rec.njobs + done.n;
    struct calls_str strs_small[CORE_CALL_SMALL], *strs = strs_small;
    double rcs_small[CORE_CALL_SMALL], *rcs = rcs_small;
    if (n > CORE_CALL_SMALL) {
        strs = lua_newuserdata(L, sizeof *strs * (size_t)n);
        rcs = lua_newuserdata(L, sizeof *rcs * (size_t)(rec.njobs + 1));
    }
    if (one) {
        strs[0].p = lua_tolstring(L, 11, &strs[0].len);
        rcs[0] = lua_tonumber(L, 12);
    }
    for (int i = 0; !one && i < rec.njobs; i++) {
        lua_rawgeti(L, 11, i + 1);               /* [job] */
        if (!lua_istable(L, -1)) return luaL_error(L, "core.call_begin: job %d is not a table", i + 1);
        lua_pushvalue(L, lua_upvalueindex(2));
        lua_rawget(L, -2);                       /* [job, retry_count] */
        rcs[i] = lua_tonumber(L, -1);
        lua_pushvalue(L, lua_upvalueindex(1));
        lua_rawget(L, -3);                       /* [job, retry_count, id] */
        if (lua_type(L, -1) != LUA_TSTRING) return luaL_error(L, "core.call_begin: job %d has no id", i + 1);
        strs[i].p = lua_tolstring(L, -1, &strs[i].len);
        lua_pop(L, 3);
    }
    for (int k = 0; k < done.n; k++) {
        struct calls_str *s = &strs[rec.njobs + k];
        lua_rawgeti(L, 8, have + k + 1);         /* [id] */
        if (lua_type(L, -1) != LUA_TSTRING) return luaL_error(L, "core.call_begin: done id %d is no string", have + k + 1);
        s->p = lua_tolstring(L, -1, &s->len);
        lua_pop(L, 1);
    }
    rec.ids = strs;
    rec.retry_counts = rcs;
    done.ids = strs + rec.njobs;
    int slot = calls_set(c, started, deadline, lease, &rec, done.key ? &done : NULL);
    if (slot == -2) return luaL_error(L, "core.call_begin: out of memory");
    return slot;
}

/* core.call_begin(timeout_s, lease_until, worker, shard, batch, token, key,
 * done, done_reset, slot, jobs [, retry_count [, hook]]) -> started, deadline
 * (monotonic), slot, cancelled: a perform call starts on this thread
 * (cancelled: one of its jobs was cancelled before it began, calls_cancel). lease_until:
 * when its shard's lease surely runs out (nil: never). The rest is its
 * record, what the main VM needs to fail its jobs should the call never
 * come back (calls.c): worker, shard, batch (nil: none), token (an elastic
 * thread's own lease token; nil: the host's); with key (its shard's
 * prefix), the ids done before the call in its fetch: done, a list that
 * grows by each call of the fetch (the thread keeps those it was given and
 * reads the new ones only; done_reset: another fetch's list starts over),
 * slot where the thread keeps them (pass it back with the key's next call;
 * nil: none); jobs ({id = , retry_count = } each) or, for a call of one
 * job, its id and retry_count; hook: the name of the hook the call runs
 * (luakiq.lib.hooks: a hook bounded by hook_timeout; nil: perform). */
static int core_call_begin(lua_State *L) {
    double timeout = luaL_checknumber(L, 1), lease = luaL_optnumber(L, 2, HUGE_VAL);
    double now = runner_monotonic();
    struct calls *c = calls_self();
    int top = lua_gettop(L), slot = c ? core_call_record(L, c, now, now + timeout, lease) : -1;
    lua_settop(L, top);
    core_call_enter(L, now + timeout, timeout);
    lua_pushnumber(L, now);
    lua_pushnumber(L, now + timeout);
    if (slot < 0) lua_pushnil(L);
    else lua_pushinteger(L, slot);
    lua_pushboolean(L, c && calls_cancelled(c, -1));
    return 4;
}

/* core.ack_pending(key, batch, slot) -> slot: the fetch of shard key
 * (batch: its id; nil: none) ended with every call done and its ack
 * deferred (calls_ack_pending: for the main VM, should this thread get
 * stuck before it sends it). slot: as core.call_begin's (nil: none). */
static int core_ack_pending(lua_State *L) {
    const char *key = luaL_checkstring(L, 1);
    size_t len = 0;
    const char *batch = lua_tolstring(L, 2, &len);
    int hint = lua_isnumber(L, 3) ? (int)lua_tointeger(L, 3) : -1;
    struct calls *c = calls_self();
    int slot = c ? calls_ack_pending(c, key, hint, batch ? batch : "", batch ? len : 0) : -1;
    if (slot < 0) lua_pushnil(L);
    else lua_pushinteger(L, slot);
    return 1;
}

/* core.call_pause(): the running call waits (yielded, in luakiq's I/O); the
 * thread may run other calls meanwhile (its slot keeps the call as parked:
 * calls_park). The Lua runner enforces its deadline while it waits. */
static int core_call_pause(lua_State *L) {
    core_call_leave(L, 1);
    return 0;
}

/* The thread's state as it was when the call of rec parked: performing its
 * jobs (the TTIN dump names them). */
static void core_call_performing(struct runner *r, const struct calls_record *rec) {
    char small[256], *ids = small;
    size_t n = calls_ids_text(rec, small, sizeof small);
    if (n >= sizeof small && (ids = malloc(n + 1))) calls_ids_text(rec, ids, n + 1);
    runner_set_state(r, RUNNER_PERFORMING, rec->worker.p, rec->shard, ids ? ids : small, rec->key.p);
    if (ids != small) free(ids);
}

/* core.call_resume(started, deadline, timeout) -> lease_ok, cancelled: the
 * paused call that started at `started` runs on (a deadline already passed
 * is the watchdog's at once). lease_ok is false when its lease bound has
 * passed: the runner then stops the call (core.fence) instead of letting it
 * go on beside the shard's next holder; cancelled: one of its jobs was
 * cancelled (the runner stops it: core.cancel). */
static int core_call_resume(lua_State *L) {
    double started = luaL_checknumber(L, 1), deadline = luaL_checknumber(L, 2), lease = HUGE_VAL;
    core_call_enter(L, deadline, luaL_checknumber(L, 3));
    struct calls *c = calls_self();
    const struct calls_record *rec = NULL;
    if (c && calls_unpark(c, started, &deadline, &lease, &rec) != 0) calls_set(c, started, deadline, HUGE_VAL, NULL, NULL);
    if (rec) core_call_performing(runner_self(), rec);
    lua_pushboolean(L, runner_monotonic() < lease);
    lua_pushboolean(L, c && calls_cancelled(c, -1));
    return 2;
}

/* core.fence(): stops the running call because its lease may be gone: raises
 * "lease lost: ..." now and, like a timeout, at every instruction of the
 * call's coroutines until call_end, so a user pcall cannot keep it going. */
static int core_fence(lua_State *L) {
    if (core_call_main) {
        core_call_fenced = 1;
        core_call_expired = 1;
        lua_sethook(core_call_main, core_timeout_hook, LUA_MASKCOUNT, 1);
    }
    return core_raise_timeout(L);
}

/* core.cancel(): stops the running call because one of its jobs was
 * cancelled: raises "cancelled: ..." now and, as the fence does, at every
 * instruction of the call's coroutines until call_end. */
static int core_cancel(lua_State *L) {
    if (core_call_main) {
        core_call_cancel = 1;
        core_call_expired = 1;
        lua_sethook(core_call_main, core_timeout_hook, LUA_MASKCOUNT, 1);
    }
    return core_raise_timeout(L);
}

/* core.cancels() -> n: how many times a call of this thread was marked
 * cancelled (the runner looks at its parked calls when it changes). */
static int core_cancels(lua_State *L) {
    struct calls *c = calls_self();
    lua_pushnumber(L, c ? calls_cancels(c) : 0);
    return 1;
}

/* core.call_cancelled(started) -> whether the parked call that started at
 * `started` was marked cancelled. */
static int core_call_cancelled(lua_State *L) {
    struct calls *c = calls_self();
    lua_pushboolean(L, c && calls_cancelled(c, luaL_checknumber(L, 1)));
    return 1;
}

/* core.lease_check(): inside a call whose lease bound has passed, core.fence();
 * inside one that was cancelled, core.cancel(); nothing otherwise (outside a
 * call, or on the main thread). Called before each luakiq.redis command a
 * call sends. */
static int core_lease_check(lua_State *L) {
    struct calls *c = calls_self();
    if (!c || core_call_deadline <= 0 || !core_call_main) return 0;
    if (calls_cancelled(c, -1)) return core_cancel(L);
    if (runner_monotonic() < calls_lease_until(c)) return 0;
    return core_fence(L);
}

/* --- hooks bounded off a worker thread ----------------------------------- */

/* How many VM instructions core_bound_hook lets pass between two looks at
 * the clock (the reload's check VM looks as often: entry.c). */
#define CORE_BOUND_COUNT 1000

static _Thread_local double core_bound_until;     /* monotonic; 0: no bounded call runs */
static _Thread_local const char *core_bound_why;  /* NULL until it ran out: "timeout" or "stopped" */

/* core.bounded's count hook: past the deadline, or once the host is
 * stopping (a TERM or INT), raises in the hook where it runs, and from then
 * on at every instruction, so that a pcall in the hook cannot keep it
 * going (as entry.c's check hook does). */
static void core_bound_hook(lua_State *L, lua_Debug *ar) {
    (void)ar;
    if (!core_bound_why) {
        if (runner_stopping()) core_bound_why = "stopped";
        else if (runner_monotonic() >= core_bound_until) core_bound_why = "timeout";
        else return;
        lua_sethook(L, core_bound_hook, LUA_MASKCOUNT, 1);
    }
    lua_pushstring(L, core_bound_why);
    lua_error(L);
}

/* core.bounded(timeout_s, fn, a, b) -> ok, value, why: fn(a, b) protected
 * (vm_pcall), stopped timeout_s seconds on, or when the host stops (why:
 * "timeout" or "stopped"; nil: it ended on its own). For the VMs that have
 * no watch (the main VM, the web thread's, the CLI's: luakiq.lib.hooks off
 * a worker thread): a count hook looks at the clock every CORE_BOUND_COUNT
 * instructions. LuaJIT checks no hook inside compiled traces: the caller
 * runs fn with the JIT off and its traces flushed. Code the hook cannot
 * reach (a blocking foreign call) is not bounded. Under a hook already set
 * (the reload's check VM, a worker's call) or inside another bounded call,
 * a plain protected call: that bound is the one that counts. */
static int core_bounded(lua_State *L) {
    double timeout = luaL_checknumber(L, 1);
    luaL_checktype(L, 2, LUA_TFUNCTION);
    lua_settop(L, 4);
    int outer = lua_gethook(L) == NULL && core_bound_until <= 0;
    if (outer) {
        core_bound_until = runner_monotonic() + timeout;
        core_bound_why = NULL;
        lua_sethook(L, core_bound_hook, LUA_MASKCOUNT, CORE_BOUND_COUNT);
    }
    int rc = vm_pcall(L, 2, 1);
    const char *why = NULL;
    if (outer) {
        lua_sethook(L, NULL, 0, 0);
        why = core_bound_why;
        core_bound_until = 0;
        core_bound_why = NULL;
    }
    lua_pushboolean(L, rc == 0);
    lua_insert(L, -2);
    if (why) lua_pushstring(L, why); else lua_pushnil(L);
    return 3;
}

/* core.mono() -> seconds of CLOCK_MONOTONIC (deadlines, timers). */
static int core_mono(lua_State *L) {
    lua_pushnumber(L, runner_monotonic());
    return 1;
}

/* core.call_end(njobs) -> expired, lease_until, fenced, cancelled: the call
 * (of njobs jobs: they count as performed) is over; expired: its deadline
 * passed while it ran, or the fence stopped it (fenced); lease_until: its
 * lease bound as the renewals left it, for the next call of the same fetch;
 * cancelled: one of its jobs was cancelled (whether the call saw it or not:
 * its outcome is the cancel's). */
static int core_call_end(lua_State *L) {
    long long njobs = (long long)luaL_optnumber(L, 1, 0);
    struct runner *r = runner_self();
    struct calls *c = calls_self();
    if (r && njobs > 0) runner_add_jobs(r, njobs);
    double lease = c ? calls_lease_until(c) : HUGE_VAL;
    int fenced = core_call_fenced, cancelled = core_call_cancel || (c && calls_cancelled(c, -1));
    lua_pushboolean(L, core_call_leave(L, 0));
    lua_pushnumber(L, lease);
    lua_pushboolean(L, fenced);
    lua_pushboolean(L, cancelled);
    return 4;
}

/* core.deadline() -> seconds left for the running call, or nil outside one. */
static int core_deadline(lua_State *L) {
    double left = core_call_remaining();
    if (left < 0) lua_pushnil(L); else lua_pushnumber(L, left);
    return 1;
}

/* LUAKIQ_CLOCK_OFFSET (seconds, read once): added to core.now, the clock
 * of every time-dependent feature (perform_in, windows, schedules, expiry),
 * so specs can run at any wall time without waiting for it. */
static double core_clock_offset;
static pthread_once_t core_clock_once = PTHREAD_ONCE_INIT;
static void core_clock_init(void) {
    const char *s = getenv("LUAKIQ_CLOCK_OFFSET");
    if (s && *s) core_clock_offset = strtod(s, NULL);
    if (!(core_clock_offset == core_clock_offset) || core_clock_offset > 1e10 || core_clock_offset < -1e10)
        core_clock_offset = 0;
}

static int core_now(lua_State *L) {
    pthread_once(&core_clock_once, core_clock_init);
    struct timeval tv;
    gettimeofday(&tv, NULL);
    lua_pushnumber(L, (double)tv.tv_sec + (double)tv.tv_usec / 1e6 + core_clock_offset);
    return 1;
}

static int core_stopping(lua_State *L) { lua_pushboolean(L, runner_stopping()); return 1; }
/* core.reload_wanted(): whether the calling worker thread should switch to
 * newly loaded code at its next point between calls (SIGHUP; false on the
 * main thread). One atomic read: the runner asks it before every step. */
static int core_reload_wanted(lua_State *L) {
    struct runner *r = runner_self();
    lua_pushboolean(L, r && runner_reload_wanted(r));
    return 1;
}

/* core.between_calls() -> stop, pause_generation: what a worker thread asks
 * before each call of a fetch but the first (luakiq.runner.fetch): stop is
 * true when the host stops or the thread should switch to new code
 * (core.stopping, core.reload_wanted), and the paused queues' generation
 * (pause.c) says whether they changed. One C call where three were: the
 * runner's loop runs in the interpreter, where each call costs (measured
 * on the Lowkiq shape, docs/benchmarks.md). */
static int core_between_calls(lua_State *L) {
    struct runner *r = runner_self();
    lua_pushboolean(L, runner_stopping() || (r && runner_reload_wanted(r)));
    lua_pushnumber(L, (lua_Number)pause_generation());
    return 2;
}

static int core_request_stop(lua_State *L) { (void)L; runner_request_stop(); return 0; }

/* core.wait(timeout_s) -> {prefix...}, all  (worker threads only) */
static int core_wait(lua_State *L) {
    double t = luaL_checknumber(L, 1);
    struct runner *r = runner_self();
    if (!r) return luaL_error(L, "core.wait: not a worker thread");
    char **msgs;
    int all, n = runner_wait(r, t, &msgs, &all);
    lua_createtable(L, n, 0);
    for (int i = 0; i < n; i++) {
        lua_pushstring(L, msgs[i]);
        free(msgs[i]);
        lua_rawseti(L, -2, i + 1);
    }
    free(msgs);
    lua_pushboolean(L, all);
    return 2;
}

/* core.sleep(s): inside a call, never past its deadline: a sleep the
 * deadline cuts short raises the timeout error when it comes. */
static int core_sleep(lua_State *L) {
    core_safe_point(L);
    double t = luaL_checknumber(L, 1);
    double left = core_io_begin();
    int cut = left >= 0 && t >= left;
    if (cut) t = left;
    if (t > 0) {
        struct timespec ts = {(time_t)t, (long)((t - floor(t)) * 1e9)};
        while (nanosleep(&ts, &ts) < 0 && errno == EINTR) {}
    }
    core_io_end();
    if (cut) return core_raise_timeout(L);
    return 0;
}

/* core.set_state(state, worker, shard, ids, prefix): what the calling worker
 * thread does now, for the TTIN dump and lease renewal (a thread that is
 * performing has its shard's lease renewed by the main thread). state is one
 * of core.states (core_register): a misspelt name is nil, an error here.
 * No-op on the main thread. */
static int core_set_state(lua_State *L) {
    core_safe_point(L);
    lua_Integer state = luaL_checkinteger(L, 1);
    if (state < 0 || state >= RUNNER_NSTATES) return luaL_error(L, "set_state: unknown state %d", (int)state);
    struct runner *r = runner_self();
    if (!r) return 0;
    runner_set_state(r, (enum runner_state)state, luaL_optstring(L, 2, NULL), (int)luaL_optinteger(L, 3, -1),
                     luaL_optstring(L, 4, NULL), luaL_optstring(L, 5, NULL));
    runner_set_lua_bytes(r, (long long)lua_gc(L, LUA_GCCOUNT, 0) * 1024 + lua_gc(L, LUA_GCCOUNTB, 0));
    return 0;
}

/* core.set_held(text): an elastic worker thread's shards held now (JSON of
 * runner/init.lua's making; nil clears it), for the hosts heartbeat's listing
 * (thread_stats' held). No-op on the main thread. */
static int core_set_held(lua_State *L) {
    const char *text = luaL_optstring(L, 1, NULL);
    struct runner *r = runner_self();
    if (r) runner_set_held(r, text);
    return 0;
}

/* core.thread_stats() -> {{jobs = n, lua_bytes = n, held = text or nil, calls = {{worker =
 * name, shard = n, age = s, timeout = s, parked = bool}, ...}}, ...} indexed
 * by thread index + 1; calls: the one on the thread's CPU first, then those
 * waiting in luakiq's I/O. Empty outside `luakiq run`. Main thread (GET
 * /metrics, the dashboard). The calls are copied into a userdata buffer
 * first: no lock and no malloc'd memory is held while Lua may raise. */
static int core_thread_stats(lua_State *L) {
    int n = runner_count();
    lua_createtable(L, n, 0);
    for (int i = 0; i < n; i++) {
        struct runner_stat st;
        runner_stats(i, &st);
        lua_createtable(L, 0, 3);
        lua_pushnumber(L, (lua_Number)st.jobs);
        lua_setfield(L, -2, "jobs");
        lua_pushnumber(L, (lua_Number)st.lua_bytes);
        lua_setfield(L, -2, "lua_bytes");
        int room = 16, ncalls;
        struct calls_info *calls;
        for (;;) {
            calls = lua_newuserdata(L, sizeof *calls * (size_t)room);
            ncalls = calls_list(i, runner_monotonic(), calls, room);
            if (ncalls <= room) break;
            lua_pop(L, 1);
            room = ncalls + 16; /* more parked meanwhile: try again with room */
        }
        lua_createtable(L, ncalls, 0);
        for (int k = 0; k < ncalls; k++) {
            lua_createtable(L, 0, 5);
            lua_pushstring(L, calls[k].worker);
            lua_setfield(L, -2, "worker");
            lua_pushinteger(L, calls[k].shard);
            lua_setfield(L, -2, "shard");
            lua_pushnumber(L, calls[k].age);
            lua_setfield(L, -2, "age");
            lua_pushnumber(L, calls[k].timeout);
            lua_setfield(L, -2, "timeout");
            lua_pushboolean(L, calls[k].parked);
            lua_setfield(L, -2, "parked");
            lua_rawseti(L, -2, k + 1);
        }
        lua_setfield(L, -3, "calls");
        lua_pop(L, 1); /* the buffer */
        /* held: what an elastic thread holds now (its JSON), copied the same way */
        size_t need = runner_held(i, NULL, 0);
        while (need > 0) {
            char *buf = lua_newuserdata(L, need);
            size_t again = runner_held(i, buf, need);
            if (again <= need) {
                if (again > 0) lua_pushstring(L, buf); else lua_pushnil(L);
                lua_setfield(L, -3, "held");
                lua_pop(L, 1); /* the buffer */
                break;
            }
            lua_pop(L, 1);
            need = again; /* it grew meanwhile: again with room */
        }
        lua_rawseti(L, -2, i + 1);
    }
    return 1;
}

/* core.count_timeout(worker): a call of worker failed by its timeout. */
static int core_count_timeout(lua_State *L) {
    calls_count_timeout(luaL_checkstring(L, 1));
    return 0;
}

/* core.timeouts() -> {[worker] = calls failed by their timeout in this process} */
static int core_timeouts(lua_State *L) {
    char worker[128];
    long long n;
    lua_newtable(L);
    for (int k = 0; calls_timeouts(k, worker, sizeof worker, &n); k++) {
        lua_pushnumber(L, (lua_Number)n);
        lua_setfield(L, -2, worker);
    }
    return 1;
}

static int core_log(lua_State *L) {
    core_safe_point(L);
    int lvl = log_parse_level(luaL_checkstring(L, 1));
    if (lvl < 0) return luaL_error(L, "log: unknown level '%s'", lua_tostring(L, 1));
    log_line((enum log_level)lvl, luaL_optstring(L, 3, NULL), luaL_checkstring(L, 2));
    return 0;
}

/* core.log_setup{json = bool, level = "info"} */
static int core_log_setup(lua_State *L) {
    luaL_checktype(L, 1, LUA_TTABLE);
    lua_getfield(L, 1, "json");
    log_set_json(lua_toboolean(L, -1));
    lua_getfield(L, 1, "level");
    if (lua_isstring(L, -1)) {
        int lvl = log_parse_level(lua_tostring(L, -1));
        if (lvl < 0) return luaL_error(L, "unknown log level '%s'", lua_tostring(L, -1));
        log_set_level((enum log_level)lvl);
    }
    return 0;
}

static int core_thread_index(lua_State *L) {
    struct runner *r = runner_self();
    if (r) lua_pushinteger(L, runner_index(r)); else lua_pushnil(L);
    return 1;
}

static int core_fatal(lua_State *L) { runner_set_fatal(luaL_checkstring(L, 1)); return 0; }

static int core_fatal_message(lua_State *L) {
    const char *m = runner_fatal();
    if (m) lua_pushstring(L, m); else lua_pushnil(L);
    return 1;
}

/* core.isatty(fd): whether fd is a terminal (the CLI's progress lines). */
static int core_isatty(lua_State *L) {
    lua_pushboolean(L, isatty((int)luaL_checkinteger(L, 1)));
    return 1;
}

static const luaL_Reg core_funcs[] = {
    {"now", core_now},                 {"stopping", core_stopping},
    {"request_stop", core_request_stop}, {"wait", core_wait},
    {"sleep", core_sleep},             {"set_state", core_set_state},
    {"thread_stats", core_thread_stats}, {"log", core_log},
    {"set_held", core_set_held},
    {"log_setup", core_log_setup},     {"thread_index", core_thread_index},
    {"fatal", core_fatal},             {"fatal_message", core_fatal_message},
    {"call_end", core_call_end},       {"ack_pending", core_ack_pending},
    {"call_pause", core_call_pause},   {"call_resume", core_call_resume},
    {"fence", core_fence},             {"lease_check", core_lease_check},
    {"cancel", core_cancel},           {"cancels", core_cancels},
    {"call_cancelled", core_call_cancelled},
    {"mono", core_mono},               {"raise_timeout", core_raise_timeout_l},
    {"deadline", core_deadline},       {"count_timeout", core_count_timeout},
    {"timeouts", core_timeouts},       {"isatty", core_isatty},
    {"reload_wanted", core_reload_wanted}, {"bounded", core_bounded},
    {"between_calls", core_between_calls},
    {NULL, NULL}};

/* Fills the luakiq.core table on top of the stack. core.states = {name = n}
 * for every worker-thread state: runner.c's name table is the one definition
 * of the names, so Lua writes core.states.performing, never the word itself. */
void core_register(lua_State *L) {
    luaL_register(L, NULL, core_funcs);
    lua_pushliteral(L, "id");              /* [core, "id"] */
    lua_pushliteral(L, "retry_count");     /* [core, "id", "retry_count"] */
    lua_pushcclosure(L, core_call_begin, 2);
    lua_setfield(L, -2, "call_begin");     /* [core] */
    lua_createtable(L, 0, RUNNER_NSTATES); /* [core, states] */
    for (int i = 0; i < RUNNER_NSTATES; i++) {
        lua_pushinteger(L, i);
        lua_setfield(L, -2, runner_state_name((enum runner_state)i));
    }
    lua_setfield(L, -2, "states");         /* [core] */
}
