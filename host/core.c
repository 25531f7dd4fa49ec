/* core.c - the basic services of `luakiq.core`: the clock, logging, and the
 * services of the calling worker thread (stop flag, wake-up mailbox, state for
 * TTIN and lease renewal, per-thread counters, fatal stop).
 *
 * Threads: every function runs on the thread whose VM calls it and touches
 * only that thread's runner (runner_self(); NULL on the main thread, where the
 * thread services are no-ops or errors) and process-wide values that runner.c
 * guards. The TTIN safe point (core_safe_point) is the one place a worker's
 * own traceback is taken: only the thread itself ever looks into its VM. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
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

static int core_now(lua_State *L) {
    struct timeval tv;
    gettimeofday(&tv, NULL);
    lua_pushnumber(L, (double)tv.tv_sec + (double)tv.tv_usec / 1e6);
    return 1;
}

static int core_stopping(lua_State *L) { lua_pushboolean(L, runner_stopping()); return 1; }
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

static int core_sleep(lua_State *L) {
    core_safe_point(L);
    double t = luaL_checknumber(L, 1);
    if (t > 0) {
        struct timespec ts = {(time_t)t, (long)((t - floor(t)) * 1e9)};
        while (nanosleep(&ts, &ts) < 0 && errno == EINTR) {}
    }
    return 0;
}

/* core.set_state(state, worker, shard, ids, prefix, njobs): what the calling
 * worker thread does now, for the TTIN dump, lease renewal (a thread that is
 * "performing" has its shard's lease renewed by the main thread) and the
 * per-thread counters of GET /metrics (njobs: how many jobs the call that
 * starts performing has; they count as performed when it ends). The state
 * names are runner.c's; an unknown one is an error. No-op on the main thread. */
static int core_set_state(lua_State *L) {
    core_safe_point(L);
    const char *name = luaL_checkstring(L, 1);
    int state = runner_state_parse(name);
    if (state < 0) return luaL_error(L, "set_state: unknown state '%s'", name);
    struct runner *r = runner_self();
    if (!r) return 0;
    runner_set_state(r, (enum runner_state)state, luaL_optstring(L, 2, NULL), (int)luaL_optinteger(L, 3, -1),
                     luaL_optstring(L, 4, NULL), luaL_optstring(L, 5, NULL), (long long)luaL_optnumber(L, 6, 0));
    runner_set_lua_bytes(r, (long long)lua_gc(L, LUA_GCCOUNT, 0) * 1024 + lua_gc(L, LUA_GCCOUNTB, 0));
    return 0;
}

/* core.thread_stats() -> {{jobs = n, lua_bytes = n}, ...} indexed by thread
 * index + 1; empty outside `luakiq run`. Main thread (GET /metrics). */
static int core_thread_stats(lua_State *L) {
    int n = runner_count();
    lua_createtable(L, n, 0);
    for (int i = 0; i < n; i++) {
        long long jobs, bytes;
        runner_stats(i, &jobs, &bytes);
        lua_createtable(L, 0, 2);
        lua_pushnumber(L, (lua_Number)jobs);
        lua_setfield(L, -2, "jobs");
        lua_pushnumber(L, (lua_Number)bytes);
        lua_setfield(L, -2, "lua_bytes");
        lua_rawseti(L, -2, i + 1);
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

static const luaL_Reg core_funcs[] = {
    {"now", core_now},                 {"stopping", core_stopping},
    {"request_stop", core_request_stop}, {"wait", core_wait},
    {"sleep", core_sleep},             {"set_state", core_set_state},
    {"thread_stats", core_thread_stats}, {"log", core_log},
    {"log_setup", core_log_setup},     {"thread_index", core_thread_index},
    {"fatal", core_fatal},             {"fatal_message", core_fatal_message},
    {NULL, NULL}};

void core_register(lua_State *L) { luaL_register(L, NULL, core_funcs); }
