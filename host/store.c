/* store.c - Redis access over hiredis 0.14.
 *
 * Threads: a `store` (one synchronous redisContext) is created, used and freed
 * by one thread. The script table (name -> SHA1, source) is process-wide and
 * guarded by store_mu; SHAs are learned from SCRIPT LOAD, so the same embedded
 * bytes give the same SHA on every connection. The subscriber (store_sub) lives
 * on the main thread's event_base only.
 *
 * Failure model: an I/O error or timeout marks the store broken and is reported
 * to the caller, who decides on backoff and calls store_reconnect. A command
 * that timed out may have run on the server; callers treat the outcome as
 * unknown (the queue scripts are built so that a retry is safe under a lease). */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <hiredis/hiredis.h>
#include <hiredis/async.h>
#include <hiredis/adapters/libevent.h>
#include <event2/event.h>
#include "embed.h"
#include "log.h"
#include "store.h"

struct store {
    redisContext *c;
    char url[1024];
    char shown[600];    /* the URL without its password, for messages and logs */
    double timeout_s;
    int broken;
};

/* --- URLs --------------------------------------------------------------- */

static void url_decode(char *s) {
    char *o = s;
    for (; *s; s++) {
        if (*s == '%' && s[1] && s[2]) {
            char hex[3] = {s[1], s[2], 0};
            *o++ = (char)strtol(hex, NULL, 16);
            s += 2;
        } else *o++ = *s;
    }
    *o = 0;
}

/* The end of a URL's userinfo: its last '@' before the query or fragment
 * (a password may hold an unencoded '@' or '/'), or NULL without one.
 * auth: the first byte after "scheme://". */
static const char *store_userinfo_end(const char *auth) {
    const char *stop = auth + strcspn(auth, "?#"), *at = NULL;
    for (const char *c = auth; c < stop; c++) if (*c == '@') at = c;
    return at;
}

size_t store_redact_url(const char *url, char *out, size_t outlen) {
    size_t o = 0;
#define PUT(ch) do { if (o + 1 < outlen) out[o] = (ch); o++; } while (0)
    const char *auth = strstr(url, "://"), *at = NULL;
    if (auth && auth + 3 <= url + strcspn(url, "?#")) {
        auth += 3;
        at = store_userinfo_end(auth);
    } else auth = NULL;
    for (const char *c = url; *c; ) {
        if (auth && at && c == auth) {         /* the whole userinfo */
            PUT('*'); PUT('*'); PUT('*');
            c = at;
            continue;
        }
        if ((*c == '?' || *c == '&') && strncmp(c + 1, "password=", 9) == 0) {
            for (int k = 0; k < 10; k++) PUT(c[k]);
            PUT('*'); PUT('*'); PUT('*');
            c += 10;
            while (*c && *c != '&' && *c != '#') c++;
            continue;
        }
        PUT(*c);
        c++;
    }
    if (outlen) out[o < outlen ? o : outlen - 1] = 0;
#undef PUT
    return o;
}

static void store_bad_url(const char *url, char *err, size_t errlen) {
    char shown[600]; /* never echo a password */
    store_redact_url(url, shown, sizeof shown);
    snprintf(err, errlen, "bad Redis URL '%s' (want redis://[[user]:password@]host[:port][/db], "
             "redis+sentinel://[[user]:password@]host[:port][,host[:port]...]/MASTER[/db] or unix:///path[?db=N])",
             shown);
}

/* The rest of a redis+sentinel:// URL after its userinfo:
 * "h1[:p1][,h2[:p2]...]/MASTER[/db]" (port 26379 by default, an empty list
 * is 127.0.0.1). Fills u->sentinels ("host:port,..."), u->master, u->db. */
static int store_parse_sentinel(const char *p, struct store_url *u) {
    const char *slash = strchr(p, '/');
    if (!slash) return -1;
    size_t o = 0;
    for (const char *h = p; h < slash || (h == p && h == slash); ) {
        const char *end = memchr(h, ',', (size_t)(slash - h));
        if (!end) end = slash;
        const char *colon = memchr(h, ':', (size_t)(end - h));
        size_t hl = (size_t)((colon ? colon : end) - h);
        long port = 26379;
        if (colon) {
            char *e;
            port = strtol(colon + 1, &e, 10);
            if (e != end || port <= 0 || port > 65535) return -1;
        }
        int w = snprintf(u->sentinels + o, sizeof u->sentinels - o, "%s%.*s:%ld", o ? "," : "",
                         (int)hl, hl ? h : "127.0.0.1", port);
        if (w < 0 || (size_t)w >= sizeof u->sentinels - o) return -1;
        o += (size_t)w;
        if (end == slash) break;
        h = end + 1;
    }
    const char *name = slash + 1, *next = strchr(name, '/');
    size_t nl = next ? (size_t)(next - name) : strlen(name);
    if (nl == 0 || nl >= sizeof u->master) return -1;
    memcpy(u->master, name, nl);
    if (next && next[1]) {
        char *end;
        long db = strtol(next + 1, &end, 10);
        if (*end || next[1] < '0' || next[1] > '9' || db > 1000000) return -1;
        u->db = (int)db;
    }
    return 0;
}

int store_parse_url(const char *url, struct store_url *u, char *err, size_t errlen) {
    memset(u, 0, sizeof *u);
    u->port = 6379;
    if (strncmp(url, "unix://", 7) == 0) {
        const char *p = url + 7, *q = strchr(p, '?');
        size_t n = q ? (size_t)(q - p) : strlen(p);
        if (n == 0 || n >= sizeof u->path) goto bad;
        memcpy(u->path, p, n);
        for (; q && *q; ) {
            q++;
            if (strncmp(q, "db=", 3) == 0) {
                /* digits only, up to '&' or the end (atoi took "-3" and "x") */
                char *end;
                long db = strtol(q + 3, &end, 10);
                if (q[3] < '0' || q[3] > '9' || (*end && *end != '&') || db > 1000000) goto bad;
                u->db = (int)db;
            }
            else if (strncmp(q, "password=", 9) == 0) {
                const char *e = strchr(q, '&');
                size_t m = e ? (size_t)(e - q - 9) : strlen(q + 9);
                if (m >= sizeof u->password) goto bad;
                memcpy(u->password, q + 9, m);
                url_decode(u->password);
            } else if (strncmp(q, "user=", 5) == 0) {
                const char *e = strchr(q, '&');
                size_t m = e ? (size_t)(e - q - 5) : strlen(q + 5);
                if (m >= sizeof u->user) goto bad;
                memcpy(u->user, q + 5, m);
                url_decode(u->user);
            } else goto bad;
            q = strchr(q, '&');
        }
        return 0;
    }
    int sentinel = strncmp(url, "redis+sentinel://", 17) == 0;
    if (!sentinel && strncmp(url, "redis://", 8) != 0) goto bad;
    const char *p = url + (sentinel ? 17 : 8), *at = store_userinfo_end(p), *slash;
    if (at) {
        /* user:password (an ACL user), :password, or password alone */
        const char *colon = memchr(p, ':', (size_t)(at - p));
        const char *pw = colon ? colon + 1 : p;
        size_t m = (size_t)(at - pw);
        if (m >= sizeof u->password) goto bad;
        memcpy(u->password, pw, m);
        url_decode(u->password);
        if (colon) {
            size_t un = (size_t)(colon - p);
            if (un >= sizeof u->user) goto bad;
            memcpy(u->user, p, un);
            url_decode(u->user);
        }
        p = at + 1;
    }
    if (sentinel) return store_parse_sentinel(p, u) < 0 ? (store_bad_url(url, err, errlen), -1) : 0;
    slash = strchr(p, '/');
    size_t hl = slash ? (size_t)(slash - p) : strlen(p);
    const char *colon = memchr(p, ':', hl);
    if (colon) {
        char *end;
        long port = strtol(colon + 1, &end, 10);
        if (end != p + hl || port <= 0 || port > 65535) goto bad;
        u->port = (int)port;
        hl = (size_t)(colon - p);
    }
    if (hl >= sizeof u->host) goto bad;
    memcpy(u->host, p, hl);
    if (hl == 0) strcpy(u->host, "127.0.0.1");
    if (slash && slash[1]) {
        char *end;
        long db = strtol(slash + 1, &end, 10);
        if (*end || slash[1] < '0' || slash[1] > '9' || db > 1000000) goto bad;
        u->db = (int)db;
    }
    return 0;
bad:
    store_bad_url(url, err, errlen);
    return -1;
}

/* --- connections -------------------------------------------------------- */

static struct timeval store_tv(double s) {
    struct timeval tv = {(time_t)s, (suseconds_t)((s - (double)(time_t)s) * 1e6)};
    return tv;
}

/* Asks the sentinels of u (in order, the first that answers) where u's
 * master is, into u->host and u->port. Blocks up to timeout_s per sentinel
 * (at most 2 s each). Any thread (a context of its own per call). */
static int store_resolve_master(struct store_url *u, double timeout_s, char *err, size_t errlen) {
    char list[sizeof u->sentinels], last[200] = "no sentinel listed";
    snprintf(list, sizeof list, "%s", u->sentinels);
    struct timeval tv = store_tv(timeout_s < 2 ? timeout_s : 2);
    for (char *save = NULL, *hp = strtok_r(list, ",", &save); hp; hp = strtok_r(NULL, ",", &save)) {
        char *colon = strrchr(hp, ':');
        *colon = 0;
        redisContext *c = redisConnectWithTimeout(hp, atoi(colon + 1), tv);
        if (!c || c->err) {
            snprintf(last, sizeof last, "%s:%s: %s", hp, colon + 1, c ? c->errstr : "out of memory");
            if (c) redisFree(c);
            continue;
        }
        redisSetTimeout(c, tv);
        redisReply *r = redisCommand(c, "SENTINEL get-master-addr-by-name %s", u->master);
        if (r && r->type == REDIS_REPLY_ARRAY && r->elements == 2 && r->element[0]->type == REDIS_REPLY_STRING &&
            r->element[1]->type == REDIS_REPLY_STRING && r->element[0]->len < sizeof u->host) {
            snprintf(u->host, sizeof u->host, "%s", r->element[0]->str);
            u->port = atoi(r->element[1]->str);
            freeReplyObject(r);
            redisFree(c);
            return 0;
        }
        snprintf(last, sizeof last, "%s:%s: %s", hp, colon + 1,
                 !r ? c->errstr : r->type == REDIS_REPLY_ERROR ? r->str : "does not know that master");
        if (r) freeReplyObject(r);
        redisFree(c);
    }
    snprintf(err, errlen, "no Sentinel told where master '%s' is (%s)", u->master, last);
    return -1;
}

/* Connects s->c from s->url; on failure leaves s->c NULL and fills err.
 * A redis+sentinel:// URL is resolved again at every (re)connection, so a
 * connection made after a failover goes to the new master. */
static int store_connect(store *s, char *err, size_t errlen) {
    struct store_url u;
    if (store_parse_url(s->url, &u, err, errlen) < 0) return -1;
    if (u.master[0] && store_resolve_master(&u, s->timeout_s, err, errlen) < 0) return -1;
    if (u.path[0]) snprintf(s->shown, sizeof s->shown, "unix://%s", u.path);
    else if (u.master[0]) snprintf(s->shown, sizeof s->shown, "%s:%d (master '%s')", u.host, u.port, u.master);
    else snprintf(s->shown, sizeof s->shown, "%s:%d", u.host, u.port);
    struct timeval tv = store_tv(s->timeout_s);
    redisContext *c = u.path[0] ? redisConnectUnixWithTimeout(u.path, tv)
                                : redisConnectWithTimeout(u.host, u.port, tv);
    if (!c || c->err) {
        snprintf(err, errlen, "cannot connect to Redis at %s: %s", s->shown, c ? c->errstr : "out of memory");
        if (c) redisFree(c);
        return -1;
    }
    redisSetTimeout(c, tv);
    redisReply *r = NULL;
    if (u.user[0]) {
        r = redisCommand(c, "AUTH %s %s", u.user, u.password);
        if (!r || r->type == REDIS_REPLY_ERROR) goto fail;
        freeReplyObject(r);
    } else if (u.password[0]) {
        r = redisCommand(c, "AUTH %s", u.password);
        if (!r || r->type == REDIS_REPLY_ERROR) goto fail;
        freeReplyObject(r);
    }
    if (u.db) {
        r = redisCommand(c, "SELECT %d", u.db);
        if (!r || r->type == REDIS_REPLY_ERROR) goto fail;
        freeReplyObject(r);
    }
    if (u.master[0]) {
        /* mid-failover a sentinel may still name a demoted master */
        r = redisCommand(c, "ROLE");
        if (!r || r->type != REDIS_REPLY_ARRAY || r->elements < 1 || r->element[0]->type != REDIS_REPLY_STRING ||
            strcmp(r->element[0]->str, "master") != 0) {
            snprintf(err, errlen, "Redis at %s is not a master yet (a failover in progress?)", s->shown);
            if (r) freeReplyObject(r);
            redisFree(c);
            return -1;
        }
        freeReplyObject(r);
    }
    s->c = c;
    s->broken = 0;
    return 0;
fail:
    snprintf(err, errlen, "Redis at %s refused set-up: %s", s->shown, r ? r->str : c->errstr);
    if (r) freeReplyObject(r);
    redisFree(c);
    return -1;
}

store *store_open(const char *url, double timeout_s, char *err, size_t errlen) {
    store *s = calloc(1, sizeof *s);
    if (!s) { snprintf(err, errlen, "out of memory"); return NULL; }
    snprintf(s->url, sizeof s->url, "%s", url);
    s->timeout_s = timeout_s > 0 ? timeout_s : 10;
    if (store_connect(s, err, errlen) < 0) { free(s); return NULL; }
    return s;
}

void store_close(store *s) {
    if (!s) return;
    if (s->c) redisFree(s->c);
    free(s);
}

int store_reconnect(store *s, char *err, size_t errlen) {
    if (s->c) redisFree(s->c);
    s->c = NULL;
    s->broken = 1;
    return store_connect(s, err, errlen);
}

int store_broken(const store *s) { return s->broken || !s->c; }

void store_bound_io(store *s, double seconds) {
    double t = seconds > 0 && seconds < s->timeout_s ? seconds : s->timeout_s;
    if (s->c) redisSetTimeout(s->c, store_tv(t));
}

/* --- scripts ------------------------------------------------------------ */

#define STORE_MAX_SCRIPTS 64
static pthread_mutex_t store_mu = PTHREAD_MUTEX_INITIALIZER;
/* src: the embedded text, or (owned) a copy given to store_script_define */
static struct { char name[64]; char sha[41]; char *src; size_t len; int owned; } store_scripts[STORE_MAX_SCRIPTS];
static int store_nscripts;

/* Finds or creates the table entry of a script (caller holds store_mu). In
 * development mode (LUAKIQ_SCRIPTS set) the table holds what luakiq.include
 * defined from the tree at start (store_script_define) and nothing else: a
 * script missing there is unknown, never the embedded copy. */
static int store_script_slot(const char *name) {
    for (int i = 0; i < store_nscripts; i++)
        if (strcmp(store_scripts[i].name, name) == 0) return i;
    const char *dir = getenv("LUAKIQ_SCRIPTS");
    if (dir && *dir) return -1;
    const struct embed_file *e = embed_find(EMBED_REDIS_SCRIPT, name);
    if (!e || store_nscripts == STORE_MAX_SCRIPTS || strlen(name) >= sizeof store_scripts[0].name) return -1;
    int i = store_nscripts++;
    snprintf(store_scripts[i].name, sizeof store_scripts[i].name, "%s", name);
    store_scripts[i].src = (char *)e->bytes;
    store_scripts[i].len = e->len;
    store_scripts[i].sha[0] = 0;
    return i;
}

int store_script_define(const char *name, const char *src, size_t len) {
    char *copy = malloc(len + 1);
    if (!copy) return -1;
    memcpy(copy, src, len);
    copy[len] = 0;
    pthread_mutex_lock(&store_mu);
    int i = 0;
    while (i < store_nscripts && strcmp(store_scripts[i].name, name) != 0) i++;
    if (i == store_nscripts) {
        if (i == STORE_MAX_SCRIPTS || strlen(name) >= sizeof store_scripts[0].name) {
            pthread_mutex_unlock(&store_mu);
            free(copy);
            return -1;
        }
        store_nscripts++;
        snprintf(store_scripts[i].name, sizeof store_scripts[i].name, "%s", name);
    } else if (store_scripts[i].owned) {
        free(store_scripts[i].src);
    }
    store_scripts[i].src = copy;
    store_scripts[i].len = len;
    store_scripts[i].owned = 1;
    store_scripts[i].sha[0] = 0;
    pthread_mutex_unlock(&store_mu);
    return 0;
}

const char *store_script_source(const char *name, size_t *len) {
    pthread_mutex_lock(&store_mu);
    int i = store_script_slot(name);
    const char *src = i < 0 ? NULL : store_scripts[i].src;
    if (i >= 0 && len) *len = store_scripts[i].len;
    pthread_mutex_unlock(&store_mu);
    return src;
}

/* SCRIPT LOADs a script on this connection and records its SHA. 0 on success. */
static int store_load_script(store *s, const char *name, char *sha, char *err, size_t errlen) {
    size_t len;
    const char *src = store_script_source(name, &len);
    if (!src) { snprintf(err, errlen, "unknown Redis script '%s'", name); return -1; }
    const char *argv[] = {"SCRIPT", "LOAD", src};
    size_t lens[] = {6, 4, len};
    redisReply *r = redisCommandArgv(s->c, 3, argv, lens);
    if (!r) { s->broken = 1; snprintf(err, errlen, "Redis I/O error: %s", s->c->errstr); return -1; }
    if (r->type != REDIS_REPLY_STRING || r->len != 40) {
        snprintf(err, errlen, "SCRIPT LOAD %s failed: %s", name, r->type == REDIS_REPLY_ERROR ? r->str : "bad reply");
        freeReplyObject(r);
        return -1;
    }
    pthread_mutex_lock(&store_mu);
    int i = store_script_slot(name);
    memcpy(store_scripts[i].sha, r->str, 41);
    memcpy(sha, r->str, 41);
    pthread_mutex_unlock(&store_mu);
    freeReplyObject(r);
    return 0;
}

/* The SHA of a script, loading it when this process has not yet. */
static int store_script_sha(store *s, const char *name, char *sha, char *err, size_t errlen) {
    pthread_mutex_lock(&store_mu);
    int i = store_script_slot(name);
    int known = i >= 0 && store_scripts[i].sha[0];
    if (known) memcpy(sha, store_scripts[i].sha, 41);
    pthread_mutex_unlock(&store_mu);
    if (i < 0) { snprintf(err, errlen, "unknown Redis script '%s'", name); return -1; }
    return known ? 0 : store_load_script(s, name, sha, err, errlen);
}

/* Appends one command (plain or EVALSHA) to the connection's output buffer. */
static int store_append(store *s, const struct store_cmd *cmd, const char *sha) {
    if (!cmd->script) return redisAppendCommandArgv(s->c, cmd->argc, cmd->argv, cmd->lens);
    int n = cmd->argc + 3;
    const char *stackv[32];
    size_t stackl[32];
    const char **argv = n <= 32 ? stackv : malloc(sizeof *argv * (size_t)n);
    size_t *lens = n <= 32 ? stackl : malloc(sizeof *lens * (size_t)n);
    if (!argv || !lens) {
        if (argv != stackv) free(argv);
        if (lens != stackl) free(lens);
        return REDIS_ERR;
    }
    char nk[16];
    snprintf(nk, sizeof nk, "%d", cmd->numkeys);
    argv[0] = "EVALSHA"; lens[0] = 7;
    argv[1] = sha; lens[1] = 40;
    argv[2] = nk; lens[2] = strlen(nk);
    memcpy(argv + 3, cmd->argv, sizeof *argv * (size_t)cmd->argc);
    memcpy(lens + 3, cmd->lens, sizeof *lens * (size_t)cmd->argc);
    int rc = redisAppendCommandArgv(s->c, n, argv, lens);
    if (argv != stackv) free(argv);
    if (lens != stackl) free(lens);
    return rc;
}

/* Writes the output buffer out once it holds STORE_FLUSH_AT bytes, so that
 * Redis starts on the first commands of a big pipeline (an enqueue of many
 * shard groups) while this thread formats the next ones. Blocking socket:
 * returns when all is written. Caller's thread. */
#define STORE_FLUSH_AT (256 * 1024)
static int store_flush_big(store *s) {
    if (sdslen(s->c->obuf) < STORE_FLUSH_AT) return REDIS_OK;
    int done = 0;
    do {
        if (redisBufferWrite(s->c, &done) != REDIS_OK) return REDIS_ERR;
    } while (!done);
    return REDIS_OK;
}

static int store_is_noscript(const redisReply *r) {
    return r->type == REDIS_REPLY_ERROR && strncmp(r->str, "NOSCRIPT", 8) == 0;
}

/* The one round trip: every command of cmds sent at once, scripts by
 * EVALSHA; the replies read in order. A NOSCRIPT (Redis restarted or
 * flushed its scripts) reloads the scripts and resends only those commands,
 * so a caller never sees it. */
int store_pipeline(store *s, int n, const struct store_cmd *cmds, store_reply **out, char *err, size_t errlen) {
    char sha[41];
    if (store_broken(s)) { snprintf(err, errlen, "Redis connection is down"); return -1; }
    /* Every script this process has not loaded yet is loaded first, before
     * anything is appended: a SCRIPT LOAD is a round trip of its own, and
     * one sent behind appended commands would read their replies. */
    for (int i = 0; i < n; i++)
        if (cmds[i].script && store_script_sha(s, cmds[i].script, sha, err, errlen) < 0) return -1;
    for (int i = 0; i < n; i++) {
        if (cmds[i].script && store_script_sha(s, cmds[i].script, sha, err, errlen) < 0) return -1;
        if (store_append(s, &cmds[i], sha) != REDIS_OK || store_flush_big(s) != REDIS_OK) goto io;
    }
    int got = 0;
    for (; got < n; got++) {
        void *r = NULL;
        if (redisGetReply(s->c, &r) != REDIS_OK || !r) { for (int j = 0; j < got; j++) freeReplyObject(out[j]); goto io; }
        out[got] = r;
    }
    /* A master demoted under us (a Sentinel failover) answers writes with
     * READONLY: the connection must be made again, to the new master. */
    for (int i = 0; i < n; i++) {
        const redisReply *r = (const redisReply *)out[i];
        if (r->type == REDIS_REPLY_ERROR && strncmp(r->str, "READONLY", 8) == 0) s->broken = 1;
    }
    /* A script flushed from Redis (restart, SCRIPT FLUSH) did not run: load it
     * and send that one command again, in order. */
    for (int i = 0; i < n; i++) {
        redisReply *r = (redisReply *)out[i];
        if (!cmds[i].script || !store_is_noscript(r)) continue;
        freeReplyObject(r);
        out[i] = NULL;
        void *again = NULL;
        if (store_load_script(s, cmds[i].script, sha, err, errlen) < 0 ||
            store_append(s, &cmds[i], sha) != REDIS_OK || redisGetReply(s->c, &again) != REDIS_OK || !again) {
            for (int j = 0; j < n; j++) if (out[j]) freeReplyObject(out[j]);
            if (!s->broken && s->c->err) goto io;
            s->broken = s->broken || s->c->err;
            return -1;
        }
        out[i] = again;
    }
    return 0;
io:
    s->broken = 1;
    snprintf(err, errlen, "Redis I/O error at %s: %s", s->shown, s->c->errstr[0] ? s->c->errstr : strerror(errno));
    return -1;
}

/* --- replies ------------------------------------------------------------ */

void store_reply_free(store_reply *r) { if (r) freeReplyObject(r); }

int store_reply_type(const store_reply *p) {
    const redisReply *r = (const redisReply *)p;
    switch (r->type) {
    case REDIS_REPLY_STRING: return STORE_STRING;
    case REDIS_REPLY_ARRAY: return STORE_ARRAY;
    case REDIS_REPLY_INTEGER: return STORE_INTEGER;
    case REDIS_REPLY_STATUS: return STORE_STATUS;
    case REDIS_REPLY_ERROR: return STORE_ERROR;
    default: return STORE_NIL;
    }
}
const char *store_reply_str(const store_reply *p, size_t *len) {
    const redisReply *r = (const redisReply *)p;
    *len = r->len;
    return r->str;
}
long long store_reply_int(const store_reply *p) { return ((const redisReply *)p)->integer; }
size_t store_reply_count(const store_reply *p) { return ((const redisReply *)p)->elements; }
const store_reply *store_reply_elem(const store_reply *p, size_t i) {
    return (const store_reply *)((const redisReply *)p)->element[i];
}

/* --- subscriber (main thread) ------------------------------------------- */

struct store_sub {
    struct event_base *base;
    redisAsyncContext *ac;
    struct event *retry;
    char url[1024], channel[256];
    store_message_cb cb;
    void *arg;
    int down_logged;
};

static void store_sub_connect(struct store_sub *sub);

static void store_sub_on_message(redisAsyncContext *ac, void *reply, void *priv) {
    (void)ac;
    struct store_sub *sub = priv;
    redisReply *r = reply;
    if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 3) return;
    if (r->element[0]->type == REDIS_REPLY_STRING && strcmp(r->element[0]->str, "message") == 0 &&
        r->element[2]->type == REDIS_REPLY_STRING)
        sub->cb(r->element[2]->str, r->element[2]->len, sub->arg);
    else if (strcmp(r->element[0]->str, "subscribe") == 0 && sub->down_logged) {
        log_fmt(LOG_INFO, "wake-up subscriber connected again");
        sub->down_logged = 0;
        sub->cb(NULL, 0, sub->arg); /* (re)subscribed: wake everyone, pushes may have been missed */
    }
}

static void store_sub_lost(struct store_sub *sub, const char *why) {
    sub->ac = NULL;
    if (!sub->down_logged) log_fmt(LOG_WARN, "wake-up subscriber lost Redis (%s); retrying every second", why);
    sub->down_logged = 1;
    struct timeval tv = {1, 0};
    evtimer_add(sub->retry, &tv);
}

static void store_sub_on_connect(const redisAsyncContext *ac, int status) {
    struct store_sub *sub = ac->data;
    if (status != REDIS_OK) store_sub_lost(sub, ac->errstr);
}

static void store_sub_on_disconnect(const redisAsyncContext *ac, int status) {
    struct store_sub *sub = ac->data;
    (void)status;
    if (sub) store_sub_lost(sub, ac->errstr[0] ? ac->errstr : "disconnected");
}

static void store_sub_retry(evutil_socket_t fd, short what, void *arg) {
    (void)fd; (void)what;
    store_sub_connect(arg);
}

static void store_sub_connect(struct store_sub *sub) {
    struct store_url u;
    char err[256];
    if (store_parse_url(sub->url, &u, err, sizeof err) < 0) return;
    if (u.master[0] && store_resolve_master(&u, 1, err, sizeof err) < 0) {
        store_sub_lost(sub, err);
        return;
    }
    redisAsyncContext *ac = u.path[0] ? redisAsyncConnectUnix(u.path) : redisAsyncConnect(u.host, u.port);
    if (!ac || ac->err) {
        if (ac) redisAsyncFree(ac);
        store_sub_lost(sub, "connect failed");
        return;
    }
    ac->data = sub;
    sub->ac = ac;
    redisLibeventAttach(ac, sub->base);
    redisAsyncSetConnectCallback(ac, store_sub_on_connect);
    redisAsyncSetDisconnectCallback(ac, store_sub_on_disconnect);
    if (u.user[0]) redisAsyncCommand(ac, NULL, NULL, "AUTH %s %s", u.user, u.password);
    else if (u.password[0]) redisAsyncCommand(ac, NULL, NULL, "AUTH %s", u.password);
    redisAsyncCommand(ac, store_sub_on_message, sub, "SUBSCRIBE %s", sub->channel);
}

struct store_sub *store_subscribe(struct event_base *base, const char *url, const char *channel,
                                  store_message_cb cb, void *arg, char *err, size_t errlen) {
    struct store_url u;
    if (store_parse_url(url, &u, err, errlen) < 0) return NULL;
    struct store_sub *sub = calloc(1, sizeof *sub);
    if (!sub) return NULL;
    sub->base = base;
    snprintf(sub->url, sizeof sub->url, "%s", url);
    snprintf(sub->channel, sizeof sub->channel, "%s", channel);
    sub->cb = cb;
    sub->arg = arg;
    sub->retry = evtimer_new(base, store_sub_retry, sub);
    store_sub_connect(sub);
    return sub;
}

void store_sub_free(struct store_sub *sub) {
    if (!sub) return;
    if (sub->ac) {
        sub->ac->data = NULL;
        redisAsyncFree(sub->ac);
    }
    event_free(sub->retry);
    free(sub);
}
