/* core.h - the basic services of `luakiq.core`: clock, logging, the calling
 * worker thread's services (stop flag, mailbox, state, fatal stop) and the
 * TTIN safe point. */
#ifndef LUAKIQ_CORE_H
#define LUAKIQ_CORE_H
#include <stddef.h>

struct lua_State;

/* Adds the basic functions to the table on top of the stack (the luakiq.core
 * table being built). Any thread, for its own VM. */
void core_register(struct lua_State *L);

/* A TTIN safe point: when the main thread asked for tracebacks, the calling
 * worker thread stores its own VM's traceback. Call it at the start of any C
 * function Lua calls on a worker thread (it is a no-op elsewhere). */
void core_safe_point(struct lua_State *L);

/* Call deadlines (worker threads; see core.c). core_install_timeouts installs
 * the process-wide handler of CALLS_TIMEOUT_SIGNAL (main thread, once, before
 * threads start). core_call_remaining: seconds left for the calling thread's
 * running call, or -1 when none runs. core_io_begin/end bracket a wait in
 * luakiq's own I/O (no signal is sent then: the I/O ends itself at the
 * deadline); core_io_begin returns the seconds the wait may take (-1: no
 * bound; 0: none left, the caller fails with the timeout error). */
void core_install_timeouts(void);
double core_call_remaining(void);
double core_io_begin(void);
void core_io_end(void);
/* Raises the timeout error of the calling thread's call; core_timeout_text
 * writes its text. */
int core_raise_timeout(struct lua_State *L);
void core_timeout_text(char *buf, size_t len);

#endif
