-- luakiq.ops.cli: the command line (docs/cli in README and docs/operations.md).
-- Runs on the main thread's VM. Exit codes: 0 ok, 1 runtime failure (Redis
-- away, a fatal error), 2 bad usage or bad input, always with one line on stderr.
local core = require "luakiq.core"
local errors = require "luakiq.lib.errors"
local json = require "luakiq.json"
local keys = require "luakiq.lib.keys"
local runtime = require "luakiq.lib.runtime"

local M = {}

local USAGE = [[
usage: luakiq COMMAND ...

  run DIR [--redis URL] [--threads N] [--web ADDR:PORT] [--replies ADDR:PORT] [--log-format text|json] [--log-level L]
                                       process jobs with the workers of DIR
  enqueue DIR WORKER [FILE]            enqueue JSON lines or a JSON array of {id, payload?, score?,
                                       perform_in?, retry_count?, expires_at?, priority?, windows?,
                                       timezone?, tags?} (stdin without FILE)
  stats DIR                            queue numbers as JSON (same as GET /api/v1/stats)
  plan DIR [--threads N]               which thread processes which shards
  morgue DIR WORKER list|requeue|delete [ID...] [--all]
                                       the dead jobs of a worker
  jobs DIR WORKER queue|morgue|busy [--order F] [--desc] [--min X] [--max X] [--limit N] [--offset N] [--cursor C]
  jobs DIR --tag T [--limit N]         list jobs as JSON lines (--tag: every worker's jobs tagged T)
  job DIR WORKER ID                    where one job is: queued, in_flight, dead, done... (JSON)
  reply DIR WORKER TOKEN|--key K [JSON]
                                       reply to a job that waits for one (JSON from stdin without JSON)
  waiting DIR WORKER [--late]          the jobs that wait for a reply (JSON lines); --late: the late replies
  pause DIR WORKER / resume DIR WORKER every host stops / starts calls of WORKER (kept in Redis)
  reshard DIR WORKER N                 change WORKER's shards_count to N while hosts run (moves its jobs)
  schedules DIR                        the recurring jobs of config.lua: last and next runs (JSON lines)
  hosts DIR                            the running hosts: threads, shards, calls (JSON lines)
  timing DIR WORKER [--day YYYY-MM-DD] wait and run times of one UTC day: count, mean, std, histogram (JSON)
  admin DIR WORKER perform-now|kill-failed|delete-failed|delete ID...|kill ID...
                                       bulk actions on queued jobs
  cancel DIR WORKER ID...              cancel jobs: queued and waiting ones are removed, running ones stopped
  failures DIR [jobs|requeue|delete GROUP] [--worker W]
                                       failed jobs grouped by error (JSON lines); a group's jobs;
                                       requeue or delete a whole group
  scripts DIR [NAME...]                write the embedded Redis scripts, expanded, and a manifest
                                       (names, sha1) into DIR, for clients in other languages
  lua [--redis URL] FILE [ARG...]      run a Lua file inside the host runtime (luakiq.redis: REDIS_URL)

REDIS_URL (default redis://127.0.0.1:6379/0) or --redis selects Redis.
`luakiq COMMAND --help` shows the help of one command.
]]

local HELP = {
  run = [[usage: luakiq run DIR [--redis URL] [--threads N] [--web ADDR:PORT] [--replies ADDR:PORT]
                  [--log-format text|json] [--log-level debug|info|warn|error]
Loads DIR/config.lua and DIR/workers/*.lua, splits the shards of every worker
over threads_per_node threads and processes jobs until TERM or INT (a second
INT exits at once). TTIN writes a thread dump. --web serves the dashboard and
the HTTP API (docs/operations.md); a non-loopback address needs web_token or
LUAKIQ_WEB_TOKEN. --replies serves only the reply routes (POST
/api/v1/replies/TOKEN and its /heartbeat), on a listener of its own fit to
face the internet (docs/operations.md, "Replies").]],
  enqueue = [[usage: luakiq enqueue DIR WORKER [FILE] [--redis URL]
Reads JSON lines, or one JSON array, of jobs {"id":..., "payload":..., "score":..., "perform_in":...,
"retry_count":..., "expires_at":..., "priority":..., "windows":[...], "timezone":..., "tags":[...]}
(only id is required; docs/cli.md, "enqueue") from FILE or stdin. Everything is
checked first: on any bad job nothing is enqueued and the exit code is 2
("line 12 (id 42): ..."). JSON lines are streamed (checked whole, then sent 2,000 lines at a time; memory stays a few
MB; a progress line on a terminal). Prints how many jobs were enqueued.]],
  stats = [[usage: luakiq stats DIR [--redis URL]
Prints {"total":{"length","morgue_length","lag"},"by_worker":{NAME:{...}}} (JSON).]],
  plan = [[usage: luakiq plan DIR [--threads N]
Prints the splitter's result, one line per thread: "t0: A0, B0, B3, D1".
With splitter = "elastic" the plan is dynamic: a first line says so, then
what this host would take alone.]],
  morgue = [[usage: luakiq morgue DIR WORKER list|requeue|delete [ID...] [--all] [--redis URL]
list prints JSON lines {"id","updated_at","payloads":[[payload,score],...],"error"};
requeue and delete act on the given ids, or on every dead job with --all.]],
  jobs = [[usage: luakiq jobs DIR WORKER queue|morgue|busy [--order id|perform_in|retry_count|updated_at] [--desc]
                   [--min X] [--max X] [--limit N] [--offset N] [--cursor C] [--redis URL]
       luakiq jobs DIR --tag T [--limit N] [--redis URL]
Lists jobs as JSON lines (--limit 1 to 1000, default 100). Ranges use Redis syntax: ids "-", "+", "[x", "(x";
numbers "-inf", "+inf", "(n". When there are more, stderr says which --cursor gives the next page (it
carries the order, direction and range: give it alone); a page from a cursor costs the same at any depth,
an --offset (0 to 5000) is walked to.
--tag T: the jobs tagged T in every worker, queued, in flight or dead, by worker and id:
{"worker","id","state","tags",...} as `luakiq job` shows them.]],
  schedules = [[usage: luakiq schedules DIR [--redis URL]
Prints one JSON line per schedule of config.lua:
{"every"|"cron","id","last","name","next","timezone","worker"}; last: the last
tick a host claimed (absent before any host ran it), next: the next tick (Unix times).]],
  pause = [[usage: luakiq pause DIR WORKER [--redis URL]
Every host stops starting calls of WORKER; running calls finish; enqueue goes
on. Returns once every live host acknowledged it: from then on no call of
WORKER starts. Kept in Redis: a host started later stays paused. Prints
{"changed":true|false,"hosts":N,"paused":true,"worker":NAME} (N: the hosts that
acknowledged), exit 0; a live host that did not acknowledge within 2 s: the
same with "missing":[TOKEN...], one line on stderr, exit 1 (the pause stays:
it holds on that host once it answers). Undo with luakiq resume.]],
  resume = [[usage: luakiq resume DIR WORKER [--redis URL]
Lets every host run WORKER again (its backlog drains). Prints
{"changed":true|false,"paused":false,"worker":NAME}.]],
  reshard = [[usage: luakiq reshard DIR WORKER N [--batch N] [--redis URL]
Changes the shards_count of WORKER's queue to N while hosts run: the queue
pauses (pushes go on), every job whose shard crc32(id) % N differs moves there
(queued, retried, scheduled and dead jobs, with tags, priorities, windows and
expiries), then the queue runs again on N shards. Resumable: run it again
after a kill. Prints {"worker","queue","from","to","moved","restored","waited",
"paused","seconds","passes"} (seconds). Then set shards_count = N in the worker
file: a host started with the old count is refused (docs/operations.md,
"Resharding"). --batch: ids per move call (default 200).]],
  job = [[usage: luakiq job DIR WORKER ID [--redis URL]
Prints one JSON object: {"id","state":"queued"|"in_flight"|"dead","perform_in","retry_count","error",
"payloads":[[payload,score],...]}; in_flight adds "host" (HOST:PID), "fetched_at", "running"
(seconds); dead has "updated_at" instead of perform_in and retry_count. A worker with
keep_done answers {"id","state":"done"|"cancelled","finished_at","attempts","result"}
for a finished job it keeps. An id that is nowhere: exit 1.
The job's own fields when it has them: "priority", "tags", "windows", "timezone"; "state":"waiting"
(it awaits a reply) adds "attempt", "since", "deadline" (docs/cli.md, "job").]],
  admin = [[usage: luakiq admin DIR WORKER perform-now|kill-failed|delete-failed|delete ID...|kill ID... [--redis URL]
perform-now: every queued job becomes due now; kill-failed: queued jobs that
failed at least once go to the morgue; delete-failed: they are deleted;
delete: the given ids' queued jobs and jobs that wait for a reply are
deleted; kill: they go to the morgue (jobs in flight are not touched).
Prints what was done as JSON.]],
  cancel = [[usage: luakiq cancel DIR WORKER ID... [--redis URL]
Cancels each id: a queued job is removed with all its payloads, a job that
waits for a reply loses its wait (its token answers STALE), a running one is
stopped by its host at its call's next wait (luakiq.sleep, luakiq.http,
luakiq.process.run, luakiq.redis: within a second) and not retried. Prints
one line per id: "ID: cancelled queued", "ID: cancelled waiting",
"ID: running (cancel requested)" or "ID: not found". Exit 2 for an unknown
worker, 1 when Redis fails.]],
  hosts = [[usage: luakiq hosts DIR [--redis URL]
Prints one JSON line per running host (every host that beat within 10 s):
{"hostname","pid","version","started","web","token","seen","threads":[{"thread","jobs",
"shards":[{"worker","shard"}...],"calls":[{"worker","shard","running","timeout","waiting"}...]}...]}.
A host beats every 2 s; one that stops leaves at once (docs/operations.md, "Hosts").]],
  timing = [[usage: luakiq timing DIR WORKER [--day YYYY-MM-DD] [--redis URL]
Prints one JSON object for WORKER and one UTC day (default today):
{"day","worker","wait":{...},"run":{...}}, each {"count","mean","std","sum",
"histogram":[{"from","to","count"},...]} in seconds. wait: from when a job was
due to the start of its call; run: one perform call. Kept 30 days, the
histograms 7 (docs/operations.md, "Timing").]],
  failures = [[usage: luakiq failures DIR [jobs|requeue|delete GROUP] [--worker W] [--redis URL]
Without an action: one JSON line per group of failed jobs (queued for a retry, or
dead) whose errors read the same once numbers, ids and addresses are masked,
most jobs first: {"count","dead","error","queued","workers":{NAME:{"count","dead",
"ids","queued"}}}. GROUP is such an "error" text, as printed.
jobs GROUP: one JSON line per job of the group, {"id","state":"queued"|"dead","worker"}.
requeue GROUP: dead jobs back to the queue, queued ones due now: {"due_now","requeued"}.
delete GROUP: every job of the group deleted: {"deleted"}.
--worker W: only W's jobs (docs/operations.md, "Failures").]],
  lua = [[usage: luakiq lua [--redis URL] FILE [ARG...]
Runs FILE in the host's Lua runtime (LuaJIT, the luakiq modules); `arg` holds the arguments.
luakiq.redis.call(...) talks to REDIS_URL (or --redis, given before FILE), connected on first use.]],
  scripts = [[usage: luakiq scripts DIR [NAME...]   (or: luakiq scripts --out DIR [NAME...])
Writes the Redis scripts this luakiq embeds (every one, or the NAMEs), expanded as it loads
them, into DIR (made when missing) as NAME.lua, and DIR/manifest.json:
{"layout":"2","luakiq":VERSION,"scripts":{NAME:{"file":"NAME.lua","sha1":SHA1}}}. Files that
already hold the same text are left alone; a script an earlier manifest there listed and this
one does not is removed. Prints how many files changed (docs/redis.md, "Loading the scripts").]],
  reply = [[usage: luakiq reply DIR WORKER TOKEN [JSON] [--redis URL]
       luakiq reply DIR WORKER --key K [JSON] [--redis URL]
Replies to a job of WORKER that waits for one (luakiq.await), by its reply
token or by the correlation key its await named. The reply is JSON, from the
argument or else stdin (surrounding white space dropped). Prints {"accepted":true}
(and "duplicate":true for the same reply again) and exits 0; otherwise one line,
exit 1: CONFLICT (another reply was accepted), STALE (the wait is over: an older
attempt, handled, failed or timed out), UNKNOWN (no such token or key), BADREPLY
(a worker without on_reply takes {"status":"succeeded"|"failed",...}), TOOBIG
(over 256 KiB), RESHARD. Bad usage or JSON: exit 2.]],
  waiting = [[usage: luakiq waiting DIR WORKER [--late] [--redis URL]
Prints one JSON line per job of WORKER that waits for a reply:
{"id","shard","attempt","state":"waiting"|"replied"|"handling","since","deadline",
"heartbeat_deadline","key"} (Unix times; heartbeat_deadline and key only when
the await set them). --late: the latest late replies instead (replies that came
after the wait was over; each shard keeps its last 100), newest first:
{"at","id","shard","attempt","op":"reply"|"heartbeat","body"} (body cut at 1 KiB).]],
}

-- A usage error: one line, exit 2.
local function usage(msg) errors.input(msg) end

-- Splits argv into positionals and --options. flags: option -> takes a value.
local function parse(argv, from, flags)
  local pos, opt = {}, {}
  local i = from
  while argv[i] do
    local a = argv[i]
    if a == "--help" or a == "-h" then opt.help = true
    elseif a:sub(1, 2) == "--" then
      local name, val = a:match("^%-%-([^=]+)=(.*)$")
      name = name or a:sub(3)
      if flags[name] == nil then usage("unknown option --" .. name) end
      if flags[name] then
        if not val then
          i = i + 1
          val = argv[i]
          if val == nil then usage("--" .. name .. " needs a value") end
        end
        opt[name] = val
      else
        opt[name] = true
      end
    else
      pos[#pos + 1] = a
    end
    i = i + 1
  end
  return pos, opt
end

local function overrides(opt)
  local o = {}
  if opt.redis then o.redis = opt.redis end
  if opt.threads then
    local n = tonumber(opt.threads)
    local want = require("luakiq.lib.config").threads_check(n)
    if want then usage("--threads must be " .. want) end
    o.threads_per_node = n
  end
  if opt.web then o.web = opt.web end
  return o
end

-- Connects or raises: a malformed URL is bad input (exit 2), an unreachable
-- Redis a runtime failure (exit 1).
local function connect_failed(err)
  if err:match("^bad Redis URL") then usage(err) end
  error(err, 0)
end

-- any_layout: no layout check (a host replacing itself).
local function connect(cfg, retry_for, any_layout)
  local conn, err = runtime.connect(cfg, retry_for)
  if not conn then connect_failed(err) end
  if not any_layout then
    local why = runtime.layout_refusal(conn, cfg)
    if why then error(why, 0) end
  end
  return conn
end

-- Says on stderr which workers stand in for a file that raised while it
-- loaded (luakiq.lib.config, settings only), and where their shards_count
-- comes from: the registry's when a host or a reshard wrote one
-- (runtime.follow_registry took it), else the default.
local function report_stand_ins(conn, cfg)
  for _, w in ipairs(cfg.workers) do
    if w.unloaded then
      local known = conn:call("HGET", keys.registry(cfg.namespace), w.queue_name)
      io.stderr:write(string.format("luakiq: worker %s stands in as queue '%s' with %d shards (%s): %s; %s\n",
        w.name, w.queue_name, w.shards_count,
        known and "Redis's queue registry" or "the default: Redis's queue registry does not know the queue",
        w.unloaded, require("luakiq.lib.config").SECRETS_HINT))
    end
  end
end

-- Loads the script directory, connects, and returns cfg, conn. Commands
-- that read or change a queue (need_redis = true) never perform: they need
-- each worker's settings, not its code, so they load the worker files for
-- settings only (a worker whose file raised while loading, e.g. for a secret
-- this operator lacks, stands in; run, enqueue, plan and reshard refuse it)
-- and use the registry's shards_count (a reshard may have changed it since
-- the worker files were written); `reshard` itself passes need_redis = "as_files".
local function open(dir, opt, need_redis)
  if not dir then usage("missing DIR") end
  local settings_only = need_redis == true
  local cfg = runtime.load(dir, overrides(opt), settings_only)
  if not need_redis then return cfg end
  local conn = connect(cfg, 0)
  if need_redis ~= "as_files" then runtime.follow_registry(conn, cfg) end
  if settings_only then report_stand_ins(conn, cfg) end
  return cfg, conn
end

local function print_json(v) io.stdout:write(json.clean(json.encode(v)), "\n") end

local plan = runtime.plan

local commands = {}

function commands.plan(argv)
  local pos, opt = parse(argv, 2, { threads = true, redis = true })
  local cfg = open(pos[1], opt, false)
  local groups = plan(cfg)
  if cfg.elastic then
    local n = 0
    for _, g in ipairs(groups) do n = n + #g end
    io.stdout:write(string.format("elastic: the plan is dynamic: the live hosts share the %d shards evenly and " ..
      "each host's %d threads share its part (docs/operations.md, \"Adding and removing hosts\"); " ..
      "alone, this host would take all of them, e.g.:\n", n, #groups))
  end
  for i, g in ipairs(groups) do
    local names = {}
    for j, h in ipairs(g) do names[j] = h.worker .. h.shard end
    io.stdout:write("t", i - 1, ": ", table.concat(names, ", "), "\n")
  end
  return 0
end

function commands.stats(argv)
  local pos, opt = parse(argv, 2, { redis = true })
  local cfg, conn = open(pos[1], opt, true)
  print_json(require("luakiq.ops.admin").stats(conn, cfg))
  return 0
end

-- `luakiq enqueue`: JSON lines are streamed (luakiq.ops.feed: checked whole
-- first, then sent in chunks); one JSON array is read whole.
function commands.enqueue(argv)
  local pos, opt = parse(argv, 2, { redis = true })
  if not pos[2] then usage("usage: luakiq enqueue DIR WORKER [FILE]") end
  local cfg = open(pos[1], opt, false)
  if not cfg.by_name[pos[2]] then errors.notfound("unknown worker '" .. pos[2] .. "'") end
  local feed = require "luakiq.ops.feed"
  local f, tmp = feed.open(pos[3])
  -- the connection, with the host's warning (one line) when Redis may evict
  local function conn()
    local c = connect(cfg, 0)
    local evicts = runtime.eviction_warning(runtime.maxmemory_policy(c))
    if evicts then io.stderr:write("luakiq: warning: ", evicts, "\n") end
    return c
  end
  local ok, n = pcall(function()
    feed.refuse_nul(f)
    if feed.is_array(f) then
      local ok, v = pcall(json.decode, f:read("*a"))
      if not ok then usage("invalid JSON array: " .. tostring(v)) end
      return require("luakiq.client").push(conn(), cfg, pos[2], v)
    end
    -- (connects after the whole file passed the check)
    return feed.lines(conn, cfg, pos[2], f, core.isatty(2))
  end)
  if f ~= io.stdin then f:close() end
  if tmp then os.remove(tmp) end
  if not ok then error(n, 0) end
  io.stdout:write("enqueued ", require("luakiq.lib.log").count(n, "job"), "\n")
  return 0
end

function commands.morgue(argv)
  local pos, opt = parse(argv, 2, { redis = true, all = false })
  local dir, worker, action = pos[1], pos[2], pos[3]
  if not action then usage("usage: luakiq morgue DIR WORKER list|requeue|delete [ID...] [--all]") end
  local ids = {}
  for i = 4, #pos do ids[#ids + 1] = pos[i] end
  local cfg, conn = open(dir, opt, true)
  local admin = require "luakiq.ops.admin"
  admin.worker_of(cfg, worker)
  if action == "list" then
    if #ids > 0 then
      for _, id in ipairs(ids) do
        for _, rec in ipairs(admin.list(conn, cfg, worker, "morgue", "id", "asc", "[" .. id, "[" .. id, 1, 0)) do
          print_json(rec)
        end
      end
    else
      local cursor
      repeat
        local page, after = admin.list(conn, cfg, worker, "morgue", "id", "asc", "-", "+", 1000, 0, cursor)
        for _, rec in ipairs(page) do print_json(rec) end
        cursor = after()
      until #page < 1000
    end
    return 0
  end
  if action ~= "requeue" and action ~= "delete" then usage("unknown morgue action '" .. action .. "'") end
  if #ids == 0 and not opt.all then usage("give ids or --all") end
  if #ids > 0 and opt.all then usage("give ids or --all, not both") end
  local fn = action == "requeue" and admin.morgue_requeue or admin.morgue_delete
  print_json(fn(conn, cfg, worker, #ids > 0 and ids or nil))
  return 0
end

-- The --limit of a listing: 1 to 1000, default 100.
local function limit_of(opt)
  local limit = tonumber(opt.limit or 100)
  if not limit or limit ~= math.floor(limit) or limit < 1 or limit > 1000 then usage("--limit must be 1 to 1000") end
  return limit
end

-- --offset: an integer >= 0 (admin.list caps it), 0 by default.
local function offset_of(opt)
  local offset = tonumber(opt.offset or 0)
  if not offset or offset ~= math.floor(offset) or offset < 0 then usage("--offset must be an integer >= 0") end
  return offset
end

-- `luakiq jobs DIR --tag T [--limit N]`: the jobs tagged T in every worker
-- (queued, in flight, dead), by worker and id.
local function tagged_jobs(pos, opt)
  if pos[2] then usage("usage: luakiq jobs DIR --tag T [--limit N] (no WORKER: every worker)") end
  for _, o in ipairs { "order", "desc", "min", "max", "offset", "cursor" } do
    if opt[o] then usage("--" .. o .. " does not go with --tag") end
  end
  local limit = limit_of(opt)
  local ok, why = require("luakiq.client").tag_check(opt.tag)
  if not ok then usage(why) end
  local cfg, conn = open(pos[1], opt, true)
  local list, more = require("luakiq.ops.admin").tagged(conn, cfg, opt.tag, limit, core.now())
  for _, rec in ipairs(list) do print_json(rec) end
  if more then io.stderr:write("luakiq: more: only the first " .. limit .. " jobs are shown\n") end
  return 0
end

function commands.jobs(argv)
  local pos, opt = parse(argv, 2, { redis = true, order = true, desc = false, min = true, max = true,
                                    limit = true, offset = true, cursor = true, tag = true })
  local dir, worker, what = pos[1], pos[2], pos[3]
  if opt.tag then return tagged_jobs(pos, opt) end
  if what ~= "queue" and what ~= "morgue" and what ~= "busy" then usage("say queue, morgue or busy") end
  local cfg, conn = open(dir, opt, true)
  local admin = require "luakiq.ops.admin"
  local list
  if what == "busy" then
    list = admin.busy(conn, cfg, worker, core.now())
  else
    -- a cursor names its listing: what it does not say comes from there
    local c = opt.cursor and admin.cursor_listing(opt.cursor) or {}
    local order = opt.order or c.order or (what == "queue" and "perform_in" or "updated_at")
    local lex = order == "id"
    local limit = limit_of(opt)
    local after
    list, after = admin.list(conn, cfg, worker, what, order, opt.desc and "desc" or c.dir or "asc",
      opt.min or c.min or (lex and "-" or "-inf"), opt.max or c.max or (lex and "+" or "+inf"),
      limit + 1, offset_of(opt), opt.cursor)
    if #list > limit then
      list[#list] = nil
      io.stderr:write("luakiq: more: the next page is --cursor " .. after(limit) .. "\n")
    end
  end
  for _, rec in ipairs(list) do print_json(rec) end
  return 0
end

-- `luakiq NAME DIR`: prints list(cfg, conn) as JSON lines.
local function lines_command(argv, list)
  local pos, opt = parse(argv, 2, { redis = true })
  if not pos[1] or pos[2] then usage("usage: luakiq " .. argv[1] .. " DIR") end
  local cfg, conn = open(pos[1], opt, true)
  for _, v in ipairs(list(cfg, conn)) do print_json(v) end
  return 0
end

function commands.schedules(argv)
  return lines_command(argv, function(cfg, conn) return require("luakiq.ops.admin").schedules(conn, cfg, core.now()) end)
end

function commands.hosts(argv)
  return lines_command(argv, function(cfg, conn) return require("luakiq.ops.hosts").list(conn, cfg.namespace) end)
end

function commands.timing(argv)
  local pos, opt = parse(argv, 2, { redis = true, day = true })
  local dir, worker = pos[1], pos[2]
  if not worker or pos[3] then usage("usage: luakiq timing DIR WORKER [--day YYYY-MM-DD]") end
  local cfg, conn = open(dir, opt, true)
  print_json(require("luakiq.ops.timing").read(conn, cfg, worker, opt.day))
  return 0
end

local function pause_command(argv, pause)
  local pos, opt = parse(argv, 2, { redis = true })
  local dir, worker = pos[1], pos[2]
  if not worker or pos[3] then usage("usage: luakiq " .. argv[1] .. " DIR WORKER") end
  local cfg, conn = open(dir, opt, true)
  local admin = require "luakiq.ops.admin"
  local r = admin.pause(conn, cfg, worker, pause)
  print_json(r)
  if not r.missing then return 0 end
  io.stderr:write(string.format("luakiq: pause of %s not acknowledged within %g s by %d live host(s): %s\n",
    r.worker, admin.PAUSE_WAIT, #r.missing, table.concat(r.missing, ", ")))
  return 1
end
function commands.pause(argv) return pause_command(argv, true) end
function commands.resume(argv) return pause_command(argv, false) end

function commands.reshard(argv)
  local pos, opt = parse(argv, 2, { redis = true, batch = true, pace = true })
  local dir, worker, n = pos[1], pos[2], pos[3]
  if not n or pos[4] then usage("usage: luakiq reshard DIR WORKER N") end
  local batch = opt.batch and tonumber(opt.batch)
  if opt.batch and (not batch or batch < 1 or batch > 1000 or batch % 1 ~= 0) then
    usage("--batch must be an integer from 1 to 1000")
  end
  local cfg, conn = open(dir, opt, "as_files")
  local show = require("luakiq.ops.feed").progress(core.isatty(2))
  -- (--pace SECONDS, not in the help: a pause after each move call, for specs)
  local st = require("luakiq.ops.reshard").run(conn, cfg, worker, n,
    { batch = batch, progress = show, pace = opt.pace and tonumber(opt.pace) })
  for _, k in ipairs { "waited", "paused", "seconds" } do st[k] = math.floor(st[k] * 1000 + 0.5) / 1000 end
  print_json(st)
  local w = cfg.by_name[worker]
  if w.shards_count ~= st.to then
    io.stderr:write(string.format("luakiq: now set shards_count = %d in %s: a host started with %d is refused\n",
      st.to, w.file or w.name, w.shards_count))
  end
  return 0
end

function commands.job(argv)
  local pos, opt = parse(argv, 2, { redis = true })
  local dir, worker, id = pos[1], pos[2], pos[3]
  if not id or pos[4] then usage("usage: luakiq job DIR WORKER ID") end
  local cfg, conn = open(dir, opt, true)
  print_json(require("luakiq.ops.admin").job(conn, cfg, worker, id, core.now()))
  return 0
end

-- `luakiq reply DIR WORKER TOKEN|--key K [JSON]` (luakiq.lib.replies, as
-- the HTTP routes): exit 0 accepted or duplicate, 1 any other answer.
function commands.reply(argv)
  local pos, opt = parse(argv, 2, { redis = true, key = true })
  local dir, worker = pos[1], pos[2]
  local first = opt.key and 3 or 4 -- where the JSON argument is
  if not worker or (not opt.key and not pos[3]) or pos[first + 1] then
    usage("usage: luakiq reply DIR WORKER TOKEN [JSON] | luakiq reply DIR WORKER --key K [JSON]")
  end
  local body = (pos[first] or io.stdin:read("*a") or ""):match("^%s*(.-)%s*$")
  if body == "" then usage("give the reply's JSON as an argument or on stdin") end
  local ok, err = pcall(json.decode, body)
  if not ok then usage("invalid JSON: " .. tostring(err):gsub("^json: ", "")) end
  local cfg, conn = open(dir, opt, true)
  local replies = require "luakiq.lib.replies"
  local outcome, msg
  if opt.key then outcome, msg = replies.by_key(conn, cfg, worker, opt.key, body)
  else outcome, msg = replies.by_token(conn, cfg, pos[3], body, worker) end
  if outcome ~= "accepted" and outcome ~= "duplicate" then error(outcome .. ": " .. tostring(msg), 0) end
  print_json(select(2, replies.answer(outcome)))
  return 0
end

-- `luakiq waiting DIR WORKER [--late]` (luakiq.ops.waits).
function commands.waiting(argv)
  local pos, opt = parse(argv, 2, { redis = true, late = false })
  local dir, worker = pos[1], pos[2]
  if not worker or pos[3] then usage("usage: luakiq waiting DIR WORKER [--late]") end
  local cfg, conn = open(dir, opt, true)
  local waits = require "luakiq.ops.waits"
  if opt.late then
    for _, r in ipairs(waits.late(conn, cfg, worker, 100)) do print_json(r) end
  else
    waits.each(conn, cfg, worker, print_json)
  end
  return 0
end

-- `luakiq cancel DIR WORKER ID...` (luakiq.ops.admin cancel): one line per
-- id, "ID: cancelled queued" (waiting), "ID: running (cancel requested)",
-- "ID: not found".
function commands.cancel(argv)
  local pos, opt = parse(argv, 2, { redis = true })
  local dir, worker = pos[1], pos[2]
  if not pos[3] then usage("usage: luakiq cancel DIR WORKER ID...") end
  local cfg, conn = open(dir, opt, true)
  local ids = {}
  for i = 3, #pos do ids[#ids + 1] = pos[i] end
  local states
  states, ids = require("luakiq.ops.admin").cancel(conn, cfg, worker, ids)
  local said = { queued = "cancelled queued", waiting = "cancelled waiting", running = "running (cancel requested)",
                 not_found = "not found" }
  for _, id in ipairs(ids) do io.stdout:write(id, ": ", said[states[id]] or tostring(states[id]), "\n") end
  return 0
end

function commands.admin(argv)
  local pos, opt = parse(argv, 2, { redis = true })
  local dir, worker, action = pos[1], pos[2], pos[3]
  local actions = { ["perform-now"] = true, ["kill-failed"] = true, ["delete-failed"] = true, delete = true,
                    kill = true }
  if not actions[action or ""] then usage("say perform-now, kill-failed, delete-failed, delete ID... or kill ID...") end
  local cfg, conn = open(dir, opt, true)
  local admin = require "luakiq.ops.admin"
  local ids = {}
  for i = 4, #pos do ids[#ids + 1] = pos[i] end
  if action == "perform-now" then print_json(admin.perform_all_now(conn, cfg, worker))
  elseif action == "kill-failed" then print_json(admin.kill_failed(conn, cfg, worker))
  elseif action == "delete-failed" then print_json(admin.delete_failed(conn, cfg, worker))
  elseif action == "delete" then
    if #ids == 0 then usage("delete needs ids") end
    print_json(admin.delete_queued(conn, cfg, worker, ids))
  elseif action == "kill" then
    if #ids == 0 then usage("kill needs ids") end
    print_json(admin.kill(conn, cfg, worker, ids))
  else usage("unknown admin action '" .. tostring(action) .. "'") end
  return 0
end

-- `luakiq failures DIR [jobs|requeue|delete GROUP] [--worker W]`.
function commands.failures(argv)
  local pos, opt = parse(argv, 2, { redis = true, worker = true })
  local dir, action, group = pos[1], pos[2], pos[3]
  if action and not (action == "jobs" or action == "requeue" or action == "delete") then
    usage("unknown failures action '" .. action .. "': say jobs, requeue or delete GROUP")
  end
  if (action and not group) or pos[4] then usage("usage: luakiq failures DIR [jobs|requeue|delete GROUP] [--worker W]") end
  local cfg, conn = open(dir, opt, true)
  local failures = require "luakiq.ops.failures"
  if not action then
    for _, g in ipairs(failures.list(conn, cfg, opt.worker)) do print_json(g) end
  elseif action == "jobs" then
    local cursor
    repeat
      local page = failures.jobs(conn, cfg, opt.worker, group, cursor, 1000)
      for _, j in ipairs(page.jobs) do print_json(j) end
      cursor = page.next
    until not cursor
  else
    print_json(failures.act(conn, cfg, opt.worker, group, action))
  end
  return 0
end

-- After host_run left threads stuck in calls past their timeout (JIT-compiled
-- code or a foreign call that cannot be interrupted): their jobs are failed
-- with the timeout error (the calls those threads had parked in luakiq's I/O:
-- put back unchanged) and their shards released, here in the main VM, then
-- the process is replaced by a fresh one with the same arguments (same pid),
-- so the stuck calls never run next to their ids' next calls. The acks those
-- threads had not sent yet go first and every shard of the host (prefixes)
-- is given back (luakiq.runner.unacked's hand_over). After a TERM or
-- INT the process exits instead. Never returns normally while a stuck thread runs.
local function replace(cfg, argv, token, stuck, signalled, code, prefixes)
  local log = require "luakiq.lib.log"
  local runner = require "luakiq.runner"
  local conn = connect(cfg, 10, true)
  local acks, tokens = {}, {}
  for _, s in ipairs(stuck) do
    tokens[s.token or token] = true
    if s.ack then
      s.token = s.token or token
      acks[#acks + 1] = s
    else
      local ok, err = pcall(runner.fail_stuck, cfg, conn, token, s)
      if not ok then log.error("cannot fail a stuck call's jobs (they come back after lease_ttl): " .. tostring(err)) end
    end
  end
  local okh, herr = pcall(require("luakiq.runner.unacked").hand_over, conn, cfg, acks, tokens, prefixes)
  if not okh then log.error("cannot give the stuck threads' shards back (lease_ttl): " .. tostring(herr)) end
  local fatal = core.fatal_message()
  if signalled or fatal then
    log.info("stopped (a call that could not be stopped was failed with its timeout)")
    core.exit_now(fatal and 1 or code)
  end
  local args = { argv[0] or "luakiq" }
  for i = 1, #argv do args[#args + 1] = argv[i] end
  log.warn("replacing the process (pid " .. core.getpid() .. ")")
  local _, err = core.exec_self(args)
  log.error(err)
  core.exit_now(1)
end

function commands.run(argv)
  -- From here a TERM or INT asks for a stop: a host stopped while it still
  -- loads, waits for Redis or registers exits 0 having taken nothing.
  core.host_catch_signals()
  local pos, opt = parse(argv, 2, { redis = true, threads = true, web = true, replies = true,
                                    ["log-format"] = true, ["log-level"] = true })
  local fmt = opt["log-format"] or "text"
  if fmt ~= "text" and fmt ~= "json" then usage("--log-format must be text or json") end
  local level = opt["log-level"]
  if level and level ~= "debug" and level ~= "info" and level ~= "warn" and level ~= "error" then
    usage("--log-level must be debug, info, warn or error")
  end
  core.log_setup { json = fmt == "json", level = level }
  local cfg = open(pos[1], opt, false)
  local log = require "luakiq.lib.log"
  -- The web listener is checked before anything else happens (exit 2).
  local web_token = os.getenv("LUAKIQ_WEB_TOKEN")
  if not web_token or web_token == "" then web_token = cfg.web_token end
  if web_token == "" then web_token = nil end
  if cfg.web then require("luakiq.web").check_listen(cfg.web, web_token) end
  if opt.replies then require("luakiq.web").parse_addr(opt.replies, "--replies") end
  -- (a TERM or INT stops a splitter that loops: luakiq.lib.hooks)
  local okp, groups = pcall(plan, cfg)
  if not okp and core.stopping() then
    log.info("stopped before the start (while the splitter ran); nothing was taken")
    return 0
  end
  if not okp then error(groups, 0) end
  if #groups == 0 then usage("nothing to run: the splitter gave no shards to this node") end
  local conn, cerr = runtime.connect(cfg, cfg.redis_retry or 30)
  if not conn and core.stopping() then
    log.info("stopped before the start (" .. cerr .. "); nothing was taken")
    return 0
  end
  if not conn then connect_failed(cerr) end
  -- the layout version, before anything is written (the web thread and the
  -- worker threads start later, under this check)
  local why = runtime.layout_refusal(conn, cfg)
  if why then error(why, 0) end
  local ok, rerr = runtime.register(conn, cfg)
  if not ok then usage(rerr) end
  -- acks a stop on this machine could not send (luakiq.runner.unacked), before any fetch
  require("luakiq.runner.unacked").settle(conn, cfg)
  local evicts = runtime.eviction_warning(runtime.maxmemory_policy(conn))
  if evicts then log.warn(evicts) end
  if cfg.on_server_init then cfg.on_server_init() end
  -- the lease token: HOST:PID:RANDOM (a job in flight names its host by it)
  local token = core.hostname() .. ":" .. core.getpid() .. ":" .. core.token()
  local boots, routes = {}, {}
  local hosts = require "luakiq.ops.hosts"
  local beat_every, tokens = hosts.BEAT, nil
  if cfg.elastic then
    -- Elastic hosts (luakiq.runner.elastic): every thread gets every shard and a
    -- lease token of its own, takes its share as the live hosts change, and
    -- every thread gets every wake-up (route -1). The host beats faster.
    local elastic = require "luakiq.runner.elastic"
    local beat, dead_after = elastic.timing(cfg.lease_ttl, hosts.BEAT, hosts.TIMEOUT)
    beat_every, tokens = beat, {}
    local all = runtime.handlers(cfg)
    for _, h in ipairs(all) do routes[keys.prefix(cfg.namespace, cfg.by_name[h.worker].queue_name, h.shard)] = -1 end
    for i = 1, #groups do
      tokens[i] = elastic.thread_token(token, i - 1)
      boots[i] = json.encode { dir = pos[1], overrides = overrides(opt), handlers = all, token = tokens[i],
                               log_json = fmt == "json", log_level = opt["log-level"],
                               elastic = { host = token, threads = #groups, index = i - 1, beat = beat,
                                           dead_after = dead_after } }
    end
  else
    for i, g in ipairs(groups) do
      local hs = {}
      for j, h in ipairs(g) do
        hs[j] = { worker = h.worker, shard = h.shard }
        local w = cfg.by_name[h.worker]
        routes[keys.prefix(cfg.namespace, w.queue_name, h.shard)] = i - 1
      end
      boots[i] = json.encode { dir = pos[1], overrides = overrides(opt), handlers = hs, token = token,
                               log_json = fmt == "json", log_level = opt["log-level"] }
    end
  end
  log.info(string.format("luakiq %s starting: %s, %s, Redis %s, pid %d", require("luakiq").version,
    log.count(#groups, "thread"), log.count(#cfg.workers, "worker"), runtime.redact(cfg.redis), core.getpid()))
  -- The heartbeat (luakiq.ops.hosts): from the main loop's timer, on a
  -- connection of its own with a 1 s timeout (the loop waits while it does).
  local started, beat_conn = core.now(), runtime.lazy_conn(cfg.redis, 1)
  local reload = require "luakiq.lib.reload"
  local reload_arg = json.encode { dir = pos[1], overrides = overrides(opt) }
  local running = json.decode(json.encode(reload.summary(cfg, groups))) -- as the check's, through JSON
  -- On a Redis Cluster wake-ups come by sharded Pub/Sub, one channel per
  -- shard, subscribed at the start: an elastic host that sees a queue
  -- resharded to more shards (luakiq reshard) subscribes the new ones.
  local sharded = runtime.sharded(conn)
  local subscribed = {} -- queue name -> shards whose channels are subscribed
  if cfg.elastic and sharded then
    for _, w in ipairs(cfg.workers) do subscribed[w.queue_name] = w.shards_count end
  end
  local function follow_reshards()
    if not next(subscribed) then return end
    local flat = beat_conn():call("HGETALL", keys.registry(cfg.namespace))
    for i = 1, #flat, 2 do
      local q, n = flat[i], tonumber(flat[i + 1])
      if subscribed[q] and n and n > subscribed[q] then
        for s = subscribed[q], n - 1 do core.host_subscribe(keys.prefix(cfg.namespace, q, s)) end
        subscribed[q] = n
      end
    end
  end
  -- A fixed plan cannot follow a reshard of a queue it serves (it spans
  -- every thread, and they share one lease token): the host stops as at TERM
  -- and exits 1 with one line, so its supervisor starts it again and it
  -- plans with the new count (its threads drop the queue's shards
  -- meanwhile: luakiq.runner).
  local resharded, planned = nil, {}
  for _, g in ipairs(groups) do
    for _, h in ipairs(g) do planned[h.worker] = true end
  end
  local function stop_if_resharded()
    if cfg.elastic or resharded then return end
    local flat = beat_conn():call("HGETALL", keys.registry(cfg.namespace))
    local counts = {}
    for i = 1, #flat, 2 do counts[flat[i]] = tonumber(flat[i + 1]) end
    for _, w in ipairs(cfg.workers) do
      local n = counts[w.queue_name]
      if n and n ~= w.shards_count and planned[w.name] then
        resharded = w
        log.error(string.format("queue %s was resharded from %d to %d shards and this host's plan is fixed: " ..
          "stopping (exit 1) to be started again with the new plan: set shards_count = %d in %s first, or use " ..
          "splitter = \"elastic\" (docs/operations.md, 'Resharding')", w.queue_name, w.shards_count, n, n,
          w.file or w.name))
        core.request_stop()
        return
      end
    end
  end
  local function beat(leave)
    if leave then return hosts.leave(beat_conn(), cfg.namespace, token) end
    hosts.beat(beat_conn(), cfg.namespace, token, hosts.info(groups, started, cfg.web, cfg.elastic))
    hosts.sync_pause(beat_conn(), cfg.namespace, token) -- (a pause message missed)
    follow_reshards()
    stop_if_resharded()
  end
  -- the paused queues, for the worker threads before they start (then on
  -- each pause message and at every beat: luakiq.ops.hosts.sync_pause)
  hosts.sync_pause(conn, cfg.namespace, token)
  -- the TTIN dump's default place: this user's private directory in TMPDIR
  local dump_path = cfg.dump_path
  if not dump_path then
    local pdir, perr = runtime.private_dir()
    if pdir then dump_path = pdir .. "/ttin_" .. core.getpid() .. ".txt"
    else log.warn("TTIN writes no thread dump: " .. perr .. "; set dump_path") end
  end
  local code, stuck, signalled = core.host_run {
    boots = boots, routes = routes, redis = cfg.redis,
    wake_channel = keys.wake_channel(cfg.namespace), sharded_wake = sharded,
    token = token, tokens = tokens,
    lease_ms = math.floor(cfg.lease_ttl * 1000), renew_ms = math.floor(cfg.lease_renew * 1000),
    dump_path = dump_path,
    -- The web server runs on a thread of its own, in a VM of its own
    -- (luakiq.web.open(boot)): no request ever delays this loop.
    web = cfg.web and {
      addr = cfg.web, max_body = require("luakiq.web").MAX_BODY,
      boot = json.encode { dir = pos[1], overrides = overrides(opt), token = web_token, threads = #groups },
      max_connections = cfg.web_max_connections, header_timeout = cfg.web_header_timeout,
      idle_timeout = cfg.web_idle_timeout,
    } or nil,
    -- --replies: the reply routes only, for the internet, on a thread and
    -- VM of their own (the same limits, the reply's body limit)
    replies = opt.replies and {
      addr = opt.replies, max_body = require("luakiq.lib.replies").MAX_BODY,
      batch = require("luakiq.web").BATCH,
      boot = json.encode { dir = pos[1], overrides = overrides(opt), only = "replies" },
      max_connections = cfg.web_max_connections, header_timeout = cfg.web_header_timeout,
      idle_timeout = cfg.web_idle_timeout,
    } or nil,
    tick = { ms = math.floor(beat_every * 1000), fn = function()
      local ok, e = pcall(beat)
      if not ok then error("hosts heartbeat: " .. tostring(e), 0) end -- logged at most once a minute
    end },
    -- `luakiq pause` publishes NS:paused's name on the wake-up channel: the
    -- threads get the paused queues at once, then the pause is acknowledged
    -- (an error is logged at most once a minute; the next beat tries again)
    pause = { msg = keys.paused(cfg.namespace), fn = function() hosts.sync_pause(beat_conn(), cfg.namespace, token) end },
    -- SIGHUP: the threads switch to DIR's new code when it loads and keeps
    -- what this process cannot change in place (luakiq.lib.reload)
    reload = function() return reload.run(reload_arg, running) end,
  }
  local okl, lerr = pcall(beat, true) -- gone from the hosts list at once
  if not okl then log.warn("could not leave the hosts list (" .. tostring(lerr) .. "); it drops this host in " ..
    hosts.TIMEOUT .. " s") end
  if #stuck > 0 then
    local prefixes = {}
    for p in pairs(routes) do prefixes[#prefixes + 1] = p end
    return replace(cfg, argv, token, stuck, signalled, code, prefixes)
  end
  local fatal = core.fatal_message()
  if fatal then
    log.error("fatal: " .. fatal:match("^[^\n]*"))
    if cfg.last_words then
      local okl, e = pcall(cfg.last_words, fatal)
      if not okl then log.error("last_words failed: " .. tostring(e)) end
    end
    return code ~= 0 and code or 1
  end
  log.info("stopped")
  return resharded and 1 or code
end

-- luakiq scripts DIR [NAME...] (or --out DIR): the embedded Redis scripts
-- as files (luakiq.ops.scripts).
function commands.scripts(argv)
  local pos, opt = parse(argv, 2, { out = true })
  local dir = opt.out or table.remove(pos, 1)
  if not dir then usage("usage: luakiq scripts DIR [NAME...]") end
  local changed, n = require("luakiq.ops.scripts").write(dir, pos)
  io.stdout:write(("%d scripts in %s, %d files changed\n"):format(n, dir, changed))
  return 0
end

-- luakiq lua [--redis URL] FILE [ARG...]: like the luajit command, inside the
-- host runtime. luakiq.redis (runtime.ctx.conn) connects to --redis or
-- REDIS_URL on first use: a file that never touches Redis needs none.
function commands.lua(argv)
  local i, url = 2, nil
  while argv[i] and argv[i]:match("^%-%-redis") do
    url = argv[i]:match("^%-%-redis=(.*)$")
    if not url then
      if argv[i] ~= "--redis" then break end
      i = i + 1
      url = argv[i]
      if not url then usage("--redis needs a value") end
    end
    i = i + 1
  end
  local file = argv[i]
  if not file then usage("usage: luakiq lua [--redis URL] FILE [ARG...]") end
  if not url or url == "" then url = os.getenv("REDIS_URL") end
  if not url or url == "" then url = "redis://127.0.0.1:6379/0" end
  setmetatable(runtime.ctx, { __index = function(ctx, k)
    if k ~= "conn" then return nil end
    local conn, err = core.connect(url, 10)
    if not conn then error(err, 0) end
    ctx.conn = conn
    return conn
  end })
  local a = { [0] = file }
  for k = i + 1, #argv do a[k - i] = argv[k] end
  _G.arg = a
  local fn, err = loadfile(file)
  if not fn then usage(err) end
  local ok, e = xpcall(function() return fn(unpack(a)) end, function(e)
    if type(e) == "string" then return debug.traceback(e, 2) end
    return e
  end)
  if ok then return type(e) == "number" and e or 0 end
  if e ~= nil then io.stderr:write("luakiq: ", tostring(e), "\n") end
  return 1 -- busted reports failure by raising nil
end

function M.main(argv)
  -- Development mode: the Redis scripts come from the tree, expanded by the
  -- same luakiq.lib.include as the build's, before any thread needs one.
  local tree = os.getenv("LUAKIQ_SCRIPTS")
  if tree and tree ~= "" then require("luakiq.lib.include").define_tree(tree, core.list_dir, core.script_define) end
  local cmd = argv[1]
  if not cmd or cmd == "--help" or cmd == "-h" or cmd == "help" then
    io.stdout:write(USAGE)
    return cmd and 0 or 2
  end
  if cmd == "--version" then io.stdout:write("luakiq ", require("luakiq").version, "\n") return 0 end
  local fn = commands[cmd]
  if not fn then
    io.stderr:write("luakiq: unknown command '", cmd, "' (see luakiq --help)\n")
    return 2
  end
  if cmd ~= "lua" then
    for i = 2, #argv do
      if argv[i] == "--help" or argv[i] == "-h" then io.stdout:write(HELP[cmd], "\n") return 0 end
    end
  end
  local ok, code = pcall(fn, argv)
  if ok then return code end
  local kind, msg = errors.describe(code)
  io.stderr:write("luakiq: ", (msg:match("^[^\n]*")), "\n")
  if kind == "input" or kind == "notfound" or kind == "config" then return 2 end
  return 1
end

return M
