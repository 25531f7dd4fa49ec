#!/usr/bin/env python3
"""The slow provider of examples/callback: it takes a request at once (202)
and answers it later, in another message.

    REDIS_URL=... python3 provider.py PORTFILE LOG

Listens on a free loopback port (written to PORTFILE). Routes:

  POST /pay     {"id", "attempt", "reply_url", "plan"}: 202; the answer is a
                POST of {"charge": ..., "status": "paid"} to reply_url (the
                job's luakiq.await url), when the plan says:
                  ok     after a random 0.1-1.0 s
                  twice  twice, before the 202 (the job's call is still
                         running): the first is kept, the second is the
                         same bytes (a sender retrying an answer it missed)
                  late   the first request of the id: after LATE_DELAY s,
                         past the job's reply_timeout; later ones as ok
                  never  not at all
                  hold   when GET /release comes (run.sh sends it), or 20 s
  POST /ship    {"id", "key", "plan"}: 202; the answer is a message
                {"key": key, "reply": {"tracking": ...}} pushed onto the
                Redis list TOPIC (consumer.py reads it), when the plan says
                (as above; twice: the message twice, after the 202, as a
                Kafka producer that retried)
  GET /release  sends the held answers
  GET /pending  how many answers are not sent yet

One JSON line per answer on LOG: {"t", "path", "id", "attempt" or "key",
"plan", "status" (the HTTP answer of the reply URL; "pushed" for /ship),
"body"}.
"""
import json
import os
import random
import sys
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import redis

LATE_DELAY = float(os.environ.get("LATE_DELAY", "4"))
TOPIC = os.environ.get("TOPIC", "example:callback:topic")
LOCK = threading.Lock()
RELEASED = threading.Event()
SEEN = set()          # ids whose first request came (plan late)
PENDING = [0]         # answers not sent yet
RNG = random.Random(int(os.environ.get("PROVIDER_SEED", "36")))
R = redis.Redis.from_url(os.environ["REDIS_URL"])
LOG = None


def log(entry):
    entry["t"] = time.time()
    with LOCK:
        LOG.write(json.dumps(entry, sort_keys=True) + "\n")
        LOG.flush()


def post(url, body):
    """POSTs body to url: (HTTP status, answer body)."""
    req = urllib.request.Request(url, data=body, method="POST",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as res:
            return res.status, res.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def delay(job_id, plan):
    """Seconds before the answer of this request, or None (never, hold)."""
    with LOCK:
        first = job_id not in SEEN
        SEEN.add(job_id)
        if plan == "late" and first:
            return LATE_DELAY
        if plan in ("never", "hold"):
            return None
        return RNG.uniform(0.1, 1.0)


def later(seconds, plan, send):
    """Runs send() after seconds (or, plan hold, at /release), on a thread."""
    with LOCK:
        PENDING[0] += 1

    def run():
        if plan == "hold":
            RELEASED.wait(20)
        else:
            time.sleep(seconds)
        try:
            send()
        finally:
            with LOCK:
                PENDING[0] -= 1
    threading.Thread(target=run, daemon=True).start()


class Provider(BaseHTTPRequestHandler):
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

    def do_GET(self):
        if self.path == "/release":
            RELEASED.set()
            return self.answer(200, "released")
        if self.path == "/pending":
            with LOCK:
                return self.answer(200, str(PENDING[0]))
        return self.answer(404, "no route")

    def do_POST(self):
        req = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
        job_id, plan = req["id"], req["plan"]
        wait = delay(job_id, plan)
        if self.path == "/pay":
            reply = json.dumps({"charge": "ch-%s-%d" % (job_id, req["attempt"]), "status": "paid"}).encode()

            def callback():
                st, text = post(req["reply_url"], reply)
                log({"path": "/pay", "id": job_id, "attempt": req["attempt"], "plan": plan, "status": st,
                     "body": text})
            if plan == "twice":
                callback()
                callback()
            elif plan != "never":
                later(wait, plan, callback)
        elif self.path == "/ship":
            msg = json.dumps({"key": req["key"], "reply": {"tracking": "tr-" + job_id}}, sort_keys=True)

            def publish():
                R.lpush(TOPIC, msg)
                log({"path": "/ship", "id": job_id, "key": req["key"], "plan": plan, "status": "pushed"})
            if plan == "twice":
                later(0, "ok", lambda: (publish(), publish()))
            elif plan != "never":
                later(wait, plan, publish)
        else:
            return self.answer(404, "no route")
        return self.answer(202, "accepted")


def main():
    global LOG
    LOG = open(sys.argv[2], "a")
    server = ThreadingHTTPServer(("127.0.0.1", 0), Provider)
    server.daemon_threads = True
    with open(sys.argv[1] + ".tmp", "w") as f:
        f.write(str(server.server_address[1]))
    os.rename(sys.argv[1] + ".tmp", sys.argv[1])
    server.serve_forever()


if __name__ == "__main__":
    main()
