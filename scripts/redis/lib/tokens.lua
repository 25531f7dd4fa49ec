-- Reply tokens ("luakiq:include tokens", after "waits": await.lua makes
-- them, reply.lua reads them; docs/redis.md, "Reply tokens"): "1." .. b64url(queue) .. "." ..
-- b64url(id) .. "." .. attempt .. "." .. mac, mac = the first 32 hex digits
-- of HMAC-SHA1(the queue's secret, the text before the last "."). Made and
-- checked here, so every host, the CLI and any client of reply.lua agree
-- without a secret of their own; deterministic in (queue, id, attempt), so
-- a re-run of the same attempt gets the same token and a forged one (bad
-- mac) is told from a stale one (good mac, the wait moved on).
local B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
local function b64url(s)
  local out, k = {}, 0
  for i = 1, #s, 3 do
    local a, b, c = s:byte(i, i + 2)
    local v = a * 65536 + (b or 0) * 256 + (c or 0)
    local digits = c and 4 or (b and 3 or 2)
    for j = 1, digits do
      local d = math.floor(v / 2 ^ (24 - 6 * j)) % 64
      k = k + 1
      out[k] = B64:sub(d + 1, d + 1)
    end
  end
  return table.concat(out)
end
-- The bytes of b64url text t (no padding; its digits already matched
-- [%w_-]), or nil when its length cannot be one. By arithmetic, without a
-- table: a script's chunk runs whole at every call, so a lookup table would
-- be built each time, and a call (math.floor, a helper per digit) costs as
-- much as the rest (Redis instructions, callgrind: 28.8k -> 16.9k for a
-- token's queue and id; docs/benchmarks.md, "Jobs that wait for a reply").
local function b64url_decode(t)
  local n = #t
  if n % 4 == 1 then return nil end
  local out = ""
  for i = 1, n, 4 do
    local a, b, c, d = t:byte(i, i + 3)
    a = a >= 97 and a - 71 or a >= 65 and (a == 95 and 63 or a - 65) or a >= 48 and a + 4 or 62
    b = b >= 97 and b - 71 or b >= 65 and (b == 95 and 63 or b - 65) or b >= 48 and b + 4 or 62
    local vc = not c and 0 or c >= 97 and c - 71 or c >= 65 and (c == 95 and 63 or c - 65) or c >= 48 and c + 4 or 62
    local vd = not d and 0 or d >= 97 and d - 71 or d >= 65 and (d == 95 and 63 or d - 65) or d >= 48 and d + 4 or 62
    local v = ((a * 64 + b) * 64 + vc) * 64 + vd
    local z = v % 256
    local y = (v - z) / 256 % 256
    local x = (v - v % 65536) / 65536
    out = out .. ((d and string.char(x, y, z)) or (c and string.char(x, y)) or string.char(x))
  end
  return out
end

-- HMAC-SHA1 (RFC 2104) with redis.sha1hex: pads = the key's inner and outer
-- pads (64 bytes each, key_pads), stored once per shard in P waits:key so a
-- reply costs two SHA-1s and no XOR.
local function key_pads(secret)
  local i, o = {}, {}
  for k = 1, 64 do
    local b = secret:byte(k) or 0
    i[k], o[k] = string.char(bit.bxor(b, 0x36)), string.char(bit.bxor(b, 0x5c))
  end
  return table.concat(i) .. table.concat(o)
end
-- The bytes of hex digits h (the secret: await.lua, once per shard).
local function hex_bytes(h) return (h:gsub("..", function(x) return string.char(tonumber(x, 16)) end)) end
-- The 20 bytes of a SHA-1's 40 hex digits (every reply: twice), 8 digits a
-- number, by arithmetic (as b64url_decode): 41.1k Redis instructions as
-- hex_bytes, 17.6k so.
local function bytes4(v)
  local d = v % 256
  local c = (v - d) / 256 % 256
  local b = (v - v % 65536) / 65536 % 256
  return (v - v % 16777216) / 16777216, b, c, d
end
local function sha1_bytes(h)
  local char = string.char
  return char(bytes4(tonumber(h:sub(1, 8), 16))) .. char(bytes4(tonumber(h:sub(9, 16), 16))) ..
    char(bytes4(tonumber(h:sub(17, 24), 16))) .. char(bytes4(tonumber(h:sub(25, 32), 16))) ..
    char(bytes4(tonumber(h:sub(33, 40), 16)))
end
local function hmac_hex(pads, msg)
  return redis.sha1hex(pads:sub(65, 128) .. sha1_bytes(redis.sha1hex(pads:sub(1, 64) .. msg)))
end

-- The queue of the shard prefix P ("NS:{QUEUE:SHARD}:").
local function queue_of(P) return P:match("^[^{]*{(.*):%d+}:$") end

local function make_token(pads, queue, id, attempt)
  local body = "1." .. b64url(queue) .. "." .. b64url(id) .. "." .. attempt
  return body .. "." .. hmac_hex(pads, body):sub(1, 32)
end

-- A token's queue, id and attempt (a number), or nil when it is not a
-- token of this form or its mac is not the one pads gives.
local function read_token(pads, t)
  local q, i, a, mac = t:match("^1%.([%w_-]*)%.([%w_-]+)%.(%d+)%.(%x+)$")
  if not q or #a > 15 or not pads then return nil end
  if hmac_hex(pads, t:sub(1, #t - #mac - 1)):sub(1, 32) ~= mac then return nil end
  local queue, id = b64url_decode(q), b64url_decode(i)
  if not queue or not id then return nil end
  return queue, id, tonumber(a)
end

