-- reshard_in.lua: the second step of a move (luakiq.ops.reshard; docs/redis.md,
-- "Reshard"): records staged by reshard_out.lua on the id's old shard join
-- this shard, its new one. Idempotent: a reshard killed after this call and
-- before the drop imports the same records again, to the same result.
-- Merge with a job of the id already here (pushed under the new count while
-- the reshard ran; it is younger than the moved one):
--   queued: payloads united (an equal payload keeps the minimal score);
--     perform_in, retry_count, error and windows of the moved job ("failed +
--     queued", lib/shard.lua requeue), the lowest priority; an expiry per
--     payload, the later one (a payload here without one keeps none); the
--     job goes to P later (or its level), never to P ready;
--   dead: payloads united (min score), updated_at the later, the error of
--     the later;
--   tags united;
--   a wait (lib/waits.lua): its record, pending record and due score as
--     they were (the reshard froze both shards: no reply came between), the
--     secret's pads when this shard has none, P waits:seq raised to its
--     attempt (a new wait here gets a higher one), and the held job joins
--     the id's held job here; taken in before the queued job, which an id
--     that waits keeps in P held.
-- KEYS[1] = shard prefix "NS:{QUEUE:SHARD}:". ARGV[1] = the reshard's token
-- (the shard must be frozen by it), then pairs id, record. Returns the number
-- of records taken in. (Scores in a record may be numbers or score strings.)
-- luakiq:include keys
-- luakiq:include levels
-- luakiq:include tags
-- luakiq:include shard
WAITS_WANTED = true
-- luakiq:include waits
local P = KEYS[1]
local K = shard_keys(P)
if W then W.keys(K, P) end -- (lib/waits.lua)
local token = ARGV[1]
if not token or token == "" or #ARGV % 2 ~= 1 then
  error("BADARG luakiq reshard_in: ARGV must be token, then pairs id, record", 0)
end
if redis.call("GET", K.reshard) ~= token then
  error("FENCED luakiq reshard_in: the shard is not frozen by this reshard", 0)
end
-- A flat payload list {payload, score, ...} with the scores as numbers, or
-- nil when it is not one.
local function payload_list(pl)
  if type(pl) ~= "table" then return nil end
  local out = {}
  for j = 1, #pl, 2 do
    local s = tonumber(pl[j + 1])
    if type(pl[j]) ~= "string" or not s or s ~= s then return nil end
    out[j], out[j + 1] = pl[j], s
  end
  return out
end
-- Check every record before the first write (no rollback).
local recs = {}
for i = 2, #ARGV, 2 do
  local ok, r = pcall(cmsgpack.unpack, ARGV[i + 1])
  local bad = not ok or type(r) ~= "table"
  if not bad and r.q then
    r.q.pl = payload_list(r.q.pl)
    bad = not r.q.pl or not tonumber(r.q[1]) or not tonumber(r.q[2])
  end
  if not bad and r.w then
    bad = type(r.w) ~= "table" or (r.w[4] and not payload_list(r.w[4])) or (r.w[4] and not tonumber(r.w[5]))
    if not bad then r.w[4] = r.w[4] and payload_list(r.w[4]) end
  end
  if not bad and r.d then
    r.d.pl = payload_list(r.d.pl)
    bad = not r.d.pl or not tonumber(r.d[1])
  end
  if bad then error("BADARG luakiq reshard_in: bad record for id " .. ARGV[i], 0) end
  recs[#recs + 1] = { ARGV[i], r }
end
for _, e in ipairs(recs) do
  local id, r = e[1], e[2]
  local q, d = r.q, r.d
  local w = r.w
  if w then
    if w[7] then redis.call("SET", K.waits_key, w[7], "NX") end
    local attempt = 0
    local rec, pend = W.unpack(w[1] or nil), W.unpack(w[2] or nil)
    if rec then
      redis.call("HSET", K.waits, id, w[1])
      if w[3] then redis.call("ZADD", K.waits_due, w[3], id) end
      attempt = rec.attempt
    end
    if pend then
      redis.call("HSET", K.waits_new, id, w[2])
      attempt = math.max(attempt, pend.attempt)
    end
    if attempt > (tonumber(redis.call("GET", K.waits_seq)) or 0) then redis.call("SET", K.waits_seq, attempt) end
    K.has_waits = nil
    if w[4] then
      local prio = w[6] or nil
      if rec then
        W.hold_job(K, id, tonumber(w[5]), w[4], prio)
      else
        requeue(P, K, id, score_str(tonumber(w[5])), redis.call("ZSCORE", K.retries, id) or "-1", nil, w[4], prio, nil)
      end
    end
  end
  if q and #q.pl > 0 then
    local pin, rc, err, prio, win = q[1], q[2], q[3], q[4], q[5]
    if prio == "" then prio = nil end
    if win == "" then win = nil end
    -- the expiries first: whether a payload was here decides
    local ex = q.ex or {}
    if #ex > 0 then
      local ek = expires_key(P, id)
      local _, _, place, _, here = find_job(K, id)
      local had = place and unite({}, here) or {}
      for j = 1, #ex, 2 do
        local payload, at = ex[j], ex[j + 1]
        local old = tonumber(redis.call("HGET", ek, payload))
        if not had[payload] or (old and old < tonumber(at)) then
          redis.call("HSET", ek, payload, at)
          redis.call("SADD", K.expiring, id)
        end
      end
    end
    requeue(P, K, id, score_str(tonumber(pin)), score_str(tonumber(rc)), err, q.pl, prio, win)
  end
  if d and #d.pl > 0 then
    local upd, err = d[1], d[2]
    local old = redis.call("ZSCORE", K.morgue, id)
    if not old or tonumber(old) <= tonumber(upd) then
      morgue_add(K, id, d.pl, upd, err or "")
    else
      morgue_add(K, id, d.pl, old, nil)
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
