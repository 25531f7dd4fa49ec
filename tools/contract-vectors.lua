-- The producer contract's test vectors (spec/contract/*.json, docs/redis.md):
-- what the host's own modules compute for sample inputs, which every client
-- (clients/python, clients/node, clients/ruby) must compute too.
--   build/luakiq lua tools/contract-vectors.lua [DIR]   writes DIR/*.json (default spec/contract)
-- spec/contract/vectors_spec.lua loads this file (M.files()) and fails when a
-- file differs from what the host computes now: the vectors are the host's
-- behaviour, never edited by hand. Add a case here, run the tool, commit both.
--
-- Every input is JSON text, as `luakiq enqueue` reads it (a client parses
-- it with its language's JSON parser: 12345678901234567890 is then its
-- integer, -0.0 its negative zero). The files (one vector per line):
--   shard.json      {id (JSON text), id_string, shards_count, shard}
--   canonical.json  {value (JSON text), canonical | error}: the payload bytes
--                   of the host's dump_payload (luakiq.json.encode of the decoded value)
--   push.json       {namespace, worker, shards_count, now, cluster, jobs (JSON text),
--                   calls = {{key, args}...}}: the push.lua calls (KEYS[1], ARGV
--                   as Redis receives them), in the order luakiq.client sends them
--   errors.json     {jobs (JSON text), error}: the message an enqueue of the
--                   array gives (`luakiq enqueue DIR WORKER` prints "luakiq: " before it)
--   reply.json      {name, worker, shards_count, now, token | key, body, calls =
--                   {{script, key, args}...}, outcome, message}: a reply as
--                   luakiq.lib.replies sends it (`luakiq reply`: the body
--                   trimmed; waitkey.lua's lookup answers {"a", "3"}, reply.lua
--                   "accepted"), or the answer given without a call; body
--                   {body, sent | error}: `luakiq reply`'s reading of the JSON text
-- The worker is a default one (no windows, timezone, middlewares; the
-- default max_payload_bytes), whose queue is named after it.
local core = require "luakiq.core"
local json = require "luakiq.json"
local keys = require "luakiq.lib.keys"
local errors = require "luakiq.lib.errors"
local client = require "luakiq.client"
local runtime = require "luakiq.lib.runtime"

local M = {}

local function q(s) return "'" .. s:gsub("'", "'\\''") .. "'" end

-- The config of a script directory with worker A (built in a temporary
-- directory, loaded as `luakiq enqueue` loads one).
local function config()
  local dir = os.tmpname()
  os.remove(dir)
  assert(os.execute("mkdir -p " .. q(dir .. "/workers")))
  local f = assert(io.open(dir .. "/workers/A.lua", "wb"))
  f:write("return { shards_count = 4, perform = function() end }\n")
  f:close()
  local ok, cfg = pcall(runtime.load, dir)
  os.execute("rm -rf " .. q(dir))
  if not ok then error(select(2, errors.describe(cfg)), 0) end
  return cfg
end

-- A number as the host sends it to Redis (host/conn.c, conn_arg): an
-- integer below 2^53 as its digits ("-0" for -0), else %.17g.
local function redis_arg(v)
  if type(v) ~= "number" then return v end
  if v == math.floor(v) and math.abs(v) < 2 ^ 53 then
    return (1 / v < 0 and "-" or "") .. string.format("%d", math.abs(v))
  end
  return string.format("%.17g", v)
end

-- ids: JSON text of an id; counts: shards_counts to place each in
local SHARD_IDS = {
  '"1"', '"a"', '"order-1"', '"x y:{z}"', '"\\u00fc-2"', '"\\u65e5\\u672c\\u8a9e"', '"\\ud83d\\ude00"',
  '"a\\u0000b"', '"\\n"', '"' .. ("long-"):rep(40) .. '"', '"  "', '"\\u2028"',
  '0', '1', '42', '-5', '1.0', '1e3', '123456789012', '9007199254740993', '1e20', '-0.0',
}
local SHARD_COUNTS = { 1, 2, 3, 4, 5, 8, 16, 64, 1000 }

local CANONICAL = {
  -- numbers
  '0', '-0', '-0.0', '1', '-1', '1.0', '100', '1e2', '1E2', '0.1e1', '0.1', '0.2', '0.30000000000000004', '1.5',
  '-1.5', '3.141592653589793', '2.5e-8', '1e-7', '0.0001', '0.00001', '123456789012345.6', '1e15', '1e16',
  '1e21', '1e22', '1.5e300', '5e-324', '2.2250738585072014e-308', '1.7976931348623157e308', '9007199254740991',
  '9007199254740992', '9007199254740993', '-9007199254740992', '-9007199254740993', '12345678901234567890',
  '18446744073709551616', '100000000000000000000', '4.35', '1234.5678', '0.1234567890123456789', '1e400', '-1e400',
  '[1,2.5,-0.1]', '{"n":12345678901}',
  -- strings
  '""', '"a"', '"\\u2028\\u2029"', '"\226\128\168"', '"\\"\\\\\\/\\b\\f\\n\\r\\t"', '"\\u0000\\u0001\\u001f\\u007f"',
  '"\\u00e9"', '"\195\169"', '"\\ud83d\\ude00"', '"<>&\'"', '"\\u00ff\\uffff\\ue000"', '"tab\\tand\\u000bvt"',
  -- keys: sorted by their UTF-8 bytes
  '{"b":1,"a":2,"A":3,"\\u00e9":4,"e":5,"\\ud83d\\ude00":6,"\\uffff":7,"\\ue000":8,"aa":9,"a\\u0000":10,"":11,' ..
    '"~":12,"Z":13,"\\u007f":14,"\\u0080":15}',
  '{"z":{"y":1,"x":[3,2,1]},"a":0.5,"m":{"b":[{"d":1,"c":2}],"a":null}}',
  -- shapes
  '[]', '{}', '[[]]', '[{}]', '{"a":[]}', 'null', 'true', 'false', '[1,null,true,"x"]', '{"a":null}',
  '[[[[[[[[[["deep"]]]]]]]]]]', '{"s":"\\u00e9\\n\\"\\u0001","t":true,"n":12345678901}',
}

local function ids(n, fmt)
  local t = {}
  for i = 1, n do t[i] = (fmt or "{\"id\":%d}"):format(i, i) end
  return "[" .. table.concat(t, ",") .. "]"
end

-- {name, jobs (JSON text), shards_count, now, cluster, namespace}
local NOW, NOW2 = 1700000000.25, 1700000000.123456
local PUSH = {
  { "blank jobs: the ids form, each shard's ids sorted", ids(10), 4, NOW },
  { "one payload for all", '[{"id":"b","payload":{"k":1}},{"id":"a","payload":{"k":1}},{"id":"c","payload":{"k":1}}]', 1, NOW },
  { "payloads differ: the pairs form", '[{"id":"b","payload":1},{"id":"a","payload":"x"},{"id":"c","payload":[1,{}]}]', 1, NOW2 },
  { "times differ: groups of five", '[{"id":"b","perform_in":1700000100},{"id":"a","score":5},{"id":"c","retry_count":3},' ..
    '{"id":"d","perform_in":1700000000.25,"score":1700000000.5}]', 2, NOW },
  { "the same id twice", '[{"id":"x","payload":1},{"id":"x","payload":1},{"id":"x","payload":2,"score":3}]', 3, NOW },
  { "sections: expires_at, priority, tags (job order kept)", '[{"id":"b","priority":5,"tags":["z","a","z"]},' ..
    '{"id":"a","expires_at":1700003600},{"id":"c","priority":100},{"id":"d","expires_at":1e20,"priority":-1000000000}]', 1, NOW },
  { "a job's own windows (due at their next opening)", '[{"id":"w1","windows":["23:00-23:30"]},' ..
    '{"id":"w2","windows":["08:00-09:00","22:00-02:00"],"timezone":"Europe/Berlin"},{"id":"w3",' ..
    '"windows":["00:00-24:00"],"timezone":"America/New_York"},{"id":"w4","windows":["09:00-10:00"],' ..
    '"timezone":"Asia/Kolkata","perform_in":1700000000},{"id":"w5","windows":["10:00-11:00"],"timezone":"UTC"}]', 2, NOW },
  { "numbers as arguments", '[{"id":1e20,"perform_in":1e20,"score":-0.0,"retry_count":0},' ..
    '{"id":-7,"perform_in":0.1,"score":1e-7}]', 5, NOW },
  { "a Redis Cluster of Redis >= 7: SPUBLISH", ids(3), 2, NOW, true },
  { "another namespace", '[{"id":"a","payload":"p"}]', 1, NOW, false, "myapp" },
  { "1000 jobs a call", ids(1001), 1, NOW },
  { "1000 jobs a call, groups of five", ids(1001, '{"id":%d,"score":%d}'), 1, NOW },
  { "no jobs", "[]", 4, NOW },
}

local ERRORS = {
  '{"a":1}', '"x"', '[1]', '[{"id":"a"},"x"]', '[{"id":"a"},null]', '[{"id":"a","bogus":1}]', '[{"id":"a","b\\u0001":1}]',
  '[{}]', '[{"id":""}]', '[{"id":1.5}]', '[{"id":true}]', '[{"id":null}]', '[{"id":[1]}]', '[{"id":{"a":1}}]',
  '[{"id":1e400}]', '[{"id":-1e400}]', '[{"id":0.1}]', '[{"id":123456.7890123456}]',
  '[{"id":"a","perform_in":"soon"}]', '[{"id":"a","perform_in":null}]', '[{"id":"a","perform_in":1e400}]',
  '[{"id":"a","score":true}]', '[{"id":"a","retry_count":1.5}]', '[{"id":"a","retry_count":-2}]',
  '[{"id":"a","retry_count":"1"}]', '[{"id":"a","expires_at":"x"}]',
  '[{"id":"a","priority":1.5}]', '[{"id":"a","priority":"high"}]', '[{"id":"a","priority":1000000001}]',
  '[{"id":"a","priority":-1000000001}]', '[{"id":"a","priority":null}]',
  '[{"id":"a","tags":[]}]', '[{"id":"a","tags":"x"}]', '[{"id":"a","tags":{"x":1}}]', '[{"id":"a","tags":[""]}]',
  '[{"id":"a","tags":[1]}]', '[{"id":"a","tags":["' .. ("x"):rep(65) .. '"]}]', '[{"id":"a","tags":["a\\nb"]}]',
  '[{"id":"a","tags":["a\\u007fb"]}]', '[{"id":"a","tags":["\\u00e9' .. ("x"):rep(63) .. '"]}]',
  '[{"id":"a","tags":[' .. ('"t%d",'):rep(17):format(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17):sub(1, -2) .. ']}]',
  '[{"id":"a","tags":[' .. ('"t",'):rep(20):sub(1, -2) .. ',null]}]',
  '[{"id":"a","windows":[]}]', '[{"id":"a","windows":"09:00-10:00"}]', '[{"id":"a","windows":[9]}]',
  '[{"id":"a","windows":["9-5"]}]', '[{"id":"a","windows":["09:00-09:00"]}]', '[{"id":"a","windows":["24:00-01:00"]}]',
  '[{"id":"a","windows":["09:00-24:01"]}]', '[{"id":"a","windows":["09:60-10:00"]}]',
  '[{"id":"a","timezone":"UTC"}]', '[{"id":"a","windows":["09:00-10:00"],"timezone":""}]',
  '[{"id":"a","windows":["09:00-10:00"],"timezone":7}]', '[{"id":"a","windows":["09:00-10:00"],"timezone":"Mars/Base"}]',
  '[{"id":"a","windows":["09:00-10:00"],"timezone":"../etc/passwd"}]', '[{"id":"a","windows":["09:00-10:00,11:00"]}]',
  '[{"id":"a","payload":' .. ("["):rep(257) .. ("]"):rep(257) .. '}]',
  '[{"id":"a","payload":{"x":[1,{"y":1e400}]}}]', '[{"id":"a","payload":{"odd key":1e400}}]', '[{"id":"a","payload":1e400}]',
  -- the id in the message: escaped, cut at 100 bytes
  '[{"id":"a\\nb","score":"x"}]', '[{"id":"' .. ("x"):rep(150) .. '","score":"x"}]',
  '[{"id":"' .. ("a"):rep(99) .. '\\u00e9z","score":"x"}]', '[{"id":12,"score":"x"}]', '[{"id":1e20,"score":"x"}]',
  '[{"id":-0.0,"score":"x"}]', '[{"id":"\\u00e9\\t","score":"x"}]',
  -- the first bad job is named; the checks of one job come in this order
  '[{"id":"a"},{"id":"b","score":"x"},{"id":"c","score":"y"}]',
  '[{"id":"a","windows":["x"],"perform_in":"x"}]', '[{"id":"a","perform_in":"x","score":"y"}]',
  '[{"id":"a","score":"y","retry_count":"z"}]', '[{"id":"a","retry_count":-5,"payload":1e400}]',
  '[{"id":"a","payload":1e400,"expires_at":"x"}]', '[{"id":"a","expires_at":"x","priority":0.5}]',
  '[{"id":"a","priority":0.5,"tags":[]}]',
}

-- A line of a vector file: the vector as canonical JSON.
local function line(v) return json.encode(v) end

local function file(about, vectors)
  local out = { '{"about":' .. json.encode(about) .. ',\n"vectors":[' }
  for i, v in ipairs(vectors) do out[#out + 1] = line(v) .. (i < #vectors and "," or "") end
  out[#out + 1] = "]}\n"
  return table.concat(out, "\n")
end

-- The message of an input error raised by fn(...), or nil (none raised).
local function input_error(fn, ...)
  local ok, err = pcall(fn, ...)
  if ok then return nil end
  local kind, msg = errors.describe(err)
  if kind ~= "input" then error(msg, 0) end
  return msg
end

function M.shard()
  local out = {}
  for _, text in ipairs(SHARD_IDS) do
    local id = client.id_string(json.decode(text), 1)
    for _, n in ipairs(SHARD_COUNTS) do
      out[#out + 1] = { id = text, id_string = id, shards_count = n, shard = keys.shard(id, n) }
    end
  end
  return out
end

function M.canonical()
  local out = {}
  for _, text in ipairs(CANONICAL) do
    local ok, bytes = pcall(json.encode, json.decode(text))
    out[#out + 1] = ok and { value = text, canonical = bytes } or { value = text, error = bytes }
  end
  return out
end

-- The calls luakiq.client.push sends for one case: a connection that
-- records them (the registry answers shards_count; every call succeeds),
-- the clock stopped at now.
local function push_calls(cfg, c)
  local name, jobs, count, now, cluster, ns = c[1], c[2], c[3], c[4], c[5] or false, c[6] or "luakiq"
  local sent = {}
  local conn = {
    call = function(_, cmd)
      if cmd == "HGET" then return tostring(count) end
      if cmd == "INFO" then return "redis_version:7.0.15\r\n" end
      error("unexpected " .. cmd)
    end,
    cluster = function() return cluster end,
    pipeline = function(_, cmds)
      local replies = {}
      for i, cmd in ipairs(cmds) do
        assert(cmd.script == "push")
        local call = { key = cmd[1], args = {} }
        for k = 2, #cmd do call.args[k - 1] = redis_arg(cmd[k]) end
        sent[#sent + 1] = call
        replies[i] = { 1, false }
      end
      return replies
    end,
  }
  cfg.namespace = ns
  cfg.by_name.A.shards_count = count
  local real_now = core.now
  core.now = function() return now end
  local ok, err = pcall(client.push, conn, cfg, "A", json.decode(jobs))
  core.now = real_now
  cfg.namespace = "luakiq"
  if not ok then error(name .. ": " .. select(2, errors.describe(err)), 0) end
  return { name = name, namespace = ns, worker = "A", shards_count = count, now = now, cluster = cluster,
           jobs = jobs, calls = json.array(sent) }
end

function M.push()
  local cfg, out = config(), {}
  for _, c in ipairs(PUSH) do out[#out + 1] = push_calls(cfg, c) end
  return out
end

function M.errors()
  local cfg, out = config(), {}
  for _, text in ipairs(ERRORS) do
    local msg = input_error(client.validate, cfg, "A", json.decode(text))
    if not msg then error("no error for " .. text, 0) end
    out[#out + 1] = { jobs = text, error = msg }
  end
  return out
end

-- A reply as `luakiq reply` sends it: a connection that records the calls
-- (the registry answers shards_count, waitkey.lua's lookup {"a", "3"},
-- reply.lua "accepted"), the clock stopped at NOW.
local REPLY = {
  -- name, worker, token | key ("key:" prefix), body
  { "by token", "A", "1.QQ.YQ.3.0123456789abcdef0123456789abcdef", '{"answer":42}' },
  { "by token: an id that needs escapes", "A", "1.QQ.eCB5Ont6fQ.17.ffffffffffffffffffffffffffffffff", '{"ok":true}' },
  { "by token: a non-ASCII id", "A", "1.QQ.w7wtMg.2.ffffffffffffffffffffffffffffffff", '{"ok":true}' },
  { "by token: a padding-free id of every length", "A", "1.QQ.YWJj.1.00000000000000000000000000000000", '[1]' },
  { "by token: another worker's token", "A", "1.Qg.YQ.3.0123456789abcdef0123456789abcdef", '{}' },
  { "by token: not a token", "A", "nonsense", '{}' },
  { "by token: no id", "A", "1.QQ..3.0123456789abcdef", '{}' },
  { "by token: a bad base64url length", "A", "1.QQ.Y.3.0123456789abcdef", '{}' },
  { "by token: no attempt", "A", "1.QQ.YQ..0123456789abcdef", '{}' },
  { "by key", "A", "key:corr-1", '{"answer":"yes"}' },
  { "by key: non-ASCII", "A", "key:\195\169t\195\169 \226\128\168", '"text"' },
  { "by key: too long", "A", "key:" .. ("k"):rep(1025), '{}' },
  { "by key: the longest", "A", "key:" .. ("k"):rep(1024), '{}' },
}
local REPLY_BODIES = { '{"a":1}', '  {"a": 1}\n', '\t"x" ', '[1, 2]', 'null', '', '   \n', '{"a":', 'nope', '{"a":1} x', '\11"x"\12', '\194\160{}' }

local function reply_calls(cfg, c)
  local name, worker, ref, body = c[1], c[2], c[3], c[4]
  local now, count, sent = NOW, 4, {}
  local conn = {
    call = function(_, cmd)
      if cmd == "HGET" then return tostring(count) end
      error("unexpected " .. cmd)
    end,
    cluster = function() return false end,
    script = function(_, script, key, ...)
      local call = { script = script, key = key, args = {} }
      for k, v in ipairs({ ... }) do call.args[k] = redis_arg(v) end
      sent[#sent + 1] = call
      if script == "waitkey" then return { "a", "3" } end
      return "accepted"
    end,
  }
  cfg.by_name[worker] = cfg.by_name[worker] or { name = worker, queue_name = worker }
  local real_now = core.now
  core.now = function() return now end
  local replies = require "luakiq.lib.replies"
  local v = { name = name, worker = worker, shards_count = count, now = now, body = body }
  local ok, outcome, msg
  if ref:match("^key:") then
    v.key = ref:sub(5)
    ok, outcome, msg = pcall(replies.by_key, conn, cfg, worker, v.key, body)
  else
    v.token = ref
    ok, outcome, msg = pcall(replies.by_token, conn, cfg, ref, body, worker)
  end
  core.now = real_now
  if not ok then error(name .. ": " .. tostring(outcome), 0) end
  v.calls, v.outcome, v.message = json.array(sent), outcome, msg
  return v
end

function M.reply()
  local cfg, out = config(), {}
  for _, c in ipairs(REPLY) do out[#out + 1] = reply_calls(cfg, c) end
  for _, body in ipairs(REPLY_BODIES) do
    local sent = body:match("^%s*(.-)%s*$")
    if sent == "" then
      out[#out + 1] = { body = body, error = "give the reply's JSON as an argument or on stdin" }
    elseif not pcall(json.decode, sent) then
      out[#out + 1] = { body = body, error = "invalid JSON" }
    else
      out[#out + 1] = { body = body, sent = sent }
    end
  end
  return out
end

-- file name -> text of every vector file.
function M.files()
  return {
    ["shard.json"] = file("shard of an id: crc32 of the id's string form (an integer id: its digits) " ..
      "modulo shards_count (docs/redis.md, 'The shard function')", M.shard()),
    ["canonical.json"] = file("canonical JSON: the payload bytes of a value (docs/redis.md, 'Payload format'); " ..
      "value is JSON text as a client's parser reads it", M.canonical()),
    ["push.json"] = file("the push.lua calls of an enqueue (docs/redis.md, 'push.lua'): KEYS[1] and ARGV, " ..
      "in the order sent; jobs is JSON text, now the enqueue's clock", M.push()),
    ["errors.json"] = file("the input error of an enqueue of jobs (JSON text) into a default worker; " ..
      "nothing is enqueued", M.errors()),
    ["reply.json"] = file("a reply to a job that waits, as `luakiq reply` sends it (docs/redis.md, 'Jobs that " ..
      "wait for a reply'): the script calls (waitkey.lua's lookup answering {\"a\", \"3\"}) and the " ..
      "outcome, or its answer without a call; then the reading of a body given as JSON text (trimmed; " ..
      "'invalid JSON' stands for the message's start)", M.reply()),
  }
end

M.NAMES = { "shard.json", "canonical.json", "push.json", "errors.json", "reply.json" }

-- Run as a tool: writes the files.
if arg and arg[0] and arg[0]:match("contract%-vectors%.lua$") then
  local dir = arg[1] or "spec/contract"
  local files = M.files()
  for _, name in ipairs(M.NAMES) do
    local f = assert(io.open(dir .. "/" .. name, "wb"))
    f:write(files[name])
    f:close()
    io.stdout:write("wrote ", dir, "/", name, "\n")
  end
end

return M
