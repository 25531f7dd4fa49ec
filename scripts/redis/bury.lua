-- bury.lua: moves single payloads of the batch in flight straight to the
-- morgue, leaving the rest of the batch in flight. The host sends it when a
-- payload cannot be loaded (load_payload fails: bytes written by another
-- producer in another format, or corrupted): retrying would fail the same way
-- max_retry_count times and hold back every other payload of the id.
-- KEYS[1] = shard prefix "NS:{QUEUE:SHARD}:".
-- ARGV[1] token, [2] lease_ms, [3] now, [4] batch id (from fetch.lua), then
-- triples: id, payload (bytes, exactly as fetched), error (already dumped).
-- Lease as in fail.lua: refused with {"LEASE", pttl} unless this token holds
-- the lease, or holds nothing but was the last holder. A batch id that is not
-- the one in flight changes nothing ({"OK", "0"}).
-- Per triple whose payload is in the id's busy record: it leaves the batch and
-- joins the id's morgue record (min score merge), morgue[id] = now,
-- morgue:errors[id] = error. An id left without payloads leaves the batch
-- (busy, busy:errors). counters.failed += ids touched.
-- Returns {"OK", buried, then per triple: the payload's score, or "" when it
-- was not buried} (buried = payloads moved; fetch.lua sends no scores).
-- luakiq:include keys
-- luakiq:include levels
-- luakiq:include shard
-- luakiq:include args
local P = KEYS[1]
local K = shard_keys(P)
local token, batch = ARGV[1], ARGV[4]
local lease_ms = arg_lease("bury", token, ARGV[2])
local now = arg_finite("bury", "now", ARGV[3])
if not batch or batch == "" or (#ARGV - 4) % 3 ~= 0 then
  error("BADARG luakiq bury: ARGV must be token, lease_ms, now, batch, then id/payload/error triples", 0)
end

local refused = hold_lease(K, token, lease_ms)
if refused then return refused end
local busy = K.busy
if redis.call("EXISTS", busy) == 0 or batch ~= redis.call("GET", K.batch) then
  return { "OK", "0" }
end

local now_s = score_str(now)
local buried, touched, out = 0, {}, { "OK", "0" }
local recs = {} -- id -> {pin, rc, prio, win, payloads} of the busy records touched
for i = 5, #ARGV, 3 do
  local id, payload, err = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  local r = recs[id]
  if r == nil then
    local v = redis.call("HGET", busy, id)
    local pin, rc, prio, win, pl
    if v then pin, rc, prio, win, pl = busy_decode(v, now_s) end
    r = pl and { pin, rc, prio, win, pl } or false
    recs[id] = r
  end
  local score
  if r then
    local pl = r[5]
    for k = 1, #pl, 2 do
      if pl[k] == payload then
        score = pl[k + 1]
        table.remove(pl, k)
        table.remove(pl, k)
        break
      end
    end
  end
  out[#out + 1] = score and score_str(score) or ""
  if score then
    morgue_add(K, id, { payload, score }, now_s, err)
    buried = buried + 1
    if not touched[id] then
      touched[id] = true
      touched[#touched + 1] = id
    end
  end
end
for _, id in ipairs(touched) do
  local r = recs[id]
  if #r[5] == 0 then
    redis.call("HDEL", busy, id)
    redis.call("HDEL", K.busy_errors, id)
  else
    redis.call("HSET", busy, id, busy_record(r[1], r[2], r[3], r[4], r[5]))
  end
end
if #touched > 0 then busy_settle(K) end
if #touched > 0 then redis.call("HINCRBY", K.counters, "failed", #touched) end
out[2] = tostring(buried)
return out
