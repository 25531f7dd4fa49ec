/* fuzz_lua.h - run a Lua fuzz driver inside a real host VM (fuzz/ only). */
#ifndef LUAKIQ_FUZZ_LUA_H
#define LUAKIQ_FUZZ_LUA_H
#include <stddef.h>
#include <stdint.h>

/* The first call makes one VM and runs the Lua file driver, which returns a
 * function(bytes); every call hands it data. -1 on a Lua error. */
int fuzz_lua_one(const char *driver, const uint8_t *data, size_t len);

#endif
