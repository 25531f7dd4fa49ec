/* http.c - the transfers behind luakiq.http.request, on libcurl's multi
 * interface (Debian's libcurl4-openssl-dev: HTTP/1.1, HTTP/2, TLS verified
 * against the system's CA store; we write neither HTTP nor TLS).
 *
 * Threads: each thread (a worker, or the main thread for `luakiq lua`) has
 * its own CURLM, made on first use and kept until the thread ends
 * (http_thread_end): its connection cache is the thread's keep-alive pool.
 * Nothing here is shared between threads, so nothing is locked; a transfer
 * belongs to the VM, and so the thread, that started it.
 *
 * A transfer is a full userdata (metatable "luakiq.http_transfer") that owns
 * a CURL easy handle, its request header list and the response it collects;
 * its __gc ends it, so a call that raised (a timeout) leaves nothing behind.
 * Policy is in scripts/luakiq/http.lua: it checks the options, caps the
 * transfer's timeout by the call's remaining time, and either parks the call
 * (the runner drives every transfer of the thread with http_pump and
 * http_wait between other calls) or waits in place.
 *
 * No Lua call is made while libcurl holds our memory in a way a raise would
 * leak: everything a transfer allocates hangs off its userdata.
 *
 * libcurl is loaded on first use (dlopen of its SONAME, once per process,
 * pthread_once), not linked: linked, it and the libraries it pulls in (TLS,
 * Kerberos, LDAP, SSH...) made every luakiq process ~5.8 MB larger in RSS
 * at start, of which ~1.8 MB was curl_global_init, also for hosts and CLI
 * commands that never make a request (docs/benchmarks.md, "Host RSS").
 * The headers are still libcurl's own; calls go through http_curl, filled
 * once and only read after. */
#include <curl/curl.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <lua.h>
#include <lauxlib.h>
#include "core.h"
#include "http.h"
#include "runner.h"

#define HTTP_MT "luakiq.http_transfer"
#define HTTP_MAX_IDLE 64 /* keep-alive connections a thread keeps open */

static _Thread_local CURLM *http_multi;
static _Thread_local int http_nactive; /* transfers added to http_multi, not done */

struct http_buf { char *p; size_t len, cap; };

struct http_transfer {
    CURL *easy;
    struct curl_slist *headers;
    int in_multi, done, too_big;
    CURLcode code;
    size_t max_body;
    struct http_buf body, head; /* head: the last response's header lines */
    char errbuf[CURL_ERROR_SIZE];
};

/* The libcurl functions this file calls, from the loaded library. */
static struct {
    CURLcode (*global_init)(long);
    const char *(*easy_strerror)(CURLcode);
    CURL *(*easy_init)(void);
    CURLcode (*easy_setopt)(CURL *, CURLoption, ...);
    CURLcode (*easy_getinfo)(CURL *, CURLINFO, ...);
    void (*easy_cleanup)(CURL *);
    CURLM *(*multi_init)(void);
    CURLMcode (*multi_setopt)(CURLM *, CURLMoption, ...);
    CURLMcode (*multi_add_handle)(CURLM *, CURL *);
    CURLMcode (*multi_remove_handle)(CURLM *, CURL *);
    CURLMcode (*multi_perform)(CURLM *, int *);
    CURLMsg *(*multi_info_read)(CURLM *, int *);
    CURLMcode (*multi_poll)(CURLM *, struct curl_waitfd *, unsigned int, int, int *);
    CURLMcode (*multi_cleanup)(CURLM *);
    struct curl_slist *(*slist_append)(struct curl_slist *, const char *);
    void (*slist_free_all)(struct curl_slist *);
} http_curl;
static pthread_once_t http_curl_once = PTHREAD_ONCE_INIT;
static char http_curl_error[300]; /* why libcurl could not be loaded ("": it was) */

/* The SONAME libcurl has had since 7.16 (Debian's libcurl4). */
#define HTTP_CURL_SONAME "libcurl.so.4"

/* Loads libcurl and initialises it (once, by whichever thread first needs
 * it: pthread_once; curl_global_init is thread-safe since 7.84, Debian 12
 * ships 7.88, and runs here once anyway). Never unloaded. */
static void http_curl_load(void) {
    void *lib = dlopen(HTTP_CURL_SONAME, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        snprintf(http_curl_error, sizeof http_curl_error, "cannot load %s (%s)", HTTP_CURL_SONAME, dlerror());
        return;
    }
    static const char *const names[] = {
        "curl_global_init", "curl_easy_strerror", "curl_easy_init", "curl_easy_setopt", "curl_easy_getinfo",
        "curl_easy_cleanup", "curl_multi_init", "curl_multi_setopt", "curl_multi_add_handle",
        "curl_multi_remove_handle", "curl_multi_perform", "curl_multi_info_read", "curl_multi_poll",
        "curl_multi_cleanup", "curl_slist_append", "curl_slist_free_all"};
    void *syms[sizeof names / sizeof names[0]];
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        if (!(syms[i] = dlsym(lib, names[i]))) {
            snprintf(http_curl_error, sizeof http_curl_error, "%s has no %s (libcurl 7.66 or later is needed)",
                     HTTP_CURL_SONAME, names[i]);
            return;
        }
    }
    /* (object pointers to function pointers: POSIX dlsym's contract; the
     * struct is exactly these pointers, in this order) */
    _Static_assert(sizeof http_curl == sizeof syms, "http_curl: one pointer per name");
    memcpy(&http_curl, syms, sizeof syms);
    CURLcode c = http_curl.global_init(CURL_GLOBAL_DEFAULT);
    if (c != CURLE_OK) {
        snprintf(http_curl_error, sizeof http_curl_error, "cannot initialise libcurl: %s", http_curl.easy_strerror(c));
        memset(&http_curl, 0, sizeof http_curl);
    }
}

/* Any thread: 1 once libcurl is loaded, 0 when it cannot be (the reason is
 * in http_curl_error). */
static int http_curl_ready(void) {
    pthread_once(&http_curl_once, http_curl_load);
    return http_curl.global_init != NULL;
}

/* This thread's engine, made on first use; NULL: libcurl could not be
 * loaded (http_curl_error) or is out of memory. */
static CURLM *http_engine(void) {
    if (!http_multi && http_curl_ready()) {
        http_multi = http_curl.multi_init();
        if (http_multi) http_curl.multi_setopt(http_multi, CURLMOPT_MAXCONNECTS, (long)HTTP_MAX_IDLE);
    }
    return http_multi;
}

/* The error for a NULL http_engine(). */
static int http_engine_error(lua_State *L) {
    if (http_curl_error[0]) return luaL_error(L, "http: %s", http_curl_error);
    return luaL_error(L, "http: cannot start the transfer engine");
}

void http_thread_end(void) {
    if (http_multi) http_curl.multi_cleanup(http_multi);
    http_multi = NULL;
    http_nactive = 0;
}

static int http_buf_add(struct http_buf *b, const char *p, size_t n) {
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n) cap *= 2;
        char *q = realloc(b->p, cap);
        if (!q) return -1;
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->len, p, n);
    b->len += n;
    return 0;
}

/* libcurl callbacks (the thread's own, inside curl_multi_perform). */
static size_t http_on_body(char *p, size_t size, size_t n, void *ud) {
    struct http_transfer *t = ud;
    size_t len = size * n;
    if (t->body.len + len > t->max_body) { t->too_big = 1; return 0; } /* aborts: CURLE_WRITE_ERROR */
    return http_buf_add(&t->body, p, len) == 0 ? len : 0;
}

static size_t http_on_header(char *p, size_t size, size_t n, void *ud) {
    struct http_transfer *t = ud;
    size_t len = size * n;
    /* A status line starts a response (a redirect's next hop, after a 100
     * Continue): only the last response's headers are kept. */
    if (len >= 5 && memcmp(p, "HTTP/", 5) == 0) t->head.len = 0;
    return http_buf_add(&t->head, p, len) == 0 ? len : 0;
}

/* Detaches t from the thread's engine and frees all it owns. Idempotent. */
static void http_close(struct http_transfer *t) {
    if (t->easy) {
        if (t->in_multi && http_multi) {
            http_curl.multi_remove_handle(http_multi, t->easy);
            http_nactive--;
        }
        t->in_multi = 0;
        http_curl.easy_cleanup(t->easy);
        t->easy = NULL;
    }
    if (t->headers) http_curl.slist_free_all(t->headers);
    t->headers = NULL;
    free(t->body.p);
    free(t->head.p);
    memset(&t->body, 0, sizeof t->body);
    memset(&t->head, 0, sizeof t->head);
}

/* Moves every transfer libcurl reports finished to done (never blocks). */
static void http_pump_all(void) {
    if (!http_multi) return;
    int running, left;
    http_curl.multi_perform(http_multi, &running);
    CURLMsg *m;
    while ((m = http_curl.multi_info_read(http_multi, &left))) {
        if (m->msg != CURLMSG_DONE) continue;
        struct http_transfer *t = NULL;
        http_curl.easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&t);
        CURLcode code = m->data.result; /* m is invalid once the handle is removed */
        http_curl.multi_remove_handle(http_multi, m->easy_handle);
        http_nactive--;
        if (t) { t->in_multi = 0; t->done = 1; t->code = code; }
    }
}

static struct http_transfer *http_check(lua_State *L) {
    return luaL_checkudata(L, 1, HTTP_MT);
}

static const char *http_field_str(lua_State *L, const char *k, int required) {
    lua_getfield(L, 1, k);
    const char *s = lua_isnil(L, -1) && !required ? NULL : lua_tostring(L, -1);
    if (!s && required) luaL_error(L, "http_start: %s must be a string", k);
    lua_pop(L, 1); /* s stays valid: the string is still referenced by the options table */
    return s;
}

static double http_field_num(lua_State *L, const char *k, double dflt) {
    lua_getfield(L, 1, k);
    double v = lua_isnumber(L, -1) ? lua_tonumber(L, -1) : dflt;
    lua_pop(L, 1);
    return v;
}

/* core.http_start{method=, url=, headers={"Name: value", ...}, body=?,
 * timeout_ms=, insecure=, redirects=, max_body=} -> transfer. The options
 * are already checked by luakiq.http. The transfer is added to this thread's
 * engine and started (connecting, without waiting). */
static int http_start(lua_State *L) {
    core_safe_point(L);
    luaL_checktype(L, 1, LUA_TTABLE);
    const char *method = http_field_str(L, "method", 1);
    const char *url = http_field_str(L, "url", 1);
    const char *body = http_field_str(L, "body", 0);
    size_t body_len = 0;
    if (body) {
        lua_getfield(L, 1, "body");
        body_len = lua_objlen(L, -1);
        lua_pop(L, 1);
    }
    long timeout_ms = (long)http_field_num(L, "timeout_ms", 30000);
    long redirects = (long)http_field_num(L, "redirects", 0);
    double max_body = http_field_num(L, "max_body", 16.0 * 1024 * 1024);
    lua_getfield(L, 1, "insecure");
    int insecure = lua_toboolean(L, -1);
    lua_pop(L, 1);
    CURLM *multi = http_engine();
    if (!multi) return http_engine_error(L);

    struct http_transfer *t = lua_newuserdata(L, sizeof *t);
    memset(t, 0, sizeof *t);
    luaL_getmetatable(L, HTTP_MT);
    lua_setmetatable(L, -2); /* from here on __gc frees whatever t owns */
    t->max_body = max_body > 0 ? (size_t)max_body : 0;
    lua_getfield(L, 1, "headers");
    if (lua_istable(L, -1)) {
        int n = (int)lua_objlen(L, -1);
        for (int i = 1; i <= n; i++) {
            lua_rawgeti(L, -1, i);
            const char *h = lua_tostring(L, -1);
            struct curl_slist *l = h ? http_curl.slist_append(t->headers, h) : t->headers;
            lua_pop(L, 1);
            if (!l) return luaL_error(L, "http: out of memory");
            t->headers = l;
        }
    }
    lua_pop(L, 1);
    t->easy = http_curl.easy_init();
    if (!t->easy) return luaL_error(L, "http: out of memory");
    CURL *e = t->easy;
    http_curl.easy_setopt(e, CURLOPT_URL, url);
    http_curl.easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
    http_curl.easy_setopt(e, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
    http_curl.easy_setopt(e, CURLOPT_NOSIGNAL, 1L); /* threads: no SIGALRM for DNS timeouts */
    http_curl.easy_setopt(e, CURLOPT_TIMEOUT_MS, timeout_ms > 0 ? timeout_ms : 1L);
    http_curl.easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, timeout_ms > 0 ? timeout_ms : 1L);
    http_curl.easy_setopt(e, CURLOPT_ERRORBUFFER, t->errbuf);
    http_curl.easy_setopt(e, CURLOPT_PRIVATE, (char *)t);
    http_curl.easy_setopt(e, CURLOPT_WRITEFUNCTION, http_on_body);
    http_curl.easy_setopt(e, CURLOPT_WRITEDATA, t);
    http_curl.easy_setopt(e, CURLOPT_HEADERFUNCTION, http_on_header);
    http_curl.easy_setopt(e, CURLOPT_HEADERDATA, t);
    http_curl.easy_setopt(e, CURLOPT_MAXFILESIZE_LARGE, (curl_off_t)t->max_body);
    if (t->headers) http_curl.easy_setopt(e, CURLOPT_HTTPHEADER, t->headers);
    if (redirects > 0) {
        http_curl.easy_setopt(e, CURLOPT_FOLLOWLOCATION, 1L);
        http_curl.easy_setopt(e, CURLOPT_MAXREDIRS, redirects);
    }
    if (insecure) {
        http_curl.easy_setopt(e, CURLOPT_SSL_VERIFYPEER, 0L);
        http_curl.easy_setopt(e, CURLOPT_SSL_VERIFYHOST, 0L);
    }
    if (strcmp(method, "HEAD") == 0) {
        http_curl.easy_setopt(e, CURLOPT_NOBODY, 1L);
    } else if (body) {
        http_curl.easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)body_len);
        http_curl.easy_setopt(e, CURLOPT_COPYPOSTFIELDS, body); /* copied: the Lua string may go */
        if (strcmp(method, "POST") != 0) http_curl.easy_setopt(e, CURLOPT_CUSTOMREQUEST, method);
    } else if (strcmp(method, "GET") != 0) {
        http_curl.easy_setopt(e, CURLOPT_CUSTOMREQUEST, method);
    }
    if (http_curl.multi_add_handle(multi, e) != CURLM_OK) return luaL_error(L, "http: cannot add the transfer");
    t->in_multi = 1;
    http_nactive++;
    http_pump_all(); /* start connecting now */
    return 1;
}

/* transfer:done() -> whether it has finished (as of the last pump or wait). */
static int http_done(lua_State *L) {
    lua_pushboolean(L, http_check(L)->done);
    return 1;
}

/* transfer:result() -> status, header block, body; or nil, reason, kind (a
 * transport failure: connect, TLS, timeout, a body over max_body; kind is
 * "timeout" when the transfer's own timeout ended it, else "transport"). */
static int http_result(lua_State *L) {
    struct http_transfer *t = http_check(L);
    if (!t->done) return luaL_error(L, "http: the transfer has not finished");
    if (t->code != CURLE_OK) {
        lua_pushnil(L);
        if (t->too_big || t->code == CURLE_FILESIZE_EXCEEDED)
            lua_pushfstring(L, "response body larger than max_body (%d bytes)", (int)t->max_body);
        else if (t->errbuf[0])
            lua_pushstring(L, t->errbuf);
        else
            lua_pushstring(L, http_curl.easy_strerror(t->code));
        lua_pushstring(L, t->code == CURLE_OPERATION_TIMEDOUT ? "timeout" : "transport");
        return 3;
    }
    long status = 0;
    http_curl.easy_getinfo(t->easy, CURLINFO_RESPONSE_CODE, &status);
    lua_pushinteger(L, status);
    lua_pushlstring(L, t->head.p ? t->head.p : "", t->head.len);
    lua_pushlstring(L, t->body.p ? t->body.p : "", t->body.len);
    return 3;
}

/* transfer:close(): ends it now (abandoned: the call timed out) or frees a
 * finished one early. Also its __gc. */
static int http_close_l(lua_State *L) {
    http_close(http_check(L));
    return 0;
}

/* core.http_pump() -> transfers in flight: moves them on without waiting. */
static int http_pump(lua_State *L) {
    core_safe_point(L);
    http_pump_all();
    lua_pushinteger(L, http_nactive);
    return 1;
}

/* core.http_wait(seconds, wake [, fds]) -> transfers in flight: waits until
 * one of this thread's transfers can move, `seconds` pass, (wake true, on a
 * worker thread) the thread's mailbox is written, or one of `fds` (an array
 * of fds, e.g. a parked call's child process's: proc.c) is readable; then
 * pumps. A signal (the timeout watchdog's) ends the wait early too. */
#define HTTP_EXTRA_FDS 32
static int http_wait(lua_State *L) {
    core_safe_point(L);
    double s = luaL_checknumber(L, 1);
    int wake = lua_toboolean(L, 2);
    CURLM *multi = http_engine();
    if (!multi) return http_engine_error(L);
    struct curl_waitfd extra[HTTP_EXTRA_FDS + 1];
    unsigned n = 0;
    struct runner *r = runner_self();
    if (wake && r && runner_wake_fd(r) >= 0) {
        extra[n].fd = runner_wake_fd(r);
        extra[n].events = CURL_WAIT_POLLIN;
        extra[n++].revents = 0;
    }
    if (lua_type(L, 3) == LUA_TTABLE) {
        int m = (int)lua_objlen(L, 3);
        for (int i = 1; i <= m && n < HTTP_EXTRA_FDS + 1; i++) {
            lua_rawgeti(L, 3, i);
            int fd = (int)lua_tointeger(L, -1);
            lua_pop(L, 1);
            extra[n].fd = fd;
            extra[n].events = CURL_WAIT_POLLIN;
            extra[n++].revents = 0;
        }
    }
    int ms = s <= 0 ? 0 : s > 3600 ? 3600000 : (int)(s * 1000 + 0.999);
    http_curl.multi_poll(multi, n ? extra : NULL, n, ms, NULL);
    http_pump_all();
    lua_pushinteger(L, http_nactive);
    return 1;
}

/* core.http_active() -> this thread's transfers in flight (no I/O). */
static int http_active(lua_State *L) {
    lua_pushinteger(L, http_nactive);
    return 1;
}

static const luaL_Reg http_methods[] = {
    {"done", http_done}, {"result", http_result}, {"close", http_close_l}, {NULL, NULL}};

static const luaL_Reg http_funcs[] = {
    {"http_start", http_start}, {"http_pump", http_pump}, {"http_wait", http_wait},
    {"http_active", http_active}, {NULL, NULL}};

void http_register(lua_State *L) {
    if (luaL_newmetatable(L, HTTP_MT)) {
        lua_newtable(L);
        luaL_register(L, NULL, http_methods);
        lua_setfield(L, -2, "__index");
        lua_pushcfunction(L, http_close_l);
        lua_setfield(L, -2, "__gc");
    }
    lua_pop(L, 1);
    luaL_register(L, NULL, http_funcs);
}
