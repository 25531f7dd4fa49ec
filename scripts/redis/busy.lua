-- busy.lua: the shard's jobs in flight (the batch fetch.lua handed out and
-- nobody acked, failed or restored yet), in perform_in order.
-- KEYS[1] = shard prefix "NS:{QUEUE:SHARD}:".  ARGV[1] (optional):
-- "fetched_at" adds one element at the end of the reply.
-- Returns {n, then per job: id, perform_in, retry_count, error or "",
-- npayloads, payload, score, ...} (strings), then with "fetched_at" the time
-- fetch.lua fetched the batch (its `now`; "" when unknown, nothing in flight).
-- luakiq:include keys
-- luakiq:include listing
local P = KEYS[1]
local K = shard_keys(P)
local flat, jobs = redis.call("HGETALL", K.busy), {}
for i = 1, #flat, 2 do
  local pin, rc, _, _, pl = busy_decode(flat[i + 1])
  if pl then jobs[#jobs + 1] = { flat[i], pin, rc, tonumber(pin), pl } end
end
table.sort(jobs, function(a, b)
  if a[4] ~= b[4] then return a[4] < b[4] end
  return a[1] < b[1]
end)
local out = { tostring(#jobs) }
for _, j in ipairs(jobs) do
  local pl = j[5]
  out[#out + 1] = j[1]
  out[#out + 1] = j[2]
  out[#out + 1] = j[3]
  out[#out + 1] = redis.call("HGET", K.busy_errors, j[1]) or ""
  put_payloads(out, pl)
end
if ARGV[1] == "fetched_at" then out[#out + 1] = #jobs > 0 and redis.call("GET", K.busy_fetched_at) or "" end
return out
