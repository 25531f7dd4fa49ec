/* entry.c - where the process and each worker thread enter Lua.
 *
 * entry_main (main thread) makes the main VM and hands argv to
 * luakiq.ops.cli.main; everything user-facing is Lua from there on. `luakiq run`
 * comes back into C through core.host_run (hostlua.c), which starts one worker
 * thread per group; each runs entry_thread, which makes that thread's own VM
 * and runs luakiq.runner.open(boot) then luakiq.runner.run(); the web thread
 * makes its own VM with entry_vm_open (hostlua.c runs luakiq.web.open in
 * it). Each VM is created, used and closed by its own thread. `luakiq.core` is assembled here
 * from the files that each own one area of it.
 *
 * Reload (SIGHUP, docs/architecture.md "Reload"): the main thread checks DIR
 * in a VM of its own (entry_check, closed at once), then asks every thread to
 * switch. luakiq.runner.run returns "reload" at a point where its thread has
 * no call in flight and nothing unacked; the thread then builds a fresh VM
 * with the new code (runner.open: DIR, its own Redis connection, the
 * scheduler) next to the old one, and only when that succeeded closes the
 * old VM; otherwise it runs on in the old VM, whose state run() kept. So a
 * thread never runs two VMs' code at once and never loses a batch. */
#include <signal.h>
#include <string.h>
#include <stdio.h>
#include <lua.h>
#include <lauxlib.h>
#include <luajit.h>
#include "conn.h"
#include "core.h"
#include "entry.h"
#include "host.h"
#include "hostlua.h"
#include "http.h"
#include "proc.h"
#include "log.h"
#include "pause.h"
#include "record.h"
#include "runner.h"
#include "sys.h"
#include "vm.h"

static int entry_thread(const char *boot);
static char *entry_check(const char *arg, char *err, size_t len);
static lua_State *entry_vm_open(void);
static void entry_vm_close(lua_State *L);
static const struct hostlua_entry entry_worker = {entry_thread, entry_check, entry_vm_open, entry_vm_close};

int entry_open_core(lua_State *L) {
    lua_newtable(L);                           /* [core] */
    core_register(L);
    sys_register(L);
    conn_register(L);
    http_register(L);
    proc_register(L);
    record_register(L);
    pause_register(L);
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
    /* `luakiq run`: a TERM or INT from the first instruction on asks for a
     * stop (luakiq.cli's run does this again, for a run started otherwise);
     * made the VM and loaded the CLI first, a loaded machine left a window
     * where a TERM killed the host with 143 before it said a word. */
    if (argc > 1 && strcmp(argv[1], "run") == 0) host_catch_signals();
    lua_State *L = vm_new(entry_open_core);
    if (!L) { fprintf(stderr, "luakiq: cannot create a Lua state\n"); return 1; }
    struct entry_argv a = {argc, argv};
    int code;
    if (vm_call_module(L, "luakiq.ops.cli", "main", entry_push_argv, &a) != 0) {
        /* Only a host bug gets here: luakiq.ops.cli handles user errors itself. */
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

struct entry_open { const char *boot; int reload; };

static int entry_push_open(lua_State *L, void *ud) {
    const struct entry_open *o = ud;
    lua_pushstring(L, o->boot);
    lua_pushboolean(L, o->reload);
    return 2;
}

static int entry_push_none(lua_State *L, void *ud) {
    (void)L; (void)ud;
    return 0;
}

static int entry_push_string(lua_State *L, void *ud) {
    lua_pushstring(L, ud);
    return 1;
}

/* The error on top of L's stack, first line only, into err. */
static void entry_error(lua_State *L, char *err, size_t len) {
    const char *msg = lua_tostring(L, -1);
    if (!msg) msg = "(error object is not a string)";
    snprintf(err, len, "%.*s", (int)strcspn(msg, "\n"), msg);
}

/* Worker thread: a fresh VM with the thread's runner opened in it
 * (luakiq.runner.open: loads DIR, connects, builds the scheduler). NULL on
 * failure, with the error's first line in err. */
static lua_State *entry_thread_vm(const char *boot, int reload, char *err, size_t len) {
    lua_State *L = vm_new(entry_open_core);
    if (!L) { snprintf(err, len, "cannot create a Lua state"); return NULL; }
    struct entry_open o = {boot, reload};
    if (vm_call_module(L, "luakiq.runner", "open", entry_push_open, &o) != 0) {
        entry_error(L, err, len);
        lua_close(L);
        return NULL;
    }
    lua_settop(L, 0);
    return L;
}

/* A worker thread's body (runner.c runs it on the new thread). A Lua error
 * that escapes luakiq.runner.open at the start or luakiq.runner.run is a host
 * bug or a start-up failure: it stops the whole process (runner_set_fatal).
 * run() returning "reload" swaps the VM (see the design note); a fresh VM
 * that fails to open is logged on one line and the old one runs on. */
static int entry_thread(const char *boot) {
    char err[1024];
    lua_State *L = entry_thread_vm(boot, 0, err, sizeof err);
    int code = 0;
    if (!L) {
        log_fmt(LOG_ERROR, "worker thread failed: %s", err);
        runner_set_fatal(err);
        http_thread_end();
        return 1;
    }
    for (;;) {
        if (vm_call_module(L, "luakiq.runner", "run", entry_push_none, NULL) != 0) {
            entry_error(L, err, sizeof err);
            log_fmt(LOG_ERROR, "worker thread failed: %s", err);
            runner_set_fatal(err);
            code = 1;
            break;
        }
        if (lua_type(L, -1) != LUA_TSTRING || strcmp(lua_tostring(L, -1), "reload") != 0) {
            code = lua_isnumber(L, -1) ? (int)lua_tointeger(L, -1) : 0;
            break;
        }
        lua_settop(L, 0);
        struct runner *r = runner_self();
        int gen = runner_reload_take(r);
        lua_State *fresh = entry_thread_vm(boot, 1, err, sizeof err);
        if (fresh) {
            lua_close(L); /* its calls are over and acked; its connection closes */
            L = fresh;
        } else {
            log_fmt(LOG_ERROR, "reload: this thread keeps the old code: %s", err);
        }
        runner_reload_done(r, gen, fresh != NULL);
    }
    lua_close(L);
    http_thread_end();
    return code;
}

/* How long the reload's check may load DIR: it runs on the main thread,
 * whose loop (signals, lease renewals, the watchdog) waits meanwhile. */
#define ENTRY_CHECK_SECONDS 5.0

/* main thread only: the check's deadline, and once it is over, its error */
static double entry_check_deadline;
static char entry_check_error[512];

/* The check VM's count hook: past the deadline, or once a TERM or INT is
 * pending (entry_check blocks them meanwhile), raises in the loading code
 * (where it was: the file and line that loops), and from then on the same
 * error at every instruction, so that a pcall in it cannot keep the load
 * going. */
static void entry_check_hook(lua_State *L, lua_Debug *ar) {
    if (!entry_check_error[0]) {
        sigset_t pending;
        int sig = sigpending(&pending) == 0 && (sigismember(&pending, SIGTERM) || sigismember(&pending, SIGINT));
        if (!sig && runner_monotonic() < entry_check_deadline) return;
        int n = lua_getinfo(L, "Sl", ar) && ar->currentline > 0
            ? snprintf(entry_check_error, sizeof entry_check_error, "%s:%d: ", ar->short_src, ar->currentline) : 0;
        if (n < 0 || (size_t)n >= sizeof entry_check_error) n = 0;
        if (sig) snprintf(entry_check_error + n, sizeof entry_check_error - (size_t)n, "loading was stopped by a TERM or INT");
        else snprintf(entry_check_error + n, sizeof entry_check_error - (size_t)n,
                      "loading took longer than %d s (a loop at load time?)", (int)ENTRY_CHECK_SECONDS);
        lua_sethook(L, entry_check_hook, LUA_MASKCOUNT, 1);
    }
    lua_pushstring(L, entry_check_error);
    lua_error(L);
}

/* Main thread, on SIGHUP (core.load_check, hostlua.c): loads DIR in a VM of
 * its own as a worker thread would (luakiq.lib.reload.check(arg)), so that
 * nothing of the new code enters the main VM, and closes it. Returns the
 * check's result (a malloc'd string), or NULL with the error's first line in
 * err (a host bug, or a load that did not end: the check reports DIR's own
 * errors in its result). The load is bounded: the VM runs interpreted (the
 * JIT off: LuaJIT checks hooks only in the interpreter) under a count hook
 * with a deadline (ENTRY_CHECK_SECONDS), and TERM and INT are blocked on
 * this thread meanwhile, so that the hook sees one pending and ends the
 * load (the loop takes the signal as the mask comes back). A load blocked
 * in a foreign call (a read from a pipe) is not bounded. */
static char *entry_check(const char *arg, char *err, size_t len) {
    lua_State *L = vm_new(entry_open_core);
    if (!L) { snprintf(err, len, "cannot create a Lua state"); return NULL; }
    sigset_t stop, old;
    sigemptyset(&stop);
    sigaddset(&stop, SIGTERM);
    sigaddset(&stop, SIGINT);
    pthread_sigmask(SIG_BLOCK, &stop, &old);
    luaJIT_setmode(L, 0, LUAJIT_MODE_ENGINE | LUAJIT_MODE_OFF);
    entry_check_deadline = runner_monotonic() + ENTRY_CHECK_SECONDS;
    entry_check_error[0] = 0;
    lua_sethook(L, entry_check_hook, LUA_MASKCOUNT, 1000);
    char *out = NULL;
    if (vm_call_module(L, "luakiq.lib.reload", "check", entry_push_string, (void *)arg) != 0) {
        entry_error(L, err, len);
    } else if (lua_type(L, -1) != LUA_TSTRING) {
        snprintf(err, len, "luakiq.reload.check returned no string");
    } else {
        out = strdup(lua_tostring(L, -1));
        if (!out) snprintf(err, len, "out of memory");
    }
    lua_close(L);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return out;
}
