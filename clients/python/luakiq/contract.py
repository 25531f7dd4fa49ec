"""The producer contract without I/O (docs/redis.md; the test vectors in
spec/contract/): canonical JSON, the shard of an id, the checks of a job with
luakiq's own messages, and the push.lua calls of an enqueue. Each function
mirrors the host's (scripts/luakiq/json.lua, lib/keys.lua, client.lua) so
that a job enqueued here is stored byte for byte as `luakiq enqueue` stores it.

Values are Python's: dict (object), list or tuple (array; an empty one is
written {}, as the host writes an empty table), str or bytes (UTF-8 text),
int, float, bool, None (null). A key absent from a job is "not given"; a key
given as None is JSON's null (the host refuses it where a number is due)."""
import base64
import json
import math
import re
import zlib

from . import tz

MAX_PAYLOAD_DEPTH = 256
MAX_PAYLOAD_BYTES = 1048576
MAX_TAGS, MAX_TAG_BYTES = 16, 64
MAX_JSON_DEPTH = 1000
CHUNK = 1000  # jobs per push.lua call
ALLOWED = ("id", "payload", "score", "perform_in", "retry_count", "expires_at", "priority", "windows",
           "timezone", "tags")
ALLOWED_TEXT = ", ".join(ALLOWED)
_ALLOWED_SET = frozenset(ALLOWED)
_2_53 = 2.0 ** 53


class InputError(ValueError):
    """A job (or the jobs) luakiq refuses, with the message `luakiq enqueue`
    gives for it; nothing of the enqueue was sent."""


class JSONError(ValueError):
    """A value canonical JSON cannot hold ("json: <reason> at <path>")."""


# numbers ----------------------------------------------------------------------

def is_number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def to_float(v):
    """The double the host holds for number v (an int too large is +-inf)."""
    try:
        return float(v)
    except OverflowError:
        return math.inf if v > 0 else -math.inf


def finite(v):
    return is_number(v) and math.isfinite(to_float(v))


def g(x, digits):
    """C's %.<digits>g."""
    return "%.*g" % (digits, x)


def lua_tostring(x):
    """Lua's tostring of a number (%.14g; inf, -inf, nan)."""
    x = to_float(x)
    if math.isnan(x):
        return "nan"
    return g(x, 14)


def number_text(x):
    """Canonical JSON of a number, or None for NaN and +-inf."""
    if isinstance(x, int) and -_2_53 < x < _2_53:
        return str(x)
    x = to_float(x)
    if not math.isfinite(x):
        return None
    if x == math.floor(x) and -_2_53 < x < _2_53:
        return "%d" % x  # also -0 as 0
    for digits in (15, 16, 17):
        s = g(x, digits)
        if float(s) == x:
            return s
    return g(x, 17)


def redis_arg(x):
    """A number as the host sends it to Redis (host/conn.c): an integer below
    2^53 as its digits (-0 as "-0"), else %.17g."""
    x = to_float(x)
    if x == math.floor(x) and abs(x) < _2_53:
        return ("-" if math.copysign(1, x) < 0 else "") + "%d" % abs(x)
    return g(x, 17)


# text -------------------------------------------------------------------------

def utf8(s):
    """s (str or bytes) as bytes; a str's lone surrogates kept as their
    (invalid) UTF-8-like bytes, so that utf8_valid refuses them."""
    if isinstance(s, bytes):
        return s
    return s.encode("utf-8", "surrogatepass")


def utf8_valid(b):
    try:
        b.decode("utf-8", "strict")
        return True
    except UnicodeDecodeError:
        return False


_ESCAPES = {ord('"'): b'\\"', ord("\\"): b"\\\\", 8: b"\\b", 12: b"\\f", 10: b"\\n", 13: b"\\r", 9: b"\\t"}
_NEEDS_ESCAPE = re.compile(b'[\x00-\x1f"\\\\]')


def _json_string(b):
    if not _NEEDS_ESCAPE.search(b):
        return b'"' + b + b'"'
    out = bytearray(b'"')
    for c in b:
        if c < 32 or c == 34 or c == 92:
            out += _ESCAPES.get(c) or b"\\u%04x" % c
        else:
            out.append(c)
    out += b'"'
    return bytes(out)


def esc(s):
    """A user-given string inside an error message: one line (control
    characters, and bytes that are not UTF-8, as \\xNN), at most 100 bytes."""
    if is_number(s) and finite(s) and to_float(s) == math.floor(to_float(s)):
        s = "%.0f" % to_float(s)
    elif is_number(s):
        s = lua_tostring(s)
    b = utf8(s) if isinstance(s, (str, bytes)) else str(s).encode()
    if len(b) > 100:
        b = b[:100] + b"..."
    pattern = b"[\x00-\x1f\x7f]" if utf8_valid(b) else b"[\x00-\x1f\x7f-\xff]"
    return re.sub(pattern, lambda m: b"\\x%02x" % m.group()[0], b).decode("utf-8")


# canonical JSON ---------------------------------------------------------------

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _path(path):
    out = "$"
    for k in path:
        if isinstance(k, int):
            out += "[%d]" % k
        elif _IDENT.match(k):
            out += "." + k
        else:
            out += "[" + _json_string(utf8(k)).decode("utf-8", "replace") + "]"
    return out


def _encode(v, path, buf, seen):
    if v is None:
        buf.append(b"null")
    elif v is True:
        buf.append(b"true")
    elif v is False:
        buf.append(b"false")
    elif isinstance(v, (str, bytes)):
        buf.append(_json_string(utf8(v)))
    elif is_number(v):
        s = number_text(v)
        if s is None:
            raise JSONError("json: cannot encode NaN/inf at " + _path(path))
        buf.append(s.encode())
    elif isinstance(v, (list, tuple, dict)):
        if len(path) >= MAX_JSON_DEPTH:
            raise JSONError("json: nesting deeper than %d at %s" % (MAX_JSON_DEPTH, _path(path)))
        if id(v) in seen:
            raise JSONError("json: cannot encode a cyclic table at " + _path(path))
        seen.add(id(v))
        if isinstance(v, dict) and v:
            keys = []
            for k in v:
                if not isinstance(k, (str, bytes)):
                    raise JSONError("json: cannot encode a table key of type %s (%r) at %s"
                                    % (type(k).__name__, k, _path(path)))
                keys.append((utf8(k), k))
            keys.sort(key=lambda kk: kk[0])
            buf.append(b"{")
            for i, (kb, k) in enumerate(keys):
                if i:
                    buf.append(b",")
                buf.append(_json_string(kb))
                buf.append(b":")
                _encode(v[k], path + [k], buf, seen)
            buf.append(b"}")
        elif v:
            buf.append(b"[")
            for i, x in enumerate(v):
                if i:
                    buf.append(b",")
                _encode(x, path + [i + 1], buf, seen)
            buf.append(b"]")
        else:
            buf.append(b"{}")  # an empty array too: the host's empty table
        seen.discard(id(v))
    else:
        raise JSONError("json: cannot encode a %s at %s" % (type(v).__name__, _path(path)))


def canonical(v):
    """The canonical JSON bytes of v (luakiq.json.encode): keys sorted by
    their UTF-8 bytes, no whitespace, integers below 2^53 without fraction,
    other numbers in the fewest of 15-17 digits that read back equal."""
    buf = []
    _encode(v, [], buf, set())
    return b"".join(buf)


# ids and shards ---------------------------------------------------------------

def _label(at):
    return at if isinstance(at, str) else "job %d" % at


def _got(v):
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean " + ("true" if v else "false")
    if is_number(v):
        return "number " + lua_tostring(v)
    if isinstance(v, (list, tuple, dict)):
        return "an array or object"
    return "a " + type(v).__name__


def id_string(v, at="id", given=True):
    """The id's string form (an integer: its digits), or InputError."""
    t = type(v)
    if t is int and -_2_53 < v < _2_53:  # (the common cases first: what follows gives the same)
        return str(v)
    if t is str and v and v.isascii():
        return v
    if isinstance(v, (str, bytes)):
        b = utf8(v)
        if not b:
            raise InputError(_label(at) + ": id must not be empty")
        if not utf8_valid(b):
            raise InputError(_label(at) + ": id must be valid UTF-8 (got " + esc(b) + ")")
        return b.decode("utf-8")
    if is_number(v) and finite(v) and to_float(v) == math.floor(to_float(v)):
        return "%.0f" % to_float(v)
    raise InputError(_label(at) + ": id must be a non-empty string or an integer, got " +
                     (_got(v) if given else "none"))


def shard(id_text, shards_count):
    """crc32 of the id's bytes modulo shards_count (docs/redis.md)."""
    return zlib.crc32(utf8(id_text)) % shards_count


def prefix(namespace, queue, shard_number):
    return "%s:{%s:%d}:" % (namespace, queue, shard_number)


# windows ----------------------------------------------------------------------

_SPAN = re.compile(r"^([0-9][0-9]):([0-9][0-9])-([0-9][0-9]):([0-9][0-9])$")


def _minutes(h, m):
    h, m = int(h), int(m)
    if m > 59 or h > 24 or (h == 24 and m != 0):
        return None
    return h * 60 + m


def _parse_windows(text):
    """(zone, spans) of a job's windows text "ZONE|HH:MM-HH:MM,...", or
    (None, why), as luakiq.lib.windows.of_text."""
    head, bar, rest = text.partition("|")
    if not bar or not rest:
        return None, "not ZONE|HH:MM-HH:MM,..."
    zone, why = tz.zone(head)
    if not zone:
        return None, "timezone '" + head + "': " + why
    spans = []
    for s in (p for p in rest.split(",") if p):
        m = _SPAN.match(s)
        a = m and _minutes(m.group(1), m.group(2))
        b = m and _minutes(m.group(3), m.group(4))
        if a is None or b is None or not m or a == 1440:
            return None, "'" + s + "' must be HH:MM-HH:MM (00:00 to 24:00)"
        if a == b:
            return None, "'" + s + "' is empty (start = end)"
        spans.append((a, b))
    return (zone, spans), None


def _inside(w, t):
    zone, spans = w
    m = zone.minute_of_day(t)
    for a, b in spans:
        if (a < b and a <= m < b) or (a >= b and (m >= a or m < b)):
            return True
    return False


def _next_open(w, t):
    if _inside(w, t):
        return t
    m = math.floor(t / 60) * 60 + 60
    for _ in range(2 * 1440):
        if _inside(w, m):
            return m
        m += 60
    return None


# jobs -------------------------------------------------------------------------

def _num(job, name, default, where, jid):
    if name not in job:
        return default
    v = job[name]
    if not finite(v):
        raise InputError("%s (id %s): %s must be a finite number" % (where, esc(jid), name))
    return to_float(v)


def _showable(v, where, jid, depth):
    if isinstance(v, (str, bytes)):
        if not utf8_valid(utf8(v)):
            raise InputError("%s (id %s): payload: a string is not valid UTF-8" % (where, esc(jid)))
    elif isinstance(v, (list, tuple, dict)):
        if depth >= MAX_PAYLOAD_DEPTH:
            raise InputError("%s (id %s): payload nests deeper than %d levels" % (where, esc(jid), MAX_PAYLOAD_DEPTH))
        items = v.items() if isinstance(v, dict) else ((None, x) for x in v)
        for k, x in items:
            if isinstance(k, (str, bytes)):
                _showable(k, where, jid, depth)
            _showable(x, where, jid, depth + 1)


def tag_check(t):
    """(tag bytes, None) or (None, why), as luakiq.client.tag_check."""
    if not isinstance(t, (str, bytes)) or not t:
        return None, "a tag must be a non-empty string"
    b = utf8(t)
    if len(b) > MAX_TAG_BYTES:
        return None, "tag %s is over %d bytes" % (esc(b), MAX_TAG_BYTES)
    if not utf8_valid(b):
        return None, "tag " + esc(b) + " is not valid UTF-8"
    if re.search(b"[\x00-\x1f\x7f]", b):
        return None, "tag " + esc(b) + " has a control character"
    return b, None


def _tags(v, where, jid):
    if not isinstance(v, (list, tuple)) or not v:
        raise InputError("%s (id %s): tags must be a non-empty array of strings" % (where, esc(jid)))
    seen = set()
    for t in v:
        b, why = tag_check(t)
        if b is None:
            raise InputError("%s (id %s): %s" % (where, esc(jid), why))
        seen.add(b)
    if len(seen) > MAX_TAGS:
        raise InputError("%s (id %s): at most %d tags, got %d" % (where, esc(jid), MAX_TAGS, len(seen)))
    return b"\n".join(sorted(seen))


def _windows(job, where, jid, now, memo):
    """(windows text, due) of a job's own windows (fields windows, timezone)."""
    lst, zone = job.get("windows"), job.get("timezone")
    if "windows" not in job:
        raise InputError("%s (id %s): timezone goes with windows" % (where, esc(jid)))
    if not isinstance(lst, (list, tuple)) or not lst or not all(isinstance(s, (str, bytes)) for s in lst):
        raise InputError('%s (id %s): windows must be a non-empty array of "HH:MM-HH:MM"' % (where, esc(jid)))
    if "timezone" in job and (not isinstance(zone, (str, bytes)) or not zone):
        raise InputError("%s (id %s): timezone must be a time zone name" % (where, esc(jid)))
    text = utf8(zone if "timezone" in job else "UTC") + b"|" + b",".join(utf8(s) for s in lst)
    if text in memo:
        return text, memo[text]
    w, why = _parse_windows(text.decode("utf-8", "surrogateescape"))
    if not w:
        raise InputError("%s (id %s): windows: %s" % (where, esc(jid), esc(why)))
    due = _next_open(w, now)
    memo[text] = due
    return text, due


class Job:
    """A checked job: what push.lua takes of it."""
    __slots__ = ("id", "perform_in", "retry_count", "score", "payload", "expires_at", "priority", "windows", "tags")

    def __init__(self, id, perform_in, retry_count, score, payload, expires_at, priority, windows, tags):
        self.id, self.perform_in, self.retry_count, self.score, self.payload = id, perform_in, retry_count, score, payload
        self.expires_at, self.priority, self.windows, self.tags = expires_at, priority, windows, tags

    def extras(self):
        return (self.expires_at is not None or self.priority is not None or self.windows is not None
                or self.tags is not None)


def check_job(job, at, now, memo, max_payload_bytes=MAX_PAYLOAD_BYTES):
    """Checks one job (number at, 1-based) as luakiq.client does, in its
    order; returns a Job or raises InputError."""
    where = _label(at)
    if type(job) is not dict:
        if isinstance(job, (list, tuple)) and job:
            raise InputError(where + ": unknown field '1' (allowed: " + ALLOWED_TEXT + ")")
        if isinstance(job, (list, tuple)):
            job = {}
        if not isinstance(job, dict):
            raise InputError(where + ": must be an object")
    if not _ALLOWED_SET.issuperset(job):
        for k in job:
            if k not in _ALLOWED_SET:
                raise InputError(where + ": unknown field '" + esc(k) + "' (allowed: " + ALLOWED_TEXT + ")")
    jid = id_string(job.get("id"), at, "id" in job)
    wtext, due = None, now
    if "windows" in job or "timezone" in job:
        wtext, due = _windows(job, where, jid, now, memo)
    perform_in = _num(job, "perform_in", due, where, jid)
    score = _num(job, "score", now, where, jid)
    retry_count = _num(job, "retry_count", -1, where, jid)
    if retry_count != math.floor(retry_count) or retry_count < -1:
        raise InputError("%s (id %s): retry_count must be an integer >= -1" % (where, esc(jid)))
    payload = job.get("payload", "") if "payload" in job else ""
    if payload == "" or (isinstance(payload, bytes) and not payload):
        data = b'""'
    else:
        _showable(payload, where, jid, 0)
        try:
            data = canonical(payload)
        except JSONError as e:
            raise InputError("%s (id %s): cannot dump payload: %s" % (where, esc(jid), esc(str(e))))
        except RecursionError:
            raise InputError("%s (id %s): cannot dump payload: json: nesting too deep" % (where, esc(jid)))
    if len(data) > max_payload_bytes:
        raise InputError("%s (id %s): payload is %d bytes, over max_payload_bytes (%d)"
                         % (where, esc(jid), len(data), max_payload_bytes))
    expires_at = _num(job, "expires_at", None, where, jid)
    priority = None
    if "priority" in job:
        p = job["priority"]
        if not finite(p) or to_float(p) != math.floor(to_float(p)) or abs(to_float(p)) > 1e9:
            raise InputError("%s (id %s): priority must be an integer from -1000000000 to 1000000000"
                             % (where, esc(jid)))
        priority = None if to_float(p) == 100 else "%d" % to_float(p)
    tags = _tags(job["tags"], where, jid) if "tags" in job else None
    return Job(jid, perform_in, retry_count, score, data, expires_at, priority, wtext, tags)


def check_jobs(jobs, now, max_payload_bytes=MAX_PAYLOAD_BYTES):
    """Checks every job (a list); returns the Jobs or raises InputError for
    the first bad one (nothing is sent then)."""
    if not isinstance(jobs, (list, tuple)):
        raise InputError("jobs must be an array")
    memo = {}
    return [check_job(j, i + 1, now, memo, max_payload_bytes) for i, j in enumerate(jobs)]


# push.lua calls ---------------------------------------------------------------

_SECTIONS = (("expires_at", b"expires_at"), ("priority", b"priority"), ("windows", b"windows"), ("tags", b"tags"))


def _b(x):
    return x if isinstance(x, bytes) else (x.encode("utf-8") if isinstance(x, str) else redis_arg(x).encode())


def push_calls(namespace, queue, shards_count, jobs, now, channel):
    """The push.lua calls of checked jobs, as luakiq.client sends them: jobs
    grouped by shard (shards in the order their first job came), at most
    CHUNK a call; the short forms "ids" (one perform_in, retry_count, score
    and payload) and "pairs" (payloads differ), else groups of 5; the
    sections; "shards". Returns [(shard, key, [arg bytes])], and each call's
    jobs in parts ([[Job]], one list per call)."""
    calls, parts = [], []
    for s, key, args, chunk in each_push_call(namespace, queue, shards_count, jobs, now, channel):
        calls.append((s, key, args))
        parts.append(chunk)
    return calls, parts


def each_push_call(namespace, queue, shards_count, jobs, now, channel):
    """push_calls' calls one by one, as each is made: (shard, key, args, jobs)."""
    by_shard, order = {}, []
    for j in jobs:
        s = shard(j.id, shards_count)
        if s not in by_shard:
            by_shard[s] = []
            order.append(s)
        by_shard[s].append(j)
    extras = any(j.extras() for j in jobs)
    now_s = g(now, 17).encode()
    for s in order:
        lst, key = by_shard[s], prefix(namespace, queue, s)
        for start in range(0, len(lst), CHUNK):
            chunk = lst[start:start + CHUNK]
            args = [channel.encode(), now_s]
            f = chunk[0]
            same = all(j.perform_in == f.perform_in and j.retry_count == f.retry_count and j.score == f.score
                       for j in chunk)
            one_payload = same and all(j.payload == f.payload for j in chunk)
            if same:
                args += [b"", b"ids" if one_payload else b"pairs",
                         now_s if f.perform_in == now else _b(f.perform_in),
                         b"-1" if f.retry_count == -1 else _b(f.retry_count),
                         now_s if f.score == now else _b(f.score)]
                rows = chunk if extras else sorted(chunk, key=lambda j: utf8(j.id))
                if one_payload:
                    args.append(f.payload)
                    args += [_b(j.id) for j in rows]
                else:
                    for j in rows:
                        args += [_b(j.id), j.payload]
            else:
                for j in chunk:
                    args += [_b(j.id), now_s if j.perform_in == now else _b(j.perform_in),
                             b"-1" if j.retry_count == -1 else _b(j.retry_count),
                             now_s if j.score == now else _b(j.score), j.payload]
            if extras:
                for field, name in _SECTIONS:
                    opened = False
                    for n, j in enumerate(chunk, 1):
                        v = getattr(j, field)
                        if v is None:
                            continue
                        if not opened:
                            args += [b"", name]
                            opened = True
                        args += [str(n).encode(), g(v, 17).encode() if field == "expires_at" else _b(v)]
            args += [b"", b"shards", str(shards_count).encode()]
            yield s, key, args, chunk


# replies ----------------------------------------------------------------------

MAX_REPLY_BYTES = 262144  # reply.lua's limit (TOOBIG)
MAX_KEY_BYTES = 1024      # waitkey.lua's
_TOKEN = re.compile(rb"1\.([A-Za-z0-9_-]*)\.([A-Za-z0-9_-]+)\.[0-9]+\.[0-9A-Fa-f]+")


def _b64url(t):
    if len(t) % 4 == 1:
        return None
    return base64.urlsafe_b64decode(t + b"=" * (-len(t) % 4))


def split_token(token):
    """A reply token's queue (str) and id (bytes), or None when it is not of
    the form "1." b64url(queue) "." b64url(id) "." attempt "." mac (luakiq's
    lib/replies.lua; whether it is genuine only reply.lua can tell)."""
    if not isinstance(token, (str, bytes)):
        return None
    m = _TOKEN.fullmatch(utf8(token))
    queue, jid = m and _b64url(m.group(1)), m and _b64url(m.group(2))
    if not queue or not jid:
        return None
    return queue.decode("utf-8", "surrogateescape"), jid


def _no_constant(name):
    raise ValueError("%s is not JSON" % name)


def reply_body(body):
    """The bytes a reply sends: JSON text (str or bytes) as `luakiq reply`
    reads it (ASCII white space around it dropped, then checked), or any
    other value as its canonical JSON. InputError with the CLI's message."""
    if body is None:
        raise InputError("give the reply's JSON as an argument or on stdin")
    if isinstance(body, (str, bytes)):
        b = utf8(body).strip(b" \t\n\v\f\r")
        if not b:
            raise InputError("give the reply's JSON as an argument or on stdin")
        try:
            json.loads(b, parse_constant=_no_constant)
        except ValueError as e:
            raise InputError("invalid JSON: %s" % e) from None
    else:
        try:
            b = canonical(body)
        except JSONError as e:
            raise InputError("invalid JSON: %s" % e) from None
    if len(b) > MAX_REPLY_BYTES:
        raise InputError("TOOBIG: the reply is %d bytes, at most %d" % (len(b), MAX_REPLY_BYTES))
    return b


def reply_key(key):
    """A correlation key's bytes, or InputError (`luakiq reply --key`'s message)."""
    b = utf8(key) if isinstance(key, (str, bytes)) else b""
    if not b or len(b) > MAX_KEY_BYTES:
        raise InputError("BADREPLY: key must be a string of 1 to %d bytes" % MAX_KEY_BYTES)
    return b


def reply_args(now, channel, shards_count, refs, body):
    """reply.lua's ARGV for a reply: refs are the "how" words (b"token", T |
    b"key", KEY, ID, ATTEMPT), body the JSON bytes (docs/redis.md, 'reply.lua')."""
    return [b"reply", redis_arg(now).encode(), _b(channel), str(shards_count).encode()] + [_b(r) for r in refs] + [body]
