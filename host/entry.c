/* entry.c - where the process and each worker thread enter Lua.
 *
 * entry_main (main thread) makes the main VM and hands argv to
 * luakiq.cli.main; everything user-facing is Lua from there on. `luakiq run`
 * comes back into C through core.host_run (hostlua.c), which starts one worker
 * thread per group; each runs entry_thread, which makes that thread's own VM
 * and runs luakiq.runner.main(boot); the web thread makes its own VM with
 * entry_vm_open (hostlua.c runs luakiq.web.open in it). Each VM is created, used and closed by
 * its own thread. `luakiq.core` is assembled here from the files that each
 * own one area of it. */
#include <stdio.h>
#include <lua.h>
#include <lauxlib.h>
#include "conn.h"
#include "core.h"
#include "entry.h"
#include "hostlua.h"
#include "http.h"
#include "proc.h"
#include "log.h"
#include "runner.h"
#include "sys.h"
#include "vm.h"

static int entry_thread(const char *boot);
static lua_State *entry_vm_open(void);
static void entry_vm_close(lua_State *L);
static const struct hostlua_entry entry_worker = {entry_thread, entry_vm_open, entry_vm_close};

int entry_open_core(lua_State *L) {
    lua_newtable(L);                           /* [core] */
    core_register(L);
    sys_register(L);
    conn_register(L);
    http_register(L);
    proc_register(L);
    hostlua_register(L, &entry_worker);
    return 1;
}

struct entry_argv { int argc; char **argv; };

static int entry_push_argv(lua_State *L, void *ud) {
    struct entry_argv *a = ud;
    lua_createtable(L, a->argc, 0);
    for (int i = 0; i < a->argc; i++) {
        lua_pushstring(L, a->argv[i]);
        lua_rawseti(L, -2, i); /* argv[0] at index 0, like Lua's `arg` */
    }
    return 1;
}

int entry_main(int argc, char **argv) {
    const char *err;
    if (http_global_init(&err) != 0) { fprintf(stderr, "luakiq: cannot initialise libcurl: %s\n", err); return 1; }
    lua_State *L = vm_new(entry_open_core);
    if (!L) { fprintf(stderr, "luakiq: cannot create a Lua state\n"); return 1; }
    struct entry_argv a = {argc, argv};
    int code;
    if (vm_call_module(L, "luakiq.cli", "main", entry_push_argv, &a) != 0) {
        /* Only a host bug gets here: luakiq.cli handles user errors itself. */
        const char *msg = lua_tostring(L, -1);
        fprintf(stderr, "luakiq: %s\n", msg ? msg : "(error object is not a string)");
        code = 1;
    } else {
        code = lua_isnumber(L, -1) ? (int)lua_tointeger(L, -1) : 0;
    }
    lua_close(L);
    http_thread_end(); /* after the VM: closing it ends its transfers */
    return code;
}

/* The web thread's VM (hostlua.c's web app): made and closed on that thread. */
static lua_State *entry_vm_open(void) { return vm_new(entry_open_core); }

static void entry_vm_close(lua_State *L) {
    lua_close(L);
    http_thread_end();
}

static int entry_push_boot(lua_State *L, void *ud) {
    lua_pushstring(L, ud);
    return 1;
}

/* A worker thread's body (runner.c runs it on the new thread). A Lua error
 * that escapes luakiq.runner.main is a host bug or a start-up failure: it
 * stops the whole process (runner_set_fatal). */
static int entry_thread(const char *boot) {
    lua_State *L = vm_new(entry_open_core);
    if (!L) { runner_set_fatal("cannot create a Lua state"); return 1; }
    int code = 0;
    if (vm_call_module(L, "luakiq.runner", "main", entry_push_boot, (void *)boot) != 0) {
        const char *msg = lua_tostring(L, -1);
        log_fmt(LOG_ERROR, "worker thread failed: %s", msg ? msg : "(error object is not a string)");
        runner_set_fatal(msg ? msg : "worker thread failed");
        code = 1;
    } else if (lua_isnumber(L, -1)) {
        code = (int)lua_tointeger(L, -1);
    }
    lua_close(L);
    http_thread_end();
    return code;
}
