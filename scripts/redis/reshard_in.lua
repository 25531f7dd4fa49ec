-- reshard_in.lua: the second step of a move (luakiq.reshard; docs/redis.md,
-- "Reshard"): records staged by reshard_out.lua on the id's old shard join
-- this shard, its new one. Idempotent: a reshard killed after this call and
-- before the drop imports the same records again, to the same result.
-- Merge with a job of the id already here (pushed under the new count while
-- the reshard ran; it is younger than the moved one):
--   queued: payloads united (an equal payload keeps the minimal score);
--     perform_in, retry_count, error and windows of the moved job ("failed +
--     queued"), the lowest priority; an expiry per payload, the later one (a
--     payload here without one keeps none);
--   dead: payloads united (min score), updated_at the later, the error of
--     the later;
--   tags united.
-- KEYS[1] = shard prefix "NS:{QUEUE:SHARD}:". ARGV[1] = the reshard's token
-- (the shard must be frozen by it), then pairs id, record. Returns the number
-- of records taken in.
-- luakiq:include keys
-- luakiq:include levels
-- luakiq:include tags
-- luakiq:include shard
local P = KEYS[1]
local K = shard_keys(P)
local token = ARGV[1]
if not token or token == "" or #ARGV % 2 ~= 1 then
  error("luakiq reshard_in: ARGV must be token, then pairs id, record", 0)
end
if redis.call("GET", K.reshard) ~= token then
  error("luakiq reshard_in: the shard is not frozen by this reshard", 0)
end
local recs = {}
for i = 2, #ARGV, 2 do
  local ok, r = pcall(cmsgpack.unpack, ARGV[i + 1])
  if not ok or type(r) ~= "table" then error("luakiq reshard_in: bad record for id " .. ARGV[i], 0) end
  recs[#recs + 1] = { ARGV[i], r }
end
for _, e in ipairs(recs) do
  local id, r = e[1], e[2]
  local q, d = r.q, r.d
  if q then
    local pin, rc, err, prio, win = q[1], q[2], q[3], q[4], q[5]
    if prio == "" then prio = nil end
    local pk, ek = payloads_key(P, id), expires_key(P, id)
    -- the expiries first: whether a payload was here decides
    local ex = q.ex or {}
    for j = 1, #ex, 2 do
      local payload, at = ex[j], ex[j + 1]
      local here = redis.call("ZSCORE", pk, payload)
      local old = tonumber(redis.call("HGET", ek, payload))
      if not here or (old and old < tonumber(at)) then
        redis.call("HSET", ek, payload, at)
        redis.call("SADD", K.expiring, id)
      end
    end
    queue_at(P, K, id, pin, merged_priority(P, K, id, prio))
    set_retry(K, id, rc)
    redis.call("ZADD", K.ids, 0, id)
    local pl = q.pl
    for j = 1, #pl, 2 do redis.call("ZADD", pk, "LT", pl[j + 1], pl[j]) end
    if err ~= "" then redis.call("HSET", K.errors, id, err) else redis.call("HDEL", K.errors, id) end
    if win ~= "" then
      redis.call("HSET", K.windows, id, win)
      K.has_windows = true
    end
  end
  if d then
    local upd, err, pl = d[1], d[2], d.pl
    local old = tonumber(redis.call("ZSCORE", K.morgue, id))
    redis.call("ZADD", K.morgue, "GT", upd, id)
    redis.call("ZADD", K.morgue_ids, 0, id)
    local mk = morgue_payloads_key(P, id)
    for j = 1, #pl, 2 do redis.call("ZADD", mk, "LT", pl[j + 1], pl[j]) end
    if not old or old <= tonumber(upd) then
      if err ~= "" then redis.call("HSET", K.morgue_errors, id, err) else redis.call("HDEL", K.morgue_errors, id) end
    end
  end
  if r.t and r.t ~= "" then
    local set = {}
    local old = redis.call("HGET", K.tags, id)
    for t in string.gmatch((old or "") .. "\n" .. r.t, "[^\n]+") do set[t] = true end
    local list = {}
    for t in pairs(set) do list[#list + 1] = t end
    table.sort(list)
    for _, t in ipairs(list) do redis.call("SADD", tag_key(P, t), id) end
    redis.call("HSET", K.tags, id, table.concat(list, "\n"))
  end
end
return #recs
