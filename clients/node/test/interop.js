'use strict';
// For spec/clients/interop_spec.lua: enqueues each call of a JSON array of
// calls (each an array of jobs) read from stdin, and prints each call's count;
// an input error prints "error: MESSAGE" and exits 2.
// usage: node interop.js URL NAMESPACE WORKER SHARDS_COUNT < calls.json
const fs = require('fs');
const { Client, InputError } = require('..');

(async () => {
  const [url, namespace, worker, count] = process.argv.slice(2);
  const client = new Client(url, { namespace });
  try {
    for (const jobs of JSON.parse(fs.readFileSync(0, 'utf8'))) {
      console.log(await client.enqueue(worker, jobs, { shardsCount: Number(count) }));
    }
  } catch (e) {
    if (!(e instanceof InputError)) throw e;
    console.log('error: ' + e.message);
    process.exitCode = 2;
  } finally {
    await client.close();
  }
})();
