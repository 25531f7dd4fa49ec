-- await.lua: luakiq.await(id) inside a call: the job of id, in the batch in
-- flight, will wait for a reply once its call ends (docs/redis.md, "Waits";
-- lib/waits.lua). Written before await returns, so a reply faster than the
-- call is not lost: the wait is "pending" (P waits:new) until the batch is
-- settled: its ack (fetch.lua) or a "done" (fail.lua) makes it a wait, a
-- failure drops it, a dead holder's restore keeps it for the job's re-run,
-- whose await gets the same attempt, hence the same token.
-- KEYS[1] = shard prefix "NS:{QUEUE:SHARD}:".
-- ARGV[1] token (the shard's holder), [2] lease_ms, [3] now, [4] batch (the
--      batch in flight, from fetch.lua), [5] id, [6] timeout (seconds > 0),
--      [7] heartbeat (seconds, "" or "0" = none), [8] correlation key ("" =
--      none; the caller claims it with waitkey.lua), [9] rule ("status": the
--      worker has no on_reply, so a reply must be rickover's
--      {"status": "succeeded" | "failed"}; "" = any JSON), [10] the queue's
--      secret (64 hex digits, waitkey.lua "secret"; stored in the shard by
--      the first await, ignored after).
-- Lease as fail.lua (the holder, or its last holder with nobody since).
-- A job of the id queued since the batch was fetched (pushed while its
-- call ran) moves to P held: it runs after the reply was handled.
-- Returns {token, attempt, deadline}. Errors: FENCED (another holds the
-- shard), NOTINFLIGHT (id is not in the batch in flight, or batch is not
-- that batch's id).
-- luakiq:include keys
-- luakiq:include levels
-- luakiq:include shard
WAITS_WANTED = true
-- luakiq:include waits
-- luakiq:include tokens
-- luakiq:include args
local P = KEYS[1]
local K = W.keys(shard_keys(P), P)
local token, batch, id, key, rule, secret = ARGV[1], ARGV[4], ARGV[5], ARGV[8], ARGV[9], ARGV[10]
local lease_ms = arg_lease("await", token, ARGV[2])
local now = arg_finite("await", "now", ARGV[3])
local timeout = arg_finite("await", "timeout", ARGV[6])
local hb = ARGV[7] == "" and 0 or arg_finite("await", "heartbeat", ARGV[7])
if not secret or not batch or not id or id == "" or not key or not rule then
  error("BADARG luakiq await: ARGV must be token, lease_ms, now, batch, id, timeout, heartbeat, key, rule, secret", 0)
end
if timeout <= 0 or hb < 0 then
  error("BADARG luakiq await: timeout must be > 0 and heartbeat >= 0 seconds, got '" .. ARGV[6] .. "', '" .. ARGV[7] .. "'", 0)
end
if #key > 1024 then error("BADARG luakiq await: key must be at most 1024 bytes", 0) end
if rule ~= "" and rule ~= "status" then error("BADARG luakiq await: rule must be \"\" or \"status\", got '" .. rule .. "'", 0) end
if not secret:match("^" .. string.rep("%x", 64) .. "$") then
  error("BADARG luakiq await: secret must be 64 hex digits", 0)
end
local queue = queue_of(P)
if not queue then error("BADARG luakiq await: KEYS[1] must be a shard prefix NS:{QUEUE:SHARD}:", 0) end

local refused = hold_lease(K, token, lease_ms)
if refused then return redis.error_reply("FENCED luakiq await: the shard's lease is another holder's (pttl " .. refused[2] .. " ms)") end
if batch == "" or redis.call("GET", K.batch) ~= batch or redis.call("HEXISTS", K.busy, id) == 0 then
  return redis.error_reply("NOTINFLIGHT luakiq await: '" .. id .. "' is not a job of the batch in flight " .. batch)
end

local pads = redis.call("GET", K.waits_key)
if not pads then
  pads = key_pads(hex_bytes(secret:lower()))
  redis.call("SET", K.waits_key, pads)
end
-- the pending wait of a run restored and performed again keeps its attempt
-- (and a reply that came meanwhile); await twice in one call keeps it too
local p = W.get_pending(K, id)
if not p then
  p = { attempt = redis.call("INCR", K.waits_seq) }
end
p.state, p.batch, p.since, p.deadline, p.hb = "pending", batch, now, now + timeout, hb
p.beat = hb > 0 and now + hb or nil
p.key = key ~= "" and key or nil
p.rule = rule ~= "" and rule or nil
redis.call("HSET", K.waits_new, id, W.pack(p))
K.has_waits = true
-- a job of the id pushed while the call ran waits behind the reply
local m, _, place, pin, pl = find_job(K, id)
if m then
  redis.call("ZREM", K.jobs, m)
  if place then
    local q = place == "p" and redis.call("HGET", K.prio, id) or nil
    leave_place(P, K, id, place, q)
    W.hold_job(K, id, pin, pl, q)
  end
end
return { make_token(pads, queue, id, p.attempt), tostring(p.attempt), score_str(p.deadline) }
