-- core.unpack (host/record.c): the MessagePack values of a busy record, as
-- Redis's cmsgpack writes them (docs/redis.md, "Records"), and nil for
-- anything a record never holds or bytes that do not decode. Runs under
-- ASan in CI like every spec, so a read past the input would show there.
local core = require "luakiq.core"

-- A MessagePack float64 of x (big-endian IEEE 754), built with the FFI.
local ffi = require "ffi"
local function f64(x)
  local u = ffi.new("union { double d; uint8_t b[8]; }")
  u.d = x
  local out = {}
  for i = 7, 0, -1 do out[#out + 1] = string.char(u.b[i]) end
  return "\203" .. table.concat(out)
end

describe("core.unpack", function()
  it("decodes a blank job's busy record: perform_in, retry_count, no priority, no windows, one payload", function()
    local t = {}
    local n = core.unpack(f64(1732623456.25) .. "\162-1\194\194\160\192", t)
    assert.are.equal(6, n)
    assert.are.same({ 1732623456.25, "-1", false, false, "" }, { t[1], t[2], t[3], t[4], t[5] })
    assert.is_nil(t[6])
  end)

  it("decodes every scalar a record holds: integers of each width, floats, strings of each length, nil, booleans", function()
    local t = {}
    local long = string.rep("x", 300)
    local big = string.rep("y", 70000)
    local bytes = "\0\127\224\255" -- fixints 0, 127, -32, -1
      .. "\204\200\205\1\0\206\0\1\0\0\207\0\0\0\1\0\0\0\0" -- uint8 200, uint16 256, uint32 65536, uint64 2^32
      .. "\208\128\209\128\0\210\128\0\0\0\211\255\255\255\255\255\255\255\254" -- int8..int64
      .. "\202\63\192\0\0" .. f64(-0.1) -- float32 1.5, float64 -0.1
      .. "\217\44" .. long:sub(1, 44) -- str8 of 44 bytes
      .. "\218\1\44" .. long -- str16 of 300
      .. "\219\0\1\17\112" .. big -- str32 of 70000
      .. "\163a\0b\192\194\195"
    local n = core.unpack(bytes, t)
    assert.are.equal(21, n)
    assert.are.same({ 0, 127, -32, -1, 200, 256, 65536, 2 ^ 32, -128, -32768, -2147483648, -2, 1.5, -0.1 },
      { t[1], t[2], t[3], t[4], t[5], t[6], t[7], t[8], t[9], t[10], t[11], t[12], t[13], t[14] })
    assert.are.equal(long:sub(1, 44), t[15])
    assert.are.equal(long, t[16])
    assert.are.equal(big, t[17])
    assert.are.equal("a\0b", t[18])
    assert.is_nil(t[19])
    assert.is_true(t[20] == false and t[21] == true)
  end)

  it("reuses the table: a shorter record overwrites its own slots, nils included", function()
    local t = {}
    assert.are.equal(3, core.unpack("\161a\161b\161c", t))
    assert.are.equal(2, core.unpack("\192\161z", t))
    assert.is_nil(t[1])
    assert.are.equal("z", t[2])
    assert.are.equal("c", t[3]) -- past n: left as it was
  end)

  it("returns nil for junk: truncated values, a never-used byte, arrays, maps, extensions, bin", function()
    local t = {}
    for _, junk in ipairs { "\203\0\0", "\161", "\218\0\5abc", "\193", "\145\1", "\129\1\1", "\212\1\1", "\196\1a",
                            "\161a\193", f64(1) .. "\221\0\0\0\1\1" } do
      assert.is_nil(core.unpack(junk, t), ("%q"):format(junk))
    end
    assert.are.equal(0, core.unpack("", t))
  end)

  it("refuses what is not a string and a table", function()
    assert.is_false(pcall(core.unpack, nil, {}))
    assert.is_false(pcall(core.unpack, "\1", nil))
  end)
end)
