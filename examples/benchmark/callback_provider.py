#!/usr/bin/env python3
"""The external service of the benchmark's callback shape (await_shape.lua).

    python3 callback_provider.py PORTFILE --delay-ms N [--senders K]

A job's perform POSTs its reply URL (the body, text) to /call: answered 202 at
once, and DELAY ms later the service POSTs {"ok": true} to that URL (luakiq's
--replies listener), as hipq's providers do. Binds 127.0.0.1 on a free port
(written to PORTFILE); keep-alive both ways: one thread per incoming
connection, K sender threads each with a connection of its own.

  /call      POST, body = reply URL: 202; the callback is due in DELAY ms
  /stats     JSON {calls, first, last, sent, ok, failed, pending}: calls taken,
             the first and last one's arrival (Unix time), callbacks sent,
             answered 200, answered otherwise or not at all, still due
  /reset     forgets everything
"""
import heapq
import http.client
import json
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

DELAY = 1.0
LOCK = threading.Condition()
DUE = []   # heap of (due time, sequence, url)
STATS = {}
SEQ = [0]


def reset():
    with LOCK:
        DUE.clear()
        STATS.update(calls=0, first=None, last=None, sent=0, ok=0, failed=0)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True

    def log_message(self, *args):
        pass

    def answer(self, status, body=b""):
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n) if n else b""
        if self.path == "/call":
            now = time.time()
            with LOCK:
                SEQ[0] += 1
                heapq.heappush(DUE, (now + DELAY, SEQ[0], body.decode()))
                STATS["calls"] += 1
                STATS["first"] = STATS["first"] or now
                STATS["last"] = now
                LOCK.notify()
            self.answer(202)
        elif self.path == "/reset":
            reset()
            self.answer(200)
        else:
            self.answer(404)

    def do_GET(self):
        if self.path == "/stats":
            with LOCK:
                s = dict(STATS, pending=len(DUE))
            self.answer(200, json.dumps(s).encode())
        else:
            self.answer(404)


def sender():
    conns = {}
    while True:
        with LOCK:
            while not DUE or DUE[0][0] > time.time():
                LOCK.wait(DUE[0][0] - time.time() if DUE else None)
            _, _, url = heapq.heappop(DUE)
        u = urllib.parse.urlsplit(url)
        ok = False
        for _ in range(2):  # a kept-alive connection the listener closed: once more
            c = conns.get(u.netloc) or http.client.HTTPConnection(u.netloc, timeout=10)
            conns[u.netloc] = c
            try:
                c.request("POST", u.path, b'{"ok":true}', {"Content-Type": "application/json"})
                r = c.getresponse()
                r.read()
                ok = r.status == 200
                break
            except (OSError, http.client.HTTPException):
                c.close()
                conns.pop(u.netloc, None)
        with LOCK:
            STATS["sent"] += 1
            STATS["ok" if ok else "failed"] += 1


def main():
    global DELAY
    args = sys.argv[1:]
    portfile = args[0]
    senders = 8
    i = 1
    while i < len(args):
        if args[i] == "--delay-ms":
            DELAY = int(args[i + 1]) / 1000.0
        elif args[i] == "--senders":
            senders = int(args[i + 1])
        i += 2
    reset()
    for _ in range(senders):
        threading.Thread(target=sender, daemon=True).start()
    ThreadingHTTPServer.daemon_threads = True
    ThreadingHTTPServer.request_queue_size = 512
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    with open(portfile + ".tmp", "w") as f:
        f.write(str(srv.server_address[1]))
    import os
    os.rename(portfile + ".tmp", portfile)
    srv.serve_forever()


if __name__ == "__main__":
    main()
