'use strict';
// For spec/clients/replies_spec.lua: one reply, by token or by key, with the
// body given as JSON text; prints the outcome, or "error: MESSAGE" and exits
// 2 for an input error.
// usage: node reply.js URL NAMESPACE WORKER token|key VALUE BODY
const { Client, InputError } = require('..');

(async () => {
  const [url, namespace, worker, how, value, body] = process.argv.slice(2);
  const client = new Client(url, { namespace });
  try {
    console.log(await client.reply(worker, { [how]: value, body }));
  } catch (e) {
    if (!(e instanceof InputError)) throw e;
    console.log('error: ' + e.message);
    process.exitCode = 2;
  } finally {
    await client.close();
  }
})();
