/* sys.h - operating-system utilities for Lua (crc32, sha256, hmac_sha256, list_dir,
 * token, free_port, getpid, rss in `luakiq.core`). */
#ifndef LUAKIQ_SYS_H
#define LUAKIQ_SYS_H

struct lua_State;

/* Adds the utilities to the table on top of the stack. Any thread. */
void sys_register(struct lua_State *L);

#endif
