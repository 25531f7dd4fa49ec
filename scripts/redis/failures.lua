-- failures.lua: one bounded step of a walk over the stored errors of a
-- shard, grouped by error_group (lib/groups.lua; docs/operations.md,
-- "Failures"). The caller walks with the cursor until it comes back "0";
-- each call does one HSCAN of about `count` entries, so no call keeps Redis
-- busy however many jobs failed.
-- KEYS[1] = shard prefix "NS:{QUEUE:SHARD}:".
-- ARGV[1] where: "queued" (P errors: queued jobs with an error, i.e. waiting
--         for a retry or requeued from the morgue) or "dead" (P morgue:errors),
--      [2] cursor ("0" to start), [3] count (the HSCAN COUNT hint, 1..10000),
--      [4] group ("" = every group), [5] samples (ids returned per group, 0..100;
--          only without a group).
-- Returns, without a group: {next cursor, n, then n times: group, count,
--   k, k sample ids} (the groups of this step only: the caller adds up);
-- with a group: {next cursor, the ids whose error is in that group}.
-- Read only.
-- luakiq:include keys
-- luakiq:include args
-- luakiq:include groups
local K = shard_keys(KEYS[1])
local where, cursor = ARGV[1], ARGV[2]
local hash = ({ queued = K.errors, dead = K.morgue_errors })[where]
if not hash then error("BADARG luakiq failures: where must be queued or dead, got '" .. tostring(where) .. "'", 0) end
if not (cursor and string.match(cursor, "^%d+$")) then
  error("BADARG luakiq failures: cursor must be an integer >= 0, got '" .. tostring(cursor) .. "'", 0)
end
local count = arg_count("failures", "count", ARGV[3])
if count < 1 or count > 10000 then error("BADARG luakiq failures: count must be 1..10000, got '" .. ARGV[3] .. "'", 0) end
local group = ARGV[4] or ""
local samples = arg_count("failures", "samples", ARGV[5] or "0")
if samples > 100 then error("BADARG luakiq failures: samples must be 0..100, got '" .. ARGV[5] .. "'", 0) end
local r = redis.call("HSCAN", hash, cursor, "COUNT", count)
local flat = r[2]
if group ~= "" then
  local out = { r[1] }
  for i = 1, #flat, 2 do
    if error_group(flat[i + 1], flat[i]) == group then out[#out + 1] = flat[i] end
  end
  return out
end
local by, order = {}, {}
for i = 1, #flat, 2 do
  local g = error_group(flat[i + 1], flat[i])
  local e = by[g]
  if not e then
    e = { n = 0, ids = {} }
    by[g], order[#order + 1] = e, g
  end
  e.n = e.n + 1
  if #e.ids < samples then e.ids[#e.ids + 1] = flat[i] end
end
local out = { r[1], tostring(#order) }
for _, g in ipairs(order) do
  local e = by[g]
  out[#out + 1] = g
  out[#out + 1] = tostring(e.n)
  out[#out + 1] = tostring(#e.ids)
  for _, id in ipairs(e.ids) do out[#out + 1] = id end
end
return out
