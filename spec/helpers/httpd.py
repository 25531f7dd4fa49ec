#!/usr/bin/env python3
"""A small real HTTP/1.1 server for the luakiq.http specs and the benchmark.

    python3 httpd.py PORTFILE [--tls CERT KEY] [--delay-ms N]

Binds 127.0.0.1 on a free port (the kernel's choice, so no race with other
tests), writes the port to PORTFILE, and serves until killed. Keep-alive
(HTTP/1.1, every response has a Content-Length); one thread per connection.

Routes (any method):
  /echo              200, JSON {method, path, headers (lower-case), body}
  /status/N          status N, body "status N" (Retry-After: 2 on 429/503)
  /delay/MS          sleeps MS ms, then 200 "ok"
  /hang              never answers (the connection stays open)
  /big/N             200 with N bytes of "x" (Content-Length N)
  /chunked/N         200 with N bytes of "x", chunked (no Content-Length)
  /redirect          302 to /echo
  /conn              200, body = the client's port (same port: connection reused)
  /multi             200 with X-Multi sent twice and Set-Cookie twice
  /job/ID            sleeps --delay-ms (default 0), then 200; records ID (in
                     the order requests arrive, over all connections)
  /jobs              JSON array of the recorded IDs; /count[/PREFIX]: how many;
                     /times: [[ID, Unix time it arrived], ...]
  /hook/MODE         a webhook receiver: records {mode, method, headers, body,
                     time} and answers by MODE: a number N (status N, body
                     "status N"; Retry-After: 2 on 429/503), "flaky" (500 the
                     first time a body is seen, then 200), "later" (429 with
                     Retry-After: 1 the first time, then 200, per body),
                     "slow" (sleeps 5 s, then 200), "after" (503 with
                     Retry-After: the rest of the path, URL-decoded:
                     /hook/after/1e23), "callback" (202, then,
                     /hook/callback/MS ms later, a POST to each job's
                     reply_url: {"status": "failed", "error": E,
                     "retryable": false} when a payload is {"fail": E},
                     else {"status": "succeeded"})
  /hooks             JSON array of the recorded deliveries
  /callbacks         JSON array of the callbacks made: {id, reply_url, body,
                     status, answer} (the reply URL's status and answer)
  /reset             forgets the recorded IDs and deliveries
"""
import json
import socketserver
import ssl
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

DELAY_MS = 0
JOBS = []
TIMES = []
JOBS_LOCK = threading.Lock()
HOOKS = []
SEEN = set()
CALLBACKS = []


def call_back(jobs, delay_ms):
    """Webhook callback mode's receiver: after delay_ms, POSTs each job's
    result to its reply_url, recording what the reply URL answered."""
    time.sleep(delay_ms / 1000.0)
    for job in jobs:
        fail = [p["fail"] for p in job["payloads"] if isinstance(p, dict) and "fail" in p]
        reply = {"status": "failed", "error": fail[0], "retryable": False} if fail else {"status": "succeeded"}
        body = json.dumps(reply).encode()
        req = urllib.request.Request(job["reply_url"], data=body, method="POST",
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=10) as res:
                status, answer = res.status, res.read().decode()
        except urllib.error.HTTPError as e:
            status, answer = e.code, e.read().decode()
        except OSError as e:
            status, answer = 0, str(e)
        with JOBS_LOCK:
            CALLBACKS.append({"id": job["id"], "reply_url": job["reply_url"], "body": body.decode(),
                              "status": status, "answer": answer})


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # headers and body go out in separate writes: without TCP_NODELAY the
    # body waits for the client's delayed ACK (40 ms per keep-alive request)
    disable_nagle_algorithm = True

    def log_message(self, *args):
        pass

    def reply(self, status, body=b"", headers=()):
        if isinstance(body, str):
            body = body.encode()
        self.send_response(status)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def handle_any(self):
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n) if n else b""
        parts = self.path.split("?")[0].strip("/").split("/")
        route = parts[0]
        arg = parts[1] if len(parts) > 1 else ""
        if route == "echo":
            self.reply(200, json.dumps({
                "method": self.command, "path": self.path,
                "headers": {k.lower(): v for k, v in self.headers.items()},
                "body": body.decode("utf-8", "replace"),
            }), [("Content-Type", "application/json")])
        elif route == "status":
            code = int(arg)
            extra = [("Retry-After", "2")] if code in (429, 503) else []
            self.reply(code, "status %d" % code, extra)
        elif route == "delay":
            time.sleep(int(arg) / 1000.0)
            self.reply(200, "ok")
        elif route == "hang":
            time.sleep(3600)
        elif route == "big":
            self.reply(200, b"x" * int(arg))
        elif route == "chunked":
            self.send_response(200)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            left = int(arg)
            while left > 0:
                k = min(left, 65536)
                self.wfile.write(b"%x\r\n" % k + b"x" * k + b"\r\n")
                left -= k
            self.wfile.write(b"0\r\n\r\n")
        elif route == "redirect":
            self.reply(302, "", [("Location", "/echo")])
        elif route == "conn":
            self.reply(200, str(self.client_address[1]))
        elif route == "multi":
            self.reply(200, "multi", [("X-Multi", "a"), ("X-Multi", "b"),
                                      ("Set-Cookie", "x=1"), ("Set-Cookie", "y=2")])
        elif route == "job":
            with JOBS_LOCK:
                JOBS.append(arg)
                TIMES.append(time.time())
            if DELAY_MS:
                time.sleep(DELAY_MS / 1000.0)
            self.reply(200, "ok")
        elif route == "hook":
            hdrs = {k.lower(): v for k, v in self.headers.items()}
            with JOBS_LOCK:
                HOOKS.append({"mode": arg, "method": self.command, "headers": hdrs,
                              "body": body.decode("utf-8", "replace"), "time": time.time()})
                key = (arg, body)
                first = key not in SEEN
                SEEN.add(key)
            if arg.isdigit():
                code = int(arg)
                extra = [("Retry-After", "2")] if code in (429, 503) else []
                self.reply(code, "status %d" % code, extra)
            elif arg == "flaky":
                self.reply(500 if first else 200, "flaky" if first else "ok")
            elif arg == "later":
                if first:
                    self.reply(429, "later", [("Retry-After", "1")])
                else:
                    self.reply(200, "ok")
            elif arg == "after":
                self.reply(503, "after", [("Retry-After", urllib.parse.unquote("/".join(parts[2:])))])
            elif arg == "slow":
                time.sleep(5)
                self.reply(200, "ok")
            elif arg == "callback":
                self.reply(202, "accepted")
                delay = int(parts[2]) if len(parts) > 2 else 0
                threading.Thread(target=call_back, args=(json.loads(body)["jobs"], delay), daemon=True).start()
            else:
                self.reply(404, "no hook mode " + arg)
        elif route == "hooks":
            with JOBS_LOCK:
                self.reply(200, json.dumps(HOOKS), [("Content-Type", "application/json")])
        elif route == "callbacks":
            with JOBS_LOCK:
                self.reply(200, json.dumps(CALLBACKS), [("Content-Type", "application/json")])
        elif route == "jobs":
            with JOBS_LOCK:
                self.reply(200, json.dumps(JOBS))
        elif route == "times":
            with JOBS_LOCK:
                self.reply(200, json.dumps(list(zip(JOBS, TIMES))))
        elif route == "count":
            # /count or /count/PREFIX: recorded IDs (starting with PREFIX)
            with JOBS_LOCK:
                self.reply(200, str(sum(1 for j in JOBS if j.startswith(arg))))
        elif route == "reset":
            with JOBS_LOCK:
                del JOBS[:]
                del TIMES[:]
                del HOOKS[:]
                del CALLBACKS[:]
                SEEN.clear()
            self.reply(200, "ok")
        else:
            self.reply(404, "no route " + route)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = handle_any


class Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024


def main():
    global DELAY_MS
    args = sys.argv[1:]
    portfile = args.pop(0)
    tls = None
    while args:
        a = args.pop(0)
        if a == "--tls":
            tls = (args.pop(0), args.pop(0))
        elif a == "--delay-ms":
            DELAY_MS = int(args.pop(0))
    srv = Server(("127.0.0.1", 0), Handler)
    if tls:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(tls[0], tls[1])
        srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    with open(portfile + ".tmp", "w") as f:
        f.write(str(srv.server_address[1]))
    import os
    os.rename(portfile + ".tmp", portfile)
    srv.serve_forever()


if __name__ == "__main__":
    main()
