/* conn.c - Redis connections for Lua: the connection object the runtime's
 * client, the runner and luakiq.redis are built on (core.connect), and the
 * embedded Redis scripts' sources and names.
 *
 * Threads: a connection belongs to the thread (and VM) that opened it; it
 * wraps one store (store.c), which is not shared. Its metatable is named
 * CONN_META, so it cannot be confused with the public `luakiq.redis` table.
 *
 * Errors: `call`/`pipeline`/`script` raise, `pcall`/`ppipeline` return nil,
 * err. Every C function frees what it holds before it raises. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <lua.h>
#include <lauxlib.h>
#include "cluster.h"
#include "conn.h"
#include "core.h"
#include "embed.h"
#include "store.h"
#include "url.h"

#define CONN_META "luakiq.conn"

/* Converts the argument at idx to bytes for Redis. Numbers keep full
 * precision (LuaJIT's tostring uses %.14g, which would cut timestamps). */
static const char *conn_arg(lua_State *L, int idx, size_t *len, char *buf, size_t cap) {
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

/* The n stack values from first on as command arguments (conn_arg each,
 * nums: their number buffers). 0, or -1 with err naming the bad one. */
static int conn_args(lua_State *L, int first, int n, const char **argv, size_t *lens, char (*nums)[32],
                     char *err, size_t errlen) {
    for (int i = 0; i < n; i++) {
        argv[i] = conn_arg(L, first + i, &lens[i], nums[i], sizeof nums[i]);
        if (!argv[i]) {
            snprintf(err, errlen, "redis: argument %d must be a string or a finite number", i + 1);
            return -1;
        }
    }
    return 0;
}

/* Pushes a reply. Errors inside arrays become {err = msg}; nil becomes false
 * (so arrays have no holes), as in Redis's own scripting. */
static void conn_push_reply(lua_State *L, const store_reply *r) {
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
            conn_push_reply(L, store_reply_elem(r, i));
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

typedef struct { store *s; } conn_obj;

static conn_obj *conn_check(lua_State *L) {
    conn_obj *r = luaL_checkudata(L, 1, CONN_META);
    if (!r->s) luaL_error(L, "redis: connection is closed");
    return r;
}

/* One store operation (store_pipeline, store_send, store_recv: what),
 * bounded by the running perform call's deadline when there is one (a
 * worker's luakiq.redis): then no signal interrupts it, and an I/O error at
 * the deadline is reported as the call's timeout (so is a call with no time
 * left, which does nothing). */
enum conn_op { CONN_PIPELINE, CONN_SEND, CONN_RECV };
static int conn_bounded(conn_obj *r, enum conn_op what, int n, const struct store_cmd *cmds, store_reply **out,
                        char *err, size_t errlen) {
    double left = core_io_begin();
    int rc = -1;
    if (left == 0) {
        core_timeout_text(err, errlen);
    } else {
        if (left > 0) store_bound_io(r->s, left);
        if (what == CONN_PIPELINE) rc = store_pipeline(r->s, n, cmds, out, err, errlen);
        else if (what == CONN_SEND) rc = store_send(r->s, n, cmds, err, errlen);
        else rc = store_recv(r->s, n, out, err, errlen);
        if (left > 0) store_bound_io(r->s, 0);
        if (rc < 0 && left > 0 && core_call_remaining() == 0) {
            char io[512];
            snprintf(io, sizeof io, "%s", err);
            core_timeout_text(err, errlen);
            snprintf(err + strlen(err), errlen - strlen(err), " waiting for Redis (%s)", io);
        }
    }
    core_io_end();
    return rc;
}
static int conn_io(conn_obj *r, int n, const struct store_cmd *cmds, store_reply **out, char *err, size_t errlen) {
    return conn_bounded(r, CONN_PIPELINE, n, cmds, out, err, errlen);
}

/* core.connect(url, timeout_s[, "node"]) -> conn | nil, err. "node": that
 * one server even when it is a Redis Cluster node (no routing). */
static int conn_connect(lua_State *L) {
    const char *url = luaL_checkstring(L, 1);
    double timeout = luaL_optnumber(L, 2, 10);
    int node_only = lua_isstring(L, 3) && strcmp(lua_tostring(L, 3), "node") == 0;
    char err[512];
    store *s = node_only ? store_open_node(url, timeout, err, sizeof err) : store_open(url, timeout, err, sizeof err);
    if (!s) { lua_pushnil(L); lua_pushstring(L, err); return 2; }
    conn_obj *r = lua_newuserdata(L, sizeof *r);
    r->s = s;
    luaL_getmetatable(L, CONN_META);
    lua_setmetatable(L, -2);
    return 1;
}

/* Builds store_cmds from Lua values and runs them in one round trip.
 * Shape of each command table: {"SET", "k", "v"} or {script = "fetch", numkeys = 1, key, arg...}.
 * Pushes an array of replies, or returns -1 with err filled (nothing pushed). */
#define CONN_PIPE_CMDS 4  /* a pipeline this small (every fetch) uses no heap */
#define CONN_PIPE_ARGS 32
struct conn_pipe {
    int n;
    struct store_cmd *cmds;
    const char **argv;
    size_t *lens;
    char (*nums)[32];
    store_reply **replies;
    struct store_cmd cmds_s[CONN_PIPE_CMDS + 1];
    const char *argv_s[CONN_PIPE_ARGS + 1];
    size_t lens_s[CONN_PIPE_ARGS + 1];
    char nums_s[CONN_PIPE_ARGS + 1][32];
    store_reply *replies_s[CONN_PIPE_CMDS + 1];
};

static void conn_pipe_free(struct conn_pipe *p) {
    if (p->cmds != p->cmds_s) free(p->cmds);
    if (p->argv != p->argv_s) free(p->argv);
    if (p->lens != p->lens_s) free(p->lens);
    if (p->nums != p->nums_s) free(p->nums);
    if (p->replies != p->replies_s) free(p->replies);
}

/* Fills p from the Lua table at idx (an array of command tables). The strings
 * stay owned by Lua (the table is on the stack for the whole call). */
static int conn_pipe_build(lua_State *L, int idx, struct conn_pipe *p, char *err, size_t errlen) {
    p->cmds = NULL; p->argv = NULL; p->lens = NULL; p->nums = NULL; p->replies = NULL;
    p->n = (int)lua_objlen(L, idx);
    int total = 0;
    for (int i = 1; i <= p->n; i++) {
        lua_rawgeti(L, idx, i);
        if (!lua_istable(L, -1)) { lua_pop(L, 1); snprintf(err, errlen, "redis: command %d is not a table", i); return -1; }
        total += (int)lua_objlen(L, -1);
        lua_pop(L, 1);
    }
    if (p->n <= CONN_PIPE_CMDS && total <= CONN_PIPE_ARGS) {
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
            p->argv[k] = conn_arg(L, -1, &p->lens[k], p->nums[k], sizeof p->nums[k]);
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
static int conn_pipeline_impl(lua_State *L, int protected) {
    core_safe_point(L);
    conn_obj *r = conn_check(L);
    luaL_checktype(L, 2, LUA_TTABLE);
    struct conn_pipe p;
    char err[1024];
    int ok = conn_pipe_build(L, 2, &p, err, sizeof err) == 0 && conn_io(r, p.n, p.cmds, p.replies, err, sizeof err) == 0;
    if (ok) {
        lua_createtable(L, p.n, 0);
        for (int i = 0; i < p.n; i++) {
            conn_push_reply(L, p.replies[i]);
            lua_rawseti(L, -2, i + 1);
            store_reply_free(p.replies[i]);
        }
    }
    conn_pipe_free(&p);
    if (ok) return 1;
    if (protected) { lua_pushnil(L); lua_pushstring(L, err); return 2; }
    lua_pushstring(L, err);
    return lua_error(L);
}
static int conn_pipeline(lua_State *L) { return conn_pipeline_impl(L, 0); }
static int conn_ppipeline(lua_State *L) { return conn_pipeline_impl(L, 1); }

/* conn:send(cmds) -> true, or false when nothing was sent (a cluster; use
 * pipeline): the commands written out now, their replies left for
 * conn:recv, so the caller prepares more while Redis runs these (the
 * client's enqueue). Raises on I/O or argument errors. A NOSCRIPT comes
 * back from recv as an error reply, {err = "NOSCRIPT ..."}. */
static int conn_send(lua_State *L) {
    core_safe_point(L);
    conn_obj *r = conn_check(L);
    luaL_checktype(L, 2, LUA_TTABLE);
    struct conn_pipe p;
    char err[1024];
    int rc = -1;
    if (conn_pipe_build(L, 2, &p, err, sizeof err) == 0)
        rc = conn_bounded(r, CONN_SEND, p.n, p.cmds, NULL, err, sizeof err);
    conn_pipe_free(&p);
    if (rc < 0) {
        lua_pushstring(L, err);
        return lua_error(L);
    }
    lua_pushboolean(L, rc == 0);
    return 1;
}

/* conn:recv(n) -> {reply...}: the replies of the oldest n commands conn:send
 * sent (error replies as {err = msg}, like pipeline's). Raises on I/O
 * errors (the connection is then broken). */
static int conn_recv(lua_State *L) {
    core_safe_point(L);
    conn_obj *r = conn_check(L);
    int n = (int)luaL_checkinteger(L, 2);
    char err[1024];
    if (n < 0 || n > store_pending(r->s)) return luaL_error(L, "redis: recv of %d replies, %d pending", n, store_pending(r->s));
    /* (the result table and the reply array made before any reply is read:
     * the array is Lua's, collected whatever raises) */
    lua_createtable(L, n, 0);
    int result = lua_gettop(L);
    store_reply **out = lua_newuserdata(L, (size_t)(n > 0 ? n : 1) * sizeof *out); /* kept on the stack */
    int rc = conn_bounded(r, CONN_RECV, n, NULL, out, err, sizeof err);
    if (rc < 0) {
        lua_pushstring(L, err);
        return lua_error(L);
    }
    for (int i = 0; i < n; i++) {
        conn_push_reply(L, out[i]);
        lua_rawseti(L, result, i + 1);
        store_reply_free(out[i]);
        out[i] = NULL;
    }
    lua_pushvalue(L, result);
    return 1;
}

/* One command from the call's own arguments (conn:call("GET", "k")). */
static int conn_call_impl(lua_State *L, int protected, const char *script) {
    core_safe_point(L);
    conn_obj *r = conn_check(L);
    int first = script ? 3 : 2, n = lua_gettop(L) - first + 1;
    const char *stackv[64];
    size_t stackl[64];
    char nums[64][32];
    char err[1024];
    store_reply *reply = NULL;
    int ok = 0;
    if (n > 64) { snprintf(err, sizeof err, "redis: too many arguments (max 64 with call; use pipeline)"); goto done; }
    if (n < 1 && !script) { snprintf(err, sizeof err, "redis: no command"); goto done; }
    if (conn_args(L, first, n, stackv, stackl, nums, err, sizeof err) < 0) goto done;
    struct store_cmd c = {script, 1, n, stackv, stackl};
    if (conn_io(r, 1, &c, &reply, err, sizeof err) < 0) goto done;
    if (store_reply_type(reply) == STORE_ERROR) {
        size_t len;
        const char *s = store_reply_str(reply, &len);
        snprintf(err, sizeof err, "redis: %.*s", (int)len, s);
        goto done;
    }
    conn_push_reply(L, reply);
    ok = 1;
done:
    store_reply_free(reply);
    if (ok) return 1;
    if (protected) { lua_pushnil(L); lua_pushstring(L, err); return 2; }
    lua_pushstring(L, err);
    return lua_error(L);
}
static int conn_call(lua_State *L) { return conn_call_impl(L, 0, NULL); }
static int conn_pcall(lua_State *L) { return conn_call_impl(L, 1, NULL); }
/* conn:script(name, key, arg...) -> reply (raises on error) */
static int conn_script(lua_State *L) {
    const char *name = luaL_checkstring(L, 2);
    return conn_call_impl(L, 0, name);
}

/* conn:each(cmd, arg...) -> {{node = "host:port", reply = r}...}: the
 * command on every master of a cluster, or on the one Redis (store_each).
 * Raises on I/O errors; error replies are {err = msg} like pipeline's. */
static int conn_each(lua_State *L) {
    core_safe_point(L);
    conn_obj *r = conn_check(L);
    int n = lua_gettop(L) - 1;
    const char *argv[64];
    size_t lens[64];
    char nums[64][32], err[512], names[CLUSTER_MAX_NODES][64];
    store_reply *out[CLUSTER_MAX_NODES];
    if (n < 1 || n > 64) return luaL_error(L, "redis: each takes a command of 1 to 64 arguments");
    if (conn_args(L, 2, n, argv, lens, nums, err, sizeof err) < 0) {
        lua_pushstring(L, err);
        return lua_error(L);
    }
    struct store_cmd c = {NULL, 0, n, argv, lens};
    int got = store_each(r->s, &c, CLUSTER_MAX_NODES, out, names, err, sizeof err);
    if (got < 0) {
        lua_pushstring(L, err);
        return lua_error(L);
    }
    lua_createtable(L, got, 0);
    for (int i = 0; i < got; i++) {
        lua_createtable(L, 0, 2);
        lua_pushstring(L, names[i]);
        lua_setfield(L, -2, "node");
        conn_push_reply(L, out[i]);
        store_reply_free(out[i]);
        out[i] = NULL;
        lua_setfield(L, -2, "reply");
        lua_rawseti(L, -2, i + 1);
    }
    return 1;
}

/* conn:reconnect() -> true | nil, err */
static int conn_reconnect(lua_State *L) {
    conn_obj *r = conn_check(L);
    char err[512];
    if (store_reconnect(r->s, err, sizeof err) < 0) { lua_pushnil(L); lua_pushstring(L, err); return 2; }
    lua_pushboolean(L, 1);
    return 1;
}

static int conn_broken(lua_State *L) {
    lua_pushboolean(L, store_broken(conn_check(L)->s));
    return 1;
}

/* conn:cluster() -> true when the connection routes over a Redis Cluster */
static int conn_cluster(lua_State *L) {
    lua_pushboolean(L, store_is_cluster(conn_check(L)->s));
    return 1;
}

static int conn_close(lua_State *L) {
    conn_obj *r = luaL_checkudata(L, 1, CONN_META);
    store_close(r->s);
    r->s = NULL;
    return 0;
}

/* core.script_source(name) -> source of a Redis-side script */
static int conn_script_source(lua_State *L) {
    size_t len;
    const char *s = store_script_source(luaL_checkstring(L, 1), &len);
    if (s) lua_pushlstring(L, s, len); else lua_pushnil(L);
    return 1;
}

/* core.script_define(name, source): development mode (LUAKIQ_SCRIPTS), see
 * store_script_define. Raises when the store's table is full. */
static int conn_script_define(lua_State *L) {
    size_t len;
    const char *name = luaL_checkstring(L, 1), *src = luaL_checklstring(L, 2, &len);
    if (store_script_define(name, src, len) != 0) return luaL_error(L, "cannot define Redis script '%s'", name);
    return 0;
}

/* core.script_names() -> names of the embedded Redis scripts */
static int conn_script_names(lua_State *L) {
    lua_newtable(L);
    int i = 0;
    for (const struct embed_file *e = embed_files; e->name; e++)
        if (e->kind == EMBED_REDIS_SCRIPT) {
            lua_pushstring(L, e->name);
            lua_rawseti(L, -2, ++i);
        }
    return 1;
}

static const luaL_Reg conn_methods[] = {
    {"call", conn_call},           {"pcall", conn_pcall},
    {"script", conn_script},       {"pipeline", conn_pipeline},
    {"ppipeline", conn_ppipeline}, {"reconnect", conn_reconnect},
    {"broken", conn_broken},       {"close", conn_close},
    {"cluster", conn_cluster},     {"each", conn_each},
    {"send", conn_send},           {"recv", conn_recv},
    {NULL, NULL}};

/* core.redact_url(url) -> the URL without credentials (url_redact:
 * the one redactor, so C's messages and Lua's agree). */
static int conn_redact_url(lua_State *L) {
    const char *url = luaL_checkstring(L, 1);
    size_t n = url_redact(url, NULL, 0);
    char *out = lua_newuserdata(L, n + 1); /* collected by Lua: nothing to free if a push raises */
    url_redact(url, out, n + 1);
    lua_pushlstring(L, out, n);
    return 1;
}

/* core.key_slot(key) -> the key's Redis Cluster hash slot (cluster.c) */
static int conn_key_slot(lua_State *L) {
    size_t len;
    const char *k = luaL_checklstring(L, 1, &len);
    lua_pushinteger(L, cluster_key_slot(k, len));
    return 1;
}

static const luaL_Reg conn_funcs[] = {
    {"key_slot", conn_key_slot},
    {"connect", conn_connect},
    {"redact_url", conn_redact_url},
    {"script_source", conn_script_source},
    {"script_define", conn_script_define},
    {"script_names", conn_script_names},
    {NULL, NULL}};

void conn_register(lua_State *L) {
    luaL_newmetatable(L, CONN_META);           /* [core, meta] */
    lua_pushvalue(L, -1);
    lua_setfield(L, -2, "__index");
    luaL_register(L, NULL, conn_methods);
    lua_pushcfunction(L, conn_close);
    lua_setfield(L, -2, "__gc");
    lua_pop(L, 1);                             /* [core] */
    luaL_register(L, NULL, conn_funcs);
}
