'use strict';
// bench.lua --clients: the Node client's enqueue of N blank jobs against
// ioredis's pipelined LPUSH of the same jobs in Sidekiq's format, both in
// calls of CALL jobs, each on an empty database; prints "luakiq SECS" and
// "peer SECS". usage: node bench.js URL N CALL (NODE_PATH: clients/node's
// node_modules, for ioredis)
const crypto = require('crypto');
const path = require('path');
const { Client } = require(path.join(__dirname, '..', '..', '..', 'clients', 'node'));
const Redis = require('ioredis');

(async () => {
  const [url, n, call] = [process.argv[2], Number(process.argv[3]), Number(process.argv[4])];
  const jobs = [];
  for (let i = 1; i <= n; i++) jobs.push({ id: i }); // (built before the timing, as push.rb's args)
  const client = new Client(url);
  await client.connect();
  await client.redis.flushdb();
  await client.enqueue('Blank', jobs.slice(0, 1), { shardsCount: 5 }); // register, load: outside the timing
  let t0 = process.hrtime.bigint();
  for (let at = 0; at < n; at += call) await client.enqueue('Blank', jobs.slice(at, at + call));
  console.log('luakiq ' + (Number(process.hrtime.bigint() - t0) / 1e9).toFixed(6));
  await client.close();

  const r = new Redis(url);
  await r.flushdb();
  t0 = process.hrtime.bigint();
  for (let at = 0; at < n; at += call) {
    const now = Date.now() / 1000;
    const pipe = r.pipeline();
    for (let i = at; i < Math.min(at + call, n); i++) {
      pipe.lpush('queue:default', JSON.stringify({ class: 'BlankWorker', args: [], retry: true, queue: 'default',
        jid: crypto.randomBytes(12).toString('hex'), created_at: now, enqueued_at: now }));
    }
    pipe.sadd('queues', 'default');
    await pipe.exec();
  }
  console.log('peer ' + (Number(process.hrtime.bigint() - t0) / 1e9).toFixed(6));
  if (await r.llen('queue:default') !== n) throw new Error('lost jobs');
  r.disconnect();
})();
