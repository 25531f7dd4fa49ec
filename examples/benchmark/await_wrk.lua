-- wrk's script for the benchmark's replies over HTTP (await_shape.lua):
-- `wrk -t T -c C -d D -s await_wrk.lua URL -- TOKENFILE T`. Thread k of T
-- sends POST /api/v1/replies/TOKEN {"ok":true} for the tokens k, k + T,
-- k + 2T, ... of TOKENFILE (lines "ID TOKEN"), each once, then stops
-- (wrk's own clock runs for D regardless; the driver times the replies by
-- Redis's counters and ends wrk when they are all in). A thread whose
-- tokens are all sent repeats its last one until it stops (at most C of
-- those: answered as duplicates).
local counter = 0

function setup(thread) -- (in wrk's setup environment: numbers the threads)
  counter = counter + 1
  thread:set("index", counter)
end

local paths, next_i, answered, share = {}, 1, 0, 0
local BODY = '{"ok":true}'
local HEADERS = { ["Content-Type"] = "application/json" }

function init(args)
  local total, k, i = tonumber(args[2]), index, 0
  for line in io.lines(args[1]) do
    i = i + 1
    if (i - k) % total == 0 then
      paths[#paths + 1] = "/api/v1/replies/" .. line:match("^%S+ (%S+)")
    end
  end
  share = #paths
  if share == 0 then wrk.thread:stop() end
end

-- (wrk calls the first thread's request() once before it runs, to check
-- it: that request is never sent, so it takes no token)
local checked = false

function request()
  if index == 1 and not checked then
    checked = true
    return wrk.format("POST", paths[1], HEADERS, BODY)
  end
  local p = paths[next_i] or paths[share]
  next_i = next_i + 1
  return wrk.format("POST", p, HEADERS, BODY)
end

function response(status)
  answered = answered + 1
  if answered >= share then wrk.thread:stop() end
end
