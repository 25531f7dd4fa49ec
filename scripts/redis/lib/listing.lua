-- The replies of the scripts that list jobs ("luakiq:include listing", after
-- "luakiq:include keys", whose score_str it uses): job.lua, jobs.lua and
-- busy.lua give a job's payloads as "npayloads, payload, score, ..."
-- (docs/redis.md, each script's reply).

-- Appends the payload list pl (flat: payload, score as a number, ...) to the
-- reply out: how many, then each payload and its score string.
local function put_payloads(out, pl)
  out[#out + 1] = tostring(#pl / 2)
  for k = 1, #pl, 2 do
    out[#out + 1] = pl[k]
    out[#out + 1] = score_str(pl[k + 1])
  end
end
