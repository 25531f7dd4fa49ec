/* entry.h - where the process and each worker thread enter Lua. */
#ifndef LUAKIQ_ENTRY_H
#define LUAKIQ_ENTRY_H

struct lua_State;

/* The process entry (main thread): makes the main VM and runs
 * luakiq.ops.cli.main(argv). Returns the exit code. */
int entry_main(int argc, char **argv);

/* The `luakiq.core` module loader: the table of every C function the Lua
 * runtime is built on (core.c, sys.c, conn.c, hostlua.c). Exposed for the
 * fuzz harnesses, which make VMs of their own with vm_new(entry_open_core). */
int entry_open_core(struct lua_State *L);

#endif
