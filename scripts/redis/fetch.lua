-- fetch.lua: the hot path. One call renews the shard lease, acks the batch in
-- flight and fetches the next one (one round trip per batch).
-- KEYS[1] = shard prefix "NS:{QUEUE:SHARD}:".
-- ARGV[1] token (this holder), [2] lease_ms, [3] now, [4] limit (max jobs),
--      [5] ack: the batch id to ack ("" = no ack), [6] fetch: "1" or "0".
-- Lease (fencing): if another token holds "lease" -> {"LEASE", pttl}, nothing
-- done. If nobody holds it and "holder" is another token, this is a new
-- acquisition: every in-flight job of the shard returns to the queue with its
-- own perform_in/retry_count/error (the "failed + queued" merge of DESIGN §1),
-- then holder = token. A holder whose lease merely expired re-acquires and
-- keeps its batch. Then lease = token for lease_ms.
-- Ack: only when ARGV[5] is the id of the batch in flight, so a call re-sent
-- after a lost reply never acks a batch its sender has not seen.
-- Fetch: if a batch is still in flight (not acked), it is delivered again
-- (same batch id): its sender lost the reply. Otherwise up to limit due ids
-- (perform_in <= now, lowest first, -inf included) move to the busy keys under
-- a new batch id.
-- Returns {"OK", batch, head, restored, acked, n, then per job: id,
-- perform_in, retry_count, error or "", npayloads, payload1, score1, ...};
-- batch = id of the returned jobs ("" when n = 0), head = lowest perform_in
-- left in the queue (or ""), payloads in ascending score order.
local P = KEYS[1]
local token, lease_ms, now, limit, ack, want = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5], ARGV[6]
if not token or token == "" then error("luakiq fetch: token is empty", 0) end
if not lease_ms or lease_ms ~= math.floor(lease_ms) or lease_ms < 1 or lease_ms > 1e12 then
  error("luakiq fetch: lease_ms must be a positive integer, got '" .. tostring(ARGV[2]) .. "'", 0)
end
if not now or now ~= now or now == math.huge or now == -math.huge then
  error("luakiq fetch: now must be a finite number, got '" .. tostring(ARGV[3]) .. "'", 0)
end
if not limit or limit ~= math.floor(limit) or limit < 0 or limit > 1e9 then
  error("luakiq fetch: limit must be an integer >= 0, got '" .. tostring(ARGV[4]) .. "'", 0)
end
if ack == nil or (want ~= "0" and want ~= "1") then
  error("luakiq fetch: ARGV must be token, lease_ms, now, limit, ack batch id, fetch (0|1)", 0)
end
local busy, berrs = P .. "busy", P .. "busy:errors"

-- Lease.
local cur = redis.call("GET", P .. "lease")
if cur and cur ~= token then
  return { "LEASE", tostring(redis.call("PTTL", P .. "lease")) }
end
local restored = 0
if not cur and redis.call("GET", P .. "holder") ~= token then
  local flat = redis.call("HGETALL", busy)
  for i = 1, #flat, 2 do
    local id = flat[i]
    local pin, rc = string.match(flat[i + 1], "^(.-)\n(.*)$")
    local src, dst = P .. "busy:payloads:" .. id, P .. "payloads:" .. id
    if redis.call("EXISTS", src) == 1 then
      redis.call("ZADD", P .. "queue", pin or string.format("%.17g", now), id)
      redis.call("ZADD", P .. "retries", rc or "-1", id)
      redis.call("ZADD", P .. "ids", 0, id)
      if redis.call("EXISTS", dst) == 1 then
        redis.call("ZUNIONSTORE", dst, 2, dst, src, "AGGREGATE", "MIN")
        redis.call("DEL", src)
      else
        redis.call("RENAME", src, dst)
      end
      local err = redis.call("HGET", berrs, id)
      if err then redis.call("HSET", P .. "errors", id, err) else redis.call("HDEL", P .. "errors", id) end
      restored = restored + 1
    end
  end
  redis.call("DEL", busy, berrs)
  redis.call("SET", P .. "holder", token)
end
redis.call("SET", P .. "lease", token, "PX", lease_ms)

-- Ack.
local acked = 0
local inflight = redis.call("EXISTS", busy) == 1
if inflight and ack ~= "" and ack == redis.call("GET", P .. "batch") then
  local ids = redis.call("HKEYS", busy)
  for _, id in ipairs(ids) do redis.call("DEL", P .. "busy:payloads:" .. id) end
  redis.call("DEL", busy, berrs)
  redis.call("HINCRBY", P .. "counters", "processed", #ids)
  acked = #ids
  inflight = false
end

-- Fetch.
local out = { "OK", "", "", tostring(restored), tostring(acked), "0" }
local function add_job(id, pin, rc, err)
  local pl = redis.call("ZRANGE", P .. "busy:payloads:" .. id, 0, -1, "WITHSCORES")
  out[#out + 1] = id
  out[#out + 1] = pin
  out[#out + 1] = rc
  out[#out + 1] = err or ""
  out[#out + 1] = tostring(#pl / 2)
  for k = 1, #pl do out[#out + 1] = pl[k] end
end
local n = 0
if want == "1" and limit > 0 then
  if inflight then
    -- Deliver the unacked batch again, in perform_in order.
    local flat, jobs = redis.call("HGETALL", busy), {}
    for i = 1, #flat, 2 do
      local pin, rc = string.match(flat[i + 1], "^(.-)\n(.*)$")
      jobs[#jobs + 1] = { flat[i], pin or "0", rc or "-1", tonumber(pin) or 0 }
    end
    table.sort(jobs, function(a, b)
      if a[4] ~= b[4] then return a[4] < b[4] end
      return a[1] < b[1]
    end)
    for _, j in ipairs(jobs) do add_job(j[1], j[2], j[3], redis.call("HGET", berrs, j[1])) end
    n = #jobs
    out[2] = redis.call("GET", P .. "batch") or ""
  else
    local due = redis.call("ZRANGEBYSCORE", P .. "queue", "-inf", string.format("%.17g", now),
      "WITHSCORES", "LIMIT", 0, limit)
    for i = 1, #due, 2 do
      local id, pin = due[i], due[i + 1]
      local rc = redis.call("ZSCORE", P .. "retries", id) or "-1"
      redis.call("ZREM", P .. "queue", id)
      redis.call("ZREM", P .. "retries", id)
      redis.call("ZREM", P .. "ids", id)
      local err = redis.call("HGET", P .. "errors", id)
      if err then redis.call("HDEL", P .. "errors", id) end
      local src = P .. "payloads:" .. id
      if redis.call("EXISTS", src) == 1 then
        if n == 0 then out[2] = tostring(redis.call("INCR", P .. "batch")) end
        redis.call("RENAME", src, P .. "busy:payloads:" .. id)
        if err then redis.call("HSET", berrs, id, err) end
        redis.call("HSET", busy, id, pin .. "\n" .. rc)
        add_job(id, pin, rc, err)
        n = n + 1
      end
    end
  end
end
out[3] = redis.call("ZRANGE", P .. "queue", 0, 0, "WITHSCORES")[2] or ""
out[6] = tostring(n)
return out
