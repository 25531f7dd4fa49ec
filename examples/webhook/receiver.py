#!/usr/bin/env python3
"""A webhook receiver for examples/webhook (and its spec).

    WEBHOOK_SECRET=... python3 receiver.py PORTFILE

Listens on a free loopback port (written to PORTFILE). For every POST:
- checks X-Luakiq-Signature (t=UNIX,v1=HMAC-SHA256 of "UNIX.BODY" with
  WEBHOOK_SECRET, docs/workers.md): a bad one, or one signed more than 5
  minutes ago (a replay), gets 401 (permanent: luakiq does not retry it);
- skips a delivery it has already processed (X-Luakiq-Delivery, the same for
  every attempt of the same jobs), answering 200;
- per job: a payload with "fail_times": N gets 500 while the attempt
  (X-Luakiq-Attempt) is N or less (luakiq retries it); "reject": true gets
  400 (permanent); else the job is processed: one line "processed ID
  PAYLOADS" on stdout.
"""
import hashlib
import hmac
import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SECRET = os.environ.get("WEBHOOK_SECRET", "").encode()
LOCK = threading.Lock()
DONE = set()      # deliveries processed


def say(line):
    print(line, flush=True)


def signed(header, body, secret, tolerance=300):
    """X-Luakiq-Signature "t=UNIX,v1=HEX": the HMAC matches and t is at
    most tolerance seconds away from now (docs/workers.md)."""
    fields = dict(p.split("=", 1) for p in header.split(",") if "=" in p)
    t = fields.get("t", "")
    if not t.isdigit() or abs(time.time() - int(t)) > tolerance:
        return False  # no timestamp, or a replay of an old request
    want = hmac.new(secret, t.encode() + b"." + body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(want, fields.get("v1", ""))


class Receiver(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True

    def log_message(self, *args):
        pass

    def answer(self, status, text):
        body = text.encode()
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if not signed(self.headers.get("X-Luakiq-Signature", ""), body, SECRET):
            say("rejected: bad signature")
            return self.answer(401, "bad signature")
        delivery = self.headers.get("X-Luakiq-Delivery", "")
        attempt = int(self.headers.get("X-Luakiq-Attempt", "1"))
        call = json.loads(body)
        with LOCK:
            if delivery in DONE:
                say("duplicate delivery %s: already processed" % delivery)
                return self.answer(200, "duplicate")
            for job in call["jobs"]:
                for p in job["payloads"]:
                    if isinstance(p, dict) and p.get("reject"):
                        say("rejected %s: bad data" % job["id"])
                        return self.answer(400, "bad data in " + job["id"])
                    if isinstance(p, dict) and attempt <= p.get("fail_times", 0):
                        say("failed %s (attempt %d, delivery %s)" % (job["id"], attempt, delivery))
                        return self.answer(500, "try again")
            for job in call["jobs"]:
                say("processed %s %s (attempt %d)" % (job["id"], json.dumps(job["payloads"]), attempt))
            DONE.add(delivery)
        return self.answer(200, "ok")


def main():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    server.daemon_threads = True
    with open(sys.argv[1] + ".tmp", "w") as f:
        f.write(str(server.server_address[1]))
    os.rename(sys.argv[1] + ".tmp", sys.argv[1])
    server.serve_forever()


if __name__ == "__main__":
    main()
