/* vm.c - Lua states: creation, the embedded modules, the one protected call.
 *
 * Threads: a lua_State is created, used and closed by one thread; nothing here
 * keeps state of its own (embed_files is read-only), so any thread may make
 * its VM with vm_new. The C functions Lua calls live elsewhere, one file per
 * area (core.c, sys.c, conn.c, hostlua.c), gathered into `luakiq.core` by
 * entry.c.
 *
 * Errors: every C->Lua call goes through vm_pcall, which adds a traceback. */
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <lua.h>
#include <lauxlib.h>
#include <lualib.h>
#include "embed.h"
#include "vm.h"

/* Message handler: a string error gets a traceback; other error values (a
 * table raised on purpose, busted's nil) pass through untouched. */
static int vm_traceback(lua_State *L) {
    if (lua_type(L, 1) == LUA_TSTRING) luaL_traceback(L, L, lua_tostring(L, 1), 1);
    return 1;
}

int vm_pcall(lua_State *L, int nargs, int nresults) {
    int base = lua_gettop(L) - nargs;
    lua_pushcfunction(L, vm_traceback);
    lua_insert(L, base);
    int rc = lua_pcall(L, nargs, nresults, base);
    lua_remove(L, base);
    return rc;
}

/* Pushes the bytes of the file at path as a string: a page kept as a file
 * (scripts/luakiq/x.html), whose module is its bytes (cmake/embed.lua).
 * Raises when the file cannot be read. */
static void vm_push_file(lua_State *L, const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) luaL_error(L, "cannot open %s", path);
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    size_t n;
    do {
        char *p = luaL_prepbuffer(&b);
        n = fread(p, 1, LUAL_BUFFERSIZE, f);
        luaL_addsize(&b, n);
    } while (n == LUAL_BUFFERSIZE);
    int failed = ferror(f);
    fclose(f);
    if (failed) luaL_error(L, "cannot read %s", path);
    luaL_pushresult(&b);
}

/* package.preload loader for an embedded module (upvalue 1: the embed index).
 * With LUAKIQ_SCRIPTS set (the source tree's scripts/), the same module is
 * read from the source tree; an .html file's module is the file's bytes. */
static int vm_load_embedded(lua_State *L) {
    const struct embed_file *e = &embed_files[lua_tointeger(L, lua_upvalueindex(1))];
    const char *dir = getenv("LUAKIQ_SCRIPTS");
    int rc;
    if (dir && *dir) {
        char path[1024];
        /* LUAKIQ_SCRIPTS names scripts/; workers/ sits beside it */
        if (strncmp(e->path, "scripts/", 8) == 0) snprintf(path, sizeof path, "%s/%s", dir, e->path + 8);
        else snprintf(path, sizeof path, "%s/../%s", dir, e->path);
        size_t len = strlen(path);
        if (len > 5 && strcmp(path + len - 5, ".html") == 0) {
            vm_push_file(L, path);
            return 1;
        }
        rc = luaL_loadfile(L, path);
    } else {
        rc = luaL_loadbuffer(L, (const char *)e->bytes, e->len, e->path);
    }
    if (rc != 0) return lua_error(L);
    lua_pushstring(L, e->name);
    lua_call(L, 1, 1); /* inside require: errors propagate to require's caller */
    return 1;
}

lua_State *vm_new(int (*open_core)(lua_State *L)) {
    lua_State *L = luaL_newstate();
    if (!L) return NULL;
    luaL_openlibs(L);
    lua_getglobal(L, "package");
    lua_getfield(L, -1, "preload");            /* [package, preload] */
    for (int i = 0; embed_files[i].name; i++) {
        if (embed_files[i].kind != EMBED_HOST_MODULE) continue;
        lua_pushinteger(L, i);
        lua_pushcclosure(L, vm_load_embedded, 1);
        lua_setfield(L, -2, embed_files[i].name);
    }
    lua_pushcfunction(L, open_core);
    lua_setfield(L, -2, "luakiq.core");
    lua_pop(L, 2);
    return L;
}

int vm_call_module(lua_State *L, const char *module, const char *fn, int (*push)(lua_State *, void *), void *ud) {
    lua_getglobal(L, "require");
    lua_pushstring(L, module);
    int rc = vm_pcall(L, 1, 1);                /* [module] or [err] */
    if (rc != 0) return rc;
    lua_getfield(L, -1, fn);
    lua_remove(L, -2);                         /* [fn] */
    int nargs = push(L, ud);
    return vm_pcall(L, nargs, 1);
}
