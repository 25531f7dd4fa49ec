/* log.c - the host's logger.
 *
 * Threads: any thread may log. One line is formatted into a local buffer and
 * written with a single fputs under a mutex, so lines of different threads never
 * interleave. The thread name lives in thread-local storage. A log_limit is
 * counted under its own mutex, so any thread may share one. */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include "log.h"

static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t log_limit_mu = PTHREAD_MUTEX_INITIALIZER;
static int log_json = 0;
static enum log_level log_min = LOG_INFO;
static _Thread_local char log_thread[32] = "main";
static const char *log_names[] = {"debug", "info", "warn", "error"};

void log_set_json(int on) { log_json = on; }
void log_set_level(enum log_level lvl) { log_min = lvl; }
void log_set_thread_name(const char *name) {
    snprintf(log_thread, sizeof log_thread, "%s", name);
}

int log_parse_level(const char *name) {
    for (int i = 0; i < 4; i++)
        if (strcmp(name, log_names[i]) == 0) return i;
    return -1;
}

/* Appends s to b as a JSON string body (no quotes). */
static size_t log_escape(char *b, size_t cap, size_t n, const char *s) {
    for (; *s && n + 7 < cap; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') { b[n++] = '\\'; b[n++] = (char)c; }
        else if (c == '\n') { b[n++] = '\\'; b[n++] = 'n'; }
        else if (c < 0x20) n += (size_t)snprintf(b + n, cap - n, "\\u%04x", c);
        else b[n++] = (char)c;
    }
    return n;
}

void log_line(enum log_level lvl, const char *fields, const char *msg) {
    if (lvl < log_min) return;
    char buf[8192], ts[40];
    struct timeval tv;
    struct tm tm;
    gettimeofday(&tv, NULL);
    gmtime_r(&tv.tv_sec, &tm);
    size_t n = strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(ts + n, sizeof ts - n, ".%03dZ", (int)(tv.tv_usec / 1000));
    if (log_json) {
        n = (size_t)snprintf(buf, sizeof buf, "{\"time\":\"%s\",\"level\":\"%s\",\"thread\":\"%s\",\"msg\":\"",
                             ts, log_names[lvl], log_thread);
        n = log_escape(buf, sizeof buf - 64, n, msg);
        n += (size_t)snprintf(buf + n, sizeof buf - n, "\"%s%s}\n", fields && *fields ? "," : "",
                              fields && *fields ? fields : "");
        if (n >= sizeof buf) { buf[sizeof buf - 3] = '}'; buf[sizeof buf - 2] = '\n'; buf[sizeof buf - 1] = 0; }
    } else {
        snprintf(buf, sizeof buf, "%s %-5s [%s] %s%s%s\n", ts, log_names[lvl], log_thread, msg,
                 fields && *fields ? " " : "", fields && *fields ? fields : "");
    }
    pthread_mutex_lock(&log_mu);
    fputs(buf, stderr);
    fflush(stderr);
    pthread_mutex_unlock(&log_mu);
}

void log_fmt(enum log_level lvl, const char *fmt, ...) {
    if (lvl < log_min) return;
    char msg[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    log_line(lvl, NULL, msg);
}

/* Counts the event; writes a line only when `every` seconds passed since the
 * last line of this limit, with the count of events since then (the first
 * one ever has no count). The check costs a clock read and a mutex. */
void log_limited(struct log_limit *l, enum log_level lvl, const char *fmt, ...) {
    if (lvl < log_min) return;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    double now = (double)ts.tv_sec + (double)ts.tv_nsec / 1e9, since = 0;
    unsigned long n = 0;
    pthread_mutex_lock(&log_limit_mu);
    l->count++;
    if (l->last < 0 || now - l->last >= l->every) {
        n = l->count;
        since = l->last < 0 ? 0 : now - l->last;
        l->count = 0;
        l->last = now;
    }
    pthread_mutex_unlock(&log_limit_mu);
    if (n == 0) return;
    char msg[4096];
    va_list ap;
    va_start(ap, fmt);
    int len = vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (since > 0 && n > 1 && len >= 0 && (size_t)len < sizeof msg)
        snprintf(msg + len, sizeof msg - (size_t)len, " (x%lu in the last %.0f s)", n, since);
    log_line(lvl, NULL, msg);
}
