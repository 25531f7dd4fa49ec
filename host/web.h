/* web.h - the HTTP servers of `luakiq run --web ADDR:PORT` and `--replies
 * ADDR:PORT`: each its own thread, event loop (libevent evhttp) and Lua VM,
 * so that no request ever delays the main loop (nor the other server). It only moves bytes and enforces the connection limits:
 * every request is handed to the app's handler (hostlua.c's, which calls
 * luakiq.web in the web thread's VM) and the answer is sent back as it is. */
#ifndef LUAKIQ_WEB_H
#define LUAKIQ_WEB_H
#include <stddef.h>

struct web;

/* One request, as the handler sees it. body is blen bytes (not terminated);
 * the other strings are NUL-terminated, header fields "" when absent. Valid
 * only during the handler call. */
struct web_request {
    const char *method;           /* "GET", "HEAD", "POST", "PUT", "DELETE", ... */
    const char *uri;              /* path and query, still percent-encoded */
    const char *body;
    size_t blen;
    const char *auth;             /* Authorization */
    const char *origin;           /* Origin */
    const char *host;             /* Host */
    const char *cookie;           /* Cookie */
    const char *forwarded_proto;  /* X-Forwarded-Proto (a TLS proxy in front) */
};

/* The answer. The handler sets status and content_type ("" means JSON) and
 * hands over body and set_cookie (malloc'd, freed by web.c; NULL for none). */
struct web_response {
    int status;
    char content_type[96];
    char *body;
    size_t len;
    char *set_cookie;             /* a Set-Cookie header's value */
};

/* Returns 0, or -1 when it could not produce an answer (web.c answers 500). */
typedef int (*web_handler)(void *ud, const struct web_request *req, struct web_response *out);
/* n requests at once (opts.batch): fills outs[0..n-1] (zeroed by web.c).
 * Returns 0, or -1 when it could produce none of them (web.c answers 500 to
 * each; an out left with status 0 gets a 500 too). */
typedef int (*web_batch_handler)(void *ud, const struct web_request *reqs, int n, struct web_response *outs);

/* What answers the requests, made and ended on the web thread: open(arg)
 * returns the handler's ud (NULL with err filled on failure), close(ud)
 * frees it after the last request. */
struct web_app {
    void *(*open)(void *arg, char *err, size_t errlen);
    web_handler handle;
    void (*close)(void *ud);
    void *arg;
    web_batch_handler handle_batch;  /* used when opts.batch > 1; NULL: handle, one at a time */
};

/* The listener and its limits (docs/operations.md, "HTTP limits"). */
struct web_opts {
    const char *name;             /* "web" (NULL too) or "replies": log lines, the thread's name, errors
                                   * ("--NAME: ..."); a string that outlives the server */
    const char *addr;             /* "ADDR:PORT", "[V6]:PORT" */
    size_t max_body;              /* bodies over this get 413 */
    int max_connections;          /* open connections at most (also kept below the fd limit) */
    int fd_reserve;               /* descriptors kept free for the rest of the host */
    double header_timeout;        /* a request must arrive whole within this */
    double idle_timeout;          /* a kept-alive connection between requests; an answer being sent */
    int batch;                    /* > 1: the requests that arrive together (one pass of the event
                                   * loop), up to this many, go to app.handle_batch at once (the
                                   * replies listener: their Redis calls share one round trip) */
};

/* Main thread: starts the web thread, which makes the app (its VM), binds
 * opts->addr and serves every request through app->handle. Returns once it
 * listens; NULL with err filled when the app or the address failed. */
struct web *web_start(const struct web_opts *opts, const struct web_app *app, char *err, size_t errlen);
/* Main thread: stops the web thread (the request being answered finishes,
 * every connection is closed), joins it, frees everything. NULL: nothing. */
void web_stop(struct web *w);

#endif
