/* proc.c - child processes for workers: `core.spawn`, which the
 * `luakiq.process` module and the ready-made `command` worker use, and the
 * spawn that os.execute shares (sys.c).
 *
 * A child is started with posix_spawn, never through a shell unless the
 * caller asks for one, in a process group of its own (so a timeout can end
 * the command and whatever it started), with default signals and an empty
 * mask. Its stdin is a memfd holding the bytes given (nothing to keep
 * feeding, whatever the size), its stdout is the host's, and its stderr is a
 * non-blocking pipe whose last PROC_TAIL bytes are kept (a failing command's
 * error is its last stderr line). A pidfd becomes readable when the child
 * exits, so a thread whose call is parked on it polls the pidfd and the
 * stderr pipe beside libcurl's sockets and its mailbox (http.c), without a
 * SIGCHLD handler that would belong to the whole process.
 *
 * Thread: a process belongs to the VM (and so the thread) that spawned it.
 * No zombies: a child not reaped when its userdata is closed or collected
 * gets KILL (its group) and is reaped there. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <lua.h>
#include <lauxlib.h>
#include "calls.h"
#include "core.h"
#include "proc.h"

extern char **environ;

#define PROC_MT "luakiq.process"
#define PROC_TAIL 4096 /* bytes of stderr kept */

struct proc {
    pid_t pid;
    int pidfd;   /* -1: none (kernel < 5.3) or closed */
    int errfd;   /* read end of the stderr pipe; -1 at EOF */
    int reaped;  /* waitpid has returned the child's status */
    int status;
    size_t tail_len;
    char tail[2 * PROC_TAIL];
};

int proc_spawn(pid_t *pid, const char *path, char *const argv[], int search,
               const posix_spawn_file_actions_t *fa) {
    posix_spawnattr_t attr;
    sigset_t none, defaults;
    sigemptyset(&none);
    sigemptyset(&defaults);
    sigaddset(&defaults, SIGINT);
    sigaddset(&defaults, SIGQUIT);
    sigaddset(&defaults, SIGPIPE);
    sigaddset(&defaults, SIGTERM);
    sigaddset(&defaults, SIGURG); /* the timeout watchdog's signal (core.c) */
    posix_spawnattr_init(&attr);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    posix_spawnattr_setpgroup(&attr, 0);
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setsigdefault(&attr, &defaults);
    int rc = search ? posix_spawnp(pid, path, fa, &attr, argv, environ)
                    : posix_spawn(pid, path, fa, &attr, argv, environ);
    posix_spawnattr_destroy(&attr);
    return rc;
}

/* Raises a message without a position (luaL_error would prefix the Lua
 * caller's file:line): "spawn: ..." is the whole error. */
static int proc_raise(lua_State *L, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    lua_pushvfstring(L, fmt, ap);
    va_end(ap);
    return lua_error(L);
}

static struct proc *proc_check(lua_State *L) { return luaL_checkudata(L, 1, PROC_MT); }

/* Appends stderr bytes, keeping the last PROC_TAIL. */
static void proc_keep(struct proc *p, const char *b, size_t n) {
    if (n >= PROC_TAIL) {
        memcpy(p->tail, b + n - PROC_TAIL, PROC_TAIL);
        p->tail_len = PROC_TAIL;
        return;
    }
    if (p->tail_len + n > sizeof p->tail) {
        size_t keep = PROC_TAIL - n;
        memmove(p->tail, p->tail + p->tail_len - keep, keep);
        p->tail_len = keep;
    }
    memcpy(p->tail + p->tail_len, b, n);
    p->tail_len += n;
}

/* Reads what stderr has now (non-blocking); closes it at EOF. */
static void proc_read_err(struct proc *p) {
    char b[4096];
    while (p->errfd >= 0) {
        ssize_t n = read(p->errfd, b, sizeof b);
        if (n > 0) { proc_keep(p, b, (size_t)n); continue; }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && errno == EAGAIN) return;
        close(p->errfd); /* EOF or an error: nothing more will come */
        p->errfd = -1;
    }
}

/* Non-blocking progress: stderr read, the child reaped if it has exited.
 * Returns 1 once reaped. Once the child has exited its stderr is read only
 * as far as it is available, and what is left of its process group (the
 * grandchildren it left running) gets KILL: seen exited but not reaped yet
 * (waitid's WNOWAIT), its pid, the group's id, cannot have been reused. */
static int proc_pump(struct proc *p) {
    proc_read_err(p);
    if (!p->reaped) {
        siginfo_t info;
        memset(&info, 0, sizeof info);
        if (waitid(P_PID, (id_t)p->pid, &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid == p->pid)
            kill(-p->pid, SIGKILL);
        int st;
        pid_t got = waitpid(p->pid, &st, WNOHANG);
        if (got == p->pid || (got < 0 && errno == ECHILD)) {
            p->reaped = 1;
            p->status = got == p->pid ? st : 0;
            proc_read_err(p);
            if (p->errfd >= 0) { close(p->errfd); p->errfd = -1; }
            if (p->pidfd >= 0) { close(p->pidfd); p->pidfd = -1; }
        }
    }
    return p->reaped;
}

/* KILLs the group of a child not reaped yet and reaps it (blocking: after
 * SIGKILL that is prompt); closes the fds. Idempotent. */
static void proc_finish(struct proc *p) {
    if (!p->reaped && p->pid > 0) {
        kill(-p->pid, SIGKILL);
        int st;
        while (waitpid(p->pid, &st, 0) < 0 && errno == EINTR) {}
        p->reaped = 1;
        p->status = st;
    }
    if (p->errfd >= 0) { close(p->errfd); p->errfd = -1; }
    if (p->pidfd >= 0) { close(p->pidfd); p->pidfd = -1; }
}

/* A memfd holding data, at offset 0, for the child's stdin; -1 on error. */
static int proc_stdin(const char *data, size_t len) {
    int fd = memfd_create("luakiq-stdin", MFD_CLOEXEC);
    if (fd < 0) return -1;
    size_t off = 0;
    while (off < len) {
        ssize_t n = write(fd, data + off, len - off);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) { close(fd); return -1; }
        off += (size_t)n;
    }
    if (lseek(fd, 0, SEEK_SET) != 0) { close(fd); return -1; }
    return fd;
}

/* core.spawn(argv [, stdin]) -> process. argv: an array of strings, argv[1]
 * looked up in PATH; stdin: bytes for the child's stdin (nil: /dev/null).
 * Raises "spawn: ARGV1: reason" when the program cannot be started. */
static int proc_new(lua_State *L) {
    core_safe_point(L);
    luaL_checktype(L, 1, LUA_TTABLE);
    size_t inlen = 0;
    const char *in = luaL_optlstring(L, 2, NULL, &inlen);
    int n = (int)lua_objlen(L, 1);
    if (n < 1) return proc_raise(L, "spawn: argv must have at least one string");
    /* the userdata first: if anything below raises, __gc reclaims the child */
    struct proc *p = lua_newuserdata(L, sizeof *p);
    memset(p, 0, sizeof *p);
    p->pid = -1;
    p->pidfd = p->errfd = -1;
    p->reaped = 1;
    luaL_getmetatable(L, PROC_MT);
    lua_setmetatable(L, -2);
    /* argv strings stay alive on the Lua stack (the table) until we return */
    const char **argv = lua_newuserdata(L, sizeof(char *) * (size_t)(n + 1));
    for (int i = 1; i <= n; i++) {
        lua_rawgeti(L, 1, i);
        if (lua_type(L, -1) != LUA_TSTRING) return proc_raise(L, "spawn: argv[%d] must be a string", i);
        argv[i - 1] = lua_tostring(L, -1);
        lua_pop(L, 1);
    }
    argv[n] = NULL;
    int in_fd = in ? proc_stdin(in, inlen) : open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (in_fd < 0) return proc_raise(L, "spawn: %s: cannot prepare stdin: %s", argv[0], strerror(errno));
    int errp[2];
    if (pipe2(errp, O_CLOEXEC) != 0) {
        int e = errno;
        close(in_fd);
        return proc_raise(L, "spawn: %s: %s", argv[0], strerror(e));
    }
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, in_fd, 0);
    posix_spawn_file_actions_adddup2(&fa, errp[1], 2);
    pid_t pid;
    int rc = proc_spawn(&pid, argv[0], (char *const *)argv, 1, &fa);
    posix_spawn_file_actions_destroy(&fa);
    close(in_fd);
    close(errp[1]);
    if (rc != 0) {
        close(errp[0]);
        return proc_raise(L, "spawn: %s: %s", argv[0], strerror(rc));
    }
    p->pid = pid;
    p->reaped = 0;
    p->errfd = errp[0];
    fcntl(p->errfd, F_SETFL, fcntl(p->errfd, F_GETFL) | O_NONBLOCK);
#ifdef SYS_pidfd_open
    p->pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
    if (p->pidfd >= 0) fcntl(p->pidfd, F_SETFD, FD_CLOEXEC);
#endif
    lua_pop(L, 1); /* argv */
    return 1;
}

/* p:fds() -> the fds whose readiness means progress (stderr, the pidfd):
 * a parked call's thread polls them (POLLIN). None once reaped. */
static int proc_fds(lua_State *L) {
    struct proc *p = proc_check(L);
    int n = 0;
    if (!p->reaped) {
        if (p->errfd >= 0) { lua_pushinteger(L, p->errfd); n++; }
        if (p->pidfd >= 0) { lua_pushinteger(L, p->pidfd); n++; }
    }
    return n;
}

/* p:done() -> true once the child has exited (and been reaped). Never blocks. */
static int proc_done(lua_State *L) {
    lua_pushboolean(L, proc_pump(proc_check(L)));
    return 1;
}

/* p:wait(seconds) -> done: waits in place until the child exits or seconds
 * pass; a signal (the timeout watchdog's) ends the wait early. */
static int proc_wait(lua_State *L) {
    core_safe_point(L);
    struct proc *p = proc_check(L);
    double s = luaL_checknumber(L, 2);
    if (proc_pump(p)) { lua_pushboolean(L, 1); return 1; }
    struct pollfd fds[2];
    int n = 0;
    if (p->errfd >= 0) fds[n++] = (struct pollfd){.fd = p->errfd, .events = POLLIN};
    if (p->pidfd >= 0) fds[n++] = (struct pollfd){.fd = p->pidfd, .events = POLLIN};
    int ms = s <= 0 ? 0 : s > 3600 ? 3600000 : (int)(s * 1000 + 0.999);
    if (p->pidfd < 0 && ms > 10) ms = 10; /* no pidfd: the exit is not pollable */
    if (n > 0) poll(fds, (nfds_t)n, ms);
    else if (ms > 0) { struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000}; nanosleep(&ts, NULL); }
    lua_pushboolean(L, proc_pump(p));
    return 1;
}

/* p:result() -> exit code (nil when killed by a signal), signal number
 * (nil when it exited), the last bytes of its stderr. After done(). */
static int proc_result(lua_State *L) {
    struct proc *p = proc_check(L);
    if (!p->reaped) return luaL_error(L, "process %d has not exited", (int)p->pid);
    if (WIFEXITED(p->status)) { lua_pushinteger(L, WEXITSTATUS(p->status)); lua_pushnil(L); }
    else { lua_pushnil(L); lua_pushinteger(L, WIFSIGNALED(p->status) ? WTERMSIG(p->status) : 0); }
    size_t off = p->tail_len > PROC_TAIL ? p->tail_len - PROC_TAIL : 0;
    lua_pushlstring(L, p->tail + off, p->tail_len - off);
    return 3;
}

/* p:kill("TERM" | "KILL") -> the signal goes to the child's whole group
 * (nothing once the child is reaped: its pid may be reused). */
static int proc_kill(lua_State *L) {
    struct proc *p = proc_check(L);
    static const char *const names[] = {"TERM", "KILL", NULL};
    int which = luaL_checkoption(L, 2, "TERM", names);
    if (!p->reaped) kill(-p->pid, which == 0 ? SIGTERM : SIGKILL);
    return 0;
}

/* p:terminate(grace): TERM to the group, up to grace seconds for the child
 * to exit, then KILL and reap. In C on purpose: it runs when a call's
 * deadline has passed, where the timeout hook would stop Lua code half-way
 * (a signal only cuts a poll short; the wait goes on to the grace's end). */
static int proc_terminate(lua_State *L) {
    struct proc *p = proc_check(L);
    double grace = luaL_optnumber(L, 2, 2);
    struct calls *c = calls_self();
    if (c) calls_set_ending(c, grace + 1);
    if (!proc_pump(p)) {
        kill(-p->pid, SIGTERM);
        struct timespec t0, now;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        while (!proc_pump(p)) {
            clock_gettime(CLOCK_MONOTONIC, &now);
            double left = grace - ((double)(now.tv_sec - t0.tv_sec) + (double)(now.tv_nsec - t0.tv_nsec) / 1e9);
            if (left <= 0) break;
            int ms = (int)(left * 1000) + 1;
            if (p->pidfd >= 0) {
                struct pollfd fd = {.fd = p->pidfd, .events = POLLIN};
                poll(&fd, 1, ms);
            } else {
                struct timespec ts = {0, 10000000};
                nanosleep(&ts, NULL);
            }
        }
    }
    proc_finish(p);
    if (c) calls_set_ending(c, 0);
    return 0;
}

static int proc_pid(lua_State *L) {
    lua_pushinteger(L, proc_check(L)->pid);
    return 1;
}

/* p:close(): KILL and reap a child still running; idempotent (also __gc). */
static int proc_close(lua_State *L) {
    proc_finish(proc_check(L));
    return 0;
}

static const luaL_Reg proc_methods[] = {
    {"fds", proc_fds},       {"done", proc_done}, {"wait", proc_wait}, {"result", proc_result},
    {"kill", proc_kill},     {"pid", proc_pid},   {"close", proc_close}, {"terminate", proc_terminate},
    {NULL, NULL}};

void proc_register(lua_State *L) {
    if (luaL_newmetatable(L, PROC_MT)) {
        lua_newtable(L);
        luaL_register(L, NULL, proc_methods);
        lua_setfield(L, -2, "__index");
        lua_pushcfunction(L, proc_close);
        lua_setfield(L, -2, "__gc");
    }
    lua_pop(L, 1);
    lua_pushcfunction(L, proc_new);
    lua_setfield(L, -2, "spawn");
}
