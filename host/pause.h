/* pause.h - the queues paused on this host (luakiq pause), as the main thread
 * last read them, for every worker thread's check before a call. */
#ifndef LUAKIQ_PAUSE_H
#define LUAKIQ_PAUSE_H

struct lua_State;

/* Adds core.set_paused and core.paused to the table on top of the stack. */
void pause_register(struct lua_State *L);
/* The paused queues' generation, bumped at each change (any thread: one
 * atomic load). */
unsigned pause_generation(void);

#endif
