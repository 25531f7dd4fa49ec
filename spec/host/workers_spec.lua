-- The ready-made workers (workers/, docs/workers.md) end to end: the real
-- binary, a real redis-server, a real HTTP server (spec/helpers/httpd.py) for
-- the webhook and real child processes for the command worker. Also
-- luakiq.process.run and the failure values luakiq.permanent/retry_after.
local core = require "luakiq.core"
local json = require "luakiq.json"
local host = require "helpers.host"
local httpd = require "helpers.httpd"
local q = host.quote

local srv, env = host.fixture()

local function jobs(dir, worker, which) return host.jobs(dir, worker, which, env()) end
local function length(dir) return host.stats(dir, env()).total end

-- plan loads and validates DIR without Redis: rc, the first line of stderr
local function load(dir)
  local rc, _, err = host.exec("plan " .. q(dir))
  return rc, (err or ""):match("^[^\n]*")
end

local function alive(pid) return host.sh("kill -0 " .. pid .. " 2>/dev/null") end

-- A process that is gone, not a zombie: /proc/PID is removed once reaped.
local function reaped(pid) return not host.sh("test -e /proc/" .. pid) end

describe("luakiq.workers.command", function()
  local dir, proc, out
  local function start(worker_src, config)
    out = host.tmpdir()
    dir = host.scriptdir {
      ["config.lua"] = config or "return { threads_per_node = 1, poll_interval = 0.2 }",
      ["workers/Cmd.lua"] = worker_src:gsub("OUT", out),
    }
    proc = host.spawn("run " .. q(dir), env())
  end
  before_each(function() srv.conn:call("FLUSHALL") end)
  host.stop_after_each(function() return proc, dir, out end)

  -- the program: saves its stdin, exits with the code named by the job id
  -- ("ok" 0, "bad" 65, "fail" 3), writing two stderr lines first
  local PROGRAM = [=[
return require("luakiq.workers.command") {
  argv = { "sh", "-c", 'cat > "$1/$$.json"; echo "first line" >&2; ' ..
    'case "$(cat "$1/$$.json")" in *\"bad\"*) echo "bad data in $$" >&2; exit 65;; ' ..
    '*\"fail\"*) echo "try again later" >&2; exit 3;; esac; exit 0', "cmd", "OUT" },
  shards_count = 1, batch_size = 2, max_retry_count = 5,
  retry_in = function() return 60 end,
}
]=]

  it("runs argv once per call with the call's jobs as canonical JSON on stdin; exit 0 is done", function()
    start(PROGRAM)
    host.enqueue(dir, "Cmd", { { id = "ok", payload = { b = 2, a = 1 } }, { id = "ok2", payload = "x" } }, env())
    host.eventually(function() local t = length(dir) return t.length == 0 and #host.lines("ls " .. q(out)) == 1 end,
      10, "the call ran")
    local file = host.lines("ls " .. q(out))[1]
    local body = host.read(out .. "/" .. file)
    assert.are.equal('{"jobs":[{"id":"ok","payloads":[{"a":1,"b":2}]},{"id":"ok2","payloads":["x"]}],"worker":"Cmd"}',
      body)
    core.sleep(0.5)
    assert.are.equal(0, length(dir).morgue_length)
    assert.are.same({}, jobs(dir, "Cmd", "queue"))
  end)

  it("exit 65 is permanent: the morgue at once, with the last stderr line as the error", function()
    start(PROGRAM)
    host.enqueue(dir, "Cmd", { { id = "bad", payload = 1 } }, env())
    local dead = host.eventually(function() return jobs(dir, "Cmd", "morgue").bad end, 10, "bad in the morgue")
    assert.truthy(dead.error:find("^bad data in %d+$"), dead.error)
    assert.are.same({}, jobs(dir, "Cmd", "queue"))
  end)

  it("another exit code is a failure that takes retry_in, with the last stderr line as the error", function()
    start(PROGRAM)
    host.enqueue(dir, "Cmd", { { id = "fail", payload = 1 } }, env())
    local j = host.eventually(function()
      local x = jobs(dir, "Cmd", "queue").fail
      return x and x.retry_count == 0 and x
    end, 10, "fail retried")
    assert.are.equal("try again later", j.error)
    assert.is_true(j.perform_in > core.now() + 50, "retry_in was not used")
    assert.are.equal(0, length(dir).morgue_length)
  end)

  it("at the timeout the process group gets TERM, then KILL 2 s later; the call fails with timeout; no zombie", function()
    -- the program ignores TERM and starts a grandchild; both must go
    start([=[
return require("luakiq.workers.command") {
  argv = { "sh", "-c", 'trap "" TERM; echo $$ > "$1/pid"; sleep 60 & echo $! > "$1/child"; wait', "cmd", "OUT" },
  shards_count = 1, max_retry_count = 0, timeout = 1,
}
]=])
    host.enqueue(dir, "Cmd", { { id = "stuck" } }, env())
    local pid = host.eventually(function() return tonumber(host.read(out .. "/pid")) end, 10, "the program started")
    local child = host.eventually(function() return tonumber(host.read(out .. "/child")) end, 10, "the grandchild")
    local t0 = core.now()
    local dead = host.eventually(function() return jobs(dir, "Cmd", "morgue").stuck end, 10, "stuck failed")
    assert.truthy(dead.error:find("^timeout"), dead.error)
    -- TERM was ignored: KILL came ~2 s after the 1 s deadline
    assert.is_true(core.now() - t0 >= 1.5, "ended before the grace period")
    host.eventually(function() return reaped(pid) end, 5, "the program reaped")
    host.eventually(function() return not alive(child) end, 5, "the grandchild killed")
    assert.is_true(proc:alive())
  end)

  it("a call that succeeds leaves no grandchild running: the program's group gets KILL once it exits", function()
    start([=[
return require("luakiq.workers.command") {
  argv = { "sh", "-c", 'sleep 300 & echo $! > "$1/child"; exit 0', "cmd", "OUT" },
  shards_count = 1,
}
]=])
    host.enqueue(dir, "Cmd", { { id = "ok" } }, env())
    local child = host.eventually(function() return tonumber(host.read(out .. "/child")) end, 10, "the grandchild")
    host.eventually(function() return length(dir).length == 0 end, 10, "the call done")
    host.eventually(function() return not alive(child) end, 5, "the grandchild killed")
    assert.are.equal(0, length(dir).morgue_length)
  end)

  it("parks the call while the program runs: a thread runs other shards' programs meanwhile", function()
    start([=[
return require("luakiq.workers.command") {
  argv = { "sh", "-c", 'sleep 1; cat > /dev/null' },
  shards_count = 8,
}
]=])
    -- one thread, 8 shards: 8 one-second programs in about one second
    -- (ids of 8 distinct shards)
    local ids, shard_seen, n = {}, {}, 0
    while #ids < 8 do
      n = n + 1
      local id = "j" .. n
      local s = core.crc32(id) % 8
      if not shard_seen[s] then shard_seen[s] = true ids[#ids + 1] = { id = id } end
    end
    local t0 = core.now()
    host.enqueue(dir, "Cmd", ids, env())
    host.eventually(function()
      local t = length(dir)
      return t.length == 0 and next(jobs(dir, "Cmd", "busy")) == nil
    end, 15, "all done")
    local took = core.now() - t0
    assert.is_true(took < 4, ("8 one-second programs on one thread took %.1f s"):format(took))
  end)

  it("refuses unknown or bad options at load with one line naming the key (exit 2)", function()
    dir = host.scriptdir { ["workers/Cmd.lua"] = 'return require("luakiq.workers.command") { argvv = { "true" } }' }
    local rc, line = load(dir)
    assert.are.equal(2, rc)
    assert.truthy(line:find("workers/Cmd.lua: luakiq.workers.command: unknown key 'argvv' (did you mean 'argv'?)", 1, true), line)
    host.sh("rm -rf " .. q(dir))
    dir = host.scriptdir { ["workers/Cmd.lua"] = 'return require("luakiq.workers.command") { shards_count = 2 }' }
    rc, line = load(dir)
    assert.are.equal(2, rc)
    assert.truthy(line:find("argv is required", 1, true), line)
    host.sh("rm -rf " .. q(dir))
    dir = host.scriptdir { ["workers/Cmd.lua"] = 'return require("luakiq.workers.command") { argv = "true", shards_count = 0 }' }
    rc, line = load(dir)
    assert.are.equal(2, rc)
    assert.truthy(line:find("must be", 1, true), line)
  end)
end)

describe("luakiq.workers.webhook", function()
  local web, dir, proc
  local SECRET = "s3cret-key"
  local function start(mode, extra)
    dir = host.scriptdir {
      ["config.lua"] = "return { threads_per_node = 2, poll_interval = 0.2 }",
      ["workers/Hook.lua"] = ([[
return require("luakiq.workers.webhook") {
  url = %q, secret = %q, shards_count = 2, batch_size = 5, max_retry_count = 5,
  retry_in = function() return 0.5 end, %s
}
]]):format(web.url .. "/hook/" .. mode, SECRET, extra or ""),
    }
    proc = host.spawn("run " .. q(dir), env())
  end
  local function hooks() return json.decode(host.capture("curl -s " .. q(web.url .. "/hooks"))) end
  setup(function() web = httpd.start() end)
  teardown(function() web.stop() end)
  before_each(function()
    srv.conn:call("FLUSHALL")
    host.capture("curl -s " .. q(web.url .. "/reset"))
  end)
  host.stop_after_each(function() return proc, dir end)

  -- The signature header's t and v1 checked with openssl (not with
  -- luakiq's own code): v1 = HMAC-SHA256(SECRET, "t.body").
  local function check_signature(h)
    local t, v1 = h.headers["x-luakiq-signature"]:match("^t=(%d+),v1=(%x+)$")
    assert.truthy(t, h.headers["x-luakiq-signature"])
    local f = host.tmpdir() .. "/signed"
    host.write(f, t .. "." .. h.body)
    local want = host.capture("openssl dgst -sha256 -hmac " .. q(SECRET) .. " -r " .. q(f)):match("^(%x+)")
    assert.are.equal(want, v1)
    return tonumber(t)
  end

  it("POSTs canonical JSON with Content-Type, a delivery id, the attempt and a timestamped HMAC-SHA256 signature; 2xx is done", function()
    start("200")
    host.enqueue(dir, "Hook", { { id = "a", payload = { n = 1 } }, { id = "a", payload = { n = 2 } } }, env())
    local h = host.eventually(function() return hooks()[1] end, 10, "a delivery")
    assert.are.equal("POST", h.method)
    assert.are.equal("application/json", h.headers["content-type"])
    assert.are.equal('{"jobs":[{"id":"a","payloads":[{"n":1},{"n":2}]}],"worker":"Hook"}', h.body)
    local t = check_signature(h)
    assert.is_true(math.abs(t - h.time) <= 2, ("t=%d, received at %.1f"):format(t, h.time))
    assert.truthy(h.headers["x-luakiq-delivery"]:find("^" .. ("%x"):rep(32) .. "$"), h.headers["x-luakiq-delivery"])
    assert.are.equal("1", h.headers["x-luakiq-attempt"])
    host.eventually(function() local t = length(dir) return t.length == 0 and t.morgue_length == 0 end, 5, "done")
  end)

  it("retries a 5xx, then succeeds", function()
    start("flaky")
    host.enqueue(dir, "Hook", { { id = "f", payload = 1 } }, env())
    host.eventually(function() return #hooks() >= 2 end, 10, "a second delivery")
    local hs = hooks()
    assert.are.equal(hs[1].body, hs[2].body)
    host.eventually(function() local t = length(dir) return t.length == 0 and t.morgue_length == 0 end, 5, "done")
    core.sleep(0.7)
    assert.are.equal(2, #hooks())
  end)

  it("delivers a fetch interrupted by kill -9 again with the same delivery id", function()
    -- the receiver takes 5 s; the host is killed while it waits, a new one
    -- takes the shard over when the lease (1 s) runs out and delivers again
    dir = host.scriptdir {
      ["config.lua"] = "return { threads_per_node = 1, poll_interval = 0.2, lease_ttl = 1 }",
      ["workers/Hook.lua"] = ([[return require("luakiq.workers.webhook") { url = %q, shards_count = 1 }]]):format(
        web.url .. "/hook/slow"),
    }
    proc = host.spawn("run " .. q(dir), env())
    host.enqueue(dir, "Hook", { { id = "k", payload = { v = 1 } } }, env())
    host.eventually(function() return #hooks() >= 1 end, 10, "the first delivery")
    -- (the start line counts in words: "1 thread", not "1 threads")
    assert.truthy(proc:log():find(" starting: 1 thread, 1 worker, Redis ", 1, true), proc:log())
    proc:signal("KILL")
    proc:wait(5)
    proc = host.spawn("run " .. q(dir), env())
    host.eventually(function() return #hooks() >= 2 end, 15, "the delivery again")
    local hs = hooks()
    assert.are.equal(hs[1].headers["x-luakiq-delivery"], hs[2].headers["x-luakiq-delivery"])
    assert.are.equal(hs[1].body, hs[2].body)
    -- a job with the same payload enqueued later is another delivery
    host.eventually(function() local t = length(dir) return t.length == 0 end, 10, "k done")
    host.eventually(function() return next(jobs(dir, "Hook", "busy")) == nil end, 10, "k acked")
    host.enqueue(dir, "Hook", { { id = "k", payload = { v = 1 } } }, env())
    host.eventually(function() return #hooks() >= 3 end, 15, "the new job")
    assert.are_not.equal(hs[1].headers["x-luakiq-delivery"], hooks()[3].headers["x-luakiq-delivery"])
  end)

  it("a retry after a timeout keeps X-Luakiq-Delivery; X-Luakiq-Attempt goes 1, 2; each signature verifies", function()
    -- the receiver takes 5 s, the call's timeout is 1 s: every attempt times out
    start("slow", "timeout = 1,")
    host.enqueue(dir, "Hook", { { id = "t", payload = { v = 1 } }, { id = "t", payload = { v = 2 } } }, env())
    host.eventually(function() return #hooks() >= 2 end, 15, "the retry")
    local hs = hooks()
    assert.are.equal(hs[1].body, hs[2].body)
    assert.are.equal(hs[1].headers["x-luakiq-delivery"], hs[2].headers["x-luakiq-delivery"])
    assert.are.same({ "1", "2" }, { hs[1].headers["x-luakiq-attempt"], hs[2].headers["x-luakiq-attempt"] })
    check_signature(hs[1])
    check_signature(hs[2])
    local j = jobs(dir, "Hook", "queue").t or jobs(dir, "Hook", "busy").t
    assert.truthy(j and j.error and j.error:find("^timeout"), j and j.error)
  end)

  it("a Retry-After (seconds) sets when the retry runs", function()
    start("later", "retry_in = function() return 60 end,")
    host.enqueue(dir, "Hook", { { id = "r", payload = 1 } }, env())
    host.eventually(function() return #hooks() >= 2 end, 10, "the retry")
    local hs = hooks()
    local gap = hs[2].time - hs[1].time
    assert.is_true(gap >= 0.9 and gap < 5, ("retried %.2f s later (Retry-After: 1)"):format(gap))
  end)

  it("caps a receiver's Retry-After at retry_after_max (default 3600 s): 10 years, 1e23 s, a date in year 9999", function()
    local values = { "315360000", "1" .. ("0"):rep(23), "Fri, 31 Dec 9999 23:59:59 GMT" }
    local files = { ["config.lua"] = "return { threads_per_node = 2, poll_interval = 0.2 }" }
    for i, v in ipairs(values) do
      local url = web.url .. "/hook/after/" .. v:gsub(" ", "%%20")
      files["workers/Capped" .. i .. ".lua"] = ([[return require("luakiq.workers.webhook") {
        url = %q, shards_count = 1, retry_after_max = 30, retry_in = function() return 600 end }]]):format(url)
      files["workers/Default" .. i .. ".lua"] = ([[return require("luakiq.workers.webhook") {
        url = %q, shards_count = 1, retry_in = function() return 600 end }]]):format(url)
    end
    dir = host.scriptdir(files)
    proc = host.spawn("run " .. q(dir), env())
    for i = 1, #values do
      host.enqueue(dir, "Capped" .. i, { { id = "c" } }, env())
      host.enqueue(dir, "Default" .. i, { { id = "d" } }, env())
    end
    for i, v in ipairs(values) do
      for _, w in ipairs { { "Capped" .. i, "c", 30 }, { "Default" .. i, "d", 3600 } } do
        local j = host.eventually(function()
          local x = jobs(dir, w[1], "queue")[w[2]]
          return x and x.retry_count == 0 and x
        end, 10, w[1] .. " failed once")
        assert.are.equal("webhook: HTTP 503: after", j.error)
        local left = j.perform_in - core.now()
        -- due within the cap, and the cap (not retry_in's 600 s) set it
        assert.is_true(left <= w[3] and left > w[3] - 15,
          ("%s (Retry-After: %s): due in %.0f s, the cap is %d s"):format(w[1], v, left, w[3]))
      end
    end
  end)

  it("a 4xx other than 408/425/429 is permanent: the morgue at once, naming the status and the body", function()
    start("400")
    host.enqueue(dir, "Hook", { { id = "p", payload = 1 } }, env())
    local dead = host.eventually(function() return jobs(dir, "Hook", "morgue").p end, 10, "p in the morgue")
    assert.are.equal("webhook: HTTP 400: status 400", dead.error)
    assert.are.equal(1, #hooks())
  end)

  it("429 and 503 are retried, not permanent", function()
    start("503", "retry_in = function() return 60 end,")
    host.enqueue(dir, "Hook", { { id = "u", payload = 1 } }, env())
    local j = host.eventually(function()
      local x = jobs(dir, "Hook", "queue").u
      return x and x.retry_count == 0 and x
    end, 10, "u retried")
    assert.are.equal("webhook: HTTP 503: status 503", j.error)
    -- Retry-After: 2 beat retry_in's 60 s
    assert.is_true(j.perform_in < core.now() + 5, "Retry-After was not used")
  end)

  it("a transport error is retried with an http: error; the call's timeout ends a slow receiver", function()
    dir = host.scriptdir {
      ["config.lua"] = "return { threads_per_node = 1, poll_interval = 0.2 }",
      ["workers/Down.lua"] = ([[return require("luakiq.workers.webhook") {
        url = "http://127.0.0.1:%d/x", shards_count = 1, retry_in = function() return 60 end }]]):format(
        core.free_port()),
      ["workers/Slow.lua"] = ([[return require("luakiq.workers.webhook") {
        url = %q, shards_count = 1, timeout = 1, max_retry_count = 0 }]]):format(web.url .. "/hook/slow"),
    }
    proc = host.spawn("run " .. q(dir), env())
    host.enqueue(dir, "Down", { { id = "d", payload = 1 } }, env())
    host.enqueue(dir, "Slow", { { id = "s", payload = 1 } }, env())
    local j = host.eventually(function()
      local x = jobs(dir, "Down", "queue").d
      return x and x.retry_count == 0 and x
    end, 10, "d retried")
    assert.truthy(j.error:find("^http: .*%(POST http://127%.0%.0%.1:%d+/x%)$"), j.error)
    local dead = host.eventually(function() return jobs(dir, "Slow", "morgue").s end, 10, "s failed")
    assert.truthy(dead.error:find("^timeout"), dead.error)
  end)

  -- Callback mode, in this VM: luakiq.await stands in (the runner's own is
  -- checked end to end below), the request goes to the real receiver.
  it("callback = true: awaits every job before the request, each job gets reply_url and attempt; 2xx returns", function()
    local luakiq = require "luakiq"
    local real, awaited = luakiq.await, {}
    luakiq.await = function(id)
      awaited[#awaited + 1] = { id, #hooks() } -- (deliveries made before the await: none)
      return { token = "t-" .. id, url = "https://pub.example/api/v1/replies/t-" .. id, attempt = 7 }
    end
    local ok, err = pcall(function()
      local w = require("luakiq.workers.webhook") { url = web.url .. "/hook/200", callback = true }
      w.perform({ b = { 2 }, a = { 1 } }, { worker = "Hook", delivery = "d1" })
      assert.are.same({ { "a", 0 }, { "b", 0 } }, awaited)
      assert.are.equal('{"jobs":[{"attempt":7,"id":"a","payloads":[1],"reply_url":"https://pub.example/api/v1/replies/t-a"},' ..
        '{"attempt":7,"id":"b","payloads":[2],"reply_url":"https://pub.example/api/v1/replies/t-b"}],"worker":"Hook"}',
        hooks()[1].body)
      -- without public_url there is no reply_url to give: the call fails before any request
      luakiq.await = function() return { token = "t", attempt = 1 } end
      local okp, perr = pcall(w.perform, { c = { 3 } }, { worker = "Hook", delivery = "d2" })
      assert.is_false(okp)
      assert.truthy(tostring(perr):find("public_url", 1, true), tostring(perr))
      assert.are.equal(1, #hooks())
      -- without callback the body is as before
      require("luakiq.workers.webhook") { url = web.url .. "/hook/200" }.perform({ a = { 1 } }, { worker = "Hook", delivery = "d3" })
      assert.are.equal('{"jobs":[{"id":"a","payloads":[1]}],"worker":"Hook"}', hooks()[2].body)
    end)
    luakiq.await = real
    assert(ok, err)
  end)

  -- The real thing: luakiq.await in the runner, the --replies listener, and a
  -- receiver (httpd.py /hook/callback) that answers 202 and then POSTs each
  -- job's result to its reply_url itself.
  it("callback = true end to end: the jobs wait after the 2xx; the receiver's POSTs to reply_url complete them", function()
    local rport = core.free_port()
    dir = host.scriptdir {
      ["config.lua"] = "return { threads_per_node = 1, poll_interval = 0.2 }",
      ["workers/Hook.lua"] = ([[return require("luakiq.workers.webhook") {
        url = %q, callback = true, shards_count = 2, batch_size = 5, max_retry_count = 3,
        retry_in = function() return 60 end }]]):format(web.url .. "/hook/callback/300"),
    }
    local webs = require "web.support"
    proc = webs.start(dir, env() .. " LUAKIQ_PUBLIC_URL=http://127.0.0.1:" .. rport, "--replies 127.0.0.1:" .. rport)
    host.enqueue(dir, "Hook", { { id = "ok", payload = 1 }, { id = "ok2", payload = 2 },
                                { id = "no", payload = { fail = "out of stock" } } }, env())
    local function callbacks() return json.decode(host.capture("curl -s " .. q(web.url .. "/callbacks"))) end
    local made = host.eventually(function()
      local c = callbacks()
      return #c == 3 and c
    end, 15, "the receiver's three callbacks")
    -- each accepted: the job waited for it after the 2xx (a job that was done
    -- would have answered 410, an unknown token 404)
    local by_id = {}
    for _, c in ipairs(made) do
      by_id[c.id] = c
      assert.are.equal(200, c.status, json.encode(c))
      assert.are.same({ accepted = true }, json.decode(c.answer))
      assert.truthy(c.reply_url:find("^http://127%.0%.0%.1:" .. rport .. "/api/v1/replies/1%."), c.reply_url)
    end
    -- succeeded: done; failed with retryable false: the morgue at once (no retry)
    local dead = host.eventually(function() return jobs(dir, "Hook", "morgue").no end, 10, "no in the morgue")
    assert.are.equal("out of stock", dead.error)
    host.eventually(function()
      return host.exec("job " .. q(dir) .. " Hook ok", nil, env()) == 1 and
        host.exec("job " .. q(dir) .. " Hook ok2", nil, env()) == 1
    end, 10, "ok and ok2 done")
    local t = length(dir)
    assert.are.same({ 0, 1, 0 }, { t.length, t.morgue_length, t.waiting })
    -- the body carried reply_url and attempt per job, one delivery per job (no retry)
    local sent = {}
    for _, h in ipairs(hooks()) do
      for _, j in ipairs(json.decode(h.body).jobs) do
        assert.is_nil(sent[j.id], j.id .. " delivered twice")
        sent[j.id] = j
      end
    end
    for _, id in ipairs { "ok", "ok2", "no" } do
      assert.are.equal(by_id[id].reply_url, sent[id].reply_url)
      assert.is_true(sent[id].attempt >= 1)
    end
    -- the wait is over: the same reply_url again is stale
    local st = webs.request("http://127.0.0.1:" .. rport, "POST", by_id.ok.reply_url:match("^https?://[^/]+(.*)$"),
      { body = '{"status":"succeeded"}' })
    assert.are.equal(410, st)
  end)

  it("refuses a missing url, a non-http url and unknown keys at load (exit 2)", function()
    for src, want in pairs {
      ['{ shards_count = 1 }'] = "url is required",
      ['{ url = "ftp://x" }'] = "url must be http:// or https://",
      ['{ url = "http://x", secrett = "k" }'] = "unknown key 'secrett' (did you mean 'secret'?)",
      ['{ url = "http://x", perform = function() end }'] = "unknown key 'perform'",
      ['{ url = "http://x", retry_after_max = 0 }'] = "retry_after_max",
      ['{ url = "http://x", retry_after_max = "1h" }'] = "retry_after_max",
    } do
      dir = host.scriptdir { ["workers/Hook.lua"] = 'return require("luakiq.workers.webhook") ' .. src }
      local rc, line = load(dir)
      assert.are.equal(2, rc, line)
      assert.truthy(line:find("workers/Hook.lua: ", 1, true), line)
      assert.truthy(line:find(want, 1, true), line)
      host.sh("rm -rf " .. q(dir))
    end
  end)
end)

describe("luakiq.permanent and luakiq.retry_after", function()
  local dir, proc
  host.stop_after_each(function() return proc, dir end)
  it("permanent sends the call's jobs to the morgue at once; retry_after sets the retry time", function()
    srv.conn:call("FLUSHALL")
    dir = host.scriptdir {
      ["config.lua"] = "return { threads_per_node = 1, poll_interval = 0.2 }",
      ["workers/W.lua"] = [[
local luakiq = require "luakiq"
return {
  shards_count = 1, max_retry_count = 25, retry_in = function() return 3600 end,
  perform = function(batch)
    for id in pairs(batch) do
      if id == "perm" then error(luakiq.permanent("no such customer")) end
      if id == "after" then error(luakiq.retry_after(120, "busy, come back")) end
    end
  end,
}
]],
    }
    proc = host.spawn("run " .. q(dir), env())
    host.enqueue(dir, "W", { { id = "perm", payload = 1 }, { id = "after", payload = 1 } }, env())
    local dead = host.eventually(function() return jobs(dir, "W", "morgue").perm end, 10, "perm in the morgue")
    assert.are.equal("no such customer", dead.error)
    local j = host.eventually(function()
      local x = jobs(dir, "W", "queue").after
      return x and x.retry_count == 0 and x
    end, 10, "after retried")
    assert.are.equal("busy, come back", j.error)
    assert.is_true(math.abs(j.perform_in - (core.now() + 120)) < 10, "perform_in " .. j.perform_in)
  end)
end)

describe("luakiq.process.run", function()
  it("runs without a shell, gives stdin, returns code, signal and stderr's tail", function()
    local file = host.tmpdir() .. "/run.lua"
    host.write(file, [[
io.stdout:setvbuf("no") -- in order with the children's output (the same stdout)
local luakiq = require "luakiq"
local r = luakiq.process.run { argv = { "sh", "-c", "read x; echo got $x >&2; exit 7" }, stdin = "abc\n" }
print(r.code, r.signal, (r.stderr:gsub("\n", "|")))
r = luakiq.process.run { argv = { "sh", "-c", "kill -9 $$" } }
print(r.code, r.signal)
r = luakiq.process.run { argv = { "printf", "%s\\n", "$HOME;rm -rf /" } } -- no shell: nothing is expanded
print(r.code)
local ok, e = pcall(luakiq.process.run, { argv = { "/no/such/program" } })
print(e)
local t = luakiq.now()
ok, e = pcall(luakiq.process.run, { argv = { "sh", "-c", "trap '' TERM; sleep 30" }, timeout = 0.3, grace = 0.4 })
print(e, luakiq.now() - t < 3)
ok, e = pcall(luakiq.process.run, { argv = { "true" }, bogus = 1 })
print(e)
]])
    local rc, out, err = host.exec("lua " .. q(file))
    assert.are.equal(0, rc, err)
    local lines = {}
    for l in out:gmatch("[^\n]+") do lines[#lines + 1] = l end
    assert.are.equal("7\tnil\tgot abc|", lines[1])
    assert.are.equal("nil\t9", lines[2])
    assert.are.equal("$HOME;rm -rf /", lines[3])
    table.remove(lines, 3)
    assert.are.equal("0", lines[3])
    assert.are.equal("spawn: /no/such/program: No such file or directory", lines[4])
    assert.are.equal("process: sh ran past its timeout of 0.3 s\ttrue", lines[5])
    assert.truthy(lines[6]:find("unknown option 'bogus'", 1, true), lines[6])
  end)
end)
