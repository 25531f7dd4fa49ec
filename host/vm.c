/* vm.c - the Lua glue: VMs, the one protected-call helper, embedded modules,
 * and the `luakiq.core` C module that the Lua runtime is built on.
 *
 * Threads: every lua_State is created, used and closed by one thread (the main
 * thread's in vm_main, each worker's in vm_thread_main). Nothing here shares a
 * VM object between threads; C state reached from Lua (a Redis connection, the
 * thread's runner) belongs to the calling thread. The one exception is the
 * per-thread metrics (vm_tstats): atomics that each worker writes in its own
 * slot and the main thread reads for GET /metrics. The main VM also answers
 * HTTP requests (vm_web_handle), re-entered from the main thread's event loop.
 *
 * Errors: every C->Lua call goes through vm_pcall, which adds a traceback.
 * C functions called from Lua free what they hold before raising (lua_error
 * longjmps), so nothing leaks and no lock is held across a raise. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netinet/in.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>
#include <lua.h>
#include <lauxlib.h>
#include <lualib.h>
#include "embed.h"
#include "host.h"
#include "log.h"
#include "runner.h"
#include "store.h"
#include "vm.h"

#define VM_REDIS "luakiq.redis"

/* --- the protected-call helper -------------------------------------------- */

/* Message handler: a string error gets a traceback; other error values (a
 * table raised on purpose, busted's nil) pass through untouched. */
static int vm_traceback(lua_State *L) {
    if (lua_type(L, 1) == LUA_TSTRING) luaL_traceback(L, L, lua_tostring(L, 1), 1);
    return 1;
}

/* Calls the function below nargs arguments like lua_pcall, with vm_traceback
 * as message handler. On error the error value is left on the stack. */
static int vm_pcall(lua_State *L, int nargs, int nresults) {
    int base = lua_gettop(L) - nargs;
    lua_pushcfunction(L, vm_traceback);
    lua_insert(L, base);
    int rc = lua_pcall(L, nargs, nresults, base);
    lua_remove(L, base);
    return rc;
}

/* --- helpers -------------------------------------------------------------- */

/* A safe point for TTIN: called at the start of luakiq.core functions, on the
 * worker's own thread, so taking this VM's traceback here is safe. */
static void vm_safe_point(lua_State *L) {
    struct runner *r = runner_self();
    if (!r || !runner_trace_wanted(r)) return;
    luaL_traceback(L, L, "traceback (at a safe point):", 1);
    runner_set_trace(r, lua_tostring(L, -1));
    lua_pop(L, 1);
}

static double vm_now(void) {
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (double)tv.tv_sec + (double)tv.tv_usec / 1e6;
}

/* Converts the argument at idx to bytes for Redis. Numbers keep full
 * precision (LuaJIT's tostring uses %.14g, which would cut timestamps). */
static const char *vm_arg(lua_State *L, int idx, size_t *len, char *buf, size_t cap) {
    int t = lua_type(L, idx);
    if (t == LUA_TSTRING) return lua_tolstring(L, idx, len);
    if (t == LUA_TNUMBER) {
        double d = lua_tonumber(L, idx);
        if (!isfinite(d)) return NULL;
        if (d == floor(d) && fabs(d) < 9007199254740992.0 && cap >= 24) {
            /* The digits of "%.0f" without printf's multi-precision path
             * (lease_ms, limits and counts go through here per batch). */
            char tmp[24];
            unsigned long long u = (unsigned long long)fabs(d);
            int n = 0, o = 0;
            do { tmp[n++] = (char)('0' + u % 10); u /= 10; } while (u);
            if (signbit(d)) buf[o++] = '-'; /* "%.0f" writes -0 as "-0" */
            while (n) buf[o++] = tmp[--n];
            buf[o] = 0;
            *len = (size_t)o;
            return buf;
        }
        snprintf(buf, cap, "%.17g", d);
        *len = strlen(buf);
        return buf;
    }
    return NULL;
}

/* Pushes a reply. Errors inside arrays become {err = msg}; nil becomes false
 * (so arrays have no holes), as in Redis's own scripting. */
static void vm_push_reply(lua_State *L, const store_reply *r) {
    size_t len;
    const char *s;
    switch (store_reply_type(r)) {
    case STORE_STRING:
    case STORE_STATUS:
        s = store_reply_str(r, &len);
        lua_pushlstring(L, s, len);
        break;
    case STORE_INTEGER: lua_pushnumber(L, (lua_Number)store_reply_int(r)); break;
    case STORE_ARRAY: {
        size_t n = store_reply_count(r);
        lua_createtable(L, (int)n, 0);
        for (size_t i = 0; i < n; i++) {
            vm_push_reply(L, store_reply_elem(r, i));
            lua_rawseti(L, -2, (int)i + 1);
        }
        break;
    }
    case STORE_ERROR:
        s = store_reply_str(r, &len);
        lua_createtable(L, 0, 1);
        lua_pushlstring(L, s, len);
        lua_setfield(L, -2, "err");
        break;
    default: lua_pushboolean(L, 0);
    }
}

/* --- Redis connections ------------------------------------------------------ */

typedef struct { store *s; } vm_redis;

static vm_redis *vm_check_redis(lua_State *L) {
    vm_redis *r = luaL_checkudata(L, 1, VM_REDIS);
    if (!r->s) luaL_error(L, "redis: connection is closed");
    return r;
}

/* core.connect(url, timeout_s) -> conn | nil, err */
static int core_connect(lua_State *L) {
    const char *url = luaL_checkstring(L, 1);
    double timeout = luaL_optnumber(L, 2, 10);
    char err[512];
    store *s = store_open(url, timeout, err, sizeof err);
    if (!s) { lua_pushnil(L); lua_pushstring(L, err); return 2; }
    vm_redis *r = lua_newuserdata(L, sizeof *r);
    r->s = s;
    luaL_getmetatable(L, VM_REDIS);
    lua_setmetatable(L, -2);
    return 1;
}

/* Builds store_cmds from Lua values and runs them in one round trip.
 * Shape of each command table: {"SET", "k", "v"} or {script = "fetch", numkeys = 1, key, arg...}.
 * Pushes an array of replies, or returns -1 with err filled (nothing pushed). */
#define VM_PIPE_CMDS 4  /* a pipeline this small (every fetch) uses no heap */
#define VM_PIPE_ARGS 32
struct vm_pipe {
    int n;
    struct store_cmd *cmds;
    const char **argv;
    size_t *lens;
    char (*nums)[32];
    store_reply **replies;
    struct store_cmd cmds_s[VM_PIPE_CMDS + 1];
    const char *argv_s[VM_PIPE_ARGS + 1];
    size_t lens_s[VM_PIPE_ARGS + 1];
    char nums_s[VM_PIPE_ARGS + 1][32];
    store_reply *replies_s[VM_PIPE_CMDS + 1];
};

static void vm_pipe_free(struct vm_pipe *p) {
    if (p->cmds != p->cmds_s) free(p->cmds);
    if (p->argv != p->argv_s) free(p->argv);
    if (p->lens != p->lens_s) free(p->lens);
    if (p->nums != p->nums_s) free(p->nums);
    if (p->replies != p->replies_s) free(p->replies);
}

/* Fills p from the Lua table at idx (an array of command tables). The strings
 * stay owned by Lua (the table is on the stack for the whole call). */
static int vm_pipe_build(lua_State *L, int idx, struct vm_pipe *p, char *err, size_t errlen) {
    p->cmds = NULL; p->argv = NULL; p->lens = NULL; p->nums = NULL; p->replies = NULL;
    p->n = (int)lua_objlen(L, idx);
    int total = 0;
    for (int i = 1; i <= p->n; i++) {
        lua_rawgeti(L, idx, i);
        if (!lua_istable(L, -1)) { lua_pop(L, 1); snprintf(err, errlen, "redis: command %d is not a table", i); return -1; }
        total += (int)lua_objlen(L, -1);
        lua_pop(L, 1);
    }
    if (p->n <= VM_PIPE_CMDS && total <= VM_PIPE_ARGS) {
        memset(p->cmds_s, 0, sizeof p->cmds_s);
        memset(p->replies_s, 0, sizeof p->replies_s);
        p->cmds = p->cmds_s; p->argv = p->argv_s; p->lens = p->lens_s;
        p->nums = p->nums_s; p->replies = p->replies_s;
    } else {
        p->cmds = calloc((size_t)p->n + 1, sizeof *p->cmds);
        p->argv = calloc((size_t)total + 1, sizeof *p->argv);
        p->lens = calloc((size_t)total + 1, sizeof *p->lens);
        p->nums = malloc(((size_t)total + 1) * sizeof *p->nums); /* written before read */
        p->replies = calloc((size_t)p->n + 1, sizeof *p->replies);
    }
    if (!p->cmds || !p->argv || !p->lens || !p->nums || !p->replies) { snprintf(err, errlen, "out of memory"); return -1; }
    int k = 0;
    for (int i = 1; i <= p->n; i++) {
        lua_rawgeti(L, idx, i);
        struct store_cmd *c = &p->cmds[i - 1];
        int m = (int)lua_objlen(L, -1);
        lua_getfield(L, -1, "script");
        c->script = lua_isstring(L, -1) ? lua_tostring(L, -1) : NULL; /* anchored by the table */
        lua_pop(L, 1);
        lua_getfield(L, -1, "numkeys");
        c->numkeys = lua_isnumber(L, -1) ? (int)lua_tointeger(L, -1) : 1;
        lua_pop(L, 1);
        c->argc = m;
        c->argv = p->argv + k;
        c->lens = p->lens + k;
        if (m == 0 && !c->script) { lua_pop(L, 1); snprintf(err, errlen, "redis: empty command"); return -1; }
        for (int j = 1; j <= m; j++, k++) {
            lua_rawgeti(L, -1, j);
            p->argv[k] = vm_arg(L, -1, &p->lens[k], p->nums[k], sizeof p->nums[k]);
            lua_pop(L, 1); /* strings stay alive: they are values of the table */
            if (!p->argv[k]) {
                lua_pop(L, 1);
                snprintf(err, errlen, "redis: argument %d of command %d must be a string or a finite number", j, i);
                return -1;
            }
        }
        lua_pop(L, 1);
    }
    return 0;
}

/* conn:pipeline(cmds) -> {reply...}; raises on I/O or argument errors.
 * conn:ppipeline(cmds) -> {reply...} | nil, err */
static int vm_redis_pipeline_impl(lua_State *L, int protected) {
    vm_safe_point(L);
    vm_redis *r = vm_check_redis(L);
    luaL_checktype(L, 2, LUA_TTABLE);
    struct vm_pipe p;
    char err[1024];
    int ok = vm_pipe_build(L, 2, &p, err, sizeof err) == 0 &&
             store_pipeline(r->s, p.n, p.cmds, p.replies, err, sizeof err) == 0;
    if (ok) {
        lua_createtable(L, p.n, 0);
        for (int i = 0; i < p.n; i++) {
            vm_push_reply(L, p.replies[i]);
            lua_rawseti(L, -2, i + 1);
            store_reply_free(p.replies[i]);
        }
    }
    vm_pipe_free(&p);
    if (ok) return 1;
    if (protected) { lua_pushnil(L); lua_pushstring(L, err); return 2; }
    lua_pushstring(L, err);
    return lua_error(L);
}
static int vm_redis_pipeline(lua_State *L) { return vm_redis_pipeline_impl(L, 0); }
static int vm_redis_ppipeline(lua_State *L) { return vm_redis_pipeline_impl(L, 1); }

/* One command from the call's own arguments (conn:call("GET", "k")). */
static int vm_redis_call_impl(lua_State *L, int protected, const char *script) {
    vm_safe_point(L);
    vm_redis *r = vm_check_redis(L);
    int first = script ? 3 : 2, n = lua_gettop(L) - first + 1;
    const char *stackv[64];
    size_t stackl[64];
    char nums[64][32];
    char err[1024];
    store_reply *reply = NULL;
    int ok = 0;
    if (n > 64) { snprintf(err, sizeof err, "redis: too many arguments (max 64 with call; use pipeline)"); goto done; }
    if (n < 1 && !script) { snprintf(err, sizeof err, "redis: no command"); goto done; }
    for (int i = 0; i < n; i++) {
        stackv[i] = vm_arg(L, first + i, &stackl[i], nums[i], sizeof nums[i]);
        if (!stackv[i]) { snprintf(err, sizeof err, "redis: argument %d must be a string or a finite number", i + 1); goto done; }
    }
    struct store_cmd c = {script, 1, n, stackv, stackl};
    if (store_pipeline(r->s, 1, &c, &reply, err, sizeof err) < 0) goto done;
    if (store_reply_type(reply) == STORE_ERROR) {
        size_t len;
        const char *s = store_reply_str(reply, &len);
        snprintf(err, sizeof err, "redis: %.*s", (int)len, s);
        goto done;
    }
    vm_push_reply(L, reply);
    ok = 1;
done:
    store_reply_free(reply);
    if (ok) return 1;
    if (protected) { lua_pushnil(L); lua_pushstring(L, err); return 2; }
    lua_pushstring(L, err);
    return lua_error(L);
}
static int vm_redis_call(lua_State *L) { return vm_redis_call_impl(L, 0, NULL); }
static int vm_redis_pcall(lua_State *L) { return vm_redis_call_impl(L, 1, NULL); }
/* conn:script(name, key, arg...) -> reply (raises on error) */
static int vm_redis_script(lua_State *L) {
    const char *name = luaL_checkstring(L, 2);
    return vm_redis_call_impl(L, 0, name);
}

/* conn:reconnect() -> true | nil, err */
static int vm_redis_reconnect(lua_State *L) {
    vm_redis *r = vm_check_redis(L);
    char err[512];
    if (store_reconnect(r->s, err, sizeof err) < 0) { lua_pushnil(L); lua_pushstring(L, err); return 2; }
    lua_pushboolean(L, 1);
    return 1;
}

static int vm_redis_broken(lua_State *L) {
    lua_pushboolean(L, store_broken(vm_check_redis(L)->s));
    return 1;
}

static int vm_redis_close(lua_State *L) {
    vm_redis *r = luaL_checkudata(L, 1, VM_REDIS);
    store_close(r->s);
    r->s = NULL;
    return 0;
}

/* --- core functions ---------------------------------------------------------- */

static int core_now(lua_State *L) { lua_pushnumber(L, vm_now()); return 1; }

static int core_crc32(lua_State *L) {
    size_t len;
    const char *s = luaL_checklstring(L, 1, &len);
    lua_pushnumber(L, (lua_Number)crc32(0L, (const Bytef *)s, (uInt)len));
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
    vm_safe_point(L);
    double t = luaL_checknumber(L, 1);
    if (t > 0) {
        struct timespec ts = {(time_t)t, (long)((t - floor(t)) * 1e9)};
        while (nanosleep(&ts, &ts) < 0 && errno == EINTR) {}
    }
    return 0;
}

/* Per-thread counters for GET /metrics: jobs performed (success or failure)
 * and the thread VM's memory. Allocated by core_host_run before the threads
 * start and freed after they are joined; each worker writes only its own slot
 * (relaxed atomics: a scrape may see a value one batch old), the main thread
 * reads them. Updating them costs a few instructions per state change. */
struct vm_tstat { atomic_llong jobs, lua_bytes; };
static struct vm_tstat *vm_tstats;
static int vm_ntstats;
static _Thread_local long long vm_performing; /* jobs of the batch now performing */

/* core.set_state(state, worker, shard, ids, prefix) - for the TTIN dump and
 * lease renewal (a "performing" thread's shard lease is renewed by the main thread) */
static int core_set_state(lua_State *L) {
    vm_safe_point(L);
    struct runner *r = runner_self();
    const char *state = luaL_checkstring(L, 1);
    const char *ids = luaL_optstring(L, 4, NULL);
    if (r) runner_set_state(r, state, luaL_optstring(L, 2, NULL),
                            (int)luaL_optinteger(L, 3, -1), ids, luaL_optstring(L, 5, NULL));
    int i = r ? runner_index(r) : -1;
    if (i >= 0 && i < vm_ntstats) {
        struct vm_tstat *t = &vm_tstats[i];
        /* A batch counts as performed when the thread leaves "performing". */
        if (vm_performing) atomic_fetch_add_explicit(&t->jobs, vm_performing, memory_order_relaxed);
        vm_performing = 0;
        if (strcmp(state, "performing") == 0 && ids && ids[0]) {
            vm_performing = 1;
            for (const char *c = ids; *c; c++) vm_performing += *c == ',';
        }
        long long bytes = (long long)lua_gc(L, LUA_GCCOUNT, 0) * 1024 + lua_gc(L, LUA_GCCOUNTB, 0);
        atomic_store_explicit(&t->lua_bytes, bytes, memory_order_relaxed);
    }
    return 0;
}

/* core.thread_stats() -> {{jobs = n, lua_bytes = n}, ...} indexed by thread
 * index + 1; empty outside `luakiq run`. Main thread. */
static int core_thread_stats(lua_State *L) {
    lua_createtable(L, vm_ntstats, 0);
    for (int i = 0; i < vm_ntstats; i++) {
        lua_createtable(L, 0, 2);
        lua_pushnumber(L, (lua_Number)atomic_load_explicit(&vm_tstats[i].jobs, memory_order_relaxed));
        lua_setfield(L, -2, "jobs");
        lua_pushnumber(L, (lua_Number)atomic_load_explicit(&vm_tstats[i].lua_bytes, memory_order_relaxed));
        lua_setfield(L, -2, "lua_bytes");
        lua_rawseti(L, -2, i + 1);
    }
    return 1;
}

static int core_log(lua_State *L) {
    vm_safe_point(L);
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

/* core.list_dir(path) -> {name...} (sorted, no dot files) | nil, err */
static int vm_strcmp(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }
static int core_list_dir(lua_State *L) {
    const char *path = luaL_checkstring(L, 1);
    DIR *d = opendir(path);
    if (!d) { lua_pushnil(L); lua_pushfstring(L, "%s: %s", path, strerror(errno)); return 2; }
    char **names = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 16;
            char **nn = realloc(names, cap * sizeof *names);
            if (!nn) break;
            names = nn;
        }
        names[n] = strdup(e->d_name);
        if (names[n]) n++;
    }
    closedir(d);
    qsort(names, n, sizeof *names, vm_strcmp);
    lua_createtable(L, (int)n, 0); /* may raise on OOM: free first would be nicer, OOM is fatal anyway */
    for (size_t i = 0; i < n; i++) {
        lua_pushstring(L, names[i]);
        free(names[i]);
        lua_rawseti(L, -2, (int)i + 1);
    }
    free(names);
    return 1;
}

/* core.token() -> 32 random hex characters (lease tokens) */
static int core_token(lua_State *L) {
    unsigned char b[16];
    char hex[33];
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    ssize_t got = fd >= 0 ? read(fd, b, sizeof b) : -1;
    if (fd >= 0) close(fd);
    if (got != (ssize_t)sizeof b) return luaL_error(L, "cannot read /dev/urandom");
    for (int i = 0; i < 16; i++) snprintf(hex + 2 * i, 3, "%02x", b[i]);
    lua_pushlstring(L, hex, 32);
    return 1;
}

/* core.free_port() -> a loopback TCP port that was free a moment ago (tests) */
static int core_free_port(lua_State *L) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) < 0 || getsockname(fd, (struct sockaddr *)&a, &len) < 0) {
        if (fd >= 0) close(fd);
        return luaL_error(L, "free_port: %s", strerror(errno));
    }
    close(fd);
    lua_pushinteger(L, ntohs(a.sin_port));
    return 1;
}

static int core_getpid(lua_State *L) { lua_pushinteger(L, getpid()); return 1; }

/* core.rss() -> resident set size in bytes (from /proc/self/statm) */
static int core_rss(lua_State *L) {
    long pages = 0, rss = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f && fscanf(f, "%ld %ld", &pages, &rss) == 2) lua_pushnumber(L, (lua_Number)rss * (lua_Number)sysconf(_SC_PAGESIZE));
    else lua_pushnil(L);
    if (f) fclose(f);
    return 1;
}

/* core.script_source(name) -> source of a Redis-side script */
static int core_script_source(lua_State *L) {
    size_t len;
    const char *s = store_script_source(luaL_checkstring(L, 1), &len);
    if (s) lua_pushlstring(L, s, len); else lua_pushnil(L);
    return 1;
}

/* core.script_names() -> names of the embedded Redis scripts */
static int core_script_names(lua_State *L) {
    lua_newtable(L);
    int i = 0;
    for (const struct embed_file *e = embed_files; e->name; e++)
        if (e->kind == EMBED_REDIS_SCRIPT) {
            lua_pushstring(L, e->name);
            lua_rawseti(L, -2, ++i);
        }
    return 1;
}

/* The HTTP handler: web.c calls it on the main thread for every request, while
 * the main VM is parked inside core.host_run (same thread, so re-entering it is
 * legal). It calls the Lua handler given to host_run with a request table
 * {method, uri, body, auth, origin, host} and expects status, content_type,
 * body back. A Lua error is logged and becomes a 500; the stack is restored
 * either way, so host_run's anchored arguments stay where they are. */
struct vm_web { lua_State *L; int ref; };

static int vm_web_handle(void *ud, const struct web_request *req, struct web_response *out) {
    struct vm_web *w = ud;
    lua_State *L = w->L;
    int top = lua_gettop(L);
    lua_rawgeti(L, LUA_REGISTRYINDEX, w->ref); /* [handler] */
    lua_createtable(L, 0, 6);                  /* [handler, req] */
    lua_pushstring(L, req->method);
    lua_setfield(L, -2, "method");
    lua_pushstring(L, req->uri);
    lua_setfield(L, -2, "uri");
    lua_pushlstring(L, req->body, req->blen);
    lua_setfield(L, -2, "body");
    lua_pushstring(L, req->auth);
    lua_setfield(L, -2, "auth");
    lua_pushstring(L, req->origin);
    lua_setfield(L, -2, "origin");
    lua_pushstring(L, req->host);
    lua_setfield(L, -2, "host");
    if (vm_pcall(L, 1, 3) != 0) {              /* [err] */
        const char *msg = lua_tostring(L, -1);
        log_fmt(LOG_ERROR, "web: %s %s: %s", req->method, req->uri, msg ? msg : "(error object is not a string)");
        lua_settop(L, top);
        return -1;
    }
    int rc = -1;                               /* [status, content_type, body] */
    size_t len;
    const char *body = lua_tolstring(L, top + 3, &len);
    if (lua_isnumber(L, top + 1) && body) {
        out->status = (int)lua_tointeger(L, top + 1);
        snprintf(out->content_type, sizeof out->content_type, "%s",
                 lua_isstring(L, top + 2) ? lua_tostring(L, top + 2) : "");
        out->body = malloc(len ? len : 1);
        if (out->body) {
            memcpy(out->body, body, len);
            out->len = len;
            rc = 0;
        }
    } else {
        log_fmt(LOG_ERROR, "web: %s %s: the handler returned no status and body", req->method, req->uri);
    }
    lua_settop(L, top);
    return rc;
}

/* core.host_run{boots = {...}, redis = url, wake_channel = ch, routes = {[prefix] = thread},
 *               dump_path = p, web = {addr = "ADDR:PORT", handler = fn(req), max_body = n}}
 *   -> exit code. Main thread only; blocks until the host stops. */
static int core_host_run(lua_State *L) {
    luaL_checktype(L, 1, LUA_TTABLE);
    if (runner_self()) return luaL_error(L, "host_run: only the main thread runs the host");
    struct host_plan plan = {0};
    lua_getfield(L, 1, "boots");     /* 2 */
    lua_getfield(L, 1, "routes");    /* 3 */
    lua_getfield(L, 1, "redis");     /* 4 */
    lua_getfield(L, 1, "wake_channel");
    lua_getfield(L, 1, "dump_path"); /* 6 */
    lua_getfield(L, 1, "token");     /* 7 */
    lua_getfield(L, 1, "lease_ms");  /* 8 */
    lua_getfield(L, 1, "renew_ms");  /* 9 */
    luaL_checktype(L, 2, LUA_TTABLE);
    luaL_checktype(L, 3, LUA_TTABLE);
    plan.redis_url = luaL_checkstring(L, 4);
    plan.wake_channel = luaL_optstring(L, 5, "");
    plan.dump_path = luaL_optstring(L, 6, "/tmp/luakiq_ttin.txt");
    plan.lease_token = luaL_optstring(L, 7, "");
    plan.lease_ms = (long)luaL_optnumber(L, 8, 30000);
    plan.renew_ms = (long)luaL_optnumber(L, 9, 10000);
    int n = (int)lua_objlen(L, 2), nr = 0;
    lua_pushnil(L);
    while (lua_next(L, 3)) { nr++; lua_pop(L, 1); }
    const char **boots = calloc((size_t)n + 1, sizeof *boots);
    const char **prefixes = calloc((size_t)nr + 1, sizeof *prefixes);
    int *threads = calloc((size_t)nr + 1, sizeof *threads);
    if (!boots || !prefixes || !threads) {
        free(boots); free(prefixes); free(threads);
        return luaL_error(L, "out of memory");
    }
    /* All strings stay anchored in the argument table while host_run blocks. */
    int ok = 1;
    for (int i = 0; i < n; i++) {
        lua_rawgeti(L, 2, i + 1);
        boots[i] = lua_tostring(L, -1);
        ok = ok && boots[i];
        lua_pop(L, 1);
    }
    int k = 0;
    lua_pushnil(L);
    while (lua_next(L, 3)) {
        prefixes[k] = lua_tostring(L, -2);
        threads[k++] = (int)lua_tointeger(L, -1);
        lua_pop(L, 1);
    }
    plan.nthreads = n;
    plan.boots = boots;
    plan.nroutes = k;
    plan.route_prefix = prefixes;
    plan.route_thread = threads;
    struct vm_web web = {L, LUA_NOREF};
    lua_getfield(L, 1, "web");       /* anchors web.addr while host_run blocks */
    if (lua_istable(L, -1)) {
        lua_getfield(L, -1, "addr");
        plan.web_addr = lua_tostring(L, -1);
        lua_pop(L, 1);
        lua_getfield(L, -1, "max_body");
        plan.web_max_body = lua_isnumber(L, -1) ? (size_t)lua_tonumber(L, -1) : 1048576;
        lua_pop(L, 1);
        lua_getfield(L, -1, "handler");
        if (plan.web_addr && lua_isfunction(L, -1)) {
            web.ref = luaL_ref(L, LUA_REGISTRYINDEX);
            plan.web_handle = vm_web_handle;
            plan.web_ud = &web;
        } else {
            lua_pop(L, 1);
            plan.web_addr = NULL;
        }
    }
    vm_tstats = calloc((size_t)n + 1, sizeof *vm_tstats);
    vm_ntstats = vm_tstats ? n : 0;
    for (int i = 0; i < vm_ntstats; i++) {
        atomic_init(&vm_tstats[i].jobs, 0);
        atomic_init(&vm_tstats[i].lua_bytes, 0);
    }
    int code = ok ? host_run(&plan) : 2;
    vm_ntstats = 0;
    free(vm_tstats);
    vm_tstats = NULL;
    if (web.ref != LUA_NOREF) luaL_unref(L, LUA_REGISTRYINDEX, web.ref);
    free(boots); free(prefixes); free(threads);
    if (!ok) return luaL_error(L, "host_run: boots must be strings");
    lua_pushinteger(L, code);
    return 1;
}

static const luaL_Reg core_funcs[] = {
    {"connect", core_connect},     {"now", core_now},
    {"crc32", core_crc32},         {"stopping", core_stopping},
    {"request_stop", core_request_stop}, {"wait", core_wait},
    {"sleep", core_sleep},         {"set_state", core_set_state},
    {"log", core_log},             {"log_setup", core_log_setup},
    {"thread_index", core_thread_index}, {"fatal", core_fatal},
    {"fatal_message", core_fatal_message}, {"list_dir", core_list_dir},
    {"token", core_token},         {"free_port", core_free_port},
    {"getpid", core_getpid},       {"rss", core_rss},
    {"script_source", core_script_source}, {"script_names", core_script_names},
    {"host_run", core_host_run},   {"thread_stats", core_thread_stats},
    {NULL, NULL}};

static const luaL_Reg redis_methods[] = {
    {"call", vm_redis_call},         {"pcall", vm_redis_pcall},
    {"script", vm_redis_script},     {"pipeline", vm_redis_pipeline},
    {"ppipeline", vm_redis_ppipeline}, {"reconnect", vm_redis_reconnect},
    {"broken", vm_redis_broken},     {"close", vm_redis_close},
    {NULL, NULL}};

static int core_open(lua_State *L) {
    luaL_newmetatable(L, VM_REDIS);
    lua_pushvalue(L, -1);
    lua_setfield(L, -2, "__index");
    luaL_register(L, NULL, redis_methods);
    lua_pushcfunction(L, vm_redis_close);
    lua_setfield(L, -2, "__gc");
    lua_pop(L, 1);
    lua_newtable(L);
    luaL_register(L, NULL, core_funcs);
    return 1;
}

/* --- module loading --------------------------------------------------------- */

/* package.preload loader for an embedded module (upvalue 1: the embed index).
 * With LUAKIQ_SCRIPTS set, the same module is read from the source tree. */
static int vm_load_embedded(lua_State *L) {
    const struct embed_file *e = &embed_files[lua_tointeger(L, lua_upvalueindex(1))];
    const char *dir = getenv("LUAKIQ_SCRIPTS");
    int rc;
    if (dir && *dir) {
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir, e->path + strlen("scripts/"));
        rc = luaL_loadfile(L, path);
    } else {
        rc = luaL_loadbuffer(L, (const char *)e->bytes, e->len, e->path);
    }
    if (rc != 0) return lua_error(L);
    lua_pushstring(L, e->name);
    lua_call(L, 1, 1); /* inside require: errors propagate to require's caller */
    return 1;
}

static lua_State *vm_new(void) {
    lua_State *L = luaL_newstate();
    if (!L) return NULL;
    luaL_openlibs(L);
    /* [package.preload] */
    lua_getglobal(L, "package");
    lua_getfield(L, -1, "preload");
    for (int i = 0; embed_files[i].name; i++) {
        if (embed_files[i].kind != EMBED_HOST_MODULE) continue;
        lua_pushinteger(L, i);
        lua_pushcclosure(L, vm_load_embedded, 1);
        lua_setfield(L, -2, embed_files[i].name);
    }
    lua_pushcfunction(L, core_open);
    lua_setfield(L, -2, "luakiq.core");
    lua_pop(L, 2);
    return L;
}

/* Requires `module` and calls its function `fn` with the values pushed by
 * push(L, ud); leaves one result. Returns the Lua status. */
static int vm_call_module(lua_State *L, const char *module, const char *fn, int (*push)(lua_State *, void *), void *ud) {
    lua_getglobal(L, "require");
    lua_pushstring(L, module);
    int rc = vm_pcall(L, 1, 1);
    if (rc != 0) return rc;
    lua_getfield(L, -1, fn);
    lua_remove(L, -2);
    int nargs = push(L, ud);
    return vm_pcall(L, nargs, 1);
}

struct vm_argv { int argc; char **argv; };
static int vm_push_argv(lua_State *L, void *ud) {
    struct vm_argv *a = ud;
    lua_createtable(L, a->argc, 0);
    for (int i = 0; i < a->argc; i++) {
        lua_pushstring(L, a->argv[i]);
        lua_rawseti(L, -2, i); /* argv[0] at index 0, like Lua's `arg` */
    }
    return 1;
}

int vm_main(int argc, char **argv) {
    lua_State *L = vm_new();
    if (!L) { fprintf(stderr, "luakiq: cannot create a Lua state\n"); return 1; }
    struct vm_argv a = {argc, argv};
    int code;
    if (vm_call_module(L, "luakiq.cli", "main", vm_push_argv, &a) != 0) {
        /* Only a host bug gets here: luakiq.cli handles user errors itself. */
        const char *msg = lua_tostring(L, -1);
        fprintf(stderr, "luakiq: %s\n", msg ? msg : "(error object is not a string)");
        code = 1;
    } else {
        code = lua_isnumber(L, -1) ? (int)lua_tointeger(L, -1) : 0;
    }
    lua_close(L);
    return code;
}

static int vm_push_boot(lua_State *L, void *ud) {
    lua_pushstring(L, ud);
    return 1;
}

int vm_thread_main(const char *boot) {
    lua_State *L = vm_new();
    if (!L) { runner_set_fatal("cannot create a Lua state"); return 1; }
    int code = 0;
    if (vm_call_module(L, "luakiq.runner", "main", vm_push_boot, (void *)boot) != 0) {
        const char *msg = lua_tostring(L, -1);
        log_fmt(LOG_ERROR, "worker thread failed: %s", msg ? msg : "(error object is not a string)");
        runner_set_fatal(msg ? msg : "worker thread failed");
        code = 1;
    } else if (lua_isnumber(L, -1)) {
        code = (int)lua_tointeger(L, -1);
    }
    lua_close(L);
    return code;
}

#ifdef LUAKIQ_FUZZ
/* Fuzzing entry (the fuzz/ harnesses, built only with -DLUAKIQ_FUZZ=ON): the first call
 * makes one VM and runs the Lua file `driver`, which returns a function(bytes);
 * every call hands it data. A Lua error (a property the driver checks failed,
 * or an unexpected error) is printed and returned as -1, so the harness can
 * abort() and libFuzzer keep the input. */
/* Lua-level coverage for libFuzzer: the C code the inputs reach is mostly
 * uninstrumented (LuaJIT, lua-cjson), so a line hook feeds Lua edges
 * (previous line -> this line, AFL style) into libFuzzer's extra counters.
 * The driver turns the JIT off, so that every line runs the hook. */
__attribute__((used, section("__libfuzzer_extra_counters")))
static uint8_t vm_fuzz_counters[1 << 16];
static uintptr_t vm_fuzz_prev;
static void vm_fuzz_hook(lua_State *L, lua_Debug *ar) {
    if (!lua_getinfo(L, "S", ar)) return;
    uintptr_t cur = (((uintptr_t)ar->source >> 4) * 2654435761u) ^ ((uintptr_t)ar->currentline * 40503u);
    cur &= 0xffff;
    vm_fuzz_counters[(cur ^ vm_fuzz_prev) & 0xffff]++;
    vm_fuzz_prev = cur >> 1;
}

int vm_fuzz_one(const char *driver, const uint8_t *data, size_t len) {
    static lua_State *L;
    static int fn = LUA_NOREF;
    if (!L) {
        L = vm_new();
        if (!L || luaL_loadfile(L, driver) != 0 || vm_pcall(L, 0, 1) != 0 || !lua_isfunction(L, -1)) {
            fprintf(stderr, "vm_fuzz_one: cannot load %s: %s\n", driver,
                    L && lua_isstring(L, -1) ? lua_tostring(L, -1) : "not a function");
            return -1;
        }
        fn = luaL_ref(L, LUA_REGISTRYINDEX);
        lua_sethook(L, vm_fuzz_hook, LUA_MASKLINE, 0);
    }
    vm_fuzz_prev = 0;
    lua_rawgeti(L, LUA_REGISTRYINDEX, fn);
    lua_pushlstring(L, (const char *)data, len);
    int rc = vm_pcall(L, 1, 0);
    if (rc != 0) {
        const char *msg = lua_tostring(L, -1);
        fprintf(stderr, "vm_fuzz_one: %s\n", msg ? msg : "(error object is not a string)");
        lua_pop(L, 1);
        return -1;
    }
    lua_gc(L, LUA_GCSTEP, 0);
    return 0;
}
#endif
