/* hostlua.c - the bridge between the main VM and the host's event loop:
 * core.host_run turns the Lua plan (threads' boot strings, routes, Redis,
 * leases, web and replies listeners) into a struct host_plan and blocks in
 * host_run; the web app it hands to web.c makes each web thread's own VM
 * (luakiq.web.open) and calls its handler for every request.
 *
 * Threads: core.host_run, the tick and the reload (SIGHUP) function run on
 * the main thread: while host_run blocks, the main VM is parked inside
 * core.host_run on this same thread, so the tick and the reload may call
 * into it (through vm_pcall); every string of the plan stays anchored in the
 * argument table for as long as host_run runs. The web app
 * (hostlua_web_open, _handle, _close) runs on a web thread only (one per
 * listener), on a VM of its own that no other thread ever sees; it reads the
 * plan's boot string only in open, while web_start keeps the main thread
 * waiting. How a VM is
 * made, and the check that loads a script directory in a VM of its own
 * (core.load_check, for a reload), are handed in (hostlua_register), so this
 * file knows nothing of it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <lua.h>
#include <lauxlib.h>
#include "calls.h"
#include "core.h"
#include "host.h"
#include "hostlua.h"
#include "log.h"
#include "runner.h"
#include "vm.h"

/* The web thread's VM and its handlers (luakiq.web.open's: one request;
 * a batch of them, LUA_NOREF when it returned none). */
struct hostlua_web { lua_State *L; int ref, batch_ref; const struct hostlua_entry *entry; };
struct hostlua_webboot { const struct hostlua_entry *entry; const char *boot; };


/* Web thread, once (web.c's app.open): a VM of its own, and in it
 * luakiq.web.open(boot) -> the request handler and the batch handler (or
 * nil), kept in the registry. */
static void *hostlua_web_open(void *arg, char *err, size_t errlen) {
    const struct hostlua_webboot *b = arg;
    struct hostlua_web *w = calloc(1, sizeof *w);
    lua_State *L = w ? b->entry->vm_open() : NULL;
    if (!L) {
        free(w);
        snprintf(err, errlen, "cannot create a Lua state");
        return NULL;
    }
    lua_getglobal(L, "require");
    lua_pushstring(L, "luakiq.web");
    int rc = vm_pcall(L, 1, 1);                /* [web] or [err] */
    if (rc == 0) {
        lua_getfield(L, -1, "open");
        lua_remove(L, -2);
        lua_pushstring(L, b->boot);
        rc = vm_pcall(L, 1, 2);                /* [handler, batch] or [err] */
    }
    if (rc != 0 || !lua_isfunction(L, -2)) {
        const char *msg = lua_tostring(L, -1);
        snprintf(err, errlen, "%s", rc != 0 && msg ? msg : "luakiq.web.open returned no handler");
        b->entry->vm_close(L);
        free(w);
        return NULL;
    }
    w->L = L;
    w->batch_ref = lua_isfunction(L, -1) ? luaL_ref(L, LUA_REGISTRYINDEX) : (lua_pop(L, 1), LUA_NOREF);
    w->ref = luaL_ref(L, LUA_REGISTRYINDEX);
    w->entry = b->entry;
    return w;
}

/* Web thread, once, after the last request (web.c's app.close). */
static void hostlua_web_close(void *ud) {
    struct hostlua_web *w = ud;
    w->entry->vm_close(w->L);
    free(w);
}

/* The HTTP handler: web.c calls it on the web thread for every request. It
 * calls the handler luakiq.web.open made with a request table {method, uri,
 * body, auth, origin, host, cookie, forwarded_proto} and expects status,
 * content_type, body, set_cookie back. A Lua error is logged and becomes a
 * 500; the stack is restored either way. */
static void hostlua_push_request(lua_State *L, const struct web_request *req) {
    lua_createtable(L, 0, 8);
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
    lua_pushstring(L, req->cookie);
    lua_setfield(L, -2, "cookie");
    lua_pushstring(L, req->forwarded_proto);
    lua_setfield(L, -2, "forwarded_proto");
}

/* The answer at stack index at..at+3 (status, content_type, body,
 * set_cookie) into out: 0, or -1 (logged) when it is not one. */
static int hostlua_read_answer(lua_State *L, int at, const struct web_request *req, struct web_response *out) {
    int rc = -1;
    size_t len;
    const char *body = lua_tolstring(L, at + 2, &len);
    if (lua_isnumber(L, at) && body) {
        out->status = (int)lua_tointeger(L, at);
        snprintf(out->content_type, sizeof out->content_type, "%s",
                 lua_isstring(L, at + 1) ? lua_tostring(L, at + 1) : "");
        out->body = malloc(len ? len : 1);
        if (out->body) {
            memcpy(out->body, body, len);
            out->len = len;
            rc = 0;
        }
        if (rc == 0 && lua_isstring(L, at + 3)) {
            out->set_cookie = strdup(lua_tostring(L, at + 3));
            if (!out->set_cookie) rc = -1;
        }
    } else {
        log_fmt(LOG_ERROR, "web: %s %s: the handler returned no status and body", req->method, req->uri);
    }
    return rc;
}

static int hostlua_web_handle(void *ud, const struct web_request *req, struct web_response *out) {
    struct hostlua_web *w = ud;
    lua_State *L = w->L;
    int top = lua_gettop(L);
    lua_rawgeti(L, LUA_REGISTRYINDEX, w->ref); /* [handler] */
    hostlua_push_request(L, req);              /* [handler, req] */
    if (vm_pcall(L, 1, 4) != 0) {              /* [err] */
        const char *msg = lua_tostring(L, -1);
        log_fmt(LOG_ERROR, "web: %s %s: %s", req->method, req->uri, msg ? msg : "(error object is not a string)");
        lua_settop(L, top);
        return -1;
    }
    int rc = hostlua_read_answer(L, top + 1, req, out); /* [status, content_type, body, set_cookie] */
    lua_settop(L, top);
    return rc;
}

/* web.c's batch handler (the replies listener): the batch function
 * luakiq.web.open made, with an array of request tables, returns an array
 * of answers {status, content_type, body, set_cookie}; without one, the
 * request handler for each. An answer that is not one is a 500 (its status
 * left 0); a Lua error, a 500 for all. */
static int hostlua_web_handle_batch(void *ud, const struct web_request *reqs, int n, struct web_response *outs) {
    struct hostlua_web *w = ud;
    lua_State *L = w->L;
    if (w->batch_ref == LUA_NOREF) {
        for (int i = 0; i < n; i++)
            if (hostlua_web_handle(ud, &reqs[i], &outs[i]) != 0) outs[i].status = 0;
        return 0;
    }
    int top = lua_gettop(L);
    lua_rawgeti(L, LUA_REGISTRYINDEX, w->batch_ref); /* [batch] */
    lua_createtable(L, n, 0);                        /* [batch, reqs] */
    for (int i = 0; i < n; i++) {
        hostlua_push_request(L, &reqs[i]);
        lua_rawseti(L, -2, i + 1);
    }
    if (vm_pcall(L, 1, 1) != 0 || !lua_istable(L, -1)) { /* [answers] or [err] */
        const char *msg = lua_tostring(L, -1);
        log_fmt(LOG_ERROR, "web: a batch of %d requests: %s", n, msg ? msg : "the handler returned no answers");
        lua_settop(L, top);
        return -1;
    }
    for (int i = 0; i < n; i++) {
        lua_rawgeti(L, top + 1, i + 1);              /* [answers, answer] */
        int ok = lua_istable(L, -1);
        for (int k = 1; k <= 4; k++) {
            if (ok) lua_rawgeti(L, top + 2, k);
            else lua_pushnil(L);
        }                                            /* [answers, answer, status, ctype, body, cookie] */
        if (hostlua_read_answer(L, top + 3, &reqs[i], &outs[i]) != 0) outs[i].status = 0;
        lua_settop(L, top + 1);
    }
    lua_settop(L, top);
    return 0;
}

/* The periodic Lua function of the plan (tick = {fn = f, ms = n}): called on
 * the main thread by host.c's timer, like the web handler (the main VM is
 * parked in core.host_run). An error is logged, at most once a minute. The
 * pause function (pause = {msg = s, fn = f}) is called the same way, when
 * the wake-up channel brings msg. */
struct hostlua_tick { lua_State *L; int ref; double logged; const char *what; };

static void hostlua_tick(void *ud) {
    struct hostlua_tick *t = ud;
    lua_State *L = t->L;
    int top = lua_gettop(L);
    lua_rawgeti(L, LUA_REGISTRYINDEX, t->ref);
    if (vm_pcall(L, 0, 0) != 0) {
        double now = runner_monotonic();
        if (now - t->logged >= 60) {
            const char *msg = lua_tostring(L, -1);
            if (!msg) msg = "(error object is not a string)";
            log_fmt(LOG_WARN, "%s: %.*s", t->what, (int)strcspn(msg, "\n"), msg); /* one line, no traceback */
            t->logged = now;
        }
    }
    lua_settop(L, top);
}

/* The fn of a plan table {fn = f, ...} on top of the stack (left there),
 * kept in the registry for t when it is a function and `ok`. 1 when kept. */
static int hostlua_plan_fn(lua_State *L, struct hostlua_tick *t, int ok) {
    lua_getfield(L, -1, "fn");
    if (lua_isfunction(L, -1) && ok) {
        t->ref = luaL_ref(L, LUA_REGISTRYINDEX);
        return 1;
    }
    lua_pop(L, 1);
    return 0;
}

/* The plan's reload function (SIGHUP): called on the main thread by host.c
 * like the tick; it checks the new code and says whether the threads may
 * switch to it (true) or not (false: it logged the one line saying why). An
 * error is logged and refuses the reload. */
struct hostlua_reload { lua_State *L; int ref; };

static int hostlua_reload(void *ud) {
    struct hostlua_reload *r = ud;
    lua_State *L = r->L;
    int top = lua_gettop(L);
    lua_rawgeti(L, LUA_REGISTRYINDEX, r->ref);
    int ok = 0;
    if (vm_pcall(L, 0, 1) != 0) {
        const char *msg = lua_tostring(L, -1);
        log_fmt(LOG_ERROR, "HUP: reload failed: %.*s; the old code keeps running",
                msg ? (int)strcspn(msg, "\n") : 40, msg ? msg : "(error object is not a string)");
    } else {
        ok = lua_toboolean(L, -1);
    }
    lua_settop(L, top);
    return ok;
}

/* core.load_check(arg) -> result | nil, err: see hostlua_entry.check. Main
 * thread (SIGHUP); the C string is copied into L before it is freed. */
static int hostlua_load_check(lua_State *L) {
    const char *arg = luaL_checkstring(L, 1);
    const struct hostlua_entry *entry = lua_touserdata(L, lua_upvalueindex(1));
    char err[1024];
    char *out = entry->check(arg, err, sizeof err);
    if (!out) {
        lua_pushnil(L);
        lua_pushstring(L, err);
        return 2;
    }
    lua_pushstring(L, out);
    free(out);
    return 1;
}

/* The string or number field k of the table on top of the stack (NULL or
 * dflt when absent). The string stays anchored in that table. */
static const char *hostlua_field_str(lua_State *L, const char *k) {
    lua_getfield(L, -1, k);
    const char *v = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : NULL;
    lua_pop(L, 1);
    return v;
}

static double hostlua_field_num(lua_State *L, const char *k, double dflt) {
    lua_getfield(L, -1, k);
    double v = lua_isnumber(L, -1) ? lua_tonumber(L, -1) : dflt;
    lua_pop(L, 1);
    return v;
}

/* A listener of the plan, field k of the argument table (index 1): "web"
 * or "replies", each {addr, boot (luakiq.web.open's), max_body,
 * max_connections, header_timeout, idle_timeout, batch}, into opts and app (a web
 * thread's app opened with boot). Absent, or without boot: opts->addr
 * stays NULL (no listener). The strings stay anchored in the argument
 * table while host_run blocks. */
static void hostlua_web_plan(lua_State *L, const char *k, struct web_opts *opts, struct web_app *app,
                             struct hostlua_webboot *boot) {
    lua_getfield(L, 1, k);           /* [..., listener] */
    if (lua_istable(L, -1)) {
        opts->addr = hostlua_field_str(L, "addr");
        boot->boot = hostlua_field_str(L, "boot");
        opts->max_body = (size_t)hostlua_field_num(L, "max_body", 1048576);
        opts->max_connections = (int)hostlua_field_num(L, "max_connections", 256);
        opts->header_timeout = hostlua_field_num(L, "header_timeout", 10);
        opts->idle_timeout = hostlua_field_num(L, "idle_timeout", 60);
        opts->batch = (int)hostlua_field_num(L, "batch", 0);
        if (!boot->boot) opts->addr = NULL;
        *app = (struct web_app){hostlua_web_open, hostlua_web_handle, hostlua_web_close, boot,
                                hostlua_web_handle_batch};
    }
    lua_pop(L, 1);                   /* [...] */
}

/* Pushes a stuck call's record (calls.c) as {worker = , shard = , batch = ,
 * token = , key = , jobs = {{id = , retry_count = }, ...}, done = {id, ...},
 * parked = bool, hook = name}: core.call_begin's arguments as they were,
 * batch, token and hook nil when there were none; done: the ids its fetch had done before it. A
 * stuck thread's unsent ack: {ack = true, key = , batch = , token = }. */
static void hostlua_push_record(lua_State *L, const struct calls_record *rec) {
    lua_createtable(L, 0, 8);
    if (rec->key.p) {
        lua_pushlstring(L, rec->key.p, rec->key.len);
        lua_setfield(L, -2, "key");
    }
    if (rec->ack) {
        lua_pushboolean(L, 1);
        lua_setfield(L, -2, "ack");
    }
    if (rec->hook.p) {
        lua_pushlstring(L, rec->hook.p, rec->hook.len);
        lua_setfield(L, -2, "hook");
    }
    lua_pushlstring(L, rec->worker.p, rec->worker.len);
    lua_setfield(L, -2, "worker");
    lua_pushinteger(L, rec->shard);
    lua_setfield(L, -2, "shard");
    if (rec->batch.p) {
        lua_pushlstring(L, rec->batch.p, rec->batch.len);
        lua_setfield(L, -2, "batch");
    }
    if (rec->token.p) {
        lua_pushlstring(L, rec->token.p, rec->token.len);
        lua_setfield(L, -2, "token");
    }
    lua_createtable(L, rec->njobs, 0);         /* [rec, jobs] */
    for (int i = 0; i < rec->njobs; i++) {
        lua_createtable(L, 0, 2);
        lua_pushlstring(L, rec->ids[i].p, rec->ids[i].len);
        lua_setfield(L, -2, "id");
        lua_pushnumber(L, rec->retry_counts[i]);
        lua_setfield(L, -2, "retry_count");
        lua_rawseti(L, -2, i + 1);
    }
    lua_setfield(L, -2, "jobs");               /* [rec] */
    lua_createtable(L, rec->ndone, 0);         /* [rec, done] */
    for (int i = 0; i < rec->ndone; i++) {
        lua_pushlstring(L, rec->done[i].p, rec->done[i].len);
        lua_rawseti(L, -2, i + 1);
    }
    lua_setfield(L, -2, "done");               /* [rec] */
    lua_pushboolean(L, rec->parked);
    lua_setfield(L, -2, "parked");
}

/* core.host_run{boots = {...}, redis = url, wake_channel = ch, routes = {[prefix] = thread (-1: all)},
 *               sharded_wake = bool (a Redis Cluster: also SSUBSCRIBE to PREFIX.."wake" per route),
 *               tokens = {...} (optional: each thread's own lease token, for renewals),
 *               dump_path = p, web = {addr = "ADDR:PORT", boot = s (luakiq.web.open's),
 *                 max_body = n, max_connections = n, header_timeout = s, idle_timeout = s},
 *               replies = {the same fields: the --replies listener},
 *               tick = {fn = f, ms = n}, reload = fn() -> bool,
 *               pause = {msg = s, fn = f} (f on the main thread when the wake-up channel
 *                 brings s, and after each subscribe: the paused queues changed)}
 *   -> exit code, stuck, signalled. Main thread only; blocks until the host
 * stops. stuck: the records (hostlua_push_record) of the calls that could
 * not be stopped at their timeout, whose threads still run, (parked =
 * true) of the calls those threads had waiting in luakiq's I/O and (ack =
 * true) of those threads' acks not sent yet; signalled:
 * a TERM/INT asked for the stop. */
static int hostlua_run(lua_State *L) {
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
    plan.dump_path = luaL_optstring(L, 6, NULL); /* (NULL: no dump) */
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
    /* tokens = {...} (elastic hosts): thread i's own lease token, anchored
     * in the argument table like the boots */
    const char **tokens = NULL;
    lua_getfield(L, 1, "tokens");
    if (lua_istable(L, -1) && (int)lua_objlen(L, -1) == n) {
        tokens = calloc((size_t)n + 1, sizeof *tokens);
        for (int i = 0; tokens && i < n; i++) {
            lua_rawgeti(L, -1, i + 1);
            tokens[i] = lua_tostring(L, -1);
            ok = ok && tokens[i];
            lua_pop(L, 1);
        }
        if (!tokens) ok = 0;
    }
    lua_pop(L, 1);
    plan.thread_tokens = tokens;
    lua_getfield(L, 1, "sharded_wake");
    plan.sharded_wake = lua_toboolean(L, -1);
    lua_pop(L, 1);
    plan.nthreads = n;
    plan.thread_main = ((const struct hostlua_entry *)lua_touserdata(L, lua_upvalueindex(1)))->thread_main;
    plan.boots = boots;
    plan.nroutes = k;
    plan.route_prefix = prefixes;
    plan.route_thread = threads;
    const struct hostlua_entry *entry = lua_touserdata(L, lua_upvalueindex(1));
    struct hostlua_webboot webboot = {entry, NULL}, repliesboot = {entry, NULL};
    hostlua_web_plan(L, "web", &plan.web, &plan.web_app, &webboot);
    hostlua_web_plan(L, "replies", &plan.replies, &plan.replies_app, &repliesboot);
    struct hostlua_tick tick = {L, LUA_NOREF, -1e9, "tick"}, pause = {L, LUA_NOREF, -1e9, "pause"};
    lua_getfield(L, 1, "tick");
    if (lua_istable(L, -1)) {
        lua_getfield(L, -1, "ms");
        plan.tick_ms = (long)lua_tonumber(L, -1);
        lua_pop(L, 1);
        if (hostlua_plan_fn(L, &tick, plan.tick_ms > 0)) {
            plan.tick = hostlua_tick;
            plan.tick_ud = &tick;
        }
    }
    lua_pop(L, 1);
    /* pause = {msg = s, fn = f}: msg anchored in the argument table */
    lua_getfield(L, 1, "pause");
    if (lua_istable(L, -1)) {
        lua_getfield(L, -1, "msg");
        plan.pause_msg = lua_tostring(L, -1);
        lua_pop(L, 1);
        if (hostlua_plan_fn(L, &pause, plan.pause_msg != NULL)) {
            plan.on_pause = hostlua_tick;
            plan.pause_ud = &pause;
        }
    }
    lua_pop(L, 1);
    struct hostlua_reload reload = {L, LUA_NOREF};
    lua_getfield(L, 1, "reload");
    if (lua_isfunction(L, -1)) {
        reload.ref = luaL_ref(L, LUA_REGISTRYINDEX);
        plan.reload = hostlua_reload;
        plan.reload_ud = &reload;
    } else {
        lua_pop(L, 1);
    }
    if (ok) core_install_timeouts();
    int code = ok ? host_run(&plan) : 2;
    if (tick.ref != LUA_NOREF) luaL_unref(L, LUA_REGISTRYINDEX, tick.ref);
    if (pause.ref != LUA_NOREF) luaL_unref(L, LUA_REGISTRYINDEX, pause.ref);
    if (reload.ref != LUA_NOREF) luaL_unref(L, LUA_REGISTRYINDEX, reload.ref);
    free(boots); free(prefixes); free(threads); free(tokens);
    if (!ok) return luaL_error(L, "host_run: boots and tokens must be strings");
    struct calls_record **stuck;
    int nstuck = calls_take_stuck(&stuck);
    lua_pushinteger(L, code);                  /* [code] */
    lua_createtable(L, nstuck, 0);             /* [code, stuck] */
    for (int i = 0; i < nstuck; i++) {
        hostlua_push_record(L, stuck[i]);      /* [code, stuck, record] */
        lua_rawseti(L, -2, i + 1);
    }
    for (int i = 0; i < nstuck; i++) free(stuck[i]);
    free(stuck);
    lua_pushboolean(L, host_signalled());      /* [code, stuck, signalled] */
    return 3;
}

/* core.host_catch_signals(): see host_catch_signals (main thread, once, before
 * `luakiq run` first waits on anything). */
static int hostlua_catch_signals(lua_State *L) {
    (void)L;
    host_catch_signals();
    return 0;
}

/* core.host_subscribe(prefix): from the tick, on the main thread, while
 * core.host_run runs (host_subscribe_shard). */
static int hostlua_subscribe(lua_State *L) {
    lua_pushboolean(L, host_subscribe_shard(luaL_checkstring(L, 1)) == 0);
    return 1;
}

void hostlua_register(lua_State *L, const struct hostlua_entry *entry) {
    lua_pushcfunction(L, hostlua_subscribe);
    lua_setfield(L, -2, "host_subscribe");
    lua_pushcfunction(L, hostlua_catch_signals);
    lua_setfield(L, -2, "host_catch_signals");
    lua_pushlightuserdata(L, (void *)entry);
    lua_pushcclosure(L, hostlua_run, 1);
    lua_setfield(L, -2, "host_run");
    lua_pushlightuserdata(L, (void *)entry);
    lua_pushcclosure(L, hostlua_load_check, 1);
    lua_setfield(L, -2, "load_check");
}
