/* web.c - the HTTP listener of `luakiq run --web ADDR:PORT`.
 *
 * Design: one evhttp server on the main thread's event_base (host.c's), next
 * to the signal handlers, the wake-up subscriber and the lease renewal timer.
 * Worker threads never see a request: they keep running jobs while the main
 * thread answers. Every request is handed, whole, to one handler (vm.c's
 * vm_web_handle, which calls luakiq.web in the main VM with the main VM's own
 * Redis connection) and its answer is sent back unchanged; routing, auth and
 * JSON are Lua policy, this file only moves bytes and enforces the limits that
 * must hold before any Lua runs (body size, header size, idle timeout).
 *
 * Threads: everything here runs on the main thread; the handler blocks the
 * loop while it talks to Redis (a listing is a few pipelined round trips), so
 * wake-up routing and lease renewal wait that long, never the workers. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <event2/util.h>
#include "log.h"
#include "web.h"

struct web {
    struct evhttp *http;
    size_t max_body;
    web_handler handler;
    void *ud;
};

static const char *web_method(enum evhttp_cmd_type cmd) {
    switch (cmd) {
    case EVHTTP_REQ_GET: return "GET";
    case EVHTTP_REQ_POST: return "POST";
    case EVHTTP_REQ_HEAD: return "HEAD";
    case EVHTTP_REQ_PUT: return "PUT";
    case EVHTTP_REQ_DELETE: return "DELETE";
    case EVHTTP_REQ_OPTIONS: return "OPTIONS";
    case EVHTTP_REQ_TRACE: return "TRACE";
    case EVHTTP_REQ_CONNECT: return "CONNECT";
    case EVHTTP_REQ_PATCH: return "PATCH";
    }
    return "UNKNOWN";
}

static const char *web_reason(int status) {
    switch (status) {
    case 200: return "OK";
    case 201: return "Created";
    case 204: return "No Content";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 413: return "Payload Too Large";
    case 500: return "Internal Server Error";
    case 503: return "Service Unavailable";
    }
    return status < 400 ? "OK" : "Error";
}

static const char *web_header(struct evkeyvalq *h, const char *name) {
    const char *v = evhttp_find_header(h, name);
    return v ? v : "";
}

static void web_free_body(const void *data, size_t len, void *arg) {
    (void)len; (void)arg;
    free((void *)data);
}

/* Sends status + body (taking ownership of body) with the headers every
 * answer carries: nothing is cached, sniffed or framed by another site. */
static void web_send(struct evhttp_request *req, int status, const char *ctype, char *body, size_t len,
                     const char *set_cookie) {
    struct evkeyvalq *oh = evhttp_request_get_output_headers(req);
    if (set_cookie && set_cookie[0]) evhttp_add_header(oh, "Set-Cookie", set_cookie);
    evhttp_add_header(oh, "Content-Type", ctype && ctype[0] ? ctype : "application/json");
    evhttp_add_header(oh, "Cache-Control", "no-store");
    evhttp_add_header(oh, "X-Content-Type-Options", "nosniff");
    evhttp_add_header(oh, "X-Frame-Options", "DENY");
    if (status == 401) evhttp_add_header(oh, "WWW-Authenticate", "Bearer realm=\"luakiq\"");
    struct evbuffer *ob = evbuffer_new();
    if (ob && body && len > 0) {
        if (evbuffer_add_reference(ob, body, len, web_free_body, NULL) == 0) body = NULL;
    }
    free(body);
    evhttp_send_reply(req, status, web_reason(status), ob);
    if (ob) evbuffer_free(ob);
}

static void web_send_static(struct evhttp_request *req, int status, const char *json) {
    char *copy = strdup(json);
    web_send(req, status, "application/json", copy, copy ? strlen(copy) : 0, NULL);
}

/* evhttp's generic callback: every path lands here, one request at a time. */
static void web_on_request(struct evhttp_request *req, void *arg) {
    struct web *w = arg;
    struct evkeyvalq *in = evhttp_request_get_input_headers(req);
    struct evbuffer *ib = evhttp_request_get_input_buffer(req);
    size_t blen = evbuffer_get_length(ib);
    /* evhttp already refuses declared and chunked bodies over the limit; this
     * is the belt to those braces. */
    if (blen > w->max_body) {
        web_send_static(req, 413, "{\"error\":\"request body too large\"}");
        return;
    }
    unsigned char *body = blen ? evbuffer_pullup(ib, -1) : NULL;
    struct web_request r = {
        .method = web_method(evhttp_request_get_command(req)),
        .uri = evhttp_request_get_uri(req),
        .body = body ? (const char *)body : "",
        .blen = blen,
        .auth = web_header(in, "Authorization"),
        .origin = web_header(in, "Origin"),
        .host = web_header(in, "Host"),
        .cookie = web_header(in, "Cookie"),
        .forwarded_proto = web_header(in, "X-Forwarded-Proto"),
    };
    struct web_response out = {0};
    if (w->handler(w->ud, &r, &out) != 0 || out.status < 100 || out.status > 599) {
        free(out.body);
        free(out.set_cookie);
        web_send_static(req, 500, "{\"error\":\"internal error (see the host's log)\"}");
        return;
    }
    web_send(req, out.status, out.content_type, out.body, out.len, out.set_cookie);
    free(out.set_cookie);
}

/* Splits "ADDR:PORT" / "[V6]:PORT" into host (copied into buf) and port. */
static int web_parse_addr(const char *s, char *buf, size_t cap, int *port) {
    const char *colon = strrchr(s, ':');
    if (!colon || colon == s) return -1;
    const char *h = s;
    size_t hlen = (size_t)(colon - s);
    if (h[0] == '[') {
        if (hlen < 3 || h[hlen - 1] != ']') return -1;
        h++;
        hlen -= 2;
    }
    if (hlen >= cap) return -1;
    memcpy(buf, h, hlen);
    buf[hlen] = 0;
    char *end;
    errno = 0;
    long p = strtol(colon + 1, &end, 10);
    if (errno || *end || end == colon + 1 || p < 0 || p > 65535) return -1;
    *port = (int)p;
    return 0;
}

struct web *web_start(struct event_base *base, const char *addr_port, size_t max_body,
                      web_handler handler, void *ud, char *err, size_t errlen) {
    char addr[256];
    int port;
    if (web_parse_addr(addr_port, addr, sizeof addr, &port) < 0) {
        snprintf(err, errlen, "--web: '%s' is not ADDR:PORT", addr_port);
        return NULL;
    }
    struct web *w = calloc(1, sizeof *w);
    if (!w || !(w->http = evhttp_new(base))) {
        free(w);
        snprintf(err, errlen, "--web: cannot create the HTTP server");
        return NULL;
    }
    w->max_body = max_body;
    w->handler = handler;
    w->ud = ud;
    evhttp_set_max_body_size(w->http, (ev_ssize_t)max_body);
    evhttp_set_max_headers_size(w->http, 16384);
    evhttp_set_timeout(w->http, 30);
    /* Read (and drop) the rest of a too-large body before closing, so that the
     * client gets the 413 instead of a connection reset. */
    evhttp_set_flags(w->http, EVHTTP_SERVER_LINGERING_CLOSE);
    evhttp_set_allowed_methods(w->http, EVHTTP_REQ_GET | EVHTTP_REQ_HEAD | EVHTTP_REQ_POST |
                                        EVHTTP_REQ_PUT | EVHTTP_REQ_DELETE | EVHTTP_REQ_PATCH);
    evhttp_set_gencb(w->http, web_on_request, w);
    errno = 0;
    if (!evhttp_bind_socket_with_handle(w->http, addr, (ev_uint16_t)port)) {
        int e = errno;
        snprintf(err, errlen, "--web: cannot listen on %s: %s", addr_port, e ? strerror(e) : "bind failed");
        evhttp_free(w->http);
        free(w);
        return NULL;
    }
    log_fmt(LOG_INFO, "web: listening on http://%s/", addr_port);
    return w;
}

void web_free(struct web *w) {
    if (!w) return;
    evhttp_free(w->http);
    free(w);
}
