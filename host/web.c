/* web.c - the HTTP servers of `luakiq run --web ADDR:PORT` and `--replies
 * ADDR:PORT`.
 *
 * Design: each server (a struct web: the web listener, and the replies
 * listener, which serves only the reply routes to the internet) is one
 * thread of its own (a web thread) with its own event_base,
 * one evhttp server and its own Lua VM (made by the app: hostlua.c, with
 * luakiq.web and its own Redis connection). The main loop (signals, wake-up
 * routing, lease renewal, the heartbeat, the watchdogs) never waits for a
 * request: a listing that takes seconds delays only other requests. Worker
 * threads never see a request. Every request is handed, whole, to one
 * handler and its answer is sent back unchanged; routing, auth and JSON are
 * Lua policy, this file only moves bytes and enforces the limits that must
 * hold before any Lua runs (docs/operations.md, "HTTP limits"):
 *
 *  - body and header sizes (evhttp);
 *  - a header timeout: a request must arrive whole within header_timeout of
 *    its first byte (or of the accept); evhttp's own timeout is per read,
 *    reset by every byte, so a client sending a byte every few seconds kept
 *    a connection forever;
 *  - an idle timeout: a kept-alive connection between requests, and an
 *    answer the client does not read, are closed after idle_timeout;
 *  - a connection cap below the fd limit (RLIMIT_NOFILE less the descriptors
 *    open at start less fd_reserve), so worker threads can always open their
 *    Redis connections: at the cap the listener stops accepting (the kernel's
 *    backlog holds the rest) until a connection closes;
 *  - an accept that fails (EMFILE, ENFILE, ENOBUFS) pauses the listener for
 *    0.1 s, doubling to 1 s, instead of retrying at once forever (a listener
 *    left enabled spins: its socket stays readable);
 *  - lines that can repeat per connection or per accept go through a
 *    log_limit (one line per 10 s with a count).
 *
 * Batches (opts.batch > 1, the replies listener): a request is not answered
 * in evhttp's callback but held; the requests of one pass of the event loop
 * (every connection that had a whole request ready: evhttp calls back for
 * each before an event activated meanwhile runs) go to app.handle_batch
 * together, up to opts.batch at a time, so that their Redis calls share one
 * round trip. A held request's connection is skipped by the sweep (its
 * deadline is 0, as while any request is answered); a client that hangs up
 * meanwhile leaves evhttp's request detached (no connection), and sending
 * its answer frees it. Held requests are answered before the server closes.
 *
 * Connections: libevent 2.1 has no per-connection hooks on the server side
 * (2.2's evhttp_set_newreqcb and max connections are missing), so each one is
 * followed through public calls: the bufferevent callback (evhttp_set_bevcb)
 * sees each accept and hands evhttp a bufferevent we made; right after the
 * accept callback (web_adopt, an event activated from it) that bufferevent's
 * callback argument is its evhttp_connection, on which we set a close
 * callback (every close of a server connection goes through it) and a
 * callback on its input buffer (the first byte of the next request). We hold
 * a reference on the bufferevent until then, so it cannot vanish between the
 * two. A timer (web_sweep) closes connections past their deadline with
 * evhttp_connection_free, as evhttp does on its own timeouts.
 *
 * Threads: web_start and web_stop run on the main thread; everything else,
 * the app's VM included, on the server's own web thread. They share only the
 * start handshake (mu, cv, state, err) and the stop event (event_active is
 * thread-safe: host_run turned libevent's pthreads support on). Two servers
 * share nothing: each has its thread, loop, VM, connection cap and log
 * limits. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <dirent.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <event2/listener.h>
#include <event2/util.h>
#include "log.h"
#include "web.h"

/* One open connection (web thread only). */
struct web_conn {
    struct web *w;
    struct bufferevent *bev;
    struct evhttp_connection *evcon;   /* NULL until adopted */
    struct evbuffer_cb_entry *in_cb;   /* on the input buffer */
    double deadline;                   /* monotonic; closed when passed (0: being answered) */
    int idle;                          /* between requests */
    struct web_conn *prev, *next;      /* adopted connections; next: pending ones too */
};

struct web {
    struct web_opts opts;              /* opts.addr: our copy */
    struct web_app app;
    void *ud;                          /* app.open's, web thread */
    pthread_t thread;
    /* the start handshake (both threads, under mu) */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int state;                         /* 0 starting, 1 listening, -1 failed */
    char err[512];
    /* web thread */
    struct event_base *base;
    struct evhttp *http;
    struct evconnlistener *lev;
    struct event *adopt_ev, *sweep_ev, *backoff_ev, *stop_ev;
    struct web_conn *pending;          /* accepted, not adopted yet */
    struct web_conn *conns;            /* adopted */
    struct event *batch_ev;            /* runs the held requests (opts.batch > 1) */
    struct evhttp_request **held;      /* opts.batch slots; NULL: no batches */
    struct web_request *held_r;        /* held[i]'s request as the handler sees it */
    struct web_response *held_out;
    int nheld;
    int nconns;                        /* accepted and not closed (pending + adopted) */
    int cap;                           /* the connection cap in force */
    int listening;                     /* the listener is enabled */
    int backing_off;                   /* paused after a failed accept */
    double backoff;                    /* the next pause, seconds */
    /* lines that can repeat per connection or accept, one per 10 s each */
    struct log_limit cap_limit, accept_limit, timeout_limit;
};

/* The listener's error callback gets evhttp's argument, not ours: each
 * server's is the one its web thread runs (set and read on that thread). */
static _Thread_local struct web *web_self;

static void web_answering(struct web *w, struct evhttp_request *req);

static double web_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static struct timeval web_tv(double s) {
    struct timeval tv = {(time_t)s, (suseconds_t)((s - (double)(time_t)s) * 1e6)};
    return tv;
}

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
    case 409: return "Conflict";
    case 410: return "Gone";
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

/* How many headers of name (case-insensitive) the request has. */
static int web_header_count(struct evkeyvalq *h, const char *name) {
    int n = 0;
    for (struct evkeyval *kv = h->tqh_first; kv; kv = kv->next.tqe_next)
        if (evutil_ascii_strcasecmp(kv->key, name) == 0) n++;
    return n;
}

static void web_free_body(const void *data, size_t len, void *arg) {
    (void)len; (void)arg;
    free((void *)data);
}

/* Sends status + body (taking ownership of body) with the headers every
 * answer carries: nothing is cached, sniffed or framed by another site. */
static void web_send(struct web *w, struct evhttp_request *req, int status, const char *ctype, char *body, size_t len,
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
    web_answering(w, req);
    evhttp_send_reply(req, status, web_reason(status), ob);
    if (ob) evbuffer_free(ob);
}

static void web_send_static(struct web *w, struct evhttp_request *req, int status, const char *json) {
    char *copy = strdup(json);
    web_send(w, req, status, "application/json", copy, copy ? strlen(copy) : 0, NULL);
}

/* --- the listener: cap and back-off ------------------------------------------- */

/* Enables or disables the listener as the state asks: not at the cap, not
 * backing off after a failed accept. */
static void web_listen_update(struct web *w) {
    int want = w->nconns < w->cap && !w->backing_off;
    if (want == w->listening || !w->lev) return;
    if (want) evconnlistener_enable(w->lev);
    else evconnlistener_disable(w->lev);
    w->listening = want;
}

/* A connection closed (or never made it past evhttp's set-up). */
static void web_conn_gone(struct web *w) {
    w->nconns--;
    web_listen_update(w);
}

/* Timer: the pause after a failed accept is over. */
static void web_on_backoff(evutil_socket_t fd, short what, void *arg) {
    (void)fd; (void)what;
    struct web *w = arg;
    w->backing_off = 0;
    web_listen_update(w);
}

/* The listener's error callback: accept() failed with an error that is not
 * retried at once (EMFILE, ENFILE, ENOBUFS, ENOMEM). The pending connection
 * stays in the kernel's backlog; we try again after a pause that doubles
 * while accepts keep failing (0.1 s .. 1 s) and starts over after one that
 * succeeds. */
static void web_on_accept_error(struct evconnlistener *lev, void *arg) {
    (void)lev; (void)arg;
    struct web *w = web_self;
    int e = EVUTIL_SOCKET_ERROR();
    double pause = w->backoff;
    w->backoff = pause * 2 > 1.0 ? 1.0 : pause * 2;
    log_limited(&w->accept_limit, LOG_WARN, "%s: accept failed: %s; not accepting for %.1f s "
                "(%d connections open)", w->opts.name, evutil_socket_error_to_string(e), pause, w->nconns);
    w->backing_off = 1;
    web_listen_update(w);
    struct timeval tv = web_tv(pause);
    evtimer_add(w->backoff_ev, &tv);
}

/* --- following connections ------------------------------------------------------ */

static void web_unlink(struct web *w, struct web_conn *c) {
    if (c->prev) c->prev->next = c->next;
    else w->conns = c->next;
    if (c->next) c->next->prev = c->prev;
}

/* evhttp's close callback: every server connection that was adopted ends here
 * (evhttp_connection_free calls it before freeing anything). */
static void web_on_close(struct evhttp_connection *evcon, void *arg) {
    (void)evcon;
    struct web_conn *c = arg;
    struct web *w = c->w;
    evbuffer_remove_cb_entry(bufferevent_get_input(c->bev), c->in_cb);
    web_unlink(w, c);
    free(c);
    web_conn_gone(w);
}

/* Bytes arrived on a connection: the first byte of a request after an idle
 * time starts the header timeout. */
static void web_on_input(struct evbuffer *buf, const struct evbuffer_cb_info *info, void *arg) {
    (void)buf;
    struct web_conn *c = arg;
    if (info->n_added > 0 && c->idle) {
        c->idle = 0;
        c->deadline = web_now() + c->w->opts.header_timeout;
    }
}

/* evhttp's bufferevent callback: called for every accepted connection, before
 * evhttp makes its connection object. Counts it, and stops accepting at the
 * cap. The bufferevent does not close its socket on free (evhttp closes it
 * itself after a shutdown, which must not hit a closed and reused number). */
static struct bufferevent *web_on_accept(struct event_base *base, void *arg) {
    struct web *w = arg;
    struct bufferevent *bev = bufferevent_socket_new(base, -1, 0);
    struct web_conn *c = bev ? calloc(1, sizeof *c) : NULL;
    if (!c) return bev; /* out of memory: served, not followed */
    w->backoff = 0.1;   /* an accept succeeded */
    bufferevent_incref(bev);
    c->w = w;
    c->bev = bev;
    c->next = w->pending;
    w->pending = c;
    w->nconns++;
    event_active(w->adopt_ev, EV_TIMEOUT, 0);
    if (w->nconns >= w->cap) {
        log_limited(&w->cap_limit, LOG_WARN, "%s: %d connections open, the limit (web_max_connections, "
                    "or the fd limit less a reserve): not accepting until one closes", w->opts.name, w->nconns);
        web_listen_update(w);
    }
    return bev;
}

/* Right after the accept callback: each new bufferevent's callback argument
 * is now its evhttp_connection (NULL when evhttp already dropped it). */
static void web_adopt(evutil_socket_t fd, short what, void *arg) {
    (void)fd; (void)what;
    struct web *w = arg;
    double now = web_now();
    struct web_conn *c;
    while ((c = w->pending)) {
        w->pending = c->next;
        struct bufferevent *bev = c->bev;
        void *evcon = NULL;
        bufferevent_getcb(bev, NULL, NULL, NULL, &evcon);
        if (evcon) {
            c->in_cb = evbuffer_add_cb(bufferevent_get_input(bev), web_on_input, c);
        }
        if (evcon && c->in_cb) {
            c->evcon = evcon;
            c->deadline = now + w->opts.header_timeout;
            c->prev = NULL;
            c->next = w->conns;
            if (w->conns) w->conns->prev = c;
            w->conns = c;
            evhttp_connection_set_closecb(c->evcon, web_on_close, c);
        } else {
            free(c);
            web_conn_gone(w);
        }
        bufferevent_decref(bev);
    }
}

/* Timer: closes the connections past their deadline (header or idle). */
static void web_sweep(evutil_socket_t fd, short what, void *arg) {
    (void)fd; (void)what;
    struct web *w = arg;
    double now = web_now();
    struct web_conn *c = w->conns, *next;
    for (; c; c = next) {
        next = c->next;
        if (c->deadline <= 0 || now < c->deadline) continue;
        if (!c->idle) /* an idle keep-alive ending is routine; a request that never came whole is not */
            log_limited(&w->timeout_limit, LOG_INFO, "%s: closed a connection that did not send a "
                        "whole request within web_header_timeout (%g s)", w->opts.name, w->opts.header_timeout);
        evhttp_connection_free(c->evcon); /* calls web_on_close, which frees c */
    }
}

static struct web_conn *web_find(struct web *w, struct evhttp_connection *evcon) {
    for (struct web_conn *c = w->conns; c; c = c->next)
        if (c->evcon == evcon) return c;
    return NULL;
}

/* The answer is sent: the connection waits for the next request. */
static void web_on_sent(struct evhttp_request *req, void *arg) {
    (void)req;
    struct web_conn *c = arg;
    c->idle = evbuffer_get_length(bufferevent_get_input(c->bev)) == 0;
    c->deadline = web_now() + (c->idle ? c->w->opts.idle_timeout : c->w->opts.header_timeout);
}

/* An answer is about to be sent (after the handler, which runs on this
 * thread, so no sweep ran meanwhile): the client must take it within the
 * idle timeout. Before evhttp_send_reply, which may free the connection. */
static void web_answering(struct web *w, struct evhttp_request *req) {
    struct web_conn *c = web_find(w, evhttp_request_get_connection(req));
    if (!c) return;
    c->deadline = web_now() + w->opts.idle_timeout;
    c->idle = 1;
    evhttp_request_set_on_complete_cb(req, web_on_sent, c);
}

/* Sends the handler's answer out (taking its body), or a 500 when it made
 * none. */
static void web_answer(struct web *w, struct evhttp_request *req, int rc, struct web_response *out) {
    if (rc != 0 || out->status < 100 || out->status > 599) {
        free(out->body);
        free(out->set_cookie);
        web_send_static(w, req, 500, "{\"error\":\"internal error (see the host's log)\"}");
        return;
    }
    web_send(w, req, out->status, out->content_type, out->body, out->len, out->set_cookie);
    free(out->set_cookie);
}

/* Answers every held request through one app.handle_batch call. Called by
 * the batch event (after the pass that held them), when the batch is full,
 * and before the server closes. */
static void web_run_batch(struct web *w) {
    int n = w->nheld;
    if (n == 0) return;
    w->nheld = 0;
    memset(w->held_out, 0, (size_t)n * sizeof *w->held_out);
    int rc = w->app.handle_batch(w->ud, w->held_r, n, w->held_out);
    for (int i = 0; i < n; i++) web_answer(w, w->held[i], rc, &w->held_out[i]);
}

static void web_on_batch(evutil_socket_t fd, short what, void *arg) {
    (void)fd; (void)what;
    web_run_batch(arg);
}

/* Holds req (r: its fields) for the batch of this pass of the loop. */
static void web_hold(struct web *w, struct evhttp_request *req, const struct web_request *r) {
    struct web_conn *c = web_find(w, evhttp_request_get_connection(req));
    if (c) c->deadline = 0; /* being answered: not the sweep's */
    w->held[w->nheld] = req;
    w->held_r[w->nheld] = *r;
    if (++w->nheld == w->opts.batch) web_run_batch(w);
    else if (w->nheld == 1) event_active(w->batch_ev, EV_TIMEOUT, 0);
}

/* evhttp's generic callback: every path lands here, one request at a time,
 * on the web thread. */
static void web_on_request(struct evhttp_request *req, void *arg) {
    struct web *w = arg;
    struct evkeyvalq *in = evhttp_request_get_input_headers(req);
    struct evbuffer *ib = evhttp_request_get_input_buffer(req);
    size_t blen = evbuffer_get_length(ib);
    /* evhttp already refuses declared and chunked bodies over the limit; this
     * is the belt to those braces. */
    if (blen > w->opts.max_body) {
        web_send_static(w, req, 413, "{\"error\":\"request body too large\"}");
        return;
    }
    /* RFC 9112 3.2: more than one Host is a 400 (evhttp would give the
     * handler the first: the loopback check and the origin check must not
     * see one name while a proxy routes by another) */
    if (web_header_count(in, "Host") > 1) {
        web_send_static(w, req, 400, "{\"error\":\"more than one Host header\"}");
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
    if (w->held) {
        web_hold(w, req, &r);
        return;
    }
    struct web_response out = {0};
    web_answer(w, req, w->app.handle(w->ud, &r, &out), &out);
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

/* Descriptors open now (/proc/self/fd; 0 when it cannot be read). */
static long web_open_fds(void) {
    DIR *d = opendir("/proc/self/fd");
    if (!d) return 0;
    long n = 0;
    while (readdir(d)) n++;
    closedir(d);
    return n > 3 ? n - 3 : 0; /* ".", ".." and the DIR's own */
}

/* The connection cap: max_connections, but never so many that the host could
 * run out of descriptors (what is open now and fd_reserve stay free). */
static int web_cap(const struct web_opts *o, long *nofile_out) {
    struct rlimit rl;
    long nofile = 1L << 20;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) nofile = (long)rl.rlim_cur;
    *nofile_out = nofile;
    long room = nofile - web_open_fds() - o->fd_reserve;
    long cap = o->max_connections < room ? o->max_connections : room;
    return cap < 1 ? 1 : (int)cap;
}

/* Web thread: everything up to listening. 0, or -1 with w->err filled. */
static int web_open(struct web *w) {
    char addr[256];
    int port;
    if (web_parse_addr(w->opts.addr, addr, sizeof addr, &port) < 0) {
        snprintf(w->err, sizeof w->err, "--%s: '%s' is not ADDR:PORT", w->opts.name, w->opts.addr);
        return -1;
    }
    if (!(w->base = event_base_new()) || !(w->http = evhttp_new(w->base))) {
        snprintf(w->err, sizeof w->err, "--%s: cannot create the HTTP server", w->opts.name);
        return -1;
    }
    char why[sizeof w->err - 64] = "";
    if (!(w->ud = w->app.open(w->app.arg, why, sizeof why))) {
        snprintf(w->err, sizeof w->err, "--%s: %s", w->opts.name, why);
        return -1;
    }
    evhttp_set_max_body_size(w->http, (ev_ssize_t)w->opts.max_body);
    evhttp_set_max_headers_size(w->http, 16384);
    /* evhttp's own timeout is per read and write, reset by every byte: a
     * backstop behind ours (web_sweep), never before them */
    double t = w->opts.header_timeout > w->opts.idle_timeout ? w->opts.header_timeout : w->opts.idle_timeout;
    struct timeval tv = web_tv(t + 1);
    evhttp_set_timeout_tv(w->http, &tv);
    /* Read (and drop) the rest of a too-large body before closing, so that the
     * client gets the 413 instead of a connection reset. */
    evhttp_set_flags(w->http, EVHTTP_SERVER_LINGERING_CLOSE);
    evhttp_set_allowed_methods(w->http, EVHTTP_REQ_GET | EVHTTP_REQ_HEAD | EVHTTP_REQ_POST |
                                        EVHTTP_REQ_PUT | EVHTTP_REQ_DELETE | EVHTTP_REQ_PATCH);
    evhttp_set_gencb(w->http, web_on_request, w);
    evhttp_set_bevcb(w->http, web_on_accept, w);
    w->adopt_ev = event_new(w->base, -1, 0, web_adopt, w);
    w->sweep_ev = event_new(w->base, -1, EV_PERSIST, web_sweep, w);
    w->backoff_ev = evtimer_new(w->base, web_on_backoff, w);
    if (w->opts.batch > 1 && w->app.handle_batch) {
        w->batch_ev = event_new(w->base, -1, 0, web_on_batch, w);
        w->held = calloc((size_t)w->opts.batch, sizeof *w->held);
        w->held_r = calloc((size_t)w->opts.batch, sizeof *w->held_r);
        w->held_out = calloc((size_t)w->opts.batch, sizeof *w->held_out);
        if (!w->batch_ev || !w->held || !w->held_r || !w->held_out) {
            snprintf(w->err, sizeof w->err, "--%s: out of memory", w->opts.name);
            return -1;
        }
    }
    if (!w->adopt_ev || !w->sweep_ev || !w->backoff_ev) {
        snprintf(w->err, sizeof w->err, "--%s: out of memory", w->opts.name);
        return -1;
    }
    struct timeval sweep_tv = {0, 200000};
    event_add(w->sweep_ev, &sweep_tv);
    long nofile;
    w->cap = web_cap(&w->opts, &nofile);
    w->backoff = 0.1;
    errno = 0;
    struct evhttp_bound_socket *bound = evhttp_bind_socket_with_handle(w->http, addr, (ev_uint16_t)port);
    if (!bound) {
        int e = errno;
        snprintf(w->err, sizeof w->err, "--%s: cannot listen on %s: %s", w->opts.name, w->opts.addr,
                 e ? strerror(e) : "bind failed");
        return -1;
    }
    w->lev = evhttp_bound_socket_get_listener(bound);
    w->listening = 1;
    web_self = w;
    evconnlistener_set_error_cb(w->lev, web_on_accept_error);
    /* the port bound, which port 0 leaves to the kernel */
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    int bound_port = port;
    if (getsockname(evhttp_bound_socket_get_fd(bound), (struct sockaddr *)&ss, &sl) == 0)
        bound_port = ss.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&ss)->sin6_port)
                                              : ntohs(((struct sockaddr_in *)&ss)->sin_port);
    log_fmt(LOG_INFO, "%s: listening on http://%s%s%s:%d/ (up to %d connections; fd limit %ld)", w->opts.name,
            strchr(addr, ':') ? "[" : "", addr, strchr(addr, ':') ? "]" : "", bound_port, w->cap, nofile);
    return 0;
}

/* Web thread: frees what web_open made (evhttp_free closes every connection,
 * each through web_on_close), then the app. */
static void web_close(struct web *w) {
    w->lev = NULL; /* evhttp_free frees it */
    w->cap = 1 << 30;
    if (w->held) web_run_batch(w); /* before evhttp_free frees their requests */
    if (w->http) evhttp_free(w->http);
    web_adopt(-1, 0, w); /* none pending after evhttp_free; frees them if any */
    if (w->adopt_ev) event_free(w->adopt_ev);
    if (w->sweep_ev) event_free(w->sweep_ev);
    if (w->backoff_ev) event_free(w->backoff_ev);
    if (w->batch_ev) event_free(w->batch_ev);
    free(w->held);
    free(w->held_r);
    free(w->held_out);
    if (w->stop_ev) event_free(w->stop_ev);
    if (w->ud) w->app.close(w->ud);
    if (w->base) event_base_free(w->base);
    web_self = NULL;
}

static void web_on_stop(evutil_socket_t fd, short what, void *arg) {
    (void)fd; (void)what;
    struct web *w = arg;
    event_base_loopbreak(w->base);
}

static void web_set_state(struct web *w, int state) {
    pthread_mutex_lock(&w->mu);
    w->state = state;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

/* The web thread: opens, tells web_start, serves until web_stop. */
static void *web_main(void *arg) {
    struct web *w = arg;
    log_set_thread_name(w->opts.name);
    int ok = web_open(w) == 0 && (w->stop_ev = event_new(w->base, -1, 0, web_on_stop, w)) != NULL;
    if (!ok) {
        if (!w->err[0]) snprintf(w->err, sizeof w->err, "--%s: out of memory", w->opts.name);
        web_close(w);
        web_set_state(w, -1);
        return NULL;
    }
    web_set_state(w, 1);
    event_base_dispatch(w->base);
    web_close(w);
    return NULL;
}

struct web *web_start(const struct web_opts *opts, const struct web_app *app, char *err, size_t errlen) {
    struct web *w = calloc(1, sizeof *w);
    char *addr = opts->addr ? strdup(opts->addr) : NULL;
    const char *name = opts->name && opts->name[0] ? opts->name : "web";
    if (!w || !addr) {
        free(w);
        free(addr);
        snprintf(err, errlen, "--%s: out of memory", name);
        return NULL;
    }
    w->opts = *opts;
    w->opts.addr = addr;
    w->opts.name = name; /* a string literal of the caller's */
    w->cap_limit = w->accept_limit = w->timeout_limit = (struct log_limit)LOG_LIMIT(10);
    w->app = *app;
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    /* Signals stay with the main thread: the web thread starts with all blocked. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    int rc = pthread_create(&w->thread, NULL, web_main, w);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    int state = -1;
    if (rc == 0) {
        pthread_mutex_lock(&w->mu);
        while (w->state == 0) pthread_cond_wait(&w->cv, &w->mu);
        state = w->state;
        pthread_mutex_unlock(&w->mu);
        if (state < 0) pthread_join(w->thread, NULL);
    } else {
        snprintf(w->err, sizeof w->err, "--%s: cannot start its thread", name);
    }
    if (state < 0) {
        snprintf(err, errlen, "%s", w->err);
        pthread_mutex_destroy(&w->mu);
        pthread_cond_destroy(&w->cv);
        free(addr);
        free(w);
        return NULL;
    }
    return w;
}

void web_stop(struct web *w) {
    if (!w) return;
    event_active(w->stop_ev, EV_TIMEOUT, 0);
    pthread_join(w->thread, NULL);
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
    free((char *)w->opts.addr);
    free(w);
}
