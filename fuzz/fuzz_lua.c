/* fuzz_lua.c - the Lua side of the fuzz harnesses (fuzz_json.c): a real
 * host VM running a Lua driver, with Lua line coverage fed to libFuzzer.
 * Linked only into the harnesses (-DLUAKIQ_FUZZ=ON), never into luakiq. */
#include <stdint.h>
#include <stdio.h>
#include <lua.h>
#include <lauxlib.h>
#include "entry.h"
#include "fuzz_lua.h"
#include "vm.h"

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
static uint8_t fuzz_lua_counters[1 << 16];
static uintptr_t fuzz_lua_prev;
static void fuzz_lua_hook(lua_State *L, lua_Debug *ar) {
    if (!lua_getinfo(L, "S", ar)) return;
    uintptr_t cur = (((uintptr_t)ar->source >> 4) * 2654435761u) ^ ((uintptr_t)ar->currentline * 40503u);
    cur &= 0xffff;
    fuzz_lua_counters[(cur ^ fuzz_lua_prev) & 0xffff]++;
    fuzz_lua_prev = cur >> 1;
}

int fuzz_lua_one(const char *driver, const uint8_t *data, size_t len) {
    static lua_State *L;
    static int fn = LUA_NOREF;
    if (!L) {
        L = vm_new(entry_open_core);
        if (!L || luaL_loadfile(L, driver) != 0 || vm_pcall(L, 0, 1) != 0 || !lua_isfunction(L, -1)) {
            fprintf(stderr, "fuzz_lua_one: cannot load %s: %s\n", driver,
                    L && lua_isstring(L, -1) ? lua_tostring(L, -1) : "not a function");
            return -1;
        }
        fn = luaL_ref(L, LUA_REGISTRYINDEX);
        lua_sethook(L, fuzz_lua_hook, LUA_MASKLINE, 0);
    }
    fuzz_lua_prev = 0;
    lua_rawgeti(L, LUA_REGISTRYINDEX, fn);
    lua_pushlstring(L, (const char *)data, len);
    int rc = vm_pcall(L, 1, 0);
    if (rc != 0) {
        const char *msg = lua_tostring(L, -1);
        fprintf(stderr, "fuzz_lua_one: %s\n", msg ? msg : "(error object is not a string)");
        lua_pop(L, 1);
        return -1;
    }
    lua_gc(L, LUA_GCSTEP, 0);
    return 0;
}
