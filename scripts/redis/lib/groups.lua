-- Failure groups ("luakiq:include groups"; docs/operations.md, "Failures").
-- error_group(err) is the one rule that says which failures are "the same
-- error": failures.lua groups the stored errors of a shard with it, and the
-- host, the dashboard and any other client see only its result, so every
-- script and every client groups alike. Plain Lua 5.1 string functions only
-- (it runs in Redis; spec/unit/failures_spec.lua loads it in LuaJIT too).
--
-- What it does to the (dumped) error text:
--   * keeps the first line, at most 1000 bytes of it;
--   * the job's own id (id: the hash field the error is stored under), as a
--     word of its own (a trailing "." or ":" aside) -> <id>, unless it is
--     all digits (a number: <n> below), so "boom for id X1" and "boom for
--     id X2" are one group;
--   * UUIDs -> <uuid>;  IPv4 addresses, with a port -> <ip>;  IPv6 addresses
--     ("[::1]:8080", "fe80::1", "2001:db8:0:0:0:0:0:1") -> <ip>;
--   * in every word: 0x1f and hex runs of 8 or more with digits and letters
--     (hashes, object ids) -> <hex>; numbers -> <n> ("3.2", "1e-3", "12"
--     are each one <n>), except one or two digits right after a letter, which
--     name things rather than count them ("utf8", "Orders2", "t0", "md5");
--   * runs of white space -> one space, trimmed; at most 200 bytes kept.
-- Quoted text is kept: "attempt to index field 'x'" names code, not data.
local function error_group(err, id)
  local s = string.sub(string.match(err, "^[^\r\n]*"), 1, 1000)
  if id == "" or (id and string.match(id, "^%d+$")) then id = nil end
  local x = "%x%x%x%x"
  s = string.gsub(s, x .. x .. "%-" .. x .. "%-" .. x .. "%-" .. x .. "%-" .. x .. x .. x, "<uuid>")
  s = string.gsub(s, "%[[%x:%.]*:[%x:%.]*%]:%d+", "<ip>")           -- [v6]:port
  s = string.gsub(s, "%[[%x:%.]*:[%x:%.]*%]", "<ip>")               -- [v6]
  s = string.gsub(s, "%d+%.%d+%.%d+%.%d+:%d+", "<ip>")              -- v4:port
  s = string.gsub(s, "%d+%.%d+%.%d+%.%d+", "<ip>")                  -- v4
  -- word by word: a word is a run of letters, digits and . : - + _ / (so
  -- "lua:12:" and "id-9f2c" are words, "=" and "(" are not)
  s = string.gsub(s, "[%w%.:%-+_/]+", function(word)
    if id and string.sub(word, 1, #id) == id and string.match(string.sub(word, #id + 1), "^[%.:]*$") then
      return "<id>" .. string.sub(word, #id + 1)
    end
    -- a bare IPv6 address: hex and colons only, with "::" or 7 colons
    if string.match(word, "^[%x:]+$") and string.find(word, "%x") then
      local _, colons = string.gsub(word, ":", "")
      if string.find(word, "::", 1, true) or colons == 7 then return "<ip>" end
    end
    word = string.gsub(word, "%w+", function(w)
      if string.match(w, "^0[xX]%x+$") then return "<hex>" end
      if #w >= 8 and string.match(w, "^%x+$") and string.find(w, "%d") and string.find(w, "%a") then
        return "<hex>"
      end
      -- digits: masked unless one or two right after a letter
      return (string.gsub(w, "()(%d+)", function(at, d)
        if at > 1 and #d <= 2 and string.find(string.sub(w, at - 1, at - 1), "%a") then return d end
        return "<n>"
      end))
    end)
    -- "<n>.<n>" (a decimal), "<n>e-<n>" (an exponent): one number
    repeat
      local n1, n2
      word, n1 = string.gsub(word, "<n>%.<n>", "<n>")
      word, n2 = string.gsub(word, "<n>[eE][%-+]?<n>", "<n>")
    until n1 + n2 == 0
    return word
  end)
  s = string.gsub(string.gsub(s, "%s+", " "), "^ ", "")
  s = string.gsub(s, " $", "")
  if #s > 200 then
    -- cut at a character boundary (UTF-8: no continuation byte left dangling)
    s = string.gsub(string.sub(s, 1, 200), "[\192-\255][\128-\191]*$", "")
  end
  return s
end
