local config = require "luakiq.lib.config"
local json = require "luakiq.json"
local retry = require "luakiq.lib.retry"
local splitters = require "luakiq.splitters"
local schedulers = require "luakiq.schedulers"

local function q(s) return "'" .. s:gsub("'", "'\\''") .. "'" end
local function sh(cmd) local r = os.execute(cmd) return r == 0 or r == true end

local dirs = {}
local function tmpdir(suffix)
  local d = os.tmpname()
  os.remove(d)
  d = d .. (suffix or "")
  assert(sh("mkdir -p " .. q(d)))
  dirs[#dirs + 1] = d
  return d
end

local function write(path, text)
  assert(sh("mkdir -p " .. q(path:match("^(.*)/[^/]*$"))))
  local f = assert(io.open(path, "wb"))
  f:write(text)
  f:close()
end

local PERFORM = "perform = function(batch) end"

-- A script directory from {relative path = text}; returns its path.
local function make(files, suffix)
  local d = tmpdir(suffix)
  for rel, text in pairs(files) do write(d .. "/" .. rel, text) end
  return d
end

-- The error of config.load(dir); checks it is one line starting with `file`.
local function load_error(dir, file, ...)
  local ok, e = pcall(config.load, dir, ...)
  assert.is_false(ok, "expected an error")
  assert.equal("string", type(e))
  assert.is_nil(e:find("\n"), "one line: " .. e)
  assert.equal(file, e:sub(1, #file), "starts with the file path: " .. e)
  return e
end

local function has(text, part) assert.is_truthy(text:find(part, 1, true), "'" .. part .. "' in: " .. text) end

teardown(function()
  for _, d in ipairs(dirs) do sh("rm -rf " .. q(d)) end
end)

describe("luakiq.config.load", function()
  it("loads workers with every default", function()
    local d = make { ["workers/Mail.lua"] = "return { " .. PERFORM .. " }" }
    local cfg = config.load(d)
    assert.equal(5, cfg.threads_per_node)
    assert.equal(1, cfg.poll_interval)
    local url = os.getenv("REDIS_URL")
    assert.equal((url and url ~= "") and url or "redis://127.0.0.1:6379/0", cfg.redis)
    assert.equal("luakiq", cfg.namespace)
    assert.equal(splitters.default, cfg.splitter)
    assert.equal(schedulers.lag, cfg.scheduler)
    assert.same({}, cfg.middlewares)
    assert.same({}, cfg.client_middlewares)
    assert.is_nil(cfg.on_server_init)
    assert.is_nil(cfg.last_words)
    assert.equal(json.encode, cfg.dump_payload)
    assert.equal(json.decode, cfg.load_payload)
    assert.equal("boom", cfg.format_error("boom"))
    assert.equal("x", cfg.dump_error("x"))
    assert.is_nil(cfg.load_error(nil))
    assert.is_nil(cfg.web)
    assert.is_nil(cfg.web_token)
    assert.equal(30, cfg.lease_ttl)
    assert.equal(10, cfg.lease_renew)
    assert.equal(1048576, cfg.max_payload_bytes)
    assert.equal(d, cfg.dir)
    assert.equal(1, #cfg.workers)
    local w = cfg.workers[1]
    assert.equal("Mail", w.name)
    assert.equal("Mail", w.queue_name)
    assert.equal(5, w.shards_count)
    assert.equal(1, w.batch_size)
    assert.same({ 300, true, 10 }, { w.fetch_size, w.fetch_auto, w.fetch_start }) -- adapts, from 10 up to 100
    assert.equal(25, w.max_retry_count)
    assert.equal(retry.default, w.retry_in)
    assert.equal("function", type(w.perform))
    assert.is_nil(w.retries_exhausted)
    assert.equal(d .. "/workers/Mail.lua", w.file)
    assert.equal(w, cfg.by_name.Mail)
  end)

  it("defaults timeout to config.lua's (600 s unless set there); a worker's own wins", function()
    local d = make { ["workers/A.lua"] = "return { perform = function() end }",
                     ["workers/B.lua"] = "return { timeout = 2.5, perform = function() end }" }
    local cfg = config.load(d)
    assert.same({ 600, 2.5 }, { cfg.by_name.A.timeout, cfg.by_name.B.timeout })
    d = make { ["config.lua"] = "return { timeout = 30 }", ["workers/A.lua"] = "return { perform = function() end }" }
    assert.equal(30, config.load(d).by_name.A.timeout)
  end)

  it("reads the keys of jobs that wait for a reply: on_reply, reply_timeout (86400), await_releases_units, public_url", function()
    local d = make { ["workers/A.lua"] = "return { perform = function() end }",
                     ["workers/B.lua"] = "return { on_reply = function() end, reply_timeout = 60, " ..
                       "await_releases_units = true, perform = function() end }" }
    local cfg = config.load(d)
    local a, b = cfg.by_name.A, cfg.by_name.B
    assert.same({ 86400, false }, { a.reply_timeout, a.await_releases_units })
    assert.is_nil(a.on_reply)
    assert.same({ "function", 60, true }, { type(b.on_reply), b.reply_timeout, b.await_releases_units })
    assert.equal(os.getenv("LUAKIQ_PUBLIC_URL") ~= "" and os.getenv("LUAKIQ_PUBLIC_URL") or nil, cfg.public_url)
    -- (trailing slashes go: await adds "/api/v1/replies/TOKEN")
    d = make { ["config.lua"] = "return { public_url = 'https://jobs.example.com/luakiq//' }",
               ["workers/A.lua"] = "return { perform = function() end }" }
    assert.equal("https://jobs.example.com/luakiq", config.load(d).public_url)
  end)

  it("refuses a bad LUAKIQ_PUBLIC_URL with one line, as config.lua's public_url", function()
    local host = require "helpers.host"
    local d = make { ["workers/A.lua"] = "return { perform = function() end }" }
    local rc, _, err = host.exec("plan " .. q(d), nil, "LUAKIQ_PUBLIC_URL=jobs.example.com")
    assert.equal(2, rc)
    has(err, 'LUAKIQ_PUBLIC_URL must be an http:// or https:// URL without spaces, query or fragment ' ..
      '(e.g. "https://jobs.example.com"), got "jobs.example.com"')
    assert.is_true(host.one_line(err), err)
    rc, _, err = host.exec("plan " .. q(d), nil, "LUAKIQ_PUBLIC_URL=http://127.0.0.1:8080/")
    assert.equal(0, rc, err)
  end)

  it("adapts fetch_size between batch_size and max(batch_size, 300) unless given or fixed by the worker's kind", function()
    local d = make { ["workers/A.lua"] = "return { batch_size = 200, perform = function() end }",
                     ["workers/B.lua"] = "return { fetch_size = 64, perform = function() end }",
                     ["workers/C.lua"] = "return { batch_size = 3, delivery = 'at_most_once', perform = function() end }",
                     ["workers/D.lua"] = "return { batch_size = 3, concurrency = 2, perform = function() end }",
                     ["workers/E.lua"] = "return { batch_size = 3, throttle = function() return true end, " ..
                       "perform = function() end }" }
    local by = config.load(d).by_name
    local function f(w) return { w.batch_size, w.fetch_size, w.fetch_auto or false } end
    assert.same({ 200, 300, true }, f(by.A))
    assert.equal(200, by.A.fetch_start)
    assert.equal(1048576, by.A.fetch_bytes)
    assert.same({ 1, 64, false }, f(by.B))
    assert.same({ 3, 3, false }, f(by.C))
    assert.same({ 3, 3, false }, f(by.D))
    assert.same({ 3, 10, false }, f(by.E))
  end)

  it("keeps a worker's own settings", function()
    local d = make { ["workers/orders.lua"] = [[
      return { name = "Orders", queue_name = "orders_v2", shards_count = 24, batch_size = 10,
               max_retry_count = 0, retry_in = function(c) return 10 end,
               retries_exhausted = function(jobs) end, perform = function() end }]] }
    local w = config.load(d).workers[1]
    assert.equal("Orders", w.name)
    assert.equal("orders_v2", w.queue_name)
    assert.equal(24, w.shards_count)
    assert.equal(10, w.batch_size)
    assert.same({ 300, true, 10 }, { w.fetch_size, w.fetch_auto, w.fetch_start })
    assert.equal(0, w.max_retry_count)
    assert.equal(10, w.retry_in(3))
    assert.equal("function", type(w.retries_exhausted))
  end)

  it("orders workers by name, or as config.workers says", function()
    local files = {
      ["workers/B.lua"] = "return { " .. PERFORM .. " }",
      ["workers/A.lua"] = "return { " .. PERFORM .. " }",
      ["workers/C.lua"] = "return { " .. PERFORM .. " }",
      ["workers/README.md"] = "not a worker",
      ["workers/.hidden.lua"] = "syntax error here",
    }
    local cfg = config.load(make(files))
    assert.same({ "A", "B", "C" }, { cfg.workers[1].name, cfg.workers[2].name, cfg.workers[3].name })
    files["config.lua"] = 'return { workers = { "C", "A", "B" } }'
    cfg = config.load(make(files))
    assert.same({ "C", "A", "B" }, { cfg.workers[1].name, cfg.workers[2].name, cfg.workers[3].name })
  end)

  it("applies every setting of config.lua and resolves the scheduler", function()
    local d = make {
      ["config.lua"] = [[
        local splitters = require "luakiq.splitters"
        return {
          threads_per_node = 3, poll_interval = 0.5, redis = "redis://h:1/2", namespace = "app",
          splitter = splitters.by_node(2, 1), scheduler = "seq",
          middlewares = { function(w, b, n) return n() end }, client_middlewares = {},
          on_server_init = function() end, last_words = function(e) end,
          dump_payload = function(v) return v end, load_payload = function(s) return s end,
          format_error = function(e) return "E" end, dump_error = function(e) return e end,
          load_error = function(e) return e end, web = "127.0.0.1:8080", web_token = "t",
          lease_ttl = 20, lease_renew = 5, max_payload_bytes = 1000,
          redis_timeout = 3, redis_retry = 0, dump_path = "/tmp/x",
        }]],
      ["workers/A.lua"] = "return { " .. PERFORM .. " }",
    }
    local cfg = config.load(d)
    assert.equal(3, cfg.threads_per_node)
    assert.equal(0.5, cfg.poll_interval)
    assert.equal("redis://h:1/2", cfg.redis)
    assert.equal("app", cfg.namespace)
    assert.equal(schedulers.seq, cfg.scheduler)
    assert.equal(1, #cfg.middlewares)
    assert.equal("E", cfg.format_error("x"))
    assert.equal("127.0.0.1:8080", cfg.web)
    assert.equal(20, cfg.lease_ttl)
    assert.same({ { { worker = "A", shard = 1 }, { worker = "A", shard = 3 } } },
      cfg.splitter({ { worker = "A", shard = 0 }, { worker = "A", shard = 1 }, { worker = "A", shard = 2 },
                     { worker = "A", shard = 3 } }, 1))
  end)

  it("accepts splitter = \"elastic\" and luakiq.splitters.elastic, the same (cfg.elastic)", function()
    for _, text in ipairs { "'elastic'", "require('luakiq.splitters').elastic" } do
      local d = make {
        ["config.lua"] = "return { splitter = " .. text .. " }",
        ["workers/A.lua"] = "return { " .. PERFORM .. " }",
      }
      local cfg = config.load(d)
      assert.equal(splitters.elastic, cfg.splitter)
      assert.is_true(cfg.elastic)
    end
    local d = make { ["workers/A.lua"] = "return { " .. PERFORM .. " }" }
    assert.is_false(config.load(d).elastic)
  end)

  it("accepts a scheduler function", function()
    local d = make {
      ["config.lua"] = "return { scheduler = function(ctx) return function() end end }",
      ["workers/A.lua"] = "return { " .. PERFORM .. " }",
    }
    assert.equal("function", type(config.load(d).scheduler))
  end)

  it("puts DIR on package.path so workers can require their libs", function()
    local d = make {
      ["lib/helper_for_spec_xyz.lua"] = "return { answer = 42 }",
      ["lib/pkg_for_spec_xyz/init.lua"] = "return { answer = 43 }",
      ["workers/A.lua"] = [[
        local h = require "lib.helper_for_spec_xyz"
        local p = require "lib.pkg_for_spec_xyz"
        return { shards_count = h.answer, batch_size = p.answer, perform = function() end }]],
    }
    local w = config.load(d .. "/").workers[1]
    assert.equal(42, w.shards_count)
    assert.equal(43, w.batch_size)
    assert.equal(d .. "/?.lua;" .. d .. "/?/init.lua;", package.path:sub(1, 2 * #d + 19))
    config.load(d)
    local prefix = d .. "/?.lua;"
    local first, second = package.path:find(prefix, 1, true)
    assert.is_nil(package.path:find(prefix, second + 1, true), "added once")
  end)

  it("uses an injected list_dir", function()
    local d = make {
      ["workers/A.lua"] = "return { " .. PERFORM .. " }",
      ["workers/B.lua"] = "return { " .. PERFORM .. " }",
    }
    local asked
    local cfg = config.load(d, function(path) asked = path return { "B.lua" } end)
    assert.equal(d .. "/workers", asked)
    assert.equal(1, #cfg.workers)
    assert.equal("B", cfg.workers[1].name)
    local e = load_error(d, d .. "/workers", function(path) return nil, path .. ": Permission denied" end)
    has(e, "Permission denied")
  end)
end)

describe("luakiq.config.load errors", function()
  local W = "return { " .. PERFORM .. " }"

  it("a syntax error names the file and line", function()
    local d = make { ["config.lua"] = "return {\n  threads_per_node = ,\n}", ["workers/A.lua"] = W }
    local e = load_error(d, d .. "/config.lua:2:")
    has(e, "unexpected symbol")
    d = make { ["workers/A.lua"] = "return {\n\n  perform = function( end }" }
    load_error(d, d .. "/workers/A.lua:3:")
  end)

  it("a file that raises names the file and line, even under a long path", function()
    local d = make({ ["workers/A.lua"] = "local x = 1\nerror('kaput')\nreturn {}" }, string.rep("_long", 15))
    assert.is_true(#d > 60)
    local e = load_error(d, d .. "/workers/A.lua:2:")
    has(e, "kaput")
    d = make { ["workers/A.lua"] = "error({})" }
    load_error(d, d .. "/workers/A.lua: table")
    d = make { ["workers/A.lua"] = "require 'lib.missing_for_spec_xyz'" }
    e = load_error(d, d .. "/workers/A.lua:1:")
    has(e, "lib.missing_for_spec_xyz")
  end)

  it("a file must return a table", function()
    local d = make { ["workers/A.lua"] = "return 5" }
    has(load_error(d, d .. "/workers/A.lua"), "must return a table, got number")
    d = make { ["config.lua"] = "", ["workers/A.lua"] = W }
    has(load_error(d, d .. "/config.lua"), "must return a table, got nil")
  end)

  it("unknown keys are named, with a hint for typos", function()
    local d = make { ["config.lua"] = "return { thread_per_node = 3 }", ["workers/A.lua"] = W }
    has(load_error(d, d .. "/config.lua"), "unknown key 'thread_per_node' (did you mean 'threads_per_node'?)")
    d = make { ["workers/A.lua"] = "return { shard_count = 3, " .. PERFORM .. " }" }
    has(load_error(d, d .. "/workers/A.lua"), "unknown key 'shard_count' (did you mean 'shards_count'?)")
    d = make { ["workers/A.lua"] = "return { frobnicate = 3, " .. PERFORM .. " }" }
    local e = load_error(d, d .. "/workers/A.lua")
    has(e, "unknown key 'frobnicate'")
    assert.is_nil(e:find("did you mean", 1, true))
    d = make { ["workers/A.lua"] = "return { 'x', " .. PERFORM .. " }" }
    has(load_error(d, d .. "/workers/A.lua"), "unknown key [1]")
    d = make { ["workers/A.lua"] = "return { file = 'x', " .. PERFORM .. " }" }
    has(load_error(d, d .. "/workers/A.lua"), "unknown key 'file'")
  end)

  local function config_case(text, parts)
    local d = make { ["config.lua"] = "return { " .. text .. " }", ["workers/A.lua"] = W }
    local e = load_error(d, d .. "/config.lua")
    for _, p in ipairs(parts) do has(e, p) end
  end

  local function worker_case(text, parts)
    local d = make { ["workers/A.lua"] = "return { " .. text .. " }" }
    local e = load_error(d, d .. "/workers/A.lua")
    for _, p in ipairs(parts) do has(e, p) end
  end

  it("wrong types and ranges in config.lua", function()
    config_case("threads_per_node = 0", { "threads_per_node must be an integer from 1 to 1024, got 0" })
    config_case("threads_per_node = 2.5", { "threads_per_node must be an integer from 1 to 1024" })
    config_case("threads_per_node = '3'", { 'threads_per_node must be an integer from 1 to 1024, got "3"' })
    config_case("poll_interval = 0", { "poll_interval must be a number > 0" })
    config_case("poll_interval = -1", { "poll_interval" })
    config_case("poll_interval = 1/0", { "poll_interval" })
    config_case("redis = 5", { "redis must be a non-empty string, got 5" })
    config_case("redis = ''", { "redis must be a non-empty string" })
    config_case("namespace = 'a b'", { "namespace must be" })
    config_case("namespace = '{x}'", { "namespace must be" })
    config_case("middlewares = { 1 }", { "middlewares must be an array of functions" })
    config_case("client_middlewares = print", { "client_middlewares must be an array of functions" })
    config_case("scheduler = 'fast'", { 'scheduler must be "lag", "seq" or a function(ctx), got "fast"' })
    config_case("splitter = 'default'", { 'splitter must be "elastic" or a function', 'got "default"' })
    config_case("splitter = 'elastik'", { 'splitter must be "elastic" or a function', 'got "elastik"' })
    config_case("last_words = true", { "last_words must be a function, got boolean" })
    config_case("dump_payload = {}", { "dump_payload must be a function, got table" })
    config_case("workers = 'A'", { "workers must be an array of worker names" })
    config_case("workers = { 1 }", { "workers must be an array of worker names" })
    config_case("max_payload_bytes = 0", { "max_payload_bytes must be a positive integer" })
    config_case("public_url = 'jobs.example.com'", { "public_url must be an http:// or https:// URL", 'got "jobs.example.com"' })
    config_case("public_url = 'https://a b'", { "public_url must be an http:// or https:// URL" })
    config_case("public_url = 'https://a/?x=1'", { "public_url must be an http:// or https:// URL" })
    config_case("public_url = 5", { "public_url must be an http:// or https:// URL", "got 5" })
    config_case("lease_ttl = 0", { "lease_ttl must be a number > 0" })
    config_case("lease_ttl = 10, lease_renew = 10", { "lease_renew (10) must be less than lease_ttl (10)" })
    config_case("timeout = 0", { "timeout must be a number > 0, got 0" })
    config_case("timeout = -5", { "timeout must be a number > 0" })
    config_case("timeout = 0/0", { "timeout must be a number > 0" })
    config_case("timeout = '30'", { 'timeout must be a number > 0, got "30"' })
  end)

  it("wrong types and ranges in a worker", function()
    worker_case("shards_count = 0, " .. PERFORM, { "shards_count must be an integer from 1 to 16384, got 0" })
    worker_case("shards_count = 1.5, " .. PERFORM, { "shards_count must be an integer from 1 to 16384, got 1.5" })
    worker_case("shards_count = '5', " .. PERFORM, { "shards_count must be an integer from 1 to 16384" })
    worker_case("batch_size = 0, " .. PERFORM, { "batch_size must be a positive integer" })
    worker_case("batch_size = -3, " .. PERFORM, { "batch_size must be a positive integer" })
    worker_case("fetch_size = 0, " .. PERFORM, { "fetch_size must be a positive integer" })
    worker_case("batch_size = 5, fetch_size = 3, " .. PERFORM, { "fetch_size (3) must be >= batch_size (5)" })
    worker_case("max_retry_count = -1, " .. PERFORM, { "max_retry_count must be a non-negative integer" })
    worker_case("max_retry_count = 0.5, " .. PERFORM, { "max_retry_count must be a non-negative integer" })
    worker_case("retry_in = 10, " .. PERFORM, { "retry_in must be a function, got 10" })
    worker_case("retries_exhausted = 'x', " .. PERFORM, { "retries_exhausted must be a function" })
    worker_case("perform = 'x'", { "perform must be a function, got \"x\"" })
    worker_case("timeout = 0, " .. PERFORM, { "timeout must be a number > 0, got 0" })
    worker_case("timeout = 1/0, " .. PERFORM, { "timeout must be a number > 0" })
    worker_case("timeout = '10s', " .. PERFORM, { "timeout must be a number > 0" })
    worker_case("name = '', " .. PERFORM, { "name must be a non-empty string" })
    worker_case("queue_name = 'a{b}', " .. PERFORM, { "queue_name must be" })
    worker_case("on_reply = true, " .. PERFORM, { "on_reply must be a function, got boolean" })
    worker_case("reply_timeout = 0, " .. PERFORM, { "reply_timeout must be a number > 0, got 0" })
    worker_case("reply_timeout = 1/0, " .. PERFORM, { "reply_timeout must be a number > 0" })
    worker_case("await_releases_units = 1, " .. PERFORM, { "await_releases_units must be true or false, got 1" })
    worker_case("on_replay = print, " .. PERFORM, { "unknown key 'on_replay' (did you mean 'on_reply'?)" })
  end)

  it("a worker without perform", function()
    worker_case("shards_count = 2", { "perform is required" })
  end)

  it("a file name that cannot be a worker name", function()
    local d = make { ["workers/my worker.lua"] = W }
    has(load_error(d, d .. "/workers/my worker.lua"), "rename the file or set `name`")
  end)

  it("unknown, repeated and unlisted names in workers", function()
    local base = { ["workers/A.lua"] = W, ["workers/B.lua"] = W }
    local function case(list, part)
      local files = { ["config.lua"] = "return { workers = " .. list .. " }" }
      for k, v in pairs(base) do files[k] = v end
      local d = make(files)
      has(load_error(d, d .. "/config.lua"), part)
    end
    case("{ 'A', 'B', 'Zed' }", "workers: unknown worker 'Zed'")
    case("{ 'A', 'B', 'A' }", "workers: 'A' is listed twice")
    case("{ 'A' }", "workers: worker 'B'")
  end)

  it("duplicate worker names and queue names", function()
    local d = make { ["workers/A.lua"] = W, ["workers/B.lua"] = "return { name = 'A', " .. PERFORM .. " }" }
    local e = load_error(d, d .. "/workers/B.lua")
    has(e, "name 'A' is already used by " .. d .. "/workers/A.lua")
    d = make { ["workers/A.lua"] = W, ["workers/B.lua"] = "return { queue_name = 'A', " .. PERFORM .. " }" }
    has(load_error(d, d .. "/workers/B.lua"), "queue_name 'A' is already used by")
  end)

  it("a missing or empty workers directory", function()
    local d = make { ["config.lua"] = "return {}" }
    has(load_error(d, d .. "/workers"), "missing directory")
    d = make { ["workers/README.md"] = "x" }
    has(load_error(d, d .. "/workers"), "no worker files")
    d = tmpdir()
    has(load_error(d .. "/nope", d .. "/nope/workers"), "missing directory")
  end)
end)

describe("luakiq.config.apply_overrides", function()
  local function cfg() return config.defaults() end

  it("sets redis, threads and web", function()
    local c = config.apply_overrides(cfg(), { redis = "redis://x:1/0", threads = 7, web = "127.0.0.1:1" })
    assert.equal("redis://x:1/0", c.redis)
    assert.equal(7, c.threads_per_node)
    assert.equal("127.0.0.1:1", c.web)
    assert.equal(2, config.apply_overrides(cfg(), { threads_per_node = "2" }).threads_per_node)
    assert.equal(5, config.apply_overrides(cfg(), {}).threads_per_node)
  end)

  it("refuses bad values and unknown keys", function()
    assert.has_error(function() config.apply_overrides(cfg(), { threads = 0 }) end,
      "--threads must be an integer from 1 to 1024, got 0")
    assert.has_error(function() config.apply_overrides(cfg(), { threads = "x" }) end)
    assert.has_error(function() config.apply_overrides(cfg(), { redis = "" }) end, "--redis must be a non-empty string")
    assert.has_error(function() config.apply_overrides(cfg(), { colour = 1 }) end,
      "config.apply_overrides: unknown override 'colour'")
  end)
end)
