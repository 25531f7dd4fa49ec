"""UTC offsets of IANA time zones from the system's TZif files, read as luakiq
reads them (scripts/luakiq/lib/tz.lua): the file's transitions only, the
last offset kept after the last one, so a job's windows open when the host
says they do."""
import os
import re

_cache = {}


def zoneinfo_dir():
    return os.environ.get("TZDIR") or "/usr/share/zoneinfo"


def _be(data, i, n, signed=False):
    return int.from_bytes(data[i:i + n], "big", signed=signed)


def _parse(data):
    if data[:4] != b"TZif":
        return None, "not a TZif file"

    def counts(at):
        return [_be(data, at + 20 + 4 * k, 4) for k in range(6)]

    isutc, isstd, leap, timecnt, typecnt, charcnt = counts(0)
    at, tsize = 0, 4
    if data[4:5] >= b"2":
        # the 64-bit section, after the 32-bit one
        at = 44 + timecnt * 4 + timecnt + typecnt * 6 + charcnt + leap * 8 + isstd + isutc
        isutc, isstd, leap, timecnt, typecnt, charcnt = counts(at)
        tsize = 8
    p = at + 44
    times = [_be(data, p + i * tsize, tsize, True) for i in range(timecnt)]
    p += timecnt * tsize
    idx = list(data[p:p + timecnt])
    p += timecnt
    offs = [_be(data, p + i * 6, 4, True) for i in range(typecnt)]
    if typecnt == 0:
        return None, "no local time types"
    return Zone(times, [offs[i] if i < len(offs) else 0 for i in idx], offs[0]), None


class Zone:
    def __init__(self, times, offsets, first):
        self.times, self.offsets, self.first = times, offsets, first

    def offset(self, t):
        """Seconds east of UTC at Unix time t."""
        times = self.times
        if not times or t < times[0]:
            return self.first
        lo, hi = 0, len(times) - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if times[mid] <= t:
                lo = mid
            else:
                hi = mid - 1
        return self.offsets[lo]

    def minute_of_day(self, t):
        """The zone's wall-clock minute of the day (0..1439) at Unix time t."""
        local = int((t + self.offset(t)) // 1)
        return (local // 60) % 1440


UTC = Zone([], [], 0)
_NAME = re.compile(r"^[A-Za-z0-9_+\-/]+$")


def zone(name):
    """(Zone, None) or (None, why), as luakiq.lib.tz.zone."""
    if name in ("UTC", "", "Etc/UTC"):
        return UTC, None
    if name in _cache:
        return _cache[name], None
    if ".." in name or name.startswith("/") or not _NAME.match(name):
        return None, "not a time zone name"
    base = zoneinfo_dir()
    try:
        with open(os.path.join(base, name), "rb") as f:
            data = f.read()
    except OSError:
        return None, "no such time zone in " + base + " (tzdata)"
    z, err = _parse(data)
    if z:
        _cache[name] = z
    return z, err
