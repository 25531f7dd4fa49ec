-- waitkey.lua: a queue's correlation keys of jobs that wait for a reply, and
-- the secret its reply tokens are signed with, in the queue's slot
-- (docs/redis.md, "Waits", "Replies by key"; lib/waits.lua).
-- KEYS[1] = the queue prefix "NS:{QUEUE}:" (its keys, lib/keys.lua:
-- NS:{QUEUE}:waitkeys, NS:{QUEUE}:secret).
-- A wait lives in its id's shard (another slot), so a reply by key is two
-- calls: "lookup" here, then reply.lua ... "key" KEY ID ATTEMPT on the
-- shard, which re-checks that the wait of ID is on ATTEMPT and carries KEY
-- (STALE when it moved on meanwhile: never another job's wait).
-- ARGV:
--   "secret", CANDIDATE (64 hex digits, random): the queue's secret, set
--     to CANDIDATE when it has none. Returns it. (The host passes it to
--     await.lua.)
--   "claim", KEY, ATTEMPT, ID, DEADLINE, NOW [, EXPECTED]: KEY names the
--     wait of ID on ATTEMPT until DEADLINE, when KEY is free, lapsed
--     (its deadline < NOW), already ID's, or its value is EXPECTED (the
--     caller found the wait it named over: a compare-and-set). Returns "OK",
--     or the error "TAKEN luakiq waitkey: ..." whose second and third words
--     are the attempt and the id holding it.
--   "lookup", KEY: {id, attempt}, or the error "UNKNOWN luakiq waitkey: ...".
--   "drop", KEY, ATTEMPT, ID: deletes KEY when it still names that wait
--     (compare-and-delete). Returns 1 or 0.
--   "sweep", CURSOR, COUNT, NOW: one HSCAN step; drops the entries whose
--     deadline passed. Returns {next_cursor, dropped}.
-- A value is "ATTEMPT DEADLINE ID" (the id last: it may hold spaces).
-- luakiq:include keys
-- luakiq:include args
local Q = { waitkeys = KEYS[1] .. QUEUE_WAITKEYS, secret = KEYS[1] .. QUEUE_SECRET }
local op = ARGV[1]
local function value(attempt, deadline, id) return attempt .. " " .. deadline .. " " .. id end
local function parse(v)
  local a, d, id = (v or ""):match("^(%d+) (%S+) (.*)$")
  return a, tonumber(d), id
end
local function check_key(k)
  if not k or k == "" or #k > 1024 then error("BADARG luakiq waitkey: key must be 1 to 1024 bytes", 0) end
end
if op == "secret" then
  local c = ARGV[2]
  if not c or not c:match("^" .. string.rep("%x", 64) .. "$") then error("BADARG luakiq waitkey: secret must be 64 hex digits", 0) end
  redis.call("SET", Q.secret, c:lower(), "NX")
  return redis.call("GET", Q.secret)
elseif op == "claim" then
  local key, attempt, id, expected = ARGV[2], ARGV[3], ARGV[4], ARGV[7]
  check_key(key)
  if not attempt or not attempt:match("^%d+$") or not id or id == "" then
    error("BADARG luakiq waitkey: claim needs key, attempt (digits), id, deadline, now", 0)
  end
  local deadline = score_str(arg_finite("waitkey", "deadline", ARGV[5]))
  local now = arg_finite("waitkey", "now", ARGV[6])
  local cur = redis.call("HGET", Q.waitkeys, key)
  local ca, cd, cid = parse(cur)
  if cur and cid ~= id and cur ~= expected and cd and cd >= now then
    return redis.error_reply("TAKEN " .. ca .. " " .. cid .. " luakiq waitkey: the key names the wait of '" .. cid ..
      "' (attempt " .. ca .. ")")
  end
  redis.call("HSET", Q.waitkeys, key, value(attempt, deadline, id))
  return "OK"
elseif op == "lookup" then
  check_key(ARGV[2])
  local a, _, id = parse(redis.call("HGET", Q.waitkeys, ARGV[2]))
  if not a then return redis.error_reply("UNKNOWN luakiq waitkey: no job waits with this key") end
  return { id, a }
elseif op == "drop" then
  check_key(ARGV[2])
  local a, _, id = parse(redis.call("HGET", Q.waitkeys, ARGV[2]))
  if a and a == ARGV[3] and id == ARGV[4] then return redis.call("HDEL", Q.waitkeys, ARGV[2]) end
  return 0
elseif op == "sweep" then
  local cursor = ARGV[2]
  if not cursor or not cursor:match("^%d+$") then error("BADARG luakiq waitkey: cursor must be digits", 0) end
  local count = arg_count("waitkey", "count", ARGV[3])
  local now = arg_finite("waitkey", "now", ARGV[4])
  local r = redis.call("HSCAN", Q.waitkeys, cursor, "COUNT", tostring(math.max(1, math.min(count, 1000))))
  local dropped = 0
  for i = 1, #r[2], 2 do
    local _, d = parse(r[2][i + 1])
    if not d or d < now then
      redis.call("HDEL", Q.waitkeys, r[2][i])
      dropped = dropped + 1
    end
  end
  return { r[1], tostring(dropped) }
end
error("BADARG luakiq waitkey: ARGV[1] must be secret, claim, lookup, drop or sweep", 0)
