/* pause.c - the queues paused on this host (docs/operations.md, "Pause"),
 * shared between the main thread, which sets them, and the worker threads,
 * which check them immediately before each call (part of `luakiq.core`).
 *
 * Design: `luakiq pause` writes the pause in Redis and publishes; the main
 * thread (host.c, on the wake-up channel's message; and at every heartbeat)
 * reads the paused queues (luakiq.ops.hosts.sync_pause), stores them here
 * (core.set_paused), and only then acknowledges in Redis. A worker thread
 * checks them after each fetch and before each call (luakiq.runner.fetch's
 * paused: core.paused with the generation it knows): a check
 * that follows the store sees it, so once the acknowledgement is written no
 * call of a paused queue starts on this host (a call that passed its check
 * before the store had already started).
 *
 * Threads: core.set_paused on the main thread only; core.paused on any. A
 * mutex guards the text; the generation is an atomic bumped under it, so a
 * check while nothing changed is one atomic load, no lock and no string. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <lua.h>
#include <lauxlib.h>
#include "pause.h"

static pthread_mutex_t pause_mu = PTHREAD_MUTEX_INITIALIZER;
static char *pause_text;              /* the paused queues, one per line; NULL: none yet */
static atomic_uint pause_gen;         /* bumped with every change of pause_text */

/* core.set_paused(text): the paused queues (names joined by "\n"). The same
 * text as before changes nothing (the heartbeat sets it every beat). */
static int pause_set(lua_State *L) {
    const char *text = luaL_checkstring(L, 1);
    char *copy = strdup(text);
    if (!copy) return luaL_error(L, "out of memory");
    pthread_mutex_lock(&pause_mu);
    if (pause_text && strcmp(pause_text, copy) == 0) {
        free(copy);
    } else {
        free(pause_text);
        pause_text = copy;
        atomic_fetch_add(&pause_gen, 1);
    }
    pthread_mutex_unlock(&pause_mu);
    return 0;
}

unsigned pause_generation(void) { return atomic_load(&pause_gen); }

/* core.paused(known) -> generation[, text]: the text only when the
 * generation is not `known` (the caller's last one; 0 at first). */
static int pause_get(lua_State *L) {
    unsigned known = (unsigned)luaL_optnumber(L, 1, 0);
    unsigned gen = atomic_load(&pause_gen);
    if (gen == known) {
        lua_pushnumber(L, (lua_Number)gen);
        return 1;
    }
    /* copied under the lock, pushed after it (a push may raise) */
    pthread_mutex_lock(&pause_mu);
    gen = atomic_load(&pause_gen);
    char *copy = strdup(pause_text ? pause_text : "");
    pthread_mutex_unlock(&pause_mu);
    if (!copy) return luaL_error(L, "out of memory");
    lua_pushnumber(L, (lua_Number)gen);
    lua_pushstring(L, copy);
    free(copy);
    return 2;
}

static const luaL_Reg pause_funcs[] = {
    {"set_paused", pause_set}, {"paused", pause_get}, {NULL, NULL},
};

void pause_register(lua_State *L) { luaL_register(L, NULL, pause_funcs); }
