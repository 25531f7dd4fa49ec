-- busy.lua: the shard's jobs in flight (the batch fetch.lua handed out and
-- nobody acked, failed or restored yet), in perform_in order.
-- KEYS[1] = shard prefix "NS:{QUEUE:SHARD}:".  No ARGV.
-- Returns {n, then per job: id, perform_in, retry_count, error or "",
-- npayloads, payload, score, ...} (strings).
local P = KEYS[1]
local flat, jobs = redis.call("HGETALL", P .. "busy"), {}
for i = 1, #flat, 2 do
  local pin, rc = string.match(flat[i + 1], "^(.-)\n(.*)$")
  jobs[#jobs + 1] = { flat[i], pin or "0", rc or "-1", tonumber(pin) or 0 }
end
table.sort(jobs, function(a, b)
  if a[4] ~= b[4] then return a[4] < b[4] end
  return a[1] < b[1]
end)
local out = { tostring(#jobs) }
for _, j in ipairs(jobs) do
  local pl = redis.call("ZRANGE", P .. "busy:payloads:" .. j[1], 0, -1, "WITHSCORES")
  out[#out + 1] = j[1]
  out[#out + 1] = j[2]
  out[#out + 1] = j[3]
  out[#out + 1] = redis.call("HGET", P .. "busy:errors", j[1]) or ""
  out[#out + 1] = tostring(#pl / 2)
  for k = 1, #pl do out[#out + 1] = pl[k] end
end
return out
