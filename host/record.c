/* record.c - core.unpack: the MessagePack values of a record as Lua values.
 *
 * fetch.lua hands the host each fetched job's busy record as Redis stores it
 * (cmsgpack: perform_in, retry_count, priority, windows, then payloads and
 * their scores; docs/redis.md "Records"), or a fresh job's member of P jobs
 * (its queued record after the id and place: perform_in, then payloads and
 * their scores), so Redis copies the payload bytes
 * instead of decoding and re-encoding them. The host decodes them here, with
 * msgpack-c (Debian's libmsgpack-dev), once per fetched job: the pure-Lua
 * decoder it replaced made a closure per short string and cost the host
 * ~0.8 us per record (docs/benchmarks.md).
 *
 * Threads: each VM has its own zone (an upvalue of its core.unpack), and
 * each call works on its caller's VM only. */
#include <lua.h>
#include <lauxlib.h>
#include <msgpack.h>
#include "record.h"

/* The zone msgpack_unpack puts arrays and maps in (a record never has one:
 * junk does). One per VM, as the unpack function's upvalue, collected with
 * the VM: msgpack_unpack_next made and freed a zone per value, ~6 mallocs a
 * record and ~1.7k instructions of a blank job's host CPU. (msgpack_unpack is
 * marked obsolete in msgpack-c 4 but exported; it is the call that takes the
 * caller's zone.) */
struct record_zone {
    msgpack_zone z;
    int live;
};

static int record_zone_gc(lua_State *L) {
    struct record_zone *rz = lua_touserdata(L, 1);
    if (rz->live) msgpack_zone_destroy(&rz->z);
    rz->live = 0;
    return 0;
}

/* core.unpack(s, t[, from]) -> n | nil: stores the values MessagePack-encoded
 * one after another in s from its byte `from` on (default 1) into t[1..n] (t
 * may be reused: entries past n are left as they were) and returns n. Records hold only scalars and strings: an
 * array, a map, an extension, bin or bytes that do not decode give nil
 * (junk another program wrote; the caller drops the record). Each value is
 * decoded and the zone cleared before anything is pushed, so a Lua error
 * (out of memory) cannot leak it: strings point into s, which the caller's
 * stack holds. */
static int record_unpack(lua_State *L) {
    size_t len, off = 0;
    const char *s = luaL_checklstring(L, 1, &len);
    luaL_checktype(L, 2, LUA_TTABLE);
    lua_Integer from = luaL_optinteger(L, 3, 1);
    if (from < 1 || (size_t)from > len + 1) return luaL_argerror(L, 3, "out of the string");
    off = (size_t)from - 1;
    struct record_zone *rz = lua_touserdata(L, lua_upvalueindex(1));
    int n = 0;
    while (off < len) {
        msgpack_object o;
        msgpack_unpack_return r = msgpack_unpack(s, len, &off, &rz->z, &o);
        msgpack_zone_clear(&rz->z);
        if (r != MSGPACK_UNPACK_SUCCESS && r != MSGPACK_UNPACK_EXTRA_BYTES) {
            lua_pushnil(L);
            return 1;
        }
        n++;
        switch (o.type) {
        case MSGPACK_OBJECT_NIL:
            lua_pushnil(L);
            break;
        case MSGPACK_OBJECT_BOOLEAN:
            lua_pushboolean(L, o.via.boolean);
            break;
        case MSGPACK_OBJECT_POSITIVE_INTEGER:
            lua_pushnumber(L, (lua_Number)o.via.u64);
            break;
        case MSGPACK_OBJECT_NEGATIVE_INTEGER:
            lua_pushnumber(L, (lua_Number)o.via.i64);
            break;
        case MSGPACK_OBJECT_FLOAT32:
        case MSGPACK_OBJECT_FLOAT64:
            lua_pushnumber(L, (lua_Number)o.via.f64);
            break;
        case MSGPACK_OBJECT_STR:
            lua_pushlstring(L, o.via.str.ptr, o.via.str.size);
            break;
        default:
            lua_pushnil(L);
            return 1;
        }
        lua_rawseti(L, 2, n);
    }
    lua_pushinteger(L, n);
    return 1;
}

void record_register(lua_State *L) {
    struct record_zone *rz = lua_newuserdata(L, sizeof *rz);
    rz->live = 0;
    lua_newtable(L);
    lua_pushcfunction(L, record_zone_gc);
    lua_setfield(L, -2, "__gc");
    lua_setmetatable(L, -2);
    if (!msgpack_zone_init(&rz->z, 256)) luaL_error(L, "core.unpack: out of memory");
    rz->live = 1;
    lua_pushcclosure(L, record_unpack, 1);
    lua_setfield(L, -2, "unpack");
}
