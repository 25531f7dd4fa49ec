/* record.h - decoding the MessagePack records Redis's scripts store
 * (`core.unpack` in `luakiq.core`; docs/redis.md, "Records"). */
#ifndef LUAKIQ_RECORD_H
#define LUAKIQ_RECORD_H

struct lua_State;

/* Adds core.unpack to the table on top of the stack. Any thread. */
void record_register(struct lua_State *L);

#endif
