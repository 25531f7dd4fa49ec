-- kill.lua: move the given ids' jobs to the morgue: the queued job (its
-- error kept), the job that waits for a reply and the payloads held behind
-- it (lib/waits.lua, W.remove: the wait ends, its token is then STALE; the
-- error says it was killed while waiting), all merged into the id's dead
-- job, updated_at = now. Never touches a job in flight (nor a wait whose
-- on_reply call runs), like delete.lua.
-- KEYS[1] = shard prefix "NS:{QUEUE:SHARD}:".  ARGV[1] now, ARGV[2..] ids.
-- Returns the number of ids that had a job to move (integer).
-- luakiq:include keys
-- luakiq:include levels
-- luakiq:include shard
-- luakiq:include args
WAITS_WANTED = redis.call("EXISTS", KEYS[1] .. WAITS_SEQ) == 1 -- (lib/waits.lua: a shard that awaited)
-- luakiq:include waits
local P = KEYS[1]
local K = shard_keys(P)
if W then W.keys(K, P) end
local now_s = score_str(arg_finite("kill", "now", ARGV[1]))
local count = 0
for i = 2, #ARGV do
  local id = ARGV[i]
  local err = redis.call("HGET", K.errors, id)
  local moved = unqueue_job(P, K, id, function(pl) morgue_add(K, id, pl, now_s, err or "") end) > 0
  if W then
    local w = W.get(K, id)
    local pl, held = W.remove(P, K, id)
    if pl then
      local why = "killed while waiting for a reply (attempt " .. (w and W.num_str(w.attempt) or "?") .. ")"
      for _, x in ipairs(held) do pl[#pl + 1] = x end
      if #pl > 0 then
        morgue_add(K, id, pl, now_s, why)
        moved = true
      end
    end
  end
  if moved then count = count + 1 end
end
return count
