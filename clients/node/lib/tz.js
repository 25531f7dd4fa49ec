'use strict';
// UTC offsets of IANA time zones from the system's TZif files, read as luakiq
// reads them (scripts/luakiq/lib/tz.lua): the file's transitions only, the
// last offset kept after the last one, so a job's windows open when the host
// says they do.
const fs = require('fs');
const path = require('path');

const cache = new Map();

function zoneinfoDir() { return process.env.TZDIR || '/usr/share/zoneinfo'; }

class Zone {
  constructor(times, offsets, first) { this.times = times; this.offsets = offsets; this.first = first; }

  // seconds east of UTC at Unix time t
  offset(t) {
    const times = this.times;
    if (times.length === 0 || t < times[0]) return this.first;
    let lo = 0, hi = times.length - 1;
    while (lo < hi) {
      const mid = Math.floor((lo + hi + 1) / 2);
      if (times[mid] <= t) lo = mid; else hi = mid - 1;
    }
    return this.offsets[lo];
  }

  // the zone's wall-clock minute of the day (0..1439) at Unix time t
  minuteOfDay(t) {
    const local = Math.floor(t + this.offset(t));
    return ((Math.floor(local / 60) % 1440) + 1440) % 1440;
  }
}

function parse(data) {
  if (data.length < 44 || data.toString('latin1', 0, 4) !== 'TZif') return [null, 'not a TZif file'];
  const counts = (at) => [0, 1, 2, 3, 4, 5].map((k) => data.readUInt32BE(at + 20 + 4 * k));
  let [isutc, isstd, leap, timecnt, typecnt, charcnt] = counts(0);
  let at = 0, tsize = 4;
  if (data[4] >= 0x32) { // version 2+: the 64-bit section, after the 32-bit one
    at = 44 + timecnt * 4 + timecnt + typecnt * 6 + charcnt + leap * 8 + isstd + isutc;
    [isutc, isstd, leap, timecnt, typecnt, charcnt] = counts(at);
    tsize = 8;
  }
  let p = at + 44;
  const times = [];
  for (let i = 0; i < timecnt; i++) {
    times.push(tsize === 8 ? Number(data.readBigInt64BE(p + i * 8)) : data.readInt32BE(p + i * 4));
  }
  p += timecnt * tsize;
  const idx = Array.from(data.subarray(p, p + timecnt));
  p += timecnt;
  const offs = [];
  for (let i = 0; i < typecnt; i++) offs.push(data.readInt32BE(p + i * 6));
  if (typecnt === 0) return [null, 'no local time types'];
  return [new Zone(times, idx.map((i) => (i < offs.length ? offs[i] : 0)), offs[0]), null];
}

const UTC = new Zone([], [], 0);

// [Zone, null] or [null, why], as luakiq.lib.tz.zone
function zone(name) {
  if (name === 'UTC' || name === '' || name === 'Etc/UTC') return [UTC, null];
  if (cache.has(name)) return [cache.get(name), null];
  if (name.includes('..') || name.startsWith('/') || !/^[A-Za-z0-9_+\-/]+$/.test(name)) {
    return [null, 'not a time zone name'];
  }
  const base = zoneinfoDir();
  let data;
  try {
    data = fs.readFileSync(path.join(base, name));
  } catch (e) {
    return [null, 'no such time zone in ' + base + ' (tzdata)'];
  }
  const [z, err] = parse(data);
  if (z) cache.set(name, z);
  return [z, err];
}

module.exports = { zone, Zone };
