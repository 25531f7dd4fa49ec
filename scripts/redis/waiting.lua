-- waiting.lua: one shard's jobs that wait for a reply, and its late
-- replies, for operators (luakiq waiting, the dashboard's Waiting view;
-- docs/redis.md, "Waits"). Read only.
-- KEYS[1] = shard prefix "NS:{QUEUE:SHARD}:".
-- ARGV "list", cursor, count: one HSCAN step of P waits (cursor "0" to
--   start, count 1..1000). Returns {next_cursor, then per wait: id, attempt,
--   state ("waiting", "replied", "handling"), since, deadline, heartbeat
--   deadline or "", key or ""}; next_cursor "0" ends the walk (HSCAN's
--   rules: an entry present for the whole walk is returned, maybe twice).
-- ARGV "late", count: the last count (1..100) stale replies kept in
--   P waits:late, newest first: {n, then per reply: at, id, attempt, op
--   ("reply" or "heartbeat"), body (cut at 1 KiB)}.
-- luakiq:include keys
-- luakiq:include levels
-- luakiq:include shard
WAITS_WANTED = true
-- luakiq:include waits
-- luakiq:include args
local P = KEYS[1]
local K = W.keys(shard_keys(P), P)
local op = ARGV[1]
if op == "list" then
  local cursor = ARGV[2]
  if not cursor or not cursor:match("^%d+$") then error("BADARG luakiq waiting: cursor must be digits, got '" .. tostring(cursor) .. "'", 0) end
  local count = arg_count("waiting", "count", ARGV[3])
  if count < 1 or count > 1000 then error("BADARG luakiq waiting: count must be 1..1000, got '" .. ARGV[3] .. "'", 0) end
  local r = redis.call("HSCAN", K.waits, cursor, "COUNT", tostring(count))
  local out, flat = { r[1] }, r[2]
  for i = 1, #flat, 2 do
    local w = W.unpack(flat[i + 1])
    if w then
      out[#out + 1] = flat[i]
      out[#out + 1] = tostring(w.attempt)
      out[#out + 1] = w.state
      out[#out + 1] = score_str(w.since)
      out[#out + 1] = score_str(w.deadline)
      out[#out + 1] = w.beat and score_str(w.beat) or ""
      out[#out + 1] = w.key or ""
    end
  end
  return out
elseif op == "late" then
  local count = arg_count("waiting", "count", ARGV[2])
  if count < 1 or count > 100 then error("BADARG luakiq waiting: count must be 1..100, got '" .. ARGV[2] .. "'", 0) end
  local out = { "0" }
  for _, e in ipairs(redis.call("LRANGE", K.waits_late, 0, count - 1)) do
    local ok, at, id, attempt, what, body = pcall(cmsgpack.unpack, e)
    if ok and type(id) == "string" then
      out[#out + 1] = score_str(at)
      out[#out + 1] = id
      out[#out + 1] = tostring(attempt)
      out[#out + 1] = tostring(what)
      out[#out + 1] = tostring(body)
    end
  end
  out[1] = tostring((#out - 1) / 5)
  return out
end
error("BADARG luakiq waiting: ARGV must be list, cursor, count or late, count", 0)
