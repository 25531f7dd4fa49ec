/* sys.c - operating-system utilities for Lua (part of `luakiq.core`):
 * CRC-32 (the shard of an id), directory listings (the script directory),
 * random lease tokens, a free loopback port (tests), the pid and the resident
 * set size (GET /metrics). Stateless: any thread. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <zlib.h>
#include <lua.h>
#include <lauxlib.h>
#include "sys.h"

static int sys_crc32(lua_State *L) {
    size_t len;
    const char *s = luaL_checklstring(L, 1, &len);
    lua_pushnumber(L, (lua_Number)crc32(0L, (const Bytef *)s, (uInt)len));
    return 1;
}

/* core.list_dir(path) -> {name...} (sorted, no dot files) | nil, err */
static int sys_strcmp(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }
static int sys_list_dir(lua_State *L) {
    const char *path = luaL_checkstring(L, 1);
    DIR *d = opendir(path);
    if (!d) { lua_pushnil(L); lua_pushfstring(L, "%s: %s", path, strerror(errno)); return 2; }
    char **names = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 16;
            char **nn = realloc(names, cap * sizeof *names);
            if (!nn) break;
            names = nn;
        }
        names[n] = strdup(e->d_name);
        if (names[n]) n++;
    }
    closedir(d);
    qsort(names, n, sizeof *names, sys_strcmp);
    lua_createtable(L, (int)n, 0); /* may raise on OOM: free first would be nicer, OOM is fatal anyway */
    for (size_t i = 0; i < n; i++) {
        lua_pushstring(L, names[i]);
        free(names[i]);
        lua_rawseti(L, -2, (int)i + 1);
    }
    free(names);
    return 1;
}

/* core.token() -> 32 random hex characters (lease tokens) */
static int sys_token(lua_State *L) {
    unsigned char b[16];
    char hex[33];
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    ssize_t got = fd >= 0 ? read(fd, b, sizeof b) : -1;
    if (fd >= 0) close(fd);
    if (got != (ssize_t)sizeof b) return luaL_error(L, "cannot read /dev/urandom");
    for (int i = 0; i < 16; i++) snprintf(hex + 2 * i, 3, "%02x", b[i]);
    lua_pushlstring(L, hex, 32);
    return 1;
}

/* core.free_port() -> a loopback TCP port that was free a moment ago (tests) */
static int sys_free_port(lua_State *L) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) < 0 || getsockname(fd, (struct sockaddr *)&a, &len) < 0) {
        if (fd >= 0) close(fd);
        return luaL_error(L, "free_port: %s", strerror(errno));
    }
    close(fd);
    lua_pushinteger(L, ntohs(a.sin_port));
    return 1;
}

static int sys_getpid(lua_State *L) { lua_pushinteger(L, getpid()); return 1; }

/* core.rss() -> resident set size in bytes (from /proc/self/statm) */
static int sys_rss(lua_State *L) {
    long pages = 0, rss = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f && fscanf(f, "%ld %ld", &pages, &rss) == 2) lua_pushnumber(L, (lua_Number)rss * (lua_Number)sysconf(_SC_PAGESIZE));
    else lua_pushnil(L);
    if (f) fclose(f);
    return 1;
}

static const luaL_Reg sys_funcs[] = {
    {"crc32", sys_crc32},         {"list_dir", sys_list_dir},
    {"token", sys_token},         {"free_port", sys_free_port},
    {"getpid", sys_getpid},       {"rss", sys_rss},
    {NULL, NULL}};

void sys_register(lua_State *L) { luaL_register(L, NULL, sys_funcs); }
