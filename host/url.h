/* url.h - REDIS_URL parsing (one Redis, a Redis Cluster's seed nodes,
 * redis+sentinel://, unix://) and the one redactor of credentials in URLs.
 * String work only: no I/O, any thread. */
#ifndef LUAKIQ_URL_H
#define LUAKIQ_URL_H
#include <stddef.h>

/* A parsed REDIS_URL: redis://[[user]:password@]host[:port][,host[:port]...][/db]
 * (several hosts: seed nodes of a Redis Cluster), redis+sentinel://... or
 * unix:///path[?db=N]. */
struct url {
    char host[256];
    int port;
    char path[512];      /* unix socket path, when set */
    char user[128];      /* Redis 6 ACL user ("" = AUTH with the password alone) */
    char master[128];    /* redis+sentinel://: the master's name ("" = a plain URL) */
    char sentinels[512]; /* redis+sentinel://: "host:port,host:port,..." */
    char seeds[512];     /* redis://h1:p1,h2:p2/: a Redis Cluster's seed nodes ("" = one host) */
    char password[256];
    int db;
};
/* 0, or -1 with a one-line reason in err (the URL in it shown without
 * anything that may be a credential, whatever is wrong with it). */
int url_parse(const char *url, struct url *out, char *err, size_t errlen);

/* The n-th entry (wrapping around) of a "host:port,host:port" list of a
 * parsed URL (sentinels, seeds) into host and port; returns the count. */
int url_pick(const char *list, int n, char *host, size_t hostlen, int *port);
/* The k-th seed node of u (wrapping around): its seed list, or its one
 * host. Returns how many seeds u names. */
int url_seed(const struct url *u, int k, char *host, size_t hostlen, int *port);

/* The one URL redactor (Redis and HTTP URLs, in every message, log, page
 * and metric): the userinfo of scheme://USERINFO@host becomes "***" (up to
 * the last '@' before the query: a password may hold an unencoded '@'), and
 * every password=VALUE query parameter's value "***". Writes a NUL-terminated
 * copy into out (truncated to outlen); returns the full length. */
size_t url_redact(const char *url, char *out, size_t outlen);

#endif
