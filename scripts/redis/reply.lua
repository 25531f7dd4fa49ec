-- reply.lua: a reply (or a heartbeat) for a job that waits, by token, by id
-- and attempt (rickover's form) or by correlation key: the one script every
-- entry point calls (the HTTP routes, luakiq reply, a Kafka consumer in any
-- language), so all of them agree (docs/redis.md, "Waits", "reply.lua";
-- lib/waits.lua).
-- KEYS[1] = shard prefix "NS:{QUEUE:SHARD}:" of the id (crc32(id) %
--      shards_count, as a push routes it).
-- ARGV[1] op: "reply" or "heartbeat", [2] now (Unix seconds), [3] wake
--      channel (as push.lua's: "" none, "!" SPUBLISH, else PUBLISH there),
--      [4] the shards_count the caller routed with ("" = not checked),
--      [5] how: "token", then [6] the token; "id", then [6] id, [7] attempt;
--      "key", then [6] key, [7] id, [8] attempt (from waitkey.lua lookup);
--      then, for "reply", the body (JSON, at most 256 KiB).
-- Replies "accepted" or "duplicate" (the same bytes as the accepted reply;
-- for "heartbeat": "ok"), else an error whose first word says why:
--   TOOBIG (body over 256 KiB), BADJSON (not JSON), BADREPLY (the worker
--   has no on_reply and the body is not {"status": "succeeded"|"failed",...}),
--   RESHARD (a reshard froze the shard: call again soon), RESHARDED N M (the
--   queue has N shards, the caller used M: read NS:queues, route again),
--   UNKNOWN (bad or forged token, unknown id/attempt), CONFLICT (another
--   body was accepted already), STALE (an older attempt, or the wait is
--   over: handled, failed or timed out).
-- Counted per outcome in P counters (replies_accepted, replies_duplicate,
-- replies_conflict, replies_stale, replies_unknown); a stale reply is also
-- kept in P waits:late (the last 100, bodies cut at 1 KiB) for operators.
-- A reply to a waiting job makes it due (P waits:due = now) and wakes the
-- shard's hosts; one to a pending wait (its call has not ended) is kept in
-- it and is due when the call is acked.
-- luakiq:include keys
-- luakiq:include levels
-- luakiq:include shard
WAITS_WANTED = true
-- luakiq:include waits
-- luakiq:include tokens
-- luakiq:include args
local P = KEYS[1]
-- (not shard_keys(P): its 28 names cost a call ~35k Redis instructions,
-- and reply.lua needs three of them)
local K = W.keys({ reshard = P .. RESHARD, shards = P .. SHARDS, counters = P .. COUNTERS }, P)
local op, channel, shards, how = ARGV[1], ARGV[3], ARGV[4], ARGV[5]
local now = arg_finite("reply", "now", ARGV[2])
if (op ~= "reply" and op ~= "heartbeat") or not channel or not shards or not how then
  error("BADARG luakiq reply: ARGV must be reply|heartbeat, now, channel, shards, then token T | id ID ATTEMPT | " ..
    "key KEY ID ATTEMPT, then the body", 0)
end
local nrefs = ({ token = 1, id = 2, key = 3 })[how]
if not nrefs or #ARGV ~= 5 + nrefs + (op == "reply" and 1 or 0) then
  error("BADARG luakiq reply: after shards: token T | id ID ATTEMPT | key KEY ID ATTEMPT, then the body (op reply)", 0)
end
local body = op == "reply" and ARGV[#ARGV] or nil
local MAX_BODY = 262144
if body and #body > MAX_BODY then
  return redis.error_reply("TOOBIG luakiq reply: the body is " .. #body .. " bytes, at most " .. MAX_BODY)
end

-- A reshard moves the waits of the shard: not now
local frozen = redis.call("GET", K.reshard)
if frozen then
  return redis.error_reply("RESHARD luakiq reply: the queue is being resharded: call again in a second")
end
if shards ~= "" then
  local have = redis.call("GET", K.shards)
  if have and have ~= shards then
    return redis.error_reply("RESHARDED " .. have .. " " .. shards .. " luakiq reply: the queue has " .. have ..
      " shards, the reply used " .. shards)
  end
end

local function count(outcome) redis.call("HINCRBY", K.counters, "replies_" .. outcome, 1) end
local function unknown(why)
  count("unknown")
  return redis.error_reply("UNKNOWN luakiq reply: " .. why)
end

-- The id and attempt the caller names
local id, attempt, key
if how == "token" then
  local queue
  queue, id, attempt = read_token(redis.call("GET", K.waits_key), ARGV[6])
  if not queue or queue ~= queue_of(P) then return unknown("no such token") end
elseif how == "id" then
  id, attempt = ARGV[6], tonumber(ARGV[7])
else
  key, id, attempt = ARGV[6], ARGV[7], tonumber(ARGV[8])
end
if not attempt or attempt ~= math.floor(attempt) or attempt < 1 then
  return unknown("attempt must be a positive integer, got '" .. tostring(ARGV[#ARGV - (body and 1 or 0)]) .. "'")
end
local reply
if body then
  local ok, v = pcall(cjson.decode, body)
  if not ok then return redis.error_reply("BADJSON luakiq reply: the body is not JSON") end
  reply = v
end

-- The wait of id on that attempt: a wait, else a pending one
local w, pending = W.get(K, id), false
if not w or w.attempt ~= attempt then
  local p = W.get_pending(K, id)
  if p and p.attempt == attempt then
    w, pending = p, true
  elseif not (w and w.attempt > attempt) and not (p and p.attempt > attempt) and
      attempt > (tonumber(redis.call("GET", K.waits_seq)) or 0) then
    return unknown("no wait of '" .. id .. "' with attempt " .. attempt)
  else
    w = nil
  end
end
if w and key and w.key ~= key then w = nil end -- (the key moved on between lookup and reply)
-- A wait whose deadline was taken (its timeout is being handled, or was
-- and its holder died: lib/waits.lua, W.settle_back) is over
if w and w.kind and w.kind ~= "reply" then w = nil end
if not w then
  count("stale")
  local why = "the wait of '" .. id .. "' with attempt " .. attempt .. " is over (an older attempt, or handled, " ..
    "failed or timed out)"
  redis.call("LPUSH", K.waits_late, cmsgpack.pack(now, id, attempt, op, body and body:sub(1, 1024) or ""))
  redis.call("LTRIM", K.waits_late, 0, 99)
  return redis.error_reply("STALE luakiq reply: " .. why)
end

if op == "heartbeat" then
  if w.hb > 0 and (w.state == "waiting" or w.state == "pending") then
    w.beat = now + w.hb
    redis.call("HSET", pending and K.waits_new or K.waits, id, W.pack(w))
    if not pending then redis.call("ZADD", K.waits_due, score_str(W.due(w)), id) end
  end
  return "ok"
end

if w.reply then
  if w.reply == body then
    count("duplicate")
    return "duplicate"
  end
  count("conflict")
  return redis.error_reply("CONFLICT luakiq reply: another reply was accepted for '" .. id .. "' attempt " .. attempt)
end
-- rickover's rule, for a worker without on_reply: decided here, so every
-- entry point refuses the same bodies
if w.rule == "status" and not (type(reply) == "table" and (reply.status == "succeeded" or reply.status == "failed")) then
  return redis.error_reply("BADREPLY luakiq reply: the body must be {\"status\": \"succeeded\"} or " ..
    "{\"status\": \"failed\", \"error\": ..., \"retryable\": ...}")
end
w.reply, w.replied_at = body, now
if pending then
  redis.call("HSET", K.waits_new, id, W.pack(w))
else
  w.state = "replied"
  redis.call("HSET", K.waits, id, W.pack(w))
  redis.call("ZADD", K.waits_due, score_str(now), id)
  wake(channel, P)
end
count("accepted")
return "accepted"
