/* conn.h - Redis connections for Lua (core.connect and the connection
 * object), and the embedded Redis scripts' sources. */
#ifndef LUAKIQ_CONN_H
#define LUAKIQ_CONN_H

struct lua_State;

/* Adds connect, script_source, script_define and script_names to the table on top of the
 * stack (the luakiq.core table being built) and registers the connection
 * metatable. Any thread, for its own VM. */
void conn_register(struct lua_State *L);

#endif
