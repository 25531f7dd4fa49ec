/* url.c - REDIS_URL parsing and the one redactor of credentials in URLs.
 *
 * Plain string work on the caller's buffers: no I/O, no shared state, so any
 * thread may call it (the store at every connection, the subscribers, the
 * CLI's messages through core.redact_url). Resolving a redis+sentinel://
 * URL's master asks the sentinels over the network: that is the store's
 * (store_resolve_master); here only the spec is read. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "url.h"

/* %XX escapes of a userinfo or query value, decoded in place. */
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
static const char *url_userinfo_end(const char *auth) {
    const char *stop = auth + strcspn(auth, "?#"), *at = NULL;
    for (const char *c = auth; c < stop; c++) if (*c == '@') at = c;
    return at;
}

size_t url_redact(const char *url, char *out, size_t outlen) {
    size_t o = 0;
#define PUT(ch) do { if (o + 1 < outlen) out[o] = (ch); o++; } while (0)
    const char *auth = strstr(url, "://"), *at = NULL;
    if (auth && auth + 3 <= url + strcspn(url, "?#")) {
        auth += 3;
        at = url_userinfo_end(auth);
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

/* Whether s (n bytes) is a number: digits, at least one. */
static int url_digits(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) if (s[i] < '0' || s[i] > '9') return 0;
    return n > 0;
}

/* A URL that does not parse, as its error shows it (into out, truncated to
 * outlen). url_redact reads a URL by its form, which a broken one does not
 * have, so this keeps back whatever may be a credential, whatever the
 * mistake: everything up to the last '@' after the scheme (a password may
 * hold an unencoded '?', '#', '/' or '@', and with no "://" the scheme is
 * unknown); every query parameter's value but db's, whichever separator
 * ('&', ';', '?') and case (PASSWORD=), and a parameter without '=' whole;
 * a fragment; and the port of an authority with no host (redis://:password,
 * its "@host" forgotten). */
static void url_shown(const char *url, char *out, size_t outlen) {
    size_t o = 0;
#define PUT(ch) do { if (o + 1 < outlen) out[o] = (ch); o++; } while (0)
#define PUTS(s) do { for (const char *k_ = (s); *k_; k_++) PUT(*k_); } while (0)
    const char *sep = strstr(url, "://"), *c = url;
    const char *start = sep ? sep + 3 : url, *at = strrchr(start, '@');
    for (; c < start; c++) PUT(*c);
    if (at) {
        PUTS("***@");
        c = at + 1;
    } else if (*c == ':') {
        size_t n = strcspn(c + 1, "/?#");
        PUT(':');
        if (url_digits(c + 1, n)) for (size_t i = 1; i <= n; i++) PUT(c[i]);
        else PUTS("***");
        c += n + 1;
    }
    for (; *c && *c != '?' && *c != '#'; c++) PUT(*c);
    while (*c == '?' || *c == '&' || *c == ';') {
        PUT(*c);
        c++;
        size_t n = strcspn(c, "&;?#"), name = strspn(c, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_");
        if (name == 2 && n > 2 && strncmp(c, "db=", 3) == 0) for (size_t i = 0; i < n; i++) PUT(c[i]);
        else if (name > 0 && name < n && c[name] == '=') {
            for (size_t i = 0; i <= name; i++) PUT(c[i]);
            PUTS("***");
        } else PUTS("***");
        c += n;
    }
    if (*c == '#') PUTS("#***");
    if (outlen) out[o < outlen ? o : outlen - 1] = 0;
#undef PUTS
#undef PUT
}

/* The one message of a URL that does not parse: the forms it may take. */
static void url_bad(const char *url, char *err, size_t errlen) {
    char shown[600]; /* never echo a password */
    url_shown(url, shown, sizeof shown);
    snprintf(err, errlen, "bad Redis URL '%s' (want redis://[[user]:password@]host[:port][,host[:port]...][/db], "
             "redis+sentinel://[[user]:password@]host[:port][,host[:port]...]/MASTER[/db] or unix:///path[?db=N])",
             shown);
}

/* A host list "h1[:p1][,h2[:p2]...]" ending at end (an empty list is
 * 127.0.0.1) into out as "host:port,host:port" (port defport when not
 * given). Sentinels and a cluster's seed nodes. */
static int url_parse_hosts(const char *p, const char *end, long defport, char *out, size_t outlen) {
    size_t o = 0;
    for (const char *h = p; h < end || (h == p && h == end); ) {
        const char *e = memchr(h, ',', (size_t)(end - h));
        if (!e) e = end;
        const char *colon = memchr(h, ':', (size_t)(e - h));
        size_t hl = (size_t)((colon ? colon : e) - h);
        long port = defport;
        if (colon) {
            char *pe;
            port = strtol(colon + 1, &pe, 10);
            if (pe != e || port <= 0 || port > 65535) return -1;
        }
        int w = snprintf(out + o, outlen - o, "%s%.*s:%ld", o ? "," : "", (int)hl, hl ? h : "127.0.0.1", port);
        if (w < 0 || (size_t)w >= outlen - o) return -1;
        o += (size_t)w;
        if (e == end) break;
        h = e + 1;
    }
    return 0;
}

/* (a list made by url_parse_hosts) */
int url_pick(const char *list, int n, char *host, size_t hostlen, int *port) {
    int count = 1;
    for (const char *c = list; *c; c++) count += *c == ',';
    n %= count;
    const char *h = list;
    for (int i = 0; i < n; i++) h = strchr(h, ',') + 1;
    const char *e = strchr(h, ','), *colon;
    if (!e) e = h + strlen(h);
    for (colon = e; colon > h && *colon != ':'; colon--) {}
    snprintf(host, hostlen, "%.*s", (int)(colon - h), h);
    *port = atoi(colon + 1);
    return count;
}

int url_seed(const struct url *u, int k, char *host, size_t hostlen, int *port) {
    if (u->seeds[0]) return url_pick(u->seeds, k, host, hostlen, port);
    snprintf(host, hostlen, "%s", u->host);
    *port = u->port;
    return 1;
}

/* The rest of a redis+sentinel:// URL after its userinfo:
 * "h1[:p1][,h2[:p2]...]/MASTER[/db]" (port 26379 by default, an empty list
 * is 127.0.0.1). Fills u->sentinels ("host:port,..."), u->master, u->db. */
static int url_parse_sentinel(const char *p, struct url *u) {
    const char *slash = strchr(p, '/');
    if (!slash || url_parse_hosts(p, slash, 26379, u->sentinels, sizeof u->sentinels) < 0) return -1;
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

int url_parse(const char *url, struct url *u, char *err, size_t errlen) {
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
    const char *p = url + (sentinel ? 17 : 8), *at = url_userinfo_end(p), *slash;
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
    if (sentinel) return url_parse_sentinel(p, u) < 0 ? (url_bad(url, err, errlen), -1) : 0;
    slash = strchr(p, '/');
    size_t hl = slash ? (size_t)(slash - p) : strlen(p);
    if (memchr(p, ',', hl)) {
        /* several seed nodes of a Redis Cluster: the first is host:port */
        if (url_parse_hosts(p, p + hl, 6379, u->seeds, sizeof u->seeds) < 0) goto bad;
        url_pick(u->seeds, 0, u->host, sizeof u->host, &u->port);
        hl = 0;
    }
    const char *colon = hl ? memchr(p, ':', hl) : NULL;
    if (colon) {
        char *end;
        long port = strtol(colon + 1, &end, 10);
        if (end != p + hl || port <= 0 || port > 65535) goto bad;
        u->port = (int)port;
        hl = (size_t)(colon - p);
    }
    if (hl >= sizeof u->host) goto bad;
    if (!u->seeds[0]) {
        memcpy(u->host, p, hl);
        if (hl == 0) strcpy(u->host, "127.0.0.1");
    }
    if (slash && slash[1]) {
        char *end;
        long db = strtol(slash + 1, &end, 10);
        if (*end || slash[1] < '0' || slash[1] > '9' || db > 1000000) goto bad;
        u->db = (int)db;
    }
    return 0;
bad:
    url_bad(url, err, errlen);
    return -1;
}
