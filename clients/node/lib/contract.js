'use strict';
// The producer contract without I/O (docs/redis.md; the test vectors in
// spec/contract/): canonical JSON, the shard of an id, the checks of a job with
// luakiq's own messages, and the push.lua calls of an enqueue. Each function
// mirrors the host's (scripts/luakiq/json.lua, lib/keys.lua, client.lua) so
// that a job enqueued here is stored byte for byte as `luakiq enqueue` stores it.
//
// Values are JavaScript's: plain objects and Maps (objects), arrays (an empty
// one is written {}, as the host writes an empty table), strings and Buffers
// (UTF-8 text), numbers and BigInts, booleans, null. A job field that is
// absent or undefined is "not given"; null is JSON's null (the host refuses it
// where a number is due).
const zlib = require('zlib');
const tz = require('./tz');

const MAX_PAYLOAD_DEPTH = 256;
const MAX_PAYLOAD_BYTES = 1048576;
const MAX_TAGS = 16;
const MAX_TAG_BYTES = 64;
const MAX_JSON_DEPTH = 1000;
const CHUNK = 1000; // jobs per push.lua call
const ALLOWED = ['id', 'payload', 'score', 'perform_in', 'retry_count', 'expires_at', 'priority', 'windows',
  'timezone', 'tags'];
const ALLOWED_TEXT = ALLOWED.join(', ');
const ALLOWED_SET = new Set(ALLOWED);
const EMPTY_PAYLOAD = Buffer.from('""');
const TWO_53 = 2 ** 53;

// A job (or the jobs) luakiq refuses, with the message `luakiq enqueue` gives
// for it; nothing of the enqueue was sent.
class InputError extends Error {
  constructor(message) { super(message); this.name = 'InputError'; }
}

// A value canonical JSON cannot hold ("json: <reason> at <path>").
class JSONError extends Error {
  constructor(message) { super(message); this.name = 'JSONError'; }
}

// numbers ----------------------------------------------------------------------

const isNumber = (v) => typeof v === 'number' || typeof v === 'bigint';
const toFloat = (v) => Number(v); // (a BigInt beyond doubles: +-Infinity)
const finite = (v) => isNumber(v) && Number.isFinite(toFloat(v));
const integral = (x) => x === Math.floor(x);

// C's %.<p>g. (Where C rounds an exact tie to even and toFixed up, the
// candidates of numberText never read back equal anyway.)
function g(x, p) {
  if (Number.isNaN(x)) return 'nan';
  if (!Number.isFinite(x)) return x < 0 ? '-inf' : 'inf';
  if (x === 0) return Object.is(x, -0) ? '-0' : '0';
  const [m, e] = x.toExponential(p - 1).split('e');
  const exp = parseInt(e, 10);
  if (exp < -4 || exp >= p) {
    const mant = m.includes('.') ? m.replace(/\.?0+$/, '') : m;
    return mant + 'e' + (exp < 0 ? '-' : '+') + String(Math.abs(exp)).padStart(2, '0');
  }
  const s = x.toFixed(p - 1 - exp);
  return s.includes('.') ? s.replace(/\.?0+$/, '') : s;
}

// C's %.0f of an integral double
const digits = (x) => (Object.is(x, -0) ? '-0' : BigInt(x).toString());

// Lua's tostring of a number (%.14g)
const luaToString = (x) => g(toFloat(x), 14);

// Canonical JSON of a number, or null for NaN and +-Infinity.
function numberText(v) {
  if (typeof v === 'bigint' && v > -TWO_53 && v < TWO_53) return v.toString();
  const x = toFloat(v);
  if (!Number.isFinite(x)) return null;
  if (integral(x) && x > -TWO_53 && x < TWO_53) return Object.is(x, -0) ? '0' : digits(x);
  for (const p of [15, 16, 17]) {
    const s = g(x, p);
    if (Number(s) === x) return s;
  }
  return g(x, 17);
}

// A number as the host sends it to Redis (host/conn.c): an integer below 2^53
// as its digits (-0 as "-0"), else %.17g.
function redisArg(v) {
  const x = toFloat(v);
  if (integral(x) && Math.abs(x) < TWO_53) return digits(x);
  return g(x, 17);
}

// text -------------------------------------------------------------------------

// s (string or Buffer) as a Buffer; a string's lone surrogates as their
// 3-byte (invalid) UTF-8-like form, which utf8Valid refuses.
function utf8(s) {
  if (Buffer.isBuffer(s) || s instanceof Uint8Array) return Buffer.from(s);
  if (s.isWellFormed()) return Buffer.from(s, 'utf8');
  const parts = [];
  for (const ch of s) {
    const cu = ch.charCodeAt(0);
    if (ch.length === 1 && cu >= 0xd800 && cu <= 0xdfff) {
      parts.push(Buffer.from([0xe0 | (cu >> 12), 0x80 | ((cu >> 6) & 0x3f), 0x80 | (cu & 0x3f)]));
    } else {
      parts.push(Buffer.from(ch, 'utf8'));
    }
  }
  return Buffer.concat(parts);
}

const decoder = new TextDecoder('utf-8', { fatal: true });
function utf8Valid(b) {
  try {
    decoder.decode(b);
    return true;
  } catch (e) {
    return false;
  }
}

const isText = (v) => typeof v === 'string' || Buffer.isBuffer(v) || v instanceof Uint8Array;
const textLength = (v) => (typeof v === 'string' ? v.length : v.length);

const ESCAPES = { '"': '\\"', '\\': '\\\\', '\b': '\\b', '\f': '\\f', '\n': '\\n', '\r': '\\r', '\t': '\\t' };
// (a valid text's JSON string, built as a JS string: UTF-8 at the end)
function jsonString(s) {
  // eslint-disable-next-line no-control-regex
  return '"' + s.replace(/[\u0000-\u001f"\\]/g, (c) => ESCAPES[c] || '\\u' + c.charCodeAt(0).toString(16).padStart(4, '0')) + '"';
}

// A user-given string inside an error message: one line (control characters,
// and bytes that are not UTF-8, as \xNN), at most 100 bytes.
function esc(s) {
  if (isNumber(s) && finite(s) && integral(toFloat(s))) s = digits(toFloat(s));
  else if (isNumber(s)) s = luaToString(s);
  let b = isText(s) ? utf8(s) : Buffer.from(String(s));
  if (b.length > 100) b = Buffer.concat([b.subarray(0, 100), Buffer.from('...')]);
  const valid = utf8Valid(b);
  const out = [];
  let from = 0;
  for (let i = 0; i < b.length; i++) {
    const c = b[i];
    if (c < 32 || c === 127 || (!valid && c >= 128)) {
      out.push(b.subarray(from, i), Buffer.from('\\x' + c.toString(16).padStart(2, '0')));
      from = i + 1;
    }
  }
  out.push(b.subarray(from));
  return Buffer.concat(out).toString('utf8');
}

// canonical JSON ---------------------------------------------------------------

function pathText(path) {
  let out = '$';
  for (const k of path) {
    if (typeof k === 'number') out += '[' + k + ']';
    else if (/^[A-Za-z_][A-Za-z0-9_]*$/.test(k)) out += '.' + k;
    else out += '[' + jsonString(k) + ']';
  }
  return out;
}

const isObject = (v) => v !== null && typeof v === 'object' && !Array.isArray(v) && !isText(v);

function encode(v, path, buf, seen) {
  if (v === null || v === undefined) {
    buf.push('null');
  } else if (v === true || v === false) {
    buf.push(v ? 'true' : 'false');
  } else if (typeof v === 'string') {
    buf.push(jsonString(v));
  } else if (isText(v)) {
    buf.push(jsonString(Buffer.from(v).toString('utf8')));
  } else if (isNumber(v)) {
    const s = numberText(v);
    if (s === null) throw new JSONError('json: cannot encode NaN/inf at ' + pathText(path));
    buf.push(s);
  } else if (Array.isArray(v) || isObject(v)) {
    if (path.length >= MAX_JSON_DEPTH) throw new JSONError('json: nesting deeper than ' + MAX_JSON_DEPTH + ' at ' + pathText(path));
    if (seen.has(v)) throw new JSONError('json: cannot encode a cyclic table at ' + pathText(path));
    seen.add(v);
    const entries = v instanceof Map ? [...v.entries()] : Array.isArray(v) ? null
      : Object.keys(v).filter((k) => v[k] !== undefined).map((k) => [k, v[k]]);
    if (entries && entries.length) {
      const keys = entries.map(([k, x]) => {
        if (!isText(k)) {
          throw new JSONError('json: cannot encode a table key of type ' + typeof k + ' (' + String(k) + ') at ' + pathText(path));
        }
        const s = typeof k === 'string' ? k : Buffer.from(k).toString('utf8');
        return [utf8(s), s, x];
      });
      keys.sort((a, b) => Buffer.compare(a[0], b[0])); // UTF-8 byte order
      buf.push('{');
      keys.forEach(([, k, x], i) => {
        if (i) buf.push(',');
        buf.push(jsonString(k), ':');
        encode(x, path.concat([k]), buf, seen);
      });
      buf.push('}');
    } else if (!entries && v.length) {
      buf.push('[');
      v.forEach((x, i) => {
        if (i) buf.push(',');
        encode(x, path.concat([i + 1]), buf, seen);
      });
      buf.push(']');
    } else {
      buf.push('{}'); // an empty array too: the host's empty table
    }
    seen.delete(v);
  } else {
    throw new JSONError('json: cannot encode a ' + typeof v + ' at ' + pathText(path));
  }
}

// The canonical JSON bytes of v (luakiq.json.encode): keys sorted by their
// UTF-8 bytes, no whitespace, integers below 2^53 without fraction, other
// numbers in the fewest of 15-17 digits that read back equal.
function canonical(v) {
  const buf = [];
  encode(v, [], buf, new Set());
  return Buffer.from(buf.join(''), 'utf8');
}

// ids and shards ---------------------------------------------------------------

const label = (at) => (typeof at === 'string' ? at : 'job ' + at);

function got(v) {
  if (v === null) return 'null';
  if (typeof v === 'boolean') return 'boolean ' + v;
  if (isNumber(v)) return 'number ' + luaToString(v);
  if (Array.isArray(v) || isObject(v)) return 'an array or object';
  return 'a ' + typeof v;
}

// The id's string form (an integer: its digits), or InputError.
function idString(v, at = 'id', given = true) {
  // (the common case first: a safe integer but -0, what follows gives the same)
  if (Number.isSafeInteger(v) && (v !== 0 || 1 / v > 0)) return String(v);
  if (isText(v)) {
    const b = utf8(v);
    if (b.length === 0) throw new InputError(label(at) + ': id must not be empty');
    if (!utf8Valid(b)) throw new InputError(label(at) + ': id must be valid UTF-8 (got ' + esc(b) + ')');
    return b.toString('utf8');
  }
  if (isNumber(v) && finite(v) && integral(toFloat(v))) return digits(toFloat(v));
  throw new InputError(label(at) + ': id must be a non-empty string or an integer, got ' + (given ? got(v) : 'none'));
}

// crc32 of the id's bytes modulo shardsCount (docs/redis.md)
function shard(id, shardsCount) {
  // (a checked id is well-formed: crc32 encodes a string as UTF-8 itself)
  return zlib.crc32(typeof id === 'string' && id.isWellFormed() ? id : utf8(id)) % shardsCount;
}

const prefix = (namespace, queue, n) => namespace + ':{' + queue + ':' + n + '}:';

// windows ----------------------------------------------------------------------

const SPAN = /^([0-9][0-9]):([0-9][0-9])-([0-9][0-9]):([0-9][0-9])$/;

function minutes(h, m) {
  h = Number(h);
  m = Number(m);
  if (m > 59 || h > 24 || (h === 24 && m !== 0)) return null;
  return h * 60 + m;
}

// [[zone, spans], null] of a job's windows text "ZONE|HH:MM-HH:MM,...", or
// [null, why], as luakiq.lib.windows.of_text.
function parseWindows(text) {
  const bar = text.indexOf('|');
  if (bar < 0 || bar === text.length - 1) return [null, 'not ZONE|HH:MM-HH:MM,...'];
  const head = text.slice(0, bar);
  const [z, why] = tz.zone(head);
  if (!z) return [null, "timezone '" + head + "': " + why];
  const spans = [];
  for (const s of text.slice(bar + 1).split(',').filter((x) => x !== '')) {
    const m = SPAN.exec(s);
    const a = m && minutes(m[1], m[2]);
    const b = m && minutes(m[3], m[4]);
    if (!m || a === null || b === null || a === 1440) return [null, "'" + s + "' must be HH:MM-HH:MM (00:00 to 24:00)"];
    if (a === b) return [null, "'" + s + "' is empty (start = end)"];
    spans.push([a, b]);
  }
  return [[z, spans], null];
}

function inside([z, spans], t) {
  const m = z.minuteOfDay(t);
  return spans.some(([a, b]) => (a < b ? m >= a && m < b : m >= a || m < b));
}

function nextOpen(w, t) {
  if (inside(w, t)) return t;
  let m = Math.floor(t / 60) * 60 + 60;
  for (let i = 0; i < 2 * 1440; i++, m += 60) if (inside(w, m)) return m;
  return null;
}

// jobs -------------------------------------------------------------------------

const has = (job, k) => Object.prototype.hasOwnProperty.call(job, k) && job[k] !== undefined;

function num(job, name, dflt, where, id) {
  if (!has(job, name)) return dflt;
  const v = job[name];
  if (!finite(v)) throw new InputError(where + ' (id ' + esc(id) + '): ' + name + ' must be a finite number');
  return toFloat(v);
}

function showable(v, where, id, depth) {
  if (isText(v)) {
    if (!utf8Valid(utf8(v))) throw new InputError(where + ' (id ' + esc(id) + '): payload: a string is not valid UTF-8');
  } else if (Array.isArray(v) || isObject(v)) {
    if (depth >= MAX_PAYLOAD_DEPTH) {
      throw new InputError(where + ' (id ' + esc(id) + '): payload nests deeper than ' + MAX_PAYLOAD_DEPTH + ' levels');
    }
    const entries = v instanceof Map ? [...v.entries()] : Array.isArray(v) ? v.map((x) => [null, x]) : Object.entries(v);
    for (const [k, x] of entries) {
      if (k !== null && isText(k)) showable(k, where, id, depth);
      showable(x, where, id, depth + 1);
    }
  }
}

// [tag Buffer, null] or [null, why], as luakiq.client.tag_check
function tagCheck(t) {
  if (!isText(t) || textLength(t) === 0) return [null, 'a tag must be a non-empty string'];
  const b = utf8(t);
  if (b.length > MAX_TAG_BYTES) return [null, 'tag ' + esc(b) + ' is over ' + MAX_TAG_BYTES + ' bytes'];
  if (!utf8Valid(b)) return [null, 'tag ' + esc(b) + ' is not valid UTF-8'];
  if (b.some((c) => c < 32 || c === 127)) return [null, 'tag ' + esc(b) + ' has a control character'];
  return [b, null];
}

function tags(v, where, id) {
  if (!Array.isArray(v) || v.length === 0) {
    throw new InputError(where + ' (id ' + esc(id) + '): tags must be a non-empty array of strings');
  }
  const seen = new Map();
  for (const t of v) {
    const [b, why] = tagCheck(t);
    if (!b) throw new InputError(where + ' (id ' + esc(id) + '): ' + why);
    seen.set(b.toString('latin1'), b);
  }
  if (seen.size > MAX_TAGS) {
    throw new InputError(where + ' (id ' + esc(id) + '): at most ' + MAX_TAGS + ' tags, got ' + seen.size);
  }
  const sorted = [...seen.values()].sort(Buffer.compare);
  return Buffer.concat(sorted.flatMap((b, i) => (i ? [Buffer.from('\n'), b] : [b])));
}

// [windows text Buffer, due] of a job's own windows (fields windows, timezone)
function jobWindows(job, where, id, now, memo) {
  const list = job.windows;
  const e = where + ' (id ' + esc(id) + '): ';
  if (!has(job, 'windows')) throw new InputError(e + 'timezone goes with windows');
  if (!Array.isArray(list) || list.length === 0 || !list.every(isText)) {
    throw new InputError(e + 'windows must be a non-empty array of "HH:MM-HH:MM"');
  }
  if (has(job, 'timezone') && (!isText(job.timezone) || textLength(job.timezone) === 0)) {
    throw new InputError(e + 'timezone must be a time zone name');
  }
  const text = Buffer.concat([utf8(has(job, 'timezone') ? job.timezone : 'UTC'), Buffer.from('|'),
    utf8(list.map((s) => (typeof s === 'string' ? s : Buffer.from(s).toString('utf8'))).join(','))]);
  const key = text.toString('latin1');
  if (memo.has(key)) return [text, memo.get(key)];
  const [w, why] = parseWindows(text.toString('utf8'));
  if (!w) throw new InputError(e + 'windows: ' + esc(why));
  const due = nextOpen(w, now);
  memo.set(key, due);
  return [text, due];
}

// Checks one job (number at, 1-based) as luakiq.client does, in its order;
// returns what push.lua takes of it, or throws InputError.
function checkJob(job, at, now, memo, maxPayloadBytes = MAX_PAYLOAD_BYTES) {
  const where = label(at);
  if (Array.isArray(job) && job.length) throw new InputError(where + ": unknown field '1' (allowed: " + ALLOWED_TEXT + ')');
  if (Array.isArray(job)) job = {};
  if (!isObject(job)) throw new InputError(where + ': must be an object');
  if (job instanceof Map) job = Object.fromEntries(job);
  for (const k of Object.keys(job)) {
    if (job[k] !== undefined && !ALLOWED_SET.has(k)) {
      throw new InputError(where + ": unknown field '" + esc(k) + "' (allowed: " + ALLOWED_TEXT + ')');
    }
  }
  const id = idString(job.id, at, has(job, 'id'));
  const e = () => where + ' (id ' + esc(id) + '): '; // (made only for a message)
  let wtext = null, due = now;
  if (has(job, 'windows') || has(job, 'timezone')) [wtext, due] = jobWindows(job, where, id, now, memo);
  const performIn = num(job, 'perform_in', due, where, id);
  const score = num(job, 'score', now, where, id);
  const retryCount = num(job, 'retry_count', -1, where, id);
  if (!integral(retryCount) || retryCount < -1) throw new InputError(e() + 'retry_count must be an integer >= -1');
  const payload = has(job, 'payload') ? job.payload : '';
  let data;
  if (payload === '' || (isText(payload) && textLength(payload) === 0)) {
    data = EMPTY_PAYLOAD;
  } else {
    showable(payload, where, id, 0);
    try {
      data = canonical(payload);
    } catch (err) {
      if (!(err instanceof JSONError)) throw err;
      throw new InputError(e() + 'cannot dump payload: ' + esc(err.message));
    }
  }
  if (data.length > maxPayloadBytes) {
    throw new InputError(e() + 'payload is ' + data.length + ' bytes, over max_payload_bytes (' + maxPayloadBytes + ')');
  }
  const expiresAt = num(job, 'expires_at', null, where, id);
  let priority = null;
  if (has(job, 'priority')) {
    const p = job.priority;
    if (!finite(p) || !integral(toFloat(p)) || Math.abs(toFloat(p)) > 1e9) {
      throw new InputError(e() + 'priority must be an integer from -1000000000 to 1000000000');
    }
    priority = toFloat(p) === 100 ? null : digits(Math.abs(toFloat(p)) === 0 ? 0 : toFloat(p));
  }
  const tagText = has(job, 'tags') ? tags(job.tags, where, id) : null;
  return { id, performIn, retryCount, score, payload: data, expiresAt, priority, windows: wtext, tags: tagText };
}

const extras = (j) => j.expiresAt !== null || j.priority !== null || j.windows !== null || j.tags !== null;

// Checks every job (an array); returns them checked, or throws InputError for
// the first bad one (nothing is sent then).
function checkJobs(jobs, now, maxPayloadBytes) {
  if (!Array.isArray(jobs)) throw new InputError('jobs must be an array');
  const memo = new Map();
  return jobs.map((j, i) => checkJob(j, i + 1, now, memo, maxPayloadBytes));
}

// push.lua calls ---------------------------------------------------------------

const SECTIONS = [['expiresAt', 'expires_at'], ['priority', 'priority'], ['windows', 'windows'], ['tags', 'tags']];
const arg = (x) => (typeof x === 'string' || Buffer.isBuffer(x) ? x : redisArg(x));

// jobs sorted by their ids' UTF-8 bytes (each id's made once; sort is stable)
function byId(jobs) {
  const keyed = jobs.map((j) => [utf8(j.id), j]);
  keyed.sort((a, b) => Buffer.compare(a[0], b[0]));
  return keyed.map((k) => k[1]);
}

// The push.lua calls of checked jobs, as luakiq.client sends them: jobs
// grouped by shard (shards in the order their first job came), at most CHUNK a
// call; the short forms "ids" (one perform_in, retry_count, score and payload)
// and "pairs" (payloads differ), else groups of 5; the sections; "shards".
// Returns [{shard, key, args, jobs}] (args: strings and Buffers).
function pushCalls(namespace, queue, shardsCount, jobs, now, channel) {
  const byShard = new Map();
  for (const j of jobs) {
    const s = shard(j.id, shardsCount);
    if (!byShard.has(s)) byShard.set(s, []);
    byShard.get(s).push(j);
  }
  const anyExtras = jobs.some(extras);
  const nowS = g(now, 17);
  const t = (x) => (x === now ? nowS : arg(x));
  const calls = [];
  for (const [s, list] of byShard) {
    const key = prefix(namespace, queue, s);
    for (let from = 0; from < list.length; from += CHUNK) {
      const chunk = list.slice(from, from + CHUNK);
      const args = [channel, nowS];
      const f = chunk[0];
      const same = chunk.every((j) => j.performIn === f.performIn && j.retryCount === f.retryCount && j.score === f.score);
      const onePayload = same && chunk.every((j) => j.payload.equals(f.payload));
      if (same) {
        args.push('', onePayload ? 'ids' : 'pairs', t(f.performIn), f.retryCount === -1 ? '-1' : arg(f.retryCount), t(f.score));
        const rows = anyExtras ? chunk : byId(chunk);
        if (onePayload) {
          args.push(f.payload);
          for (const j of rows) args.push(j.id);
        } else {
          for (const j of rows) args.push(j.id, j.payload);
        }
      } else {
        for (const j of chunk) {
          args.push(j.id, t(j.performIn), j.retryCount === -1 ? '-1' : arg(j.retryCount), t(j.score), j.payload);
        }
      }
      if (anyExtras) {
        for (const [field, name] of SECTIONS) {
          let opened = false;
          chunk.forEach((j, i) => {
            const v = j[field];
            if (v === null) return;
            if (!opened) {
              args.push('', name);
              opened = true;
            }
            args.push(String(i + 1), field === 'expiresAt' ? g(v, 17) : v);
          });
        }
      }
      args.push('', 'shards', String(shardsCount));
      calls.push({ shard: s, key, args, jobs: chunk });
    }
  }
  return calls;
}

// replies ----------------------------------------------------------------------

const MAX_REPLY_BYTES = 262144; // reply.lua's limit (TOOBIG)
const MAX_KEY_BYTES = 1024; // waitkey.lua's
const TOKEN = /^1\.([A-Za-z0-9_-]*)\.([A-Za-z0-9_-]+)\.[0-9]+\.[0-9A-Fa-f]+$/;

function b64url(t) {
  return t.length % 4 === 1 ? null : Buffer.from(t, 'base64url');
}

// A reply token's queue (string) and id (Buffer), or null when it is not
// of the form "1." b64url(queue) "." b64url(id) "." attempt "." mac (luakiq's
// lib/replies.lua; whether it is genuine only reply.lua can tell).
function splitToken(token) {
  if (typeof token !== 'string') return null;
  const m = TOKEN.exec(token);
  const queue = m && b64url(m[1]), id = m && b64url(m[2]);
  if (!queue || !id || queue.length === 0 || id.length === 0) return null;
  return { queue: queue.toString('utf8'), id };
}

// The bytes a reply sends: JSON text (a string or Buffer) as `luakiq reply`
// reads it (ASCII white space around it dropped, then checked), or any other
// value as its canonical JSON. InputError with the CLI's message.
function replyBody(body) {
  const none = "give the reply's JSON as an argument or on stdin";
  let b;
  if (body === undefined || body === null) throw new InputError(none);
  if (typeof body === 'string' || Buffer.isBuffer(body)) {
    const text = utf8(body).toString('latin1').replace(/^[ \t\n\v\f\r]+|[ \t\n\v\f\r]+$/g, '');
    if (text === '') throw new InputError(none);
    b = Buffer.from(text, 'latin1');
    try {
      JSON.parse(b.toString('utf8'));
    } catch (e) {
      throw new InputError('invalid JSON: ' + e.message);
    }
  } else {
    try {
      b = canonical(body);
    } catch (e) {
      throw new InputError('invalid JSON: ' + e.message);
    }
  }
  if (b.length > MAX_REPLY_BYTES) {
    throw new InputError('TOOBIG: the reply is ' + b.length + ' bytes, at most ' + MAX_REPLY_BYTES);
  }
  return b;
}

// A correlation key's bytes, or InputError (`luakiq reply --key`'s message).
function replyKey(key) {
  const b = typeof key === 'string' || Buffer.isBuffer(key) ? utf8(key) : Buffer.alloc(0);
  if (b.length === 0 || b.length > MAX_KEY_BYTES) {
    throw new InputError('BADREPLY: key must be a string of 1 to ' + MAX_KEY_BYTES + ' bytes');
  }
  return b;
}

// reply.lua's ARGV for a reply: refs are the "how" words ('token', T | 'key',
// KEY, ID, ATTEMPT), body the JSON bytes (docs/redis.md, 'reply.lua').
function replyArgs(now, channel, shardsCount, refs, body) {
  return ['reply', redisArg(now), channel, String(shardsCount), ...refs, body];
}

module.exports = {
  InputError, JSONError, canonical, idString, shard, prefix, checkJobs, pushCalls, tagCheck, esc, g, redisArg,
  CHUNK, MAX_PAYLOAD_BYTES, splitToken, replyBody, replyKey, replyArgs,
};
