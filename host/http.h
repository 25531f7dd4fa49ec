/* http.h - luakiq.http's transfers on libcurl (see http.c). */
#ifndef LUAKIQ_HTTP_H
#define LUAKIQ_HTTP_H

struct lua_State;

/* Once per process, on the main thread before any other thread starts
 * (curl_global_init is not thread-safe). Returns 0, or -1 with a message. */
int http_global_init(const char **err);

/* Adds the http_* functions to the table on top of the stack (the
 * luakiq.core table being built) and the transfer metatable. Any thread. */
void http_register(struct lua_State *L);

/* Frees the calling thread's transfer engine (its keep-alive connections).
 * Call after the thread's VM is closed (closing it frees its transfers). */
void http_thread_end(void);

#endif
