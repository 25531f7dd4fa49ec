-- fuzz_json.lua: the Lua side of fuzz/fuzz_json.c. Loaded once in a host VM
-- (fuzz_lua_one in fuzz/fuzz_lua.c); returns the function that gets every fuzz input. It raises
-- (and the harness aborts, keeping the input) when a property fails:
--   1. luakiq.json.decode either returns a value or raises "json: ...";
--   2. the canonical encoder is a fixed point: for a decoded value v,
--      encode(v) either raises "json: ..." or gives e with
--      encode(decode(e)) == e (equal payloads must be equal bytes);
--   3. the client's job validation (perform_async, luakiq enqueue, the HTTP
--      enqueue) given the decoded value as a job array, as one job, or as a
--      payload, either accepts it, sending only well-formed push.lua calls,
--      or raises an input/notfound error - never another error;
--   4. JSON lines (luakiq enqueue's format) go through the same steps;
--   5. load_batch's view: the raw bytes as a payload to load_payload.
-- The JIT off: traces would skip the line hook that gives libFuzzer its
-- Lua coverage (fuzz_lua_hook in fuzz/fuzz_lua.c).
if jit then jit.off() jit.flush() end
local json = require "luakiq.json"
local client = require "luakiq.client"
local errors = require "luakiq.lib.errors"

local MAX = 4096
local cfg = {
  namespace = "luakiq",
  dump_payload = json.encode,
  load_payload = json.decode,
  max_payload_bytes = MAX,
  client_middlewares = {},
  by_name = { W = { name = "W", queue_name = "W", shards_count = 7 } },
}

-- Numbers may travel as numbers or as decimal strings (push.lua parses both).
local function finite(x)
  if type(x) == "string" and x:match("^[-+]?[%d.eE+-]+$") then x = tonumber(x) end
  return type(x) == "number" and x == x and x ~= math.huge and x ~= -math.huge
end

-- A Redis connection that checks what would be sent. The queue registry
-- (HGET NS:queues) is empty: the queue is new.
local sent = 0
local conn = {}
function conn:call(cmd)
  assert(cmd == "HGET", "client sent " .. tostring(cmd))
  return false
end
function conn:pipeline(cmds)
  local replies = {}
  for i, cmd in ipairs(cmds) do
    assert(cmd.script == "push", "client sent a non-push command")
    assert(type(cmd[1]) == "string" and cmd[1]:match("^luakiq:{W:%d+}:$"), "bad shard prefix")
    assert(cmd[2] == "luakiq:wake" and finite(cmd[3]), "bad channel/now")
    local n = #cmd - 3
    assert(n > 0 and n % 5 == 0 and n <= 5 * 1000, "push.lua call with " .. n .. " job arguments")
    for j = 4, #cmd, 5 do
      local id, pin, rc, score, payload = cmd[j], cmd[j + 1], cmd[j + 2], cmd[j + 3], cmd[j + 4]
      assert(type(id) == "string" and id ~= "", "bad id")
      assert(finite(pin) and finite(score), "non-finite perform_in/score sent")
      rc = tonumber(rc)
      assert(finite(rc) and rc >= -1 and rc == math.floor(rc), "bad retry_count sent")
      assert(type(payload) == "string" and #payload <= MAX, "bad payload sent")
      -- what is sent must load back (the worker's load_payload)
      local ok, e = pcall(json.decode, payload)
      assert(ok, "sent a payload that does not load: " .. tostring(e))
      sent = sent + 1
    end
    replies[i] = { 1, "1" }
  end
  return replies
end

local function expect_json_error(e, what)
  if type(e) ~= "string" or e:sub(1, 6) ~= "json: " then
    error(what .. " raised a non-json error: " .. tostring(e), 0)
  end
end

local function push(jobs)
  local ok, e = pcall(client.push, conn, cfg, "W", jobs)
  if not ok then
    local kind, msg = errors.describe(e)
    if kind ~= "input" and kind ~= "notfound" then
      error("client.push raised a " .. kind .. " error: " .. tostring(msg), 0)
    end
    assert(type(msg) == "string" and not msg:find("\n"), "input error is not one line")
  end
end

local function check_value(v)
  local ok, e1 = pcall(json.encode, v)
  if ok then
    local ok2, v2 = pcall(json.decode, e1)
    assert(ok2, "canonical output does not decode: " .. tostring(v2))
    local e2 = json.encode(v2)
    assert(e1 == e2, "encoding is not canonical: " .. e1 .. " ~= " .. e2)
  else
    expect_json_error(e1, "encode")
  end
  push(v)
  push({ v })
  push({ { id = "x", payload = v } })
  if type(v) == "table" then
    -- a job object with every field fuzzed
    push({ { id = v.id, payload = v.payload, score = v.score, perform_in = v.perform_in } })
  end
end

local function one(s)
  local ok, v = pcall(json.decode, s)
  if ok then check_value(v) else expect_json_error(v, "decode") end
end

return function(bytes)
  one(bytes)
  if bytes:find("\n", 1, true) then
    for line in (bytes .. "\n"):gmatch("([^\n]*)\n") do
      if line:match("%S") then one(line) end
    end
  end
  -- load_batch: the worker's load_payload on raw bytes from Redis
  local ok, e = pcall(cfg.load_payload, bytes)
  if not ok then expect_json_error(e, "load_payload") end
end
