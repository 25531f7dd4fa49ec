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
-- The bytes of b64url text t (no padding), or nil when t is not one.
local function b64url_decode(t)
  if #t % 4 == 1 then return nil end
  local B64_VAL = {}
  for i = 1, 64 do B64_VAL[B64:byte(i)] = i - 1 end
  local out, k = {}, 0
  for i = 1, #t, 4 do
    local v, digits = 0, 0
    for j = i, math.min(i + 3, #t) do
      local d = B64_VAL[t:byte(j)]
      if not d then return nil end
      v, digits = v * 64 + d, digits + 1
    end
    v = v * 64 ^ (4 - digits)
    local bytes = digits - 1
    for j = 1, bytes do
      k = k + 1
      out[k] = string.char(math.floor(v / 2 ^ (24 - 8 * j)) % 256)
    end
  end
  return table.concat(out)
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
local function hex_bytes(h) return (h:gsub("..", function(x) return string.char(tonumber(x, 16)) end)) end
local function hmac_hex(pads, msg)
  return redis.sha1hex(pads:sub(65, 128) .. hex_bytes(redis.sha1hex(pads:sub(1, 64) .. msg)))
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

