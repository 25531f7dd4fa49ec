/* vm.h - Lua states: making one (standard libraries, every embedded module in
 * package.preload) and the one protected-call helper through which every
 * C->Lua call of the host goes. Knows nothing of threads, Redis or the host:
 * the `luakiq.core` API is handed in by the caller (entry.c). */
#ifndef LUAKIQ_VM_H
#define LUAKIQ_VM_H

struct lua_State;

/* A new Lua state owned by the calling thread, with the standard libraries,
 * the embedded modules of scripts/luakiq/ preloaded (read from
 * $LUAKIQ_SCRIPTS instead when it is set) and `luakiq.core` preloaded as
 * open_core. NULL when out of memory. */
struct lua_State *vm_new(int (*open_core)(struct lua_State *L));

/* lua_pcall with a traceback message handler: the function is below nargs
 * arguments; on error the error value is left on the stack (a string error
 * with a traceback appended; other values untouched). Returns the Lua status. */
int vm_pcall(struct lua_State *L, int nargs, int nresults);

/* require(module)[fn](<values pushed by push(L, ud)>), protected; leaves one
 * result (or the error). Returns the Lua status. */
int vm_call_module(struct lua_State *L, const char *module, const char *fn,
                   int (*push)(struct lua_State *L, void *ud), void *ud);

#endif
