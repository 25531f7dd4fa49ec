/* core.c - the basic services of `luakiq.core`: the clock, logging, and the
 * services of the calling worker thread (stop flag, wake-up mailbox, state for
 * TTIN and lease renewal, per-thread counters, fatal stop).
 *
 * Threads: every function runs on the thread whose VM calls it and touches
 * only that thread's runner (runner_self(); NULL on the main thread, where the
 * thread services are no-ops or errors) and process-wide values that runner.c
 * guards. The TTIN safe point (core_safe_point) is the one place a worker's
 * own traceback is taken: only the thread itself ever looks into its VM.
 *
 * Timeouts: the runner runs each perform call in a coroutine between
 * core.call_begin and core.call_end. Its deadline is published in the runner
 * (for the main thread's watchdog, host.c) and kept here in thread-locals.
 * Past it, the watchdog sends RUNNER_TIMEOUT_SIGNAL to this thread; the
 * handler runs on this thread and arms a count-1 hook on its own VM (what
 * LuaJIT's profiler does: no other thread ever touches the VM). The hook
 * raises "timeout: ..." in every coroutine but the runner's own until
 * call_end disarms it, so a user pcall cannot swallow it. LuaJIT checks no
 * hook inside compiled traces, and a blocking foreign call does not return:
 * those calls are ended by replacing the process (host.c). luakiq's own waits
 * (sleep, redis, http) bound themselves by the deadline instead. */
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
#include "core.h"
#include "log.h"
#include "runner.h"

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

/* The error the lease fence raises (core.fence), instead of the timeout's. */
static const char core_fenced_text[] =
    "lease lost: the shard's lease may have expired while this call waited (Redis unreachable, or the "
    "host stalled, longer than lease_ttl); the call was stopped so that the shard's next holder runs its jobs alone";

void core_timeout_text(char *buf, size_t len) {
    if (core_call_fenced) snprintf(buf, len, "%s", core_fenced_text);
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

/* RUNNER_TIMEOUT_SIGNAL, on the worker thread it was sent to. Async-signal
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
    sigaction(RUNNER_TIMEOUT_SIGNAL, &sa, NULL);
}

double core_call_remaining(void) {
    if (core_call_deadline <= 0) return -1;
    double left = core_call_deadline - runner_monotonic();
    return left > 0 ? left : 0;
}

double core_io_begin(void) {
    double left = core_call_remaining();
    struct runner *r = runner_self();
    if (left > 0 && r) runner_set_in_io(r, 1);
    return left;
}

void core_io_end(void) {
    struct runner *r = runner_self();
    if (core_call_deadline > 0 && r) runner_set_in_io(r, 0);
}

/* Makes a call (started, deadline, lease bound) the one running on this
 * thread now. */
static void core_call_enter(lua_State *L, double started, double deadline, double timeout, double lease_until,
                            const char *record) {
    core_call_timeout = timeout;
    core_call_deadline = deadline;
    core_call_expired = 0;
    core_call_fenced = 0;
    core_call_main = L;
    struct runner *r = runner_self();
    if (r) runner_set_call(r, started, deadline, lease_until, record);
}

/* Nothing runs on this thread's CPU for a call any more (it ended, or waits:
 * then the runner keeps it as parked). Returns whether its deadline passed
 * (or the lease fence stopped it). */
static int core_call_leave(lua_State *L, int parked) {
    int expired = core_call_expired || (core_call_deadline > 0 && runner_monotonic() >= core_call_deadline);
    core_call_main = NULL;
    core_call_deadline = 0;
    core_call_expired = 0;
    core_call_fenced = 0;
    lua_sethook(L, NULL, 0, 0);
    struct runner *r = runner_self();
    if (r && !(parked && runner_park(r) == 0)) runner_set_call(r, 0, 0, 0, NULL);
    return expired;
}

/* core.call_begin(timeout_s, record, lease_until, key, done_delta,
 * done_reset, slot) -> started, deadline (monotonic), slot: a perform call
 * starts on this thread (record: what failing its jobs needs, should it
 * never come back; lease_until: when its shard's lease surely runs out,
 * nil: never). With key (its shard's prefix), the record goes on with the
 * ids done before the call in its fetch, which the thread keeps per key
 * (runner_call_done): emptied when done_reset, then done_delta appended;
 * slot is where (pass it back with the key's next call; nil: none). */
static int core_call_begin(lua_State *L) {
    double timeout = luaL_checknumber(L, 1);
    const char *key = luaL_optstring(L, 4, NULL);
    struct runner *r = runner_self();
    int slot = -1;
    if (key && r) {
        size_t len;
        const char *delta = luaL_optlstring(L, 5, "", &len);
        slot = runner_call_done(r, key, (int)luaL_optinteger(L, 7, -1), delta, len, lua_toboolean(L, 6));
        if (slot < 0) return luaL_error(L, "core.call_begin: out of memory");
    }
    double now = runner_monotonic();
    core_call_enter(L, now, now + timeout, timeout, luaL_optnumber(L, 3, HUGE_VAL), luaL_optstring(L, 2, NULL));
    lua_pushnumber(L, now);
    lua_pushnumber(L, now + timeout);
    if (slot < 0) lua_pushnil(L);
    else lua_pushinteger(L, slot);
    return 3;
}

/* core.call_pause(): the running call waits (yielded, in luakiq's I/O); the
 * thread may run other calls meanwhile (the runner keeps the call's state as
 * parked: runner_park). The Lua runner enforces its deadline while it waits. */
static int core_call_pause(lua_State *L) {
    core_call_leave(L, 1);
    return 0;
}

/* core.call_resume(started, deadline, timeout) -> lease_ok: the paused call
 * that started at `started` runs on (a deadline already passed is the
 * watchdog's at once). lease_ok is false when its lease bound has passed:
 * the runner then stops the call (core.fence) instead of letting it go on
 * beside the shard's next holder. */
static int core_call_resume(lua_State *L) {
    double started = luaL_checknumber(L, 1), deadline = luaL_checknumber(L, 2), lease = HUGE_VAL;
    core_call_timeout = luaL_checknumber(L, 3);
    core_call_deadline = deadline;
    core_call_expired = 0;
    core_call_fenced = 0;
    core_call_main = L;
    struct runner *r = runner_self();
    if (r && runner_unpark(r, started, &deadline, &lease) != 0) runner_set_call(r, started, deadline, HUGE_VAL, NULL);
    lua_pushboolean(L, runner_monotonic() < lease);
    return 1;
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

/* core.lease_check(): inside a call whose lease bound has passed, core.fence();
 * nothing otherwise (outside a call, or on the main thread). Called before
 * each luakiq.redis command a call sends. */
static int core_lease_check(lua_State *L) {
    struct runner *r = runner_self();
    if (!r || core_call_deadline <= 0 || !core_call_main) return 0;
    if (runner_monotonic() < runner_lease_until(r)) return 0;
    return core_fence(L);
}

/* core.mono() -> seconds of CLOCK_MONOTONIC (deadlines, timers). */
static int core_mono(lua_State *L) {
    lua_pushnumber(L, runner_monotonic());
    return 1;
}

/* core.call_end(njobs) -> expired, lease_until, fenced: the call (of njobs
 * jobs: they count as performed) is over; expired: its deadline passed while
 * it ran, or the fence stopped it (fenced); lease_until: its lease bound as
 * the renewals left it, for the next call of the same fetch. */
static int core_call_end(lua_State *L) {
    long long njobs = (long long)luaL_optnumber(L, 1, 0);
    struct runner *r = runner_self();
    if (r && njobs > 0) runner_add_jobs(r, njobs);
    double lease = r ? runner_lease_until(r) : HUGE_VAL;
    int fenced = core_call_fenced;
    lua_pushboolean(L, core_call_leave(L, 0));
    lua_pushnumber(L, lease);
    lua_pushboolean(L, fenced);
    return 3;
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
        struct runner_call *calls;
        for (;;) {
            calls = lua_newuserdata(L, sizeof *calls * (size_t)room);
            ncalls = runner_calls(i, calls, room);
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
    runner_count_timeout(luaL_checkstring(L, 1));
    return 0;
}

/* core.timeouts() -> {[worker] = calls failed by their timeout in this process} */
static int core_timeouts(lua_State *L) {
    char worker[128];
    long long n;
    lua_newtable(L);
    for (int k = 0; runner_timeouts(k, worker, sizeof worker, &n); k++) {
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
    {"call_begin", core_call_begin},   {"call_end", core_call_end},
    {"call_pause", core_call_pause},   {"call_resume", core_call_resume},
    {"fence", core_fence},             {"lease_check", core_lease_check},
    {"mono", core_mono},               {"raise_timeout", core_raise_timeout_l},
    {"deadline", core_deadline},       {"count_timeout", core_count_timeout},
    {"timeouts", core_timeouts},       {"isatty", core_isatty},
    {"reload_wanted", core_reload_wanted},
    {NULL, NULL}};

/* Fills the luakiq.core table on top of the stack. core.states = {name = n}
 * for every worker-thread state: runner.c's name table is the one definition
 * of the names, so Lua writes core.states.performing, never the word itself. */
void core_register(lua_State *L) {
    luaL_register(L, NULL, core_funcs);
    lua_createtable(L, 0, RUNNER_NSTATES); /* [core, states] */
    for (int i = 0; i < RUNNER_NSTATES; i++) {
        lua_pushinteger(L, i);
        lua_setfield(L, -2, runner_state_name((enum runner_state)i));
    }
    lua_setfield(L, -2, "states");         /* [core] */
}
