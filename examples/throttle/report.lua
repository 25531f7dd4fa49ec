-- examples/throttle/report.lua: how many calls ran at once, per region and in
-- all, from the "region start end" records of Regions (REDIS_URL).
--   luakiq lua examples/throttle/report.lua
local runtime = require "luakiq.lib.runtime"
local conn = assert(runtime.connect({ redis = os.getenv("REDIS_URL") }, 5))
local ev, count = {}, {}
for _, rec in ipairs(conn:call("LRANGE", "example:throttle:calls", 0, -1)) do
  local region, a, b = rec:match("^(%S+) (%S+) (%S+)$")
  ev[#ev + 1] = { tonumber(a), 1, region }
  ev[#ev + 1] = { tonumber(b), -1, region }
  count[region] = (count[region] or 0) + 1
end
table.sort(ev, function(x, y) if x[1] ~= y[1] then return x[1] < y[1] end return x[2] < y[2] end)
local cur, most, all, all_most = {}, {}, 0, 0
for _, e in ipairs(ev) do
  cur[e[3]] = (cur[e[3]] or 0) + e[2]
  all = all + e[2]
  if cur[e[3]] > (most[e[3]] or 0) then most[e[3]] = cur[e[3]] end
  if all > all_most then all_most = all end
end
for _, region in ipairs { "east", "north", "west" } do
  print(("%-5s %4d calls, at most %3d at once"):format(region, count[region] or 0, most[region] or 0))
end
print(("all   %4d calls, at most %3d at once"):format(#ev / 2, all_most))
