/* sys.c - operating-system utilities for Lua (part of `luakiq.core`):
 * CRC-32 (the shard of an id), SHA-256 and HMAC-SHA256 (the webhook
 * worker's signature and delivery id), directory listings (the script directory),
 * random lease tokens, a free loopback port (tests), the pid, whether another
 * pid is gone (fast recovery of a dead holder's lease), the resident
 * set size (GET /metrics), os.execute for workers, and replacing or ending
 * the process at once (a call that cannot be stopped). Stateless: any thread. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <lua.h>
#include <lauxlib.h>
#include "calls.h"
#include "core.h"
#include "proc.h"
#include "runner.h"
#include "sys.h"

static int sys_crc32(lua_State *L) {
    size_t len;
    const char *s = luaL_checklstring(L, 1, &len);
    lua_pushnumber(L, (lua_Number)crc32(0L, (const Bytef *)s, (uInt)len));
    return 1;
}

/* core.list_dir(path) -> {name...} (sorted, no dot files) | nil, err */
/* core.hmac_sha256(key, data) -> lower-case hex of HMAC-SHA256 (OpenSSL's
 * libcrypto; the webhook worker's signature). */
static int sys_hmac_sha256(lua_State *L) {
    size_t klen, dlen;
    const char *key = luaL_checklstring(L, 1, &klen);
    const char *data = luaL_checklstring(L, 2, &dlen);
    unsigned char mac[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    if (!HMAC(EVP_sha256(), key, (int)klen, (const unsigned char *)data, dlen, mac, &len))
        return luaL_error(L, "hmac_sha256: OpenSSL failed");
    char hex[2 * EVP_MAX_MD_SIZE + 1];
    for (unsigned int i = 0; i < len; i++) snprintf(hex + 2 * i, 3, "%02x", mac[i]);
    lua_pushlstring(L, hex, 2 * len);
    return 1;
}

/* core.sha256(data) -> lower-case hex of SHA-256 (libcrypto). */
static int sys_sha256(lua_State *L) {
    size_t dlen;
    const char *data = luaL_checklstring(L, 1, &dlen);
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    if (!EVP_Digest(data, dlen, md, &len, EVP_sha256(), NULL)) return luaL_error(L, "sha256: OpenSSL failed");
    char hex[2 * EVP_MAX_MD_SIZE + 1];
    for (unsigned int i = 0; i < len; i++) snprintf(hex + 2 * i, 3, "%02x", md[i]);
    lua_pushlstring(L, hex, 2 * len);
    return 1;
}

static int sys_strcmp(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }
/* core.list_dir(path) -> sorted names (no "." or "..") | nil, err: the
 * script directory's workers in a stable order, without io.popen("ls"). */
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

/* core.pid_gone(pid) -> true only when no process of that pid exists in
 * this pid namespace (kill(pid, 0) fails with ESRCH); false when one does,
 * even of another user (EPERM), or for a pid out of range. Fast recovery of
 * a dead holder's shard lease on the same machine (luakiq.runner.fetch). */
static int sys_pid_gone(lua_State *L) {
    lua_Number n = luaL_checknumber(L, 1);
    int gone = n >= 2 && n <= 4194304 && n == (lua_Number)(pid_t)n && kill((pid_t)n, 0) != 0 && errno == ESRCH;
    lua_pushboolean(L, gone);
    return 1;
}

/* core.hostname() -> this machine's host name ("?" when it cannot be read). */
static int sys_hostname(lua_State *L) {
    char name[256];
    if (gethostname(name, sizeof name) != 0) strcpy(name, "?");
    name[sizeof name - 1] = 0;
    lua_pushstring(L, name);
    return 1;
}

/* core.rss() -> resident set size in bytes (from /proc/self/statm) */
static int sys_rss(lua_State *L) {
    long pages = 0, rss = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f && fscanf(f, "%ld %ld", &pages, &rss) == 2) lua_pushnumber(L, (lua_Number)rss * (lua_Number)sysconf(_SC_PAGESIZE));
    else lua_pushnil(L);
    if (f) fclose(f);
    return 1;
}

/* core.private_dir(parent) -> PARENT/luakiq-UID | nil, err: this user's
 * directory for luakiq's files in a shared one (/tmp): the TTIN dump and
 * the acks a stop could not send have predictable names, and in a shared
 * directory another user could plant a symlink there that a write would
 * follow. Made mode 0700 if missing; refused unless it is a directory (not
 * a symlink) this user owns that nobody else may enter. */
static int sys_private_dir(lua_State *L) {
    const char *parent = luaL_checkstring(L, 1);
    char path[4096];
    struct stat st;
    snprintf(path, sizeof path, "%s/luakiq-%u", parent, (unsigned)getuid());
    if (mkdir(path, 0700) != 0 && errno != EEXIST) {
        lua_pushnil(L);
        lua_pushfstring(L, "cannot make %s: %s", path, strerror(errno));
        return 2;
    }
    if (lstat(path, &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != getuid() || (st.st_mode & 077)) {
        lua_pushnil(L);
        lua_pushfstring(L, "%s is not this user's private directory (a directory of mode 0700 it owns)", path);
        return 2;
    }
    lua_pushstring(L, path);
    return 1;
}

/* Flushes stdout and stderr, the only streams the host writes, without
 * waiting for a lock: a stuck thread may hold any FILE's lock for ever (a
 * read from io.popen blocks inside fread, a print to a full pipe inside
 * fwrite), and fflush(NULL) would wait on every one of them. A stream whose
 * lock is taken is left as it is (its thread is stuck in it). */
static void sys_flush_own(void) {
    FILE *own[] = {stdout, stderr};
    for (size_t i = 0; i < sizeof own / sizeof own[0]; i++) {
        if (ftrylockfile(own[i]) != 0) continue;
        fflush_unlocked(own[i]);
        funlockfile(own[i]);
    }
}

/* core.exec_self(argv) - replaces the process with a fresh luakiq (same pid)
 * run with argv (argv[0] first). Every descriptor but stdin/out/err is closed
 * on exec, so the new process can bind the same web port and holds no stale
 * Redis connection. Called while a stuck thread still runs: takes no stdio
 * lock (sys_flush_own). Returns only on failure: nil, err. */
static int sys_exec_self(lua_State *L) {
    luaL_checktype(L, 1, LUA_TTABLE);
    int n = (int)lua_objlen(L, 1);
    if (n < 1) return luaL_error(L, "exec_self: empty argv");
    const char **argv = calloc((size_t)n + 1, sizeof *argv);
    if (!argv) return luaL_error(L, "out of memory");
    for (int i = 0; i < n; i++) {
        lua_rawgeti(L, 1, i + 1);
        argv[i] = lua_tostring(L, -1); /* anchored in the argument table */
        lua_pop(L, 1);
        if (!argv[i]) { free(argv); return luaL_error(L, "exec_self: argv[%d] is not a string", i + 1); }
    }
    DIR *d = opendir("/proc/self/fd");
    if (d) {
        struct dirent *e;
        while ((e = readdir(d))) {
            int fd = atoi(e->d_name);
            if (fd > 2 && fd != dirfd(d)) fcntl(fd, F_SETFD, FD_CLOEXEC);
        }
        closedir(d);
    }
    sys_flush_own();
    execv("/proc/self/exe", (char *const *)argv);
    int saved = errno;
    free(argv);
    lua_pushnil(L);
    lua_pushfstring(L, "cannot replace the process: %s", strerror(saved));
    return 2;
}

/* core.exit_now(code) - flushes stdout and stderr (sys_flush_own: no lock
 * waited for) and ends the process at once, without atexit handlers: for
 * when a thread stuck in a call still runs. */
static int sys_exit_now(lua_State *L) {
    int code = (int)luaL_checkinteger(L, 1);
    sys_flush_own();
    _exit(code);
    return 0;
}

/* core.execute(cmd) -> status, as Lua 5.1's os.execute (the wait status;
 * with no cmd, 1: a shell is there). Unlike system(3) it leaves the process's
 * INT and QUIT handlers alone (system ignores them process-wide while it
 * waits, which would eat the host's Ctrl-C), gives the child default signals
 * and an empty mask (a worker thread blocks everything), runs it in a process
 * group of its own, and inside a perform call waits no longer than the call's
 * deadline: then the group gets TERM, KILL 2 s later, and the timeout error
 * is raised. Worker VMs get it as os.execute (luakiq.lib.runtime). */
static int sys_execute(lua_State *L) {
    const char *cmd = luaL_optstring(L, 1, NULL);
    if (!cmd) { lua_pushinteger(L, 1); return 1; }
    char *const argv[] = {"sh", "-c", (char *)cmd, NULL};
    pid_t pid;
    int rc = proc_spawn(&pid, "/bin/sh", argv, 0, NULL);
    if (rc != 0) { lua_pushinteger(L, -1); return 1; }
    double left = core_io_begin();
    double until = left >= 0 ? runner_monotonic() + left : 0, killed = 0;
    int status = 0;
    for (;;) {
        pid_t got = waitpid(pid, &status, WNOHANG);
        if (got == pid || (got < 0 && errno != EINTR)) break;
        double now = runner_monotonic();
        if (until > 0 && now >= until) {
            if (!killed) {
                if (calls_self()) calls_set_ending(calls_self(), 3); /* TERM, KILL 2 s later: not stuck meanwhile */
                kill(-pid, SIGTERM);
                killed = now;
            }
            else if (now - killed >= 2) kill(-pid, SIGKILL);
        }
        struct timespec ts = {0, 5000000};
        nanosleep(&ts, NULL);
    }
    core_io_end();
    if (killed && calls_self()) calls_set_ending(calls_self(), 0);
    if (killed) return core_raise_timeout(L);
    lua_pushinteger(L, status);
    return 1;
}

static const luaL_Reg sys_funcs[] = {
    {"execute", sys_execute},
    {"exec_self", sys_exec_self}, {"exit_now", sys_exit_now}, {"private_dir", sys_private_dir},
    {"crc32", sys_crc32},         {"list_dir", sys_list_dir},
    {"hmac_sha256", sys_hmac_sha256}, {"sha256", sys_sha256},
    {"token", sys_token},         {"free_port", sys_free_port},
    {"getpid", sys_getpid},       {"rss", sys_rss},          {"hostname", sys_hostname},
    {"pid_gone", sys_pid_gone},
    {NULL, NULL}};

void sys_register(lua_State *L) { luaL_register(L, NULL, sys_funcs); }
