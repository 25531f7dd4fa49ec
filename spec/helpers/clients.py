"""HTTP clients that misbehave, for spec/web/limits_spec.lua.

  clients.py idle PORT LIMIT          connect, send nothing
  clients.py slowloris PORT GAP LIMIT  a request head, one byte every GAP s
  clients.py keepalive PORT LIMIT     one request, then stay connected
  clients.py hold PORT N SECONDS      open N connections, hold them
  clients.py burst PORT FILE          the requests of FILE all at once

The first three print "closed S" (seconds until the server closed the
connection; for keepalive counted from the end of the answer) or "open S"
when it was still open after LIMIT seconds. hold prints "open K" (the
connections made) as soon as they are made, then holds them. burst reads
lines "PATH BODY" (or "hangup PATH BODY": sent, then the connection closed
at once, no answer read), opens a connection for each, sends every request
(POST, each in one write) before reading any answer, and prints for each
line "STATUS BODY" (hangup: "hangup")."""
import socket
import sys
import time

HEAD = b"GET /api/v1/stats HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Pad: " + b"a" * 4000 + b"\r\n\r\n"


def closed(s, t0, limit):
    s.settimeout(0.1)
    while time.time() - t0 < limit:
        try:
            if s.recv(65536) == b"":
                return "closed %.2f" % (time.time() - t0)
        except socket.timeout:
            pass
        except OSError:
            return "closed %.2f" % (time.time() - t0)
    return "open %.2f" % (time.time() - t0)


def answer(s):
    """Reads one HTTP answer: (status, body)."""
    s.settimeout(10)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = s.recv(65536)
        if not chunk:
            return 0, ""
        data += chunk
    head, body = data.split(b"\r\n\r\n", 1)
    lines = head.split(b"\r\n")
    length = int([l for l in lines if l.lower().startswith(b"content-length:")][0].split(b":")[1])
    while len(body) < length:
        body += s.recv(65536)
    return int(lines[0].split()[1]), body.decode()


def burst(port, path):
    reqs = []
    for line in open(path):
        line = line.rstrip("\n")
        hang = line.startswith("hangup ")
        p, body = (line[len("hangup "):] if hang else line).split(" ", 1)
        reqs.append((hang, p, body.encode()))
    socks = [socket.create_connection(("127.0.0.1", port)) for _ in reqs]
    for s, (hang, p, body) in zip(socks, reqs):
        s.sendall(b"POST " + p.encode() + b" HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                  b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        if hang:
            s.close()
    for s, (hang, _, _) in zip(socks, reqs):
        if hang:
            print("hangup")
        else:
            status, body = answer(s)
            print("%d %s" % (status, body))
            s.close()


def main():
    mode, port = sys.argv[1], int(sys.argv[2])
    if mode == "burst":
        burst(port, sys.argv[3])
        return
    if mode == "hold":
        n, secs = int(sys.argv[3]), float(sys.argv[4])
        held = []
        for _ in range(n):
            try:
                held.append(socket.create_connection(("127.0.0.1", port), timeout=1))
            except OSError:
                pass
        print("open %d" % len(held), flush=True)
        time.sleep(secs)
        return
    s = socket.create_connection(("127.0.0.1", port))
    t0 = time.time()
    if mode == "idle":
        print(closed(s, t0, float(sys.argv[3])))
    elif mode == "slowloris":
        gap, limit = float(sys.argv[3]), float(sys.argv[4])
        s.settimeout(gap)
        for i in range(len(HEAD) - 2):  # never the last CRLF
            try:
                s.send(HEAD[i:i + 1])
                if s.recv(65536) == b"":
                    break
            except socket.timeout:
                pass
            except OSError:
                break
            if time.time() - t0 > limit:
                print("open %.2f" % (time.time() - t0))
                return
        print("closed %.2f" % (time.time() - t0))
    elif mode == "keepalive":
        s.sendall(b"GET /api/v1/stats HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        data = b""
        while b"\r\n\r\n" not in data:
            data += s.recv(65536)
        head, body = data.split(b"\r\n\r\n", 1)
        length = int([l for l in head.split(b"\r\n") if l.lower().startswith(b"content-length:")][0].split(b":")[1])
        while len(body) < length:
            body += s.recv(65536)
        print(closed(s, time.time(), float(sys.argv[3])))


main()
