-- systemd's notify protocol (docs/operations.md, "systemd"): `luakiq run` with
-- NOTIFY_SOCKET set sends READY=1 once its worker threads have started,
-- WATCHDOG=1 every half WATCHDOG_USEC, STOPPING=1 when a stop that ends the
-- process is asked for, RELOADING=1 then READY=1 around a reload (HUP). The
-- real binary and a real redis-server; systemd's side is a python3 process bound to an AF_UNIX datagram socket (a path or an
-- abstract name) that writes each datagram it receives, with its arrival time
-- and the sender's pid (SCM_CREDENTIALS, what NotifyAccess=main checks), as a
-- JSON line.
local core = require "luakiq.core"
local json = require "luakiq.json"
local host = require "helpers.host"
local q = host.quote

local srv = host.fixture()

local RECEIVER = [[
import json, socket, struct, sys, time
addr, out = sys.argv[1], sys.argv[2]
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
s.bind("\0" + addr[1:] if addr.startswith("@") else addr)
open(out + ".bound", "w").close()
with open(out, "a") as f:
    while True:
        data, anc, _, _ = s.recvmsg(4096, socket.CMSG_SPACE(12))
        pid = None
        for level, kind, cred in anc:
            if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS:
                pid = struct.unpack("iII", cred[:12])[0]
        f.write(json.dumps({"t": time.time(), "pid": pid, "msg": data.decode()}) + "\n")
        f.flush()
]]

-- Hold: a job "hold" waits in perform until t:release is set, "fatal" stops
-- the process with luakiq.fatal, "stuck" spins in a loop the JIT compiles (the
-- process is replaced at its timeout); every job is recorded in t:start when
-- it starts and in t:done when it ends. Each worker thread takes 0.5 s to load it, so a READY=1 sent when the threads
-- were merely created would come well before their "thread started".
local FILES = {
  ["config.lua"] = "return { threads_per_node = 2, poll_interval = 0.2, timeout = 1 }",
  ["workers/Hold.lua"] = [[
local luakiq = require "luakiq"
if require("luakiq.core").thread_index() then luakiq.sleep(0.5) end
return {
  shards_count = 2, max_retry_count = 0,
  perform = function(batch)
    for id in pairs(batch) do
      luakiq.redis.call("RPUSH", "t:start", id)
      if id == "hold" then
        while not luakiq.redis.call("GET", "t:release") do luakiq.sleep(0.05) end
      elseif id == "fatal" then
        luakiq.fatal("boom")
      elseif id == "stuck" then
        local x = 0 while true do x = x + 1 end
      end
      luakiq.redis.call("RPUSH", "t:done", id)
    end
  end,
}
]],
}

local function env(extra) return (extra or "") .. " REDIS_URL=" .. srv.url end

-- The receiver's datagrams so far: {t =, pid =, msg =, fields = {KEY = value}}.
local function received(out)
  local list = {}
  for line in (host.read(out) or ""):gmatch("([^\n]*)\n") do
    local r = json.decode(line)
    r.fields = {}
    for k, v in r.msg:gmatch("([^=\n]+)=([^\n]*)") do r.fields[k] = v end
    list[#list + 1] = r
  end
  return list
end

-- The datagrams that carry field key.
local function with(list, key)
  local found = {}
  for _, r in ipairs(list) do if r.fields[key] then found[#found + 1] = r end end
  return found
end

local count = host.count

-- The log's warning lines (text format: "TIME warn  [thread] msg").
local function warnings(log)
  local found = {}
  for line in log:gmatch("[^\n]+") do
    if line:match("^%S+ warn ") then found[#found + 1] = line end
  end
  return found
end

describe("luakiq run under systemd (NOTIFY_SOCKET)", function()
  local procs, dir, tmp = {}, nil, nil
  before_each(function()
    dir = host.scriptdir(FILES)
    tmp = host.tmpdir()
  end)
  host.stop_after_each(function() return procs, dir, tmp end)

  -- Binds the receiver on addr ("/path" or "@name"); returns the file it writes.
  local function listen(addr)
    host.write(tmp .. "/receiver.py", RECEIVER)
    local out = tmp .. "/got" .. #procs
    procs[#procs + 1] = host.spawn_cmd("python3 " .. q(tmp .. "/receiver.py") .. " " .. q(addr) .. " " .. q(out))
    host.eventually(function() return host.read(out .. ".bound") end, 10, "the receiver bound")
    return out
  end

  local function run(extra)
    local proc = host.spawn("run " .. q(dir), env(extra))
    procs[#procs + 1] = proc
    return proc
  end

  local function ready(out)
    return host.eventually(function() return with(received(out), "READY")[1] end, 10, "READY=1")
  end

  -- A receiver on tmp/notify and a host told of it (extra: more environment),
  -- once it is READY: the receiver's file, the host, the READY=1 datagram.
  local function start(extra)
    local out = listen(tmp .. "/notify")
    local proc = run("NOTIFY_SOCKET=" .. q(tmp .. "/notify") .. " " .. (extra or ""))
    return out, proc, ready(out)
  end

  it("tells READY=1 once every worker thread has started, from the host's pid", function()
    local out = listen(tmp .. "/notify")
    local started = core.now()
    local proc = run("NOTIFY_SOCKET=" .. q(tmp .. "/notify"))
    local r = ready(out)
    -- the threads' "thread started" lines come before it, not after
    assert.are.equal(2, count(proc:log(), "thread started"), proc:log())
    assert.is_true(r.t - started >= 0.5, ("READY=1 %.2f s after the start"):format(r.t - started))
    assert.are.equal("1", r.fields.READY)
    assert.are.equal(tostring(proc.pid), r.fields.MAINPID)
    assert.are.equal(proc.pid, r.pid)
    assert.are.equal("running 2 worker threads", r.fields.STATUS)
    -- once, and nothing else: no WATCHDOG_USEC, no watchdog pings
    core.sleep(0.6)
    local all = received(out)
    assert.are.equal(1, #all, json.encode(all))
    -- the host does its work meanwhile
    host.enqueue(dir, "Hold", { { id = "a" } }, env())
    host.eventually(function() return #srv.conn:call("LRANGE", "t:done", 0, -1) == 1 end, 10, "job a done")
    assert.are.same({}, warnings(proc:log()))
  end)

  it("pings WATCHDOG=1 every half WATCHDOG_USEC", function()
    local out, _, r = start("WATCHDOG_USEC=400000")
    core.sleep(2)
    local pings = {}
    for _, p in ipairs(with(received(out), "WATCHDOG")) do
      if p.t >= r.t and p.t <= r.t + 2 then pings[#pings + 1] = p end
    end
    assert.is_true(#pings >= 7 and #pings <= 11, #pings .. " pings in 2 s")
    local gaps = {}
    for i = 2, #pings do gaps[#gaps + 1] = pings[i].t - pings[i - 1].t end
    table.sort(gaps)
    local median = gaps[math.ceil(#gaps / 2)]
    assert.is_true(median > 0.15 and median < 0.3, ("median gap %.3f s"):format(median))
    assert.are.equal("1", pings[1].fields.WATCHDOG)
  end)

  it("pings when WATCHDOG_PID is its own pid, never when it names another process", function()
    -- spawn's shell execs the host: its $$ is the host's pid
    local out, own = start("WATCHDOG_USEC=400000 WATCHDOG_PID=$$")
    host.eventually(function() return #with(received(out), "WATCHDOG") >= 3 end, 5, "pings")
    for _, p in ipairs(with(received(out), "WATCHDOG")) do assert.are.equal(own.pid, p.pid) end
    own:kill()

    out = listen(tmp .. "/notify2")
    local other = run("NOTIFY_SOCKET=" .. q(tmp .. "/notify2") .. " WATCHDOG_USEC=400000 WATCHDOG_PID=1")
    ready(out)
    core.sleep(1.5)
    local all = received(out)
    assert.are.same({}, with(all, "WATCHDOG"))
    assert.are.equal(1, #all, json.encode(all))
    assert.are.same({}, warnings(other:log()))
  end)

  it("tells RELOADING=1 at a HUP and READY=1 once every thread runs the new code (after the running call)", function()
    local out, proc, r = start()
    host.enqueue(dir, "Hold", { { id = "hold" } }, env())
    host.eventually(function() return #srv.conn:call("LRANGE", "t:start", 0, -1) == 1 end, 10, "hold running")
    local hup = core.now()
    proc:signal("HUP")
    local rl = host.eventually(function() return with(received(out), "RELOADING")[1] end, 5, "RELOADING=1")
    assert.are.equal(proc.pid, rl.pid)
    assert.is_true(rl.t > r.t)
    -- MONOTONIC_USEC (required beside RELOADING=1): CLOCK_MONOTONIC at the HUP
    local mono = tonumber(rl.fields.MONOTONIC_USEC)
    assert.is_true(mono ~= nil and math.abs(mono / 1e6 - (core.mono() - (core.now() - hup))) < 1, rl.msg)
    -- the thread holding the call switches only after it: no READY=1 yet
    -- (released before the worker's timeout of 1 s)
    core.sleep(0.3)
    assert.are.equal(1, #with(received(out), "READY"), json.encode(received(out)))
    srv.conn:call("SET", "t:release", "1")
    local again = host.eventually(function() return with(received(out), "READY")[2] end, 10, "READY=1 again")
    assert.is_true(again.t > rl.t)
    assert.are.equal("running 2 worker threads", again.fields.STATUS)
    assert.are.equal(2, count(proc:log(), "thread reloaded"), proc:log())
    assert.are.same({ "hold" }, srv.conn:call("LRANGE", "t:done", 0, -1))
    -- a refused reload: RELOADING=1, then READY=1 at once (the old code runs on)
    host.write(dir .. "/workers/Hold.lua", "return {")
    proc:signal("HUP")
    host.eventually(function() return with(received(out), "READY")[3] end, 5, "READY=1 after the refusal")
    assert.are.equal(2, #with(received(out), "RELOADING"))
    assert.are.equal(1, count(proc:log(), "HUP: reload failed"), proc:log())
    assert.is_true(proc:alive())
    assert.are.same({}, warnings(proc:log()))
  end)

  it("tells STOPPING=1 at a TERM, while the running batch finishes, then exits 0", function()
    local out, proc, r = start()
    host.enqueue(dir, "Hold", { { id = "hold" } }, env())
    host.eventually(function() return #srv.conn:call("LRANGE", "t:start", 0, -1) == 1 end, 10, "hold running")
    proc:signal("TERM")
    local s = host.eventually(function() return with(received(out), "STOPPING")[1] end, 5, "STOPPING=1")
    assert.is_true(proc:alive()) -- told at the TERM, not at the exit: the batch still runs
    assert.is_true(s.t > r.t)
    assert.are.equal(proc.pid, s.pid)
    assert.are.equal("TERM: stopping; running batches finish first", s.fields.STATUS)
    srv.conn:call("SET", "t:release", "1")
    assert.are.equal(0, proc:wait(10))
    assert.are.same({ "hold" }, srv.conn:call("LRANGE", "t:done", 0, -1))
    assert.are.equal(1, #with(received(out), "STOPPING"))
    assert.are.equal(1, #with(received(out), "READY"))
  end)

  it("speaks to an abstract socket name (@name) too", function()
    local name = "@luakiq-spec-" .. core.getpid() .. "-" .. core.token()
    local out = listen(name)
    local proc = run("NOTIFY_SOCKET=" .. q(name) .. " WATCHDOG_USEC=400000")
    local r = ready(out)
    assert.are.equal(tostring(proc.pid), r.fields.MAINPID)
    host.eventually(function() return #with(received(out), "WATCHDOG") >= 2 end, 5, "pings")
    proc:signal("TERM")
    assert.are.equal(0, proc:wait(10))
    local s = with(received(out), "STOPPING")
    assert.are.equal(1, #s)
    assert.are.equal(proc.pid, s[1].pid)
    assert.are.same({}, warnings(proc:log()))
  end)

  it("runs and exits 0 with one warning line when nobody listens on NOTIFY_SOCKET", function()
    local path = tmp .. "/nobody"
    local proc = run("NOTIFY_SOCKET=" .. q(path) .. " WATCHDOG_USEC=200000")
    host.eventually(function() return count(proc:log(), "thread started") == 2 end, 10, "threads")
    host.enqueue(dir, "Hold", { { id = "a" } }, env())
    host.eventually(function() return #srv.conn:call("LRANGE", "t:done", 0, -1) == 1 end, 10, "job a done")
    core.sleep(1) -- READY=1 and some five pings, each failing
    proc:signal("TERM")
    assert.are.equal(0, proc:wait(10))
    local w = warnings(proc:log())
    assert.are.equal(1, #w, proc:log())
    assert.truthy(w[1]:find("NOTIFY_SOCKET=" .. path, 1, true), w[1])
  end)

  it("warns nothing with NOTIFY_SOCKET unset or empty", function()
    for _, unset in ipairs { "-u NOTIFY_SOCKET", "NOTIFY_SOCKET=" } do
      local proc = run(unset .. " WATCHDOG_USEC=200000")
      host.eventually(function() return count(proc:log(), "thread started") == 2 end, 10, "threads")
      core.sleep(0.5)
      proc:signal("TERM")
      assert.are.equal(0, proc:wait(10))
      assert.are.same({}, warnings(proc:log()))
      assert.falsy(proc:log():find("systemd", 1, true), proc:log())
    end
  end)

  it("tells STOPPING=1 when a fatal error stops the host (exit 1)", function()
    local out, proc = start()
    host.enqueue(dir, "Hold", { { id = "fatal" } }, env())
    assert.are.equal(1, proc:wait(10))
    local s = with(received(out), "STOPPING")
    assert.are.equal(1, #s, json.encode(received(out)))
    assert.are.equal("stopping: fatal error", s[1].fields.STATUS)
  end)

  it("a stuck call's replacement (same pid) is no stop: READY=1 again, no STOPPING=1", function()
    local out, proc = start()
    host.enqueue(dir, "Hold", { { id = "stuck" } }, env())
    local again = host.eventually(function() return with(received(out), "READY")[2] end, 15, "READY=1 again")
    assert.truthy(proc:log():find("replacing the process (pid " .. proc.pid .. ")", 1, true), proc:log())
    assert.is_true(proc:alive())
    assert.are.equal(tostring(proc.pid), again.fields.MAINPID)
    assert.are.equal(proc.pid, again.pid)
    local all = received(out)
    assert.are.same({}, with(all, "STOPPING"))
    local status = {}
    for _, r in ipairs(all) do status[#status + 1] = r.fields.STATUS end
    assert.are.same({ "running 2 worker threads", "replacing the process: a call could not be stopped at its timeout",
                      "running 2 worker threads" }, status)
    -- the replaced process stops like any other
    proc:signal("TERM")
    assert.are.equal(0, proc:wait(10))
    assert.are.equal(1, #with(received(out), "STOPPING"))
  end)
end)
