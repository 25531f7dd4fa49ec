/* hostlua.h - core.host_run: the main VM hands its plan to the host's event
 * loop (host.c); the web thread's VM answers its HTTP requests. */
#ifndef LUAKIQ_HOSTLUA_H
#define LUAKIQ_HOSTLUA_H
#include <stddef.h>

struct lua_State;

/* What a worker thread runs: given its boot string, returns 0, or 1 after a
 * fatal error; check: loads a script directory in a VM of its own on the
 * calling thread (SIGHUP's check, core.load_check): its result as a malloc'd
 * string, or NULL and a one-line error; and how the web thread makes its VM.
 * Handed in by the caller (entry.c) so that the host and the runner never
 * depend on how a VM is made. */
struct hostlua_entry {
    int (*thread_main)(const char *boot);
    char *(*check)(const char *arg, char *err, size_t len);
    /* A new VM for the calling thread (the web thread's), and its end. */
    struct lua_State *(*vm_open)(void);
    void (*vm_close)(struct lua_State *L);
};

/* Adds host_run to the table on top of the stack. entry must outlive every
 * VM (a static). Any thread may register it; only the main thread may call it. */
void hostlua_register(struct lua_State *L, const struct hostlua_entry *entry);

#endif
