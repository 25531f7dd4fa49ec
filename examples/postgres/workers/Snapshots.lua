-- Lowkiq's own story: each job is a snapshot of an order (payload
-- {version =, status =}, score = version). A snapshot replaces the order's
-- row in PostgreSQL, without comparing versions: luakiq runs the snapshots
-- of one order in order and never two at once, and with monotonic = true it
-- drops a snapshot that arrives after a newer one was written (a late
-- re-send), so the row always moves forward. Snapshots pushed while an order waits merge into one job, and only
-- the newest one (the last payload: payloads come in score order) is written.
--
-- One connection per worker thread: each thread loads this file in its own
-- Lua VM, so `db` is that thread's. lua-dbi-postgresql (Debian) is a real
-- client: a query blocks the thread while it runs (short upserts here).
-- FAIL_RATE (0..1) injects failures, half of them after the upsert: the
-- retried job writes the same or a newer snapshot, never an older one.
local ok, DBI = pcall(require, "DBI")
if not ok then error("examples/postgres needs lua-dbi-postgresql (apt-get install lua-dbi-postgresql)", 0) end

local FAIL_RATE = tonumber(os.getenv("FAIL_RATE") or "") or 0
math.randomseed(os.time() + tonumber(tostring({}):match("0x(%x+)") or "0", 16) % 100000)

local db, upsert

local function connect()
  local conn, err = DBI.Connect("PostgreSQL", os.getenv("PGDATABASE") or "postgres", os.getenv("PGUSER") or "postgres",
    os.getenv("PGPASSWORD") or "", os.getenv("PGHOST") or "127.0.0.1", tonumber(os.getenv("PGPORT") or "5432"))
  if not conn then error("PostgreSQL: " .. tostring(err), 0) end
  conn:autocommit(true)
  local sth, perr = conn:prepare([[
    INSERT INTO orders (id, version, status, written_at) VALUES (?, ?, ?, now())
    ON CONFLICT (id) DO UPDATE SET version = EXCLUDED.version, status = EXCLUDED.status,
                                   written_at = EXCLUDED.written_at]])
  if not sth then conn:close() error("PostgreSQL: " .. tostring(perr), 0) end
  db, upsert = conn, sth
end

return {
  shards_count = 20,
  -- a snapshot whose version (score) is not above the newest one written
  -- for its order is dropped at fetch (a late re-send), not performed
  monotonic = true,
  batch_size = 10,
  max_retry_count = 20,
  retry_in = function(count) return 0.1 * count end,
  timeout = 30,
  perform = function(batch)
    if not db then connect() end
    if math.random() < FAIL_RATE / 2 then error("injected failure before the write") end
    for id, snapshots in pairs(batch) do
      local s = snapshots[#snapshots]
      local done, err = upsert:execute(id, s.version, s.status)
      if not done then
        db = nil -- a broken connection is made again on the next call
        error("PostgreSQL: " .. tostring(err), 0)
      end
    end
    if math.random() < FAIL_RATE / 2 then error("injected failure after the write") end
  end,
}
