/* log.h - one line per event on stderr, text or JSON lines. Thread-safe. */
#ifndef LUAKIQ_LOG_H
#define LUAKIQ_LOG_H

enum log_level { LOG_DEBUG, LOG_INFO, LOG_WARN, LOG_ERROR };

void log_set_json(int on);
void log_set_level(enum log_level lvl);
int log_parse_level(const char *name); /* -1 when unknown */
/* Name shown as "thread" on lines written by the calling thread ("main", "t0"...). */
void log_set_thread_name(const char *name);
/* fields: NULL or a preformatted JSON object body ("\"worker\":\"A\",\"shard\":3")
 * that is appended to JSON lines and shown as key=value-ish text otherwise. */
void log_line(enum log_level lvl, const char *fields, const char *msg);
void log_fmt(enum log_level lvl, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* A line that can repeat once per connection or per failed accept (web.c)
 * goes through a limit: at most one line per `every` seconds; the line
 * that is written says how many such events there were since the previous
 * one: "... (x1234 in the last 10 s)". Declare it static with LOG_LIMIT(10). */
struct log_limit { double every, last; unsigned long count; };
#define LOG_LIMIT(seconds) {(seconds), -1.0, 0}
void log_limited(struct log_limit *l, enum log_level lvl, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
