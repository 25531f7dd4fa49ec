/* web.h - the HTTP listener of `luakiq run --web ADDR:PORT` (libevent evhttp on
 * the main thread's event loop). It only moves bytes: every request is handed
 * to a handler (hostlua.c's, which calls luakiq.web in the main VM) and the answer
 * is sent back as it is. */
#ifndef LUAKIQ_WEB_H
#define LUAKIQ_WEB_H
#include <stddef.h>

struct event_base;
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

/* Binds "ADDR:PORT" ("[::1]:PORT" for IPv6) on base and serves every request
 * through handler(ud, ...). Bodies over max_body bytes get 413 without reaching
 * the handler. Returns NULL with err filled when the address cannot be bound. */
struct web *web_start(struct event_base *base, const char *addr_port, size_t max_body,
                      web_handler handler, void *ud, char *err, size_t errlen);
void web_free(struct web *w);

#endif
