'use strict';
// luakiq: enqueue jobs into luakiq (ordered background jobs on Redis) from
// Node.js, byte for byte as `luakiq enqueue` does (README.md).
const { Client, LayoutError } = require('./lib/client');
const { InputError, canonical } = require('./lib/contract');

module.exports = { Client, InputError, LayoutError, canonical, version: '0.1.0' };
