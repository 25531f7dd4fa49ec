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

#endif
