/* notify.c - systemd's readiness protocol, sd_notify(3), in a few lines over
 * an AF_UNIX datagram socket, so that luakiq needs no libsystemd.
 *
 * Design: main thread of `luakiq run` only. host.c decides when (READY=1 once
 * every worker thread has started, RELOADING=1 then READY=1 around a reload,
 * STOPPING=1 when a stop is asked for); this
 * file owns the socket, the address taken from $NOTIFY_SOCKET (a path, or an
 * abstract name written "@name") and the watchdog timer, all in the file-static
 * state below, which no other thread touches (no lock). The watchdog pings
 * come from a timer on the host's own event loop, never from a thread of
 * their own: a wedged loop stops them, and systemd acts on it.
 *
 * Failure never stops the host: the first datagram that cannot be sent (no
 * listener, a full queue: sends never block the loop) logs one warning and
 * later ones are dropped silently. The socket is close-on-exec, so programs
 * a worker runs do not inherit it; NOTIFY_SOCKET itself stays in the
 * environment, because a stuck call's replacement re-executes this binary in
 * place (same pid) and the new image must tell systemd READY=1 again. A
 * child could read it too: the unit's NotifyAccess=main makes systemd ignore
 * any sender but the main pid (docs/operations.md, "systemd"). */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <event2/event.h>
#include "log.h"
#include "notify.h"

static struct {
    int fd;                       /* -1: notifications off */
    struct sockaddr_un addr;
    socklen_t addrlen;
    char name[sizeof ((struct sockaddr_un *)0)->sun_path + 1]; /* as NOTIFY_SOCKET spells it */
    int warned, ready, stopping;
    struct event *watchdog;       /* NULL: no watchdog asked of this pid */
} notify = {.fd = -1};

/* The one warning of a process (see the design note). */
static void notify_warn(const char *what, const char *why) {
    if (notify.warned) return;
    notify.warned = 1;
    log_fmt(LOG_WARN, "systemd: NOTIFY_SOCKET=%s: %s: %s; luakiq runs on without telling systemd",
            notify.name, what, why);
}

/* One datagram, never blocking the loop. */
static void notify_send(const char *msg) {
    if (notify.fd < 0) return;
    ssize_t n;
    do {
        n = sendto(notify.fd, msg, strlen(msg), MSG_NOSIGNAL | MSG_DONTWAIT,
                   (const struct sockaddr *)&notify.addr, notify.addrlen);
    } while (n < 0 && errno == EINTR);
    if (n < 0) notify_warn("cannot send", strerror(errno));
}

/* Sends "fields\nSTATUS=status": status is cut at its first newline, which
 * would start a field of its own. */
static void notify_send_status(const char *fields, const char *status) {
    char msg[512];
    snprintf(msg, sizeof msg, "%s%sSTATUS=%.*s", fields, fields[0] ? "\n" : "",
             (int)strcspn(status, "\n"), status);
    notify_send(msg);
}

/* Timer, every half WATCHDOG_USEC (systemd's advice for a ping interval). */
static void notify_on_watchdog(evutil_socket_t fd, short what, void *arg) {
    (void)fd; (void)what; (void)arg;
    notify_send("WATCHDOG=1");
}

/* An environment variable that holds a positive decimal number, else 0. */
static unsigned long long notify_env_number(const char *var) {
    const char *s = getenv(var);
    if (!s || *s < '0' || *s > '9') return 0;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    return errno || *end ? 0 : v;
}

/* The watchdog systemd asks of this process, if any: WATCHDOG_USEC, for us
 * unless WATCHDOG_PID names another process (sd_watchdog_enabled's rule). */
static void notify_start_watchdog(struct event_base *base) {
    unsigned long long usec = notify_env_number("WATCHDOG_USEC");
    const char *pid = getenv("WATCHDOG_PID");
    if (usec == 0) return;
    if (pid && *pid && notify_env_number("WATCHDOG_PID") != (unsigned long long)getpid()) return;
    unsigned long long half = usec / 2 > 1000 ? usec / 2 : 1000;
    struct timeval tv = {(time_t)(half / 1000000), (suseconds_t)(half % 1000000)};
    notify.watchdog = event_new(base, -1, EV_PERSIST, notify_on_watchdog, NULL);
    if (notify.watchdog) event_add(notify.watchdog, &tv);
}

void notify_open(struct event_base *base) {
    const char *s = getenv("NOTIFY_SOCKET");
    notify_close();
    notify.ready = notify.stopping = 0;
    if (!s || !*s) return;
    snprintf(notify.name, sizeof notify.name, "%s", s);
    size_t len = strlen(s);
    if (s[0] != '/' && s[0] != '@') { notify_warn("unsupported address", "neither /path nor @name"); return; }
    if (len >= sizeof notify.addr.sun_path) { notify_warn("unsupported address", "too long"); return; }
    memset(&notify.addr, 0, sizeof notify.addr);
    notify.addr.sun_family = AF_UNIX;
    memcpy(notify.addr.sun_path, s, len);
    /* An abstract name starts with a NUL and has no terminating one. */
    if (s[0] == '@') notify.addr.sun_path[0] = '\0';
    notify.addrlen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len + (s[0] == '/'));
    notify.fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (notify.fd < 0) { notify_warn("cannot make a socket", strerror(errno)); return; }
    notify_start_watchdog(base);
}

void notify_ready(const char *status) {
    if (notify.fd < 0 || notify.ready || notify.stopping) return;
    notify.ready = 1;
    char fields[64];
    snprintf(fields, sizeof fields, "READY=1\nMAINPID=%d", (int)getpid());
    notify_send_status(fields, status);
}

void notify_stopping(const char *status) {
    if (notify.fd < 0 || notify.stopping) return;
    notify.stopping = 1;
    notify_send_status("STOPPING=1", status);
}

/* systemd requires MONOTONIC_USEC beside RELOADING=1: it tells a READY=1
 * that ends this reload from one sent before it. */
void notify_reloading(const char *status) {
    if (notify.fd < 0 || notify.stopping) return;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    char fields[96];
    snprintf(fields, sizeof fields, "RELOADING=1\nMONOTONIC_USEC=%llu",
             (unsigned long long)ts.tv_sec * 1000000ULL + (unsigned long long)ts.tv_nsec / 1000ULL);
    notify.ready = 0;
    notify_send_status(fields, status);
}

void notify_status(const char *status) {
    if (notify.fd >= 0) notify_send_status("", status);
}

void notify_close(void) {
    if (notify.watchdog) event_free(notify.watchdog);
    notify.watchdog = NULL;
    if (notify.fd >= 0) close(notify.fd);
    notify.fd = -1;
}
