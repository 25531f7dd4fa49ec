-- luakiq.client: enqueue (perform_async). Runs in any VM: a worker thread, the
-- CLI, the HTTP handlers. The whole array is validated and dumped before any
-- byte is sent, so bad input enqueues nothing; then jobs are grouped by shard
-- and sent as one push.lua call per shard (in chunks), each written out as
-- soon as it is built, the replies read at the end.
local core = require "luakiq.core"
local keys = require "luakiq.lib.keys"
local runtime = require "luakiq.lib.runtime"
local errors = require "luakiq.lib.errors"
local middleware = require "luakiq.lib.middleware"
local windows = require "luakiq.lib.windows"
local json = require "luakiq.json"
local utf8_valid, json_encode = json.utf8_valid, json.encode

local M = {}

local CHUNK = 1000 -- jobs per push.lua call: keeps each script run short
local allowed = { id = true, payload = true, score = true, perform_in = true, retry_count = true, expires_at = true,
                  priority = true, windows = true, timezone = true, tags = true }
local ALLOWED = "id, payload, score, perform_in, retry_count, expires_at, priority, windows, timezone, tags"

local function finite(x) return type(x) == "number" and x == x and x ~= math.huge and x ~= -math.huge end

-- A user-given string (id, field, worker name) inside an error message: one
-- line (control characters, and bytes that are not UTF-8, as \xNN) and at
-- most 100 bytes.
local function esc(s)
  -- (an integer id checked but not made a string yet: its id's digits)
  if type(s) == "number" and s == math.floor(s) and finite(s) then s = string.format("%.0f", s) end
  s = tostring(s)
  if #s > 100 then s = s:sub(1, 100) .. "..." end
  local bad = utf8_valid(s) and "%c" or "[%c\128-\255]" -- bytes that are not text too
  return (s:gsub(bad, function(c) return string.format("\\x%02x", c:byte()) end))
end


-- How deep a payload may nest: listings wrap a payload a few levels deep in
-- their JSON answers, which refuse more than 1000 levels (luakiq.json).
M.MAX_PAYLOAD_DEPTH = 256

-- Where a job is, for an error: `at` is its number in the pushed array
-- ("job 3") or a name the caller gave ("line 12"). Built only for an error:
-- a string per job would cost every push an allocation.
-- word: what a number counts ("job", the default; "line" for luakiq.ops.feed).
local function label(at, word)
  return type(at) == "string" and at or (word or "job") .. " " .. at
end

-- Raises unless every surface can show the payload v: strings (values and
-- keys) valid UTF-8, nesting at most MAX_PAYLOAD_DEPTH. Returns nothing.
-- at, word: where the job is (label's; the text is made only for an error).
local function showable(v, at, word, id, depth)
  local t = type(v)
  if t == "string" then
    if not utf8_valid(v) then errors.input(label(at, word) .. " (id " .. esc(id) .. "): payload: a string is not valid UTF-8") end
  elseif t == "table" then
    if depth >= M.MAX_PAYLOAD_DEPTH then
      errors.input(("%s (id %s): payload nests deeper than %d levels"):format(label(at, word), esc(id), M.MAX_PAYLOAD_DEPTH))
    end
    for k, x in pairs(v) do
      if type(k) == "string" then showable(k, at, word, id, depth) end
      showable(x, at, word, id, depth + 1)
    end
  end
end

-- Returns the id as a string, or raises an input error. where, word: as
-- label's.
function M.id_string(id, where, word)
  if type(id) == "string" then
    if id == "" then errors.input(label(where, word) .. ": id must not be empty") end
    if not utf8_valid(id) then errors.input(label(where, word) .. ": id must be valid UTF-8 (got " .. esc(id) .. ")") end
    return id
  elseif type(id) == "number" and finite(id) and id == math.floor(id) then
    return string.format("%.0f", id)
  end
  -- (what it got in words that do not depend on the process: no table
  -- address; json.null, a JSON null, as null)
  local got = id == nil and "none" or id == json.null and "null" or type(id) == "table" and "an array or object"
    or type(id) .. " " .. tostring(id)
  errors.input(label(where, word) .. ": id must be a non-empty string or an integer, got " .. got)
end

-- A job's optional number field (no closure per job: this runs per job).
-- at, word: as label's.
local function num(job, name, default, at, id, word)
  local v = job[name]
  if v == nil then return default end
  if not finite(v) then errors.input(label(at, word) .. " (id " .. esc(id) .. "): " .. name .. " must be a finite number") end
  return v
end

-- A job's own windows (fields windows, timezone): their text for Redis
-- ("ZONE|HH:MM-HH:MM,...") and when the job is due without perform_in (now
-- or the next time both its windows and its worker's are open). memo: per
-- push, text -> due (the search runs once per distinct windows).
local function job_windows(worker, job, where, id, now, memo)
  local list, zone_name = job.windows, job.timezone
  if list == nil then
    if zone_name ~= nil then errors.input(where .. " (id " .. esc(id) .. "): timezone goes with windows") end
    return false
  end
  local ok = type(list) == "table" and #list > 0
  for k, v in pairs(ok and list or {}) do
    if type(k) ~= "number" or type(v) ~= "string" then ok = false end
  end
  if not ok then errors.input(where .. " (id " .. esc(id) .. "): windows must be a non-empty array of \"HH:MM-HH:MM\"") end
  if zone_name ~= nil and (type(zone_name) ~= "string" or zone_name == "") then
    errors.input(where .. " (id " .. esc(id) .. "): timezone must be a time zone name")
  end
  local text = windows.text(list, zone_name or worker.timezone or "UTC")
  local due = memo[text]
  if due then return text, due end
  local w, why = windows.of_text(text)
  if not w then errors.input(where .. " (id " .. esc(id) .. "): windows: " .. esc(why)) end
  due = windows.next_both(w, worker.windows_spec, now)
  if not due then
    errors.input(where .. " (id " .. esc(id) .. "): windows never meet worker " .. worker.name .. "'s windows")
  end
  memo[text] = due
  return text, due
end

M.MAX_TAGS, M.MAX_TAG_BYTES = 16, 64

-- Returns the tag t if it is one (a non-empty string of valid UTF-8, at
-- most MAX_TAG_BYTES, no control character), else nil and why.
function M.tag_check(t)
  if type(t) ~= "string" or t == "" then return nil, "a tag must be a non-empty string" end
  if #t > M.MAX_TAG_BYTES then return nil, ("tag %s is over %d bytes"):format(esc(t), M.MAX_TAG_BYTES) end
  if not utf8_valid(t) then return nil, "tag " .. esc(t) .. " is not valid UTF-8" end
  if t:find("%c") then return nil, "tag " .. esc(t) .. " has a control character" end
  return t
end

-- A job's tags (field tags, an array of 1 to MAX_TAGS tags): their text for
-- Redis, sorted, without duplicates, joined by "\n" (push.lua, "tags").
local function job_tags(list, where, id)
  local ok = type(list) == "table" and #list > 0
  for k in pairs(ok and list or {}) do
    if type(k) ~= "number" or k % 1 ~= 0 or k < 1 or k > #list then ok = false end
  end
  if not ok then errors.input(where .. " (id " .. esc(id) .. "): tags must be a non-empty array of strings") end
  local set, sorted = {}, {}
  for _, t in ipairs(list) do
    local good, why = M.tag_check(t)
    if not good then errors.input(where .. " (id " .. esc(id) .. "): " .. why) end
    if not set[t] then set[t] = true sorted[#sorted + 1] = t end
  end
  if #sorted > M.MAX_TAGS then
    errors.input(("%s (id %s): at most %d tags, got %d"):format(where, esc(id), M.MAX_TAGS, #sorted))
  end
  table.sort(sorted)
  return table.concat(sorted, "\n")
end

-- Checks one job and returns {id, perform_in, retry_count, score,
-- payload_bytes, expires_at or false, priority string or false, windows text
-- or false, tags text or false}.
local function prepare(cfg, worker, job, at, now, due, memo)
  local word = memo.word
  if type(job) ~= "table" then errors.input(label(at, word) .. ": must be an object") end
  for k in pairs(job) do
    if not allowed[k] then
      errors.input(label(at, word) .. ": unknown field '" .. esc(k) .. "' (allowed: " .. ALLOWED .. ")")
    end
  end
  -- (a check only: an integer id is checked, not made a string, which is
  -- most of a blank job's check)
  local id = job.id
  if memo.check_only and type(id) == "number" and finite(id) and id == math.floor(id) then
    -- valid: esc shows it as the id's digits in an error
  else
    id = M.id_string(id, at, word)
  end
  local wtext = false
  if job.windows ~= nil or job.timezone ~= nil then wtext, due = job_windows(worker, job, label(at, word), id, now, memo) end
  local perform_in, score = num(job, "perform_in", due, at, id, word), num(job, "score", now, at, id, word)
  local retry_count = num(job, "retry_count", -1, at, id, word)
  if retry_count ~= math.floor(retry_count) or retry_count < -1 then
    errors.input(label(at, word) .. " (id " .. esc(id) .. "): retry_count must be an integer >= -1")
  end
  local payload = job.payload
  if payload == nil then payload = "" end
  -- (a blank job's "" skips the checks, and the pcall below, which a
  -- stitched trace cannot return through)
  if payload ~= "" then showable(payload, at, word, id, 0) end
  local ok, bytes = true, '""'
  if payload ~= "" or cfg.dump_payload ~= json_encode then ok, bytes = pcall(cfg.dump_payload, payload) end
  if not ok then errors.input(label(at, word) .. " (id " .. esc(id) .. "): cannot dump payload: " .. esc(tostring(bytes):match("^[^\n]*"))) end
  if type(bytes) ~= "string" then errors.input(label(at, word) .. " (id " .. esc(id) .. "): dump_payload must return a string") end
  if #bytes > cfg.max_payload_bytes then
    errors.input(string.format("%s (id %s): payload is %d bytes, over max_payload_bytes (%d)",
      label(at, word), esc(id), #bytes, cfg.max_payload_bytes))
  end
  local expires_at = num(job, "expires_at", false, at, id, word)
  local priority = job.priority
  if priority ~= nil then
    if type(priority) ~= "number" or priority ~= math.floor(priority) or math.abs(priority) > 1e9 then
      errors.input(label(at, word) .. " (id " .. esc(id) .. "): priority must be an integer from -1000000000 to 1000000000")
    end
    priority = priority ~= 100 and string.format("%d", priority)
  else
    priority = false
  end
  local tags = job.tags ~= nil and job_tags(job.tags, label(at, word), id)
  if memo.check_only then return end
  return { id, perform_in, retry_count, score, bytes, expires_at, priority, wtext, tags }
end

-- A checker for jobs of worker_name: check(job, where) raises the input
-- error push would raise for it (fields, payload dump and size), naming it
-- by `where` ("line 12", or a number n: word .. " " .. n, made only for an
-- error), and sends nothing. The streamed enqueue's first pass
-- (luakiq.ops.feed). Client middlewares do not run.
function M.checker(cfg, worker_name, word)
  local worker = cfg.by_name[worker_name]
  if not worker then errors.notfound("unknown worker '" .. esc(worker_name) .. "'") end
  local now, memo = core.now(), { word = word, check_only = true }
  local due = worker.windows_spec and worker.windows_spec:next_open(now) or now
  return function(job, where) prepare(cfg, worker, job, where, now, due, memo) end
end

-- Queues whose shards_count this VM has checked against the registry. An
-- enqueue with another count would put ids in shards nobody serves.
local registered = {}

-- M.follow: this VM follows a reshard (luakiq reshard) made while it runs:
-- the worker's shards_count becomes the registry's (host threads, the web
-- thread, tools). Without it (the CLI) a count that differs from the
-- registry's is refused: the worker file is stale.
M.follow = false

local function check_registry(conn, cfg, worker)
  local key = cfg.namespace .. "\0" .. worker.queue_name
  if registered[key] == worker.shards_count then return end
  local reg = keys.registry(cfg.namespace)
  local stored = conn:call("HGET", reg, worker.queue_name)
  if not stored then
    -- a queue no host has registered yet: registered with this count
    -- (register.lua; a namespace of another layout refuses it)
    stored = conn:script("register", reg, worker.queue_name, worker.shards_count)
    if type(stored) == "table" then error(runtime.layout_text(cfg, stored[2]), 0) end
  end
  stored = tonumber(stored)
  if stored and stored ~= worker.shards_count then
    if not M.follow then
      errors.input(string.format("%s: shards_count is %d but queue '%s' has %d shards in Redis; " ..
        "nothing enqueued (see docs/configuration.md, 'Changing shards_count')",
        worker.file or worker.name, worker.shards_count, worker.queue_name, stored))
    end
    worker.shards_count = stored
  end
  registered[key] = worker.shards_count
end

-- Forgets what check_registry learnt of worker's queue (a push was refused:
-- the queue was resharded since).
local function forget_registry(cfg, worker)
  registered[cfg.namespace .. "\0" .. worker.queue_name] = nil
end

-- The optional fields of a prepared job that push.lua takes as sections.
local SECTIONS = { { 6, "expires_at" }, { 7, "priority" }, { 8, "windows" }, { 9, "tags" } }

-- Writes out st's calls not sent yet (st.sent: how many were), in order, by
-- conn:send; the first one it will not take (a cluster, or a connection
-- without send) and all after it wait for collect's pipeline (st.held).
local function dispatch(conn, st)
  for i = st.sent + 1, #st.cmds do
    if st.held or not (conn.send and conn:send({ st.cmds[i] })) then
      st.held = true
      return st
    end
    st.sent = i
  end
  return st
end

local function by_id(a, b) return a[1] < b[1] end

-- Sends prepared jobs of one worker (prepare's tables), grouped by shard
-- under the worker's shards_count, one push.lua call per shard and chunk.
-- Each call is written out as soon as it is built (dispatch), so Redis
-- runs the first ones while the next are built; defer: none is, start
-- dispatches them later (a pusher builds ahead). Returns {cmds, parts =
-- {jobs, from, to} per cmd, sent = how many cmds went by conn:send, their
-- replies unread, held = the rest wait for collect's pipeline}.
local function send(conn, cfg, worker, prepared, now, extras, defer)
  local count = worker.shards_count
  local by_shard, order = {}, {}
  for i = 1, #prepared do
    local p = prepared[i]
    local s = keys.shard(p[1], count)
    local list = by_shard[s]
    if not list then list = {} by_shard[s] = list order[#order + 1] = s end
    list[#list + 1] = p
  end
  local channel = runtime.wake_arg(conn, cfg)
  -- The defaults as strings, formatted once here rather than per job in C
  -- (the same %.17g digits; push.lua normalizes every number anyway).
  local now_s = string.format("%.17g", now)
  local count_s = tostring(count)
  local st = { cmds = {}, parts = {}, sent = 0 }
  local cmds, parts = st.cmds, st.parts
  for _, s in ipairs(order) do
    local list, prefix = by_shard[s], keys.prefix(cfg.namespace, worker.queue_name, s)
    for from = 1, #list, CHUNK do
      local to = math.min(from + CHUNK - 1, #list)
      local cmd = { script = "push", prefix, channel, now_s }
      local k = 4
      -- (jobs that share perform_in, retry_count and score, as jobs pushed
      -- together do, go in push.lua's short forms: "ids" when they share
      -- the payload too, else "pairs"; each argument Redis does not read
      -- saves it ~1k instructions)
      local f = list[from]
      local pin, rc, score, payload = f[2], f[3], f[4], f[5]
      for j = from + 1, to do
        local p = list[j]
        if p[2] ~= pin or p[3] ~= rc or p[4] ~= score then
          pin = nil
          break
        end
        if p[5] ~= payload then payload = nil end
      end
      if pin then
        cmd[4], cmd[5] = "", payload and "ids" or "pairs"
        cmd[6] = pin == now and now_s or pin
        cmd[7] = rc == -1 and "-1" or rc
        cmd[8] = score == now and now_s or score
        k = 9
        -- (sorted by id when no job has a section, which names jobs by
        -- their place: jobs of one perform_in, retry_count and score come
        -- out the same in any order, and push.lua writes ascending ids its
        -- shortest way; byte order, which is Redis's unless its
        -- LC_COLLATE says otherwise: then it takes its general way)
        if payload then
          cmd[9] = payload
          local ids = {}
          for j = from, to do ids[j - from + 1] = list[j][1] end
          if not extras then table.sort(ids) end
          for j = 1, #ids do cmd[9 + j] = ids[j] end
          k = 10 + #ids
        else
          local rows = {}
          for j = from, to do rows[j - from + 1] = list[j] end
          if not extras then table.sort(rows, by_id) end
          for j = 1, #rows do
            cmd[k], cmd[k + 1] = rows[j][1], rows[j][5]
            k = k + 2
          end
        end
      else
        for j = from, to do
          local p = list[j]
          cmd[k] = p[1]
          cmd[k + 1] = p[2] == now and now_s or p[2]
          cmd[k + 2] = p[3] == -1 and "-1" or p[3]
          cmd[k + 3] = p[4] == now and now_s or p[4]
          cmd[k + 4] = p[5]
          k = k + 5
        end
      end
      -- push.lua's sections: "", NAME, then job number, value (only for
      -- the jobs that have one)
      for _, sec in ipairs(extras and SECTIONS or {}) do
        local field, name, open = sec[1], sec[2], nil
        for j = from, to do
          local v = list[j][field]
          if v then
            if not open then open = true cmd[k], cmd[k + 1] = "", name k = k + 2 end
            cmd[k], cmd[k + 1] = tostring(j - from + 1), field == 6 and string.format("%.17g", v) or v
            k = k + 2
          end
        end
      end
      -- the count the jobs were routed with: push.lua refuses the call when
      -- a reshard recorded another in the shard (nothing written)
      cmd[k], cmd[k + 1], cmd[k + 2] = "", "shards", count_s
      cmds[#cmds + 1] = cmd
      parts[#cmds] = { list, from, to }
      if not defer then dispatch(conn, st) end
    end
  end
  return st
end

-- The replies of send's calls, in order: those it sent first (unread till
-- now), then the others' through one pipeline.
local function collect(conn, st)
  local cmds, sent, rest = st.cmds, st.sent, {}
  for i = sent + 1, #cmds do rest[#rest + 1] = cmds[i] end
  local replies = sent > 0 and conn:recv(sent) or {}
  if #rest > 0 then
    for _, r in ipairs(conn:pipeline(rest)) do replies[#replies + 1] = r end
  end
  return cmds, st.parts, replies
end

-- Reads what send's calls did. Each push.lua call is atomic (a Redis out of
-- memory refuses a script only before its first write; once it wrote, it
-- runs to its end), so the jobs stored are exactly those of the calls that
-- succeeded: returns how many, the first error (nil: none) and the
-- prepared jobs of the calls push.lua refused because the queue was
-- resharded (nothing of them written). A call Redis did not know the
-- script of (NOSCRIPT: it ran nothing) is sent again through the pipeline,
-- which loads it.
local function tally(conn, cmds, parts, replies)
  local stored, failed, refused = 0, nil, {}
  for i, r in ipairs(replies) do
    if type(r) == "table" and r.err and errors.redis_code(r.err) == "NOSCRIPT" then
      r = conn:pipeline({ cmds[i] })[1]
    end
    if type(r) == "table" and r.err then
      local code, counts = errors.redis_code(r.err)
      if code == "RESHARDED" then -- "RESHARDED HAVE USED"
        local list, from, to = parts[i][1], parts[i][2], parts[i][3]
        for j = from, to do refused[#refused + 1] = list[j] end
        refused.have = refused.have or counts:match("^%d+")
      else
        failed = failed or errors.redis_text(r.err)
      end
    else
      stored = stored + (parts[i][3] - parts[i][2] + 1)
    end
  end
  return stored, failed, refused
end

-- Validates jobs of one worker without any I/O; returns what start sends
-- (a push's first part). Raises input errors.
local function validate(worker, cfg, jobs)
  if type(jobs) ~= "table" then errors.input("jobs must be an array") end
  local n = #jobs
  for k in pairs(jobs) do
    if type(k) ~= "number" or k < 1 or k > n or k ~= math.floor(k) then errors.input("jobs must be an array") end
  end
  local now = core.now()
  -- without perform_in a job is due now, or at the next opening of its
  -- worker's windows
  local due = worker.windows_spec and worker.windows_spec:next_open(now) or now
  local prepared, memo, extras = {}, {}, false
  for i = 1, n do
    local p = prepare(cfg, worker, jobs[i], i, now, due, memo)
    if p[6] or p[7] or p[8] or p[9] then extras = true end
    prepared[i] = p
  end
  return { worker = worker, prepared = prepared, now = now, extras = extras, n = n }
end

-- Builds the push.lua calls of validated jobs (validate's table) without
-- sending them, so that start only writes them out: a pusher builds a
-- chunk's while Redis stores the chunk before. (conn: only to know whether
-- it is a cluster, asked once.)
local function build(conn, cfg, v)
  if v.n > 0 then
    v.count = v.worker.shards_count
    v.st = send(conn, cfg, v.worker, v.prepared, v.now, v.extras, true)
  end
  return v
end

-- Sends validated jobs (validate's table; built ahead or not): returns the
-- state finish reads, the replies still unread (a push's second half).
-- Nothing else may use conn until finish. Raises on I/O errors.
local function start(conn, cfg, v)
  if v.n > 0 then
    check_registry(conn, cfg, v.worker)
    if v.st and v.count == v.worker.shards_count then
      dispatch(conn, v.st)
    else
      v.count = v.worker.shards_count
      v.st = send(conn, cfg, v.worker, v.prepared, v.now, v.extras)
    end
  end
  return v
end

-- Reads the replies of start's calls; returns how many jobs were enqueued,
-- or raises (a push's last part). Either way v.stored says how many Redis
-- stored (the calls that ran), for the pusher's count.
local function finish(conn, cfg, v)
  local worker, n, now, extras = v.worker, v.n, v.now, v.extras
  v.stored = 0
  if n == 0 then return 0 end
  local count = v.count
  local stored, failed, refused = tally(conn, collect(conn, v.st))
  v.stored = stored
  if #refused > 0 and not failed then
    -- The queue was resharded since this VM last looked (luakiq reshard):
    -- those calls wrote nothing. A VM that follows sends their jobs again
    -- with the registry's count, once; the CLI's worker file is stale.
    forget_registry(cfg, worker)
    if not M.follow then
      errors.input(string.format("%s: shards_count is %d but queue '%s' has %s shards now (resharded); " ..
        "%d of the %d jobs were stored (see docs/configuration.md, 'Changing shards_count')",
        worker.file or worker.name, count, worker.queue_name, tostring(refused.have), stored, n))
    end
    -- the count the shard named (the registry says the same a moment later)
    worker.shards_count = tonumber(refused.have) or worker.shards_count
    local more, f2, r2 = tally(conn, collect(conn, send(conn, cfg, worker, refused, now, extras)))
    stored, failed = stored + more, f2
    v.stored = stored
    if #r2 > 0 then failed = failed or "luakiq push: resharded again while pushing" end
  elseif #refused > 0 then
    failed = failed .. " (and the queue was resharded meanwhile)"
  end
  if failed then
    error(("redis: push failed: %s (%d of the %d jobs were stored)"):format(failed, stored, n), 0)
  end
  return n
end

-- Runs the client middlewares (outermost first) around a push of jobs of
-- worker; returns how many were enqueued. A middleware gets (worker, jobs,
-- next) and may change jobs before next(). track, when given, gets the
-- push's state as track.v (its stored count even when it raised).
local function push_through(conn, cfg, worker, jobs, track)
  local result
  local run = middleware.chain(cfg.client_middlewares, function(w, js)
    local v = validate(w, cfg, js)
    if track then track.v = v end
    result = finish(conn, cfg, start(conn, cfg, v))
    return result
  end)
  run(worker, jobs)
  return result or 0
end

-- perform_async: validates and sends jobs of one worker, the client
-- middlewares around; returns how many were enqueued.
function M.push(conn, cfg, worker_name, jobs)
  local worker = cfg.by_name[worker_name]
  if not worker then errors.notfound("unknown worker '" .. esc(worker_name) .. "'") end
  return push_through(conn, cfg, worker, jobs)
end

-- Checks jobs of one worker as push checks them, with no I/O; raises
-- push's input errors (the contract's validation vectors:
-- tools/contract-vectors.lua).
function M.validate(cfg, worker_name, jobs)
  local worker = cfg.by_name[worker_name]
  if not worker then errors.notfound("unknown worker '" .. esc(worker_name) .. "'") end
  validate(worker, cfg, jobs)
end

-- Jobs per chunk of a pusher. Measured with luakiq.ops.feed on 300,000 jobs
-- of ~200 bytes: 2,000 peaks at 16 MB of RSS (13.6 MB for one job) in 6.8 s;
-- 10,000 at 33 MB in 7.4 s.
M.PUSHER_CHUNK = 2000

local Pusher = {}
Pusher.__index = Pusher

-- Reads the replies of the pusher's chunk in flight, if any.
local function land(p)
  local v = p.inflight
  if not v then return end
  p.inflight = nil
  local ok, err = pcall(finish, p.conn, p.cfg, v)
  p.stored = p.stored + v.stored
  if not ok then
    v.at.stored = v.stored
    p.failed = v.at
    error(err, 0)
  end
end

-- Pushes the jobs taken since the last chunk. Without client middlewares
-- the chunk is checked and built before the chunk in flight is landed,
-- then sent and left in flight; with them it goes through them (the
-- middlewares wrap a whole push) and its replies are read at once.
local function send_chunk(p)
  local jobs = p.jobs
  if #jobs == 0 then return end
  p.jobs = {}
  local at = { from = p.first, to = p.last, stored = 0 }
  if p.through then
    local track = {}
    local ok, n = pcall(push_through, p.conn, p.cfg, p.worker, jobs, track)
    if not ok then
      at.stored = track.v and track.v.stored or 0
      p.stored = p.stored + at.stored
      p.failed = at
      error(n, 0)
    end
    p.stored = p.stored + n
    return
  end
  local ok, v = pcall(validate, p.worker, p.cfg, jobs)
  if ok then ok, v = pcall(build, p.conn, p.cfg, v) end
  land(p)
  if ok then ok, v = pcall(start, p.conn, p.cfg, v) end
  if not ok then
    p.failed = at
    error(v, 0)
  end
  v.at = at
  p.inflight = v
end

-- A push of one worker's jobs handed over one at a time, for a caller that
-- streams them (luakiq.ops.feed: a file of any size in bounded memory):
-- p:add(job, at) takes a job (at: where the caller has it, e.g. its line,
-- kept for the first and last job of each chunk); every PUSHER_CHUNK jobs
-- make a chunk, pushed as push pushes an array (checked whole, then one
-- push.lua call per shard); without client middlewares a chunk is left in
-- flight until the next is ready to go, so the caller reads the next while
-- Redis stores one. p:close() pushes the rest and returns how many jobs
-- were stored. What happened is data: p.stored counts the jobs stored so
-- far; when add or close raises (push's error, its kind kept), p.failed =
-- {from, to, stored}: the ats of the chunk that failed and how many of its
-- jobs Redis stored anyway (counted in p.stored). Nothing else may use
-- conn until close.
function M.pusher(conn, cfg, worker_name)
  local worker = cfg.by_name[worker_name]
  if not worker then errors.notfound("unknown worker '" .. esc(worker_name) .. "'") end
  return setmetatable({ conn = conn, cfg = cfg, worker = worker, jobs = {}, stored = 0,
                        through = #(cfg.client_middlewares or {}) > 0 }, Pusher)
end

function Pusher:add(job, at)
  local jobs = self.jobs
  local n = #jobs + 1
  jobs[n] = job
  if n == 1 then self.first = at end
  self.last = at
  if n == M.PUSHER_CHUNK then send_chunk(self) end
end

function Pusher:close()
  send_chunk(self)
  land(self)
  return self.stored
end

return M
