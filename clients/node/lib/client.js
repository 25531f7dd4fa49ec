'use strict';
// luakiq's Client for Node.js: enqueue jobs into luakiq's queues, and read
// them, through ioredis and the Redis scripts the luakiq binary embeds
// (scripts/, written by `luakiq scripts` at build time).
const fs = require('fs');
const path = require('path');
const Redis = require('ioredis');
const c = require('./contract');

const SCRIPTS = path.join(__dirname, '..', 'scripts');
const USED = ['push', 'register', 'layout', 'stats', 'job', 'reply', 'waitkey'];
// reply.lua's and waitkey.lua's answers that are outcomes (the others throw)
const OUTCOMES = { CONFLICT: 'conflict', STALE: 'stale', UNKNOWN: 'unknown' };
const RESHARD_TRIES = 10, RESHARD_PAUSE = 100; // a frozen shard is asked again every 0.1 s, 1 s in all

// The namespace in Redis has a layout this client does not know.
class LayoutError extends Error {
  constructor(message) { super(message); this.name = 'LayoutError'; }
}

function loadScripts() {
  let manifest;
  try {
    manifest = JSON.parse(fs.readFileSync(path.join(SCRIPTS, 'manifest.json'), 'utf8'));
  } catch (e) {
    throw new Error('luakiq: ' + SCRIPTS + '/manifest.json is missing: the package was not built from a luakiq ' +
      'build (cmake --build build writes it with `luakiq scripts`)');
  }
  const scripts = {};
  for (const name of USED) {
    const e = manifest.scripts[name];
    scripts[name] = { sha: e.sha1, src: fs.readFileSync(path.join(SCRIPTS, e.file)) };
  }
  return [manifest.layout, scripts];
}

// ioredis options of a luakiq Redis URL (docs/configuration.md, 'Redis URLs'):
// redis://[[user]:password@]host[:port][,host[:port]...][/db] or
// unix:///path[?db=N][&user=U][&password=P]. Returns {nodes, options}.
function parseUrl(url) {
  const u = new URL(url);
  const q = u.searchParams;
  if (u.protocol === 'unix:') {
    return { nodes: null, options: { path: decodeURIComponent(u.pathname), db: Number(q.get('db') || 0),
      username: q.get('user') || undefined, password: q.get('password') || undefined } };
  }
  if (u.protocol !== 'redis:') throw new Error("luakiq: bad Redis URL '" + url + "': say redis://HOST:PORT/DB or unix:///PATH");
  // (the host part may list several nodes, which URL does not parse)
  const rest = url.slice('redis://'.length);
  const at = rest.lastIndexOf('@', rest.indexOf('/') < 0 ? rest.length : rest.indexOf('/'));
  const userinfo = at >= 0 ? rest.slice(0, at) : '';
  const [hosts, db] = (at >= 0 ? rest.slice(at + 1) : rest).split('/');
  let username, password;
  if (userinfo) {
    const colon = userinfo.indexOf(':');
    if (colon >= 0) {
      username = decodeURIComponent(userinfo.slice(0, colon)) || undefined;
      password = decodeURIComponent(userinfo.slice(colon + 1));
    } else {
      password = decodeURIComponent(userinfo);
    }
  }
  const nodes = hosts.split(',').map((h) => {
    const [host, port] = h.split(':');
    return { host: host || '127.0.0.1', port: Number(port || 6379) };
  });
  return { nodes, options: { db: Number(db || 0), username, password } };
}

const errorText = (e) => String(e && e.message !== undefined ? e.message : e)
  .replace(/ script: \w+, on @user_script:\d+\.$/, '');

// An error reply's code word and its message without 'luakiq NAME: '.
function errorCode(e) {
  const m = /^(?:ERR )?([A-Z]+) (?:[^:]*?luakiq \w+: )?([\s\S]*)$/.exec(errorText(e));
  return m ? [m[1], m[2]] : [null, errorText(e)];
}

class Client {
  // new Client(url, {namespace}): url is a luakiq Redis URL (default
  // REDIS_URL, else redis://127.0.0.1:6379/0), namespace the script
  // directory's (default "luakiq"). A worker is named by its queue (the
  // worker's name unless its file sets queue_name).
  constructor(url, { namespace } = {}) {
    this.url = url || process.env.REDIS_URL || 'redis://127.0.0.1:6379/0';
    this.namespace = namespace || 'luakiq';
    const { nodes, options } = parseUrl(this.url);
    this._nodes = nodes;
    this._options = { ...options, lazyConnect: true, maxRetriesPerRequest: 3 };
    // .redis: the ioredis connection (a Redis.Cluster on a cluster, once
    // connect() found it)
    this.redis = nodes ? new Redis({ host: nodes[0].host, port: nodes[0].port, ...this._options })
      : new Redis(this._options);
    this._quiet(this.redis);
    this.cluster = false;
    [this._layout, this._scripts] = loadScripts();
    this._ready = null;
    this._channel = null;
    this._counts = new Map(); // queue -> shards_count known to match the registry
  }

  // Connects (once): finds a Redis Cluster, loads the scripts, checks the
  // namespace's layout. Every method calls it.
  connect() {
    if (!this._ready) this._ready = this._connect().catch((e) => { this._ready = null; throw e; });
    return this._ready;
  }

  async _connect() {
    await this._open();
    for (const name of USED) await this._load(name);
    await this._checkLayout();
    return this;
  }

  // The connection alone (once): a Redis Cluster found by asking the server.
  // An error of the connection itself (a wrong password) is thrown as it is.
  _open() {
    if (!this._opened) {
      this._opened = (async () => {
        if (this.redis.status === 'wait') await this.redis.connect();
        if (/cluster_enabled:1/.test(await this.redis.info('cluster'))) {
          this.redis.disconnect();
          const { db, ...auth } = this._options;
          this.redis = new Redis.Cluster(this._nodes, { redisOptions: auth, scaleReads: 'master' });
          this._quiet(this.redis);
          this.cluster = true;
        }
        const server = await this.redis.info('server'); // (a cluster: any node, and then it knows them all)
        const major = Number((/redis_version:(\d+)/.exec(server) || [])[1] || 0);
        this._channel = this.cluster && major >= 7 ? '!' : this.namespace + ':wake';
      })().catch((e) => {
        this._opened = null;
        throw this._authError || e;
      });
    }
    return this._opened;
  }

  // ioredis reports connection errors as events, and reconnects; the
  // commands waiting for it fail with them (no "Unhandled error event").
  _quiet(conn) {
    conn.on('error', (e) => {
      this.lastError = e;
      if (/^WRONGPASS|invalid (username-)?password/i.test(e.message)) this._authError = e;
    });
  }

  async close() {
    this.redis.disconnect();
  }

  // Redis ------------------------------------------------------------------

  _keys(key) {
    // on a cluster, the guard key in the shard's slot (docs/redis.md, 'The
    // guard key'): a call during a slot's migration waits for it
    return this.cluster && key.includes('{') ? [key, key + '~guard'] : [key];
  }

  async _load(name) {
    const nodes = this.cluster ? this.redis.nodes('master') : [this.redis];
    await Promise.all(nodes.map((n) => n.script('LOAD', this._scripts[name].src)));
  }

  _evalsha(name, key, args) {
    const keys = this._keys(key);
    return this.redis.call('EVALSHA', this._scripts[name].sha, keys.length, ...keys, ...args);
  }

  // The replies (or errors) of [[script, key, args]], all sent at once (one
  // write per node); a call Redis did not know the script of (NOSCRIPT) is
  // sent again once the script is loaded.
  async _calls(calls) {
    const replies = await Promise.all(calls.map(([name, key, args]) => this._evalsha(name, key, args).catch((e) => e)));
    const missing = replies.map((r, i) => (r instanceof Error && /^NOSCRIPT/.test(r.message) ? i : -1)).filter((i) => i >= 0);
    for (const name of new Set(missing.map((i) => calls[i][0]))) await this._load(name);
    for (const i of missing) replies[i] = await this._evalsha(...calls[i]).catch((e) => e);
    return replies;
  }

  async _script(name, key, ...args) {
    const [r] = await this._calls([[name, key, args]]);
    if (r instanceof Error) throw r;
    return r;
  }

  async _checkLayout() {
    const v = String(await this._script('layout', this.namespace + ':queues', 'check'));
    if (v === this._layout) return;
    let why;
    if (v === '1') {
      why = 'is in layout 1 (written by an older luakiq) and this client reads layout ' + this._layout +
        ': convert it with `luakiq migrate DIR`';
    } else if (v === '1>2') {
      why = 'is being converted to layout 2 (a migration is running or was interrupted)';
    } else {
      why = "has layout '" + v + "'; this client reads layout " + this._layout;
    }
    throw new LayoutError("luakiq: namespace '" + this.namespace + "' in Redis " + why);
  }

  async _registry(queue) {
    const v = await this.redis.hget(this.namespace + ':queues', queue);
    return v === null ? null : Number(v);
  }

  // The queue's shards_count: the registry's; a queue no host registered yet
  // is registered with the given one (register.lua).
  async _shardsCount(queue, given) {
    const known = this._counts.get(queue);
    if (known !== undefined && (given === undefined || given === null || given === known)) return known;
    let stored = await this._registry(queue);
    if (stored === null) {
      if (given === undefined || given === null) {
        throw new c.InputError("queue '" + queue + "' is not registered in " + this.namespace + ':queues: no luakiq ' +
          'host or producer has used it yet; pass shardsCount');
      }
      if (!Number.isInteger(given) || given < 1) throw new c.InputError('shardsCount must be an integer >= 1, got ' + given);
      const r = await this._script('register', this.namespace + ':queues', queue, String(given));
      if (Array.isArray(r)) throw new LayoutError("luakiq: namespace '" + this.namespace + "' in Redis has layout '" + r[1] + "'");
      stored = Number(r);
    }
    if (given !== undefined && given !== null && given !== stored) {
      throw new c.InputError('shards_count is ' + given + " but queue '" + queue + "' has " + stored + ' shards in ' +
        "Redis; nothing enqueued (see luakiq's docs/configuration.md, 'Changing shards_count')");
    }
    this._counts.set(queue, stored);
    return stored;
  }

  // the API ----------------------------------------------------------------

  // Enqueues jobs (an array of objects with the fields of `luakiq enqueue`:
  // id, payload, score, perform_in, retry_count, expires_at, priority,
  // windows, timezone, tags) into the queue `worker`; resolves to how many.
  // Every job is checked first (InputError, luakiq's message; nothing sent).
  // shardsCount: the queue's, for a queue no host registered yet.
  async enqueue(worker, jobs, { shardsCount } = {}) {
    const now = Date.now() / 1000;
    const checked = c.checkJobs(jobs, now);
    if (checked.length === 0) return 0;
    await this.connect();
    let count = await this._shardsCount(worker, shardsCount);
    let [stored, failed, refused] = await this._push(worker, count, checked, now);
    if (refused && !failed) {
      // resharded since the registry was read: those calls wrote nothing;
      // sent again once with the count the shard named
      this._counts.delete(worker);
      count = refused.have || await this._registry(worker);
      const [more, f2, again] = await this._push(worker, count, refused.jobs, now);
      stored += more;
      failed = f2 || (again ? 'luakiq push: resharded again while pushing' : null);
    }
    if (failed) {
      throw new Error('luakiq: push failed: ' + failed + ' (' + stored + ' of the ' + checked.length + ' jobs were stored)');
    }
    return checked.length;
  }

  async _push(queue, count, checked, now) {
    const calls = c.pushCalls(this.namespace, queue, count, checked, now, this._channel);
    const replies = await this._calls(calls.map((call) => ['push', call.key, call.args]));
    let stored = 0, failed = null, refused = null;
    replies.forEach((r, i) => {
      if (r instanceof Error) {
        const text = errorText(r);
        const m = /^(?:ERR )?RESHARDED (\d+)|resharded: queue has (\d+) shards/.exec(text);
        if (m) {
          refused = refused || { jobs: [], have: Number(m[1] || m[2]) };
          refused.jobs.push(...calls[i].jobs);
        } else {
          failed = failed || text;
        }
      } else {
        stored += calls[i].jobs.length;
      }
    });
    return [stored, failed, refused];
  }

  // Where job `id` of the queue `worker` is: an object as `luakiq job` prints
  // it (state "queued", "in_flight" or "dead"), or null.
  // Replies to a job of the queue `worker` that waits for one (luakiq.await),
  // by its reply token or by the correlation key its await named, as
  // `luakiq reply` does (docs/redis.md, 'Jobs that wait for a reply'). body:
  // JSON text (a string or Buffer, sent as given but for white space around
  // it) or a value (sent as its canonical JSON). Resolves to 'accepted',
  // 'duplicate' (the same bytes again), 'conflict' (another reply was
  // accepted), 'stale' (the wait is over) or 'unknown' (no such token, key
  // or queue). Bad input rejects with InputError, the CLI's message.
  async reply(worker, { token, key, body } = {}) {
    if ((token === undefined || token === null) === (key === undefined || key === null)) {
      throw new c.InputError('reply: give a token or a key (one of them)');
    }
    const data = c.replyBody(body);
    const kb = key !== undefined && key !== null ? c.replyKey(key) : null;
    await this.connect();
    if (!kb) {
      const t = c.splitToken(token);
      if (!t || t.queue !== worker) return 'unknown';
      return this._reply(worker, t.id, ['token', token], data);
    }
    const qkey = this.namespace + ':{' + worker + '}:';
    let found;
    try {
      found = await this._script('waitkey', qkey, 'lookup', kb);
    } catch (e) {
      if (errorCode(e)[0] === 'UNKNOWN') return 'unknown';
      throw e;
    }
    const [id, attempt] = found;
    const outcome = await this._reply(worker, id, ['key', kb, id, attempt], data);
    if (outcome === 'stale') await this._script('waitkey', qkey, 'drop', kb, attempt, id); // (cleanup)
    return outcome;
  }

  // reply.lua on the id's shard (routed as a push): a shard resharded since
  // the registry was read is asked again with the new count, a frozen one
  // again after a pause.
  async _reply(queue, id, refs, data) {
    let fresh = false, frozen = 0;
    for (;;) {
      const count = (!fresh && this._counts.get(queue)) || await this._registry(queue);
      if (count === null) return 'unknown';
      this._counts.set(queue, count);
      const args = c.replyArgs(Date.now() / 1000, this._channel, count, refs, data);
      try {
        return String(await this._script('reply', c.prefix(this.namespace, queue, c.shard(id, count)), ...args));
      } catch (e) {
        const [code, msg] = errorCode(e);
        if (code === 'RESHARDED' && !fresh) {
          fresh = true;
        } else if (code === 'RESHARD' && frozen < RESHARD_TRIES) {
          frozen += 1;
          await new Promise((resolve) => setTimeout(resolve, RESHARD_PAUSE));
        } else if (OUTCOMES[code]) {
          return OUTCOMES[code];
        } else if (code === 'BADREPLY' || code === 'BADJSON' || code === 'TOOBIG') {
          throw new c.InputError(code + ': ' + msg);
        } else {
          throw e;
        }
      }
    }
  }

  async job(worker, id) {
    const jid = c.idString(id, 'id');
    await this.connect();
    const count = await this._registry(worker);
    if (count === null) return null;
    const key = c.prefix(this.namespace, worker, c.shard(jid, count));
    const r = await this._script('job', key, jid);
    return jobRecord(jid, r, await this.redis.hget(key + 'tags', jid), Date.now() / 1000);
  }

  // Every registered queue's numbers, as `luakiq stats` prints them:
  // {total: {length, morgue_length, lag, expired}, by_worker: {QUEUE:
  // {length, morgue_length, lag, expired[, paused]}}}.
  async stats() {
    await this.connect();
    const queues = await this.redis.hgetall(this.namespace + ':queues');
    const calls = [], owners = [];
    for (const q of Object.keys(queues).sort()) {
      for (let s = 0; s < Number(queues[q]); s++) {
        calls.push(['stats', c.prefix(this.namespace, q, s), []]);
        owners.push(q);
      }
    }
    const replies = await this._calls(calls);
    const paused = await this.redis.hgetall(this.namespace + ':paused');
    const now = Date.now() / 1000;
    const by = {};
    for (const q of Object.keys(queues)) by[q] = { length: 0, morgue_length: 0, lag: 0, expired: 0 };
    replies.forEach((r, i) => {
      if (r instanceof Error) throw r;
      const s = by[owners[i]];
      s.length += Number(r[0]) + Number(r[1]);
      s.morgue_length += Number(r[2]);
      if (r[3] !== '') s.lag = Math.max(s.lag, now - Number(r[3]));
      s.expired += Number(r[7] || 0);
    });
    const total = { length: 0, morgue_length: 0, lag: 0, expired: 0 };
    for (const [q, s] of Object.entries(by)) {
      if (paused[q] !== undefined) s.paused = true;
      for (const k of ['length', 'morgue_length', 'expired']) total[k] += s[k];
      total.lag = Math.max(total.lag, s.lag);
    }
    return { total, by_worker: by };
  }
}

function payloadValue(raw) {
  try {
    return JSON.parse(raw);
  } catch (e) {
    return raw;
  }
}

// job.lua's reply as luakiq.ops.admin's job record
function jobRecord(id, r, tags, now) {
  const state = r[0];
  if (state === '') return null;
  const payloads = (i) => {
    const n = Number(r[i]);
    const list = [];
    for (let k = 1; k <= n; k++) list.push([payloadValue(r[i + 2 * k - 1]), Number(r[i + 2 * k])]);
    return [list, i + 2 * n + 1];
  };
  const rec = { id, state };
  if (tags) rec.tags = tags.split('\n');
  if (state === 'dead') {
    rec.updated_at = Number(r[1]);
    if (r[2]) rec.error = r[2];
    [rec.payloads] = payloads(3);
    return rec;
  }
  rec.perform_in = Number(r[1]);
  rec.retry_count = Number(r[2]);
  if (r[3]) rec.error = r[3];
  const fields = (k) => {
    rec.priority = r[k] ? Number(r[k]) : 100;
    const bar = r[k + 1].indexOf('|');
    if (bar >= 0) {
      rec.timezone = r[k + 1].slice(0, bar);
      rec.windows = r[k + 1].slice(bar + 1).split(',').filter((s) => s !== '');
    }
  };
  if (state === 'queued') {
    fields(4);
    [rec.payloads] = payloads(6);
    return rec;
  }
  const holder = r[4];
  if (holder) rec.host = holder.includes(':') ? holder.slice(0, holder.lastIndexOf(':')) : holder;
  if (r[5]) {
    rec.fetched_at = Number(r[5]);
    rec.running = Math.max(0, Math.floor(now - rec.fetched_at));
  }
  fields(6);
  let i;
  [rec.payloads, i] = payloads(8);
  if (i < r.length) [rec.queued_payloads] = payloads(i);
  return rec;
}

module.exports = { Client, LayoutError, parseUrl };
