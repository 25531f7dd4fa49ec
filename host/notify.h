/* notify.h - systemd's readiness protocol (sd_notify) without libsystemd:
 * READY=1, WATCHDOG=1, RELOADING=1, STOPPING=1 datagrams to $NOTIFY_SOCKET. Main thread
 * of `luakiq run` only. Every function is a no-op when NOTIFY_SOCKET is unset
 * (or after notify_close); a socket that cannot be reached costs one warning
 * line, never an error. */
#ifndef LUAKIQ_NOTIFY_H
#define LUAKIQ_NOTIFY_H

struct event_base;

/* Reads NOTIFY_SOCKET ("/path" or "@abstract"), WATCHDOG_USEC and
 * WATCHDOG_PID, and when a watchdog is asked of this pid, pings it every half
 * WATCHDOG_USEC from a timer on base (so a wedged loop stops the pings). */
void notify_open(struct event_base *base);
/* The worker threads run: READY=1, MAINPID and STATUS=status. Once; nothing
 * after notify_stopping. */
void notify_ready(const char *status);
/* The process is going to exit: STOPPING=1 and STATUS=status. Once. */
void notify_stopping(const char *status);
/* A reload begins (RELOADING=1, MONOTONIC_USEC; on SIGHUP): notify_ready
 * sends READY=1 again when it ends (refused, or every thread switched). */
void notify_reloading(const char *status);
/* STATUS=status alone (what `systemctl status` shows). */
void notify_status(const char *status);
/* Stops the watchdog timer and closes the socket; before base is freed. */
void notify_close(void);

#endif
