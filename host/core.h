/* core.h - the basic services of `luakiq.core`: clock, logging, the calling
 * worker thread's services (stop flag, mailbox, state, fatal stop) and the
 * TTIN safe point. */
#ifndef LUAKIQ_CORE_H
#define LUAKIQ_CORE_H

struct lua_State;

/* Adds the basic functions to the table on top of the stack (the luakiq.core
 * table being built). Any thread, for its own VM. */
void core_register(struct lua_State *L);

/* A TTIN safe point: when the main thread asked for tracebacks, the calling
 * worker thread stores its own VM's traceback. Call it at the start of any C
 * function Lua calls on a worker thread (it is a no-op elsewhere). */
void core_safe_point(struct lua_State *L);

#endif
