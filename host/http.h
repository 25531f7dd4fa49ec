/* http.h - luakiq.http's transfers on libcurl (see http.c). */
#ifndef LUAKIQ_HTTP_H
#define LUAKIQ_HTTP_H

struct lua_State;

/* Adds the http_* functions to the table on top of the stack (the
 * luakiq.core table being built) and the transfer metatable. Any thread. */
void http_register(struct lua_State *L);

/* Frees the calling thread's transfer engine (its keep-alive connections).
 * Call after the thread's VM is closed (closing it frees its transfers). */
void http_thread_end(void);

#endif
