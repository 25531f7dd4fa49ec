local json = require "luakiq.json"

local function err_of(f, ...)
  local ok, e = pcall(f, ...)
  assert.is_false(ok, "expected an error")
  return e
end

describe("luakiq.json.encode", function()
  it("sorts object keys by bytes and writes no spaces", function()
    assert.equal('{"A":1,"B":2,"a":3,"b":{"x":[1,2],"y":null}}',
      json.encode { b = { y = json.null, x = { 1, 2 } }, a = 3, B = 2, A = 1 })
    assert.equal('{"a":1,"a\\u0000":2,"ab":3,"é":4}', json.encode { ["é"] = 4, ab = 3, ["a\0"] = 2, a = 1 })
  end)

  it("gives equal bytes for equal payloads built in any order", function()
    local a, b = {}, {}
    for i = 1, 50 do a["k" .. i] = i end
    for i = 50, 1, -1 do b["k" .. i] = i end
    assert.equal(json.encode(a), json.encode(b))
  end)

  it("encodes scalars", function()
    assert.equal("true", json.encode(true))
    assert.equal("false", json.encode(false))
    assert.equal("null", json.encode(json.null))
    assert.equal("null", json.encode(nil))
    assert.equal('"x"', json.encode("x"))
  end)

  it("tells arrays from objects; an empty table is {}", function()
    assert.equal("[1,\"a\",true]", json.encode { 1, "a", true })
    assert.equal("{}", json.encode {})
    assert.equal("[[],{}]", json.encode { json.array(), {} })
    assert.equal("[1,2]", json.encode(json.array { 1, 2 }))
    assert.equal("[1,null,3]", json.encode { 1, json.null, 3 })
  end)

  it("writes integers without fraction or exponent below 2^53", function()
    assert.equal("0", json.encode(0))
    assert.equal("0", json.encode(-0.0))
    assert.equal("-42", json.encode(-42))
    assert.equal("1700000000", json.encode(1700000000))
    assert.equal("9007199254740991", json.encode(2 ^ 53 - 1))
    assert.equal("-9007199254740991", json.encode(-(2 ^ 53 - 1)))
    assert.equal("1000000000000000", json.encode(1e15))
  end)

  it("writes other numbers with the shortest digits that round-trip", function()
    assert.equal("0.1", json.encode(0.1))
    assert.equal("1.5", json.encode(1.5))
    assert.equal("-2.25", json.encode(-2.25))
    assert.equal("0.3333333333333333", json.encode(1 / 3))
    assert.equal("0.30000000000000004", json.encode(0.1 + 0.2))
    assert.equal("1e-07", json.encode(1e-7))
    assert.equal("1e+300", json.encode(1e300))
    assert.equal("1700000000.123456", json.encode(1700000000.123456))
    for _, x in ipairs { 0.1, 1 / 3, math.pi, 1e-300, 5e-324, 1.7976931348623157e308, 2 ^ 53, 2 ^ 60, -1e21, 123456.789 } do
      assert.equal(x, json.decode(json.encode(x)))
    end
  end)

  it("refuses NaN and infinities", function()
    assert.matches("json: cannot encode NaN/inf", err_of(json.encode, 0 / 0), nil, true)
    assert.matches("json: cannot encode NaN/inf", err_of(json.encode, { a = math.huge }), nil, true)
    assert.matches("json: cannot encode NaN/inf at $[2]", err_of(json.encode, { 1, -math.huge }), nil, true)
  end)

  it("escapes quotes, backslashes and control characters; passes UTF-8 and / through", function()
    assert.equal([["a\"b\\c/d"]], json.encode('a"b\\c/d'))
    assert.equal([["\b\f\n\r\t"]], json.encode("\b\f\n\r\t"))
    assert.equal([["\u0000\u0001\u001f"]], json.encode("\0\1\31"))
    assert.equal('"\127 é 日本 😀"', json.encode("\127 é 日本 😀"))
    for c = 0, 255 do
      local s = "x" .. string.char(c) .. "y"
      if c < 128 then assert.equal(s, json.decode(json.encode(s))) end
    end
  end)

  it("finds a byte to escape anywhere in a long string, compiled or not", function()
    -- (encode_string and utf8_valid loop over the bytes: hot, their loops
    -- are traces; each position is asked many times)
    local base = string.rep("a", 300)
    for round = 1, 3 do
      for pos = 1, 300, 13 do -- (1, 14, ..., 300: the first and last bytes too)
        for c, esc in pairs { ['"'] = '\\"', ["\\"] = "\\\\", ["\n"] = "\\n", ["\0"] = "\\u0000", ["\31"] = "\\u001f" } do
          local s = base:sub(1, pos - 1) .. c .. base:sub(pos + 1)
          assert.are.equal('"' .. base:sub(1, pos - 1) .. esc .. base:sub(pos + 1) .. '"', json.encode(s), round)
        end
        assert.is_false(json.utf8_valid(base:sub(1, pos - 1) .. "\xff" .. base:sub(pos + 1)))
        assert.is_true(json.utf8_valid(base:sub(1, pos - 1) .. "\u{e9}" .. base:sub(pos + 1)))
        assert.are.equal('"' .. base .. '"', json.encode(base))
      end
    end
  end)

  it("refuses mixed, sparse and non-string keys", function()
    assert.matches("both string and number keys", err_of(json.encode, { 1, a = 2 }), nil, true)
    assert.matches("sparse array", err_of(json.encode, { [1] = 1, [3] = 3 }), nil, true)
    assert.matches("sparse array", err_of(json.encode, { [2] = 1 }), nil, true)
    assert.matches("table key of type boolean", err_of(json.encode, { [true] = 1 }), nil, true)
    assert.matches("table key of type number %(0%)", err_of(json.encode, { [0] = 1 }))
    assert.matches("table key of type number %(1.5%)", err_of(json.encode, { [1.5] = 1 }))
    assert.matches("string keys in a json.array", err_of(json.encode, json.array { a = 1 }), nil, true)
  end)

  it("refuses cycles but not shared tables", function()
    local t = { a = {} }
    t.a.back = t
    assert.matches("json: cannot encode a cyclic table at $.a.back", err_of(json.encode, t), nil, true)
    local shared = { 1 }
    assert.equal('{"x":[1],"y":[1]}', json.encode { x = shared, y = shared })
  end)

  it("refuses functions, userdata and threads, naming the path", function()
    assert.equal("json: cannot encode a function at $.a[2]", err_of(json.encode, { a = { 1, print } }))
    assert.equal("json: cannot encode a userdata at $[\"odd key\"]", err_of(json.encode, { ["odd key"] = io.stdout }))
    assert.equal("json: cannot encode a thread at $", err_of(json.encode, coroutine.create(print)))
  end)

  it("refuses nesting deeper than 1000", function()
    local t = {}
    local cur = t
    for _ = 1, 1100 do cur[1] = {} cur = cur[1] end
    assert.matches("json: nesting deeper than 1000", err_of(json.encode, t), nil, true)
  end)
end)

describe("luakiq.json.decode", function()
  it("round-trips canonical text", function()
    for _, s in ipairs {
      '{"a":[1,2.5,"x",true,false,null],"b":{"c":{}}}', '[]', '"\\u0000"', '1e+300', '-0.5',
      '{"id":"1","payload":{"n":123456789012345}}', '"日本"',
    } do
      local v = json.decode(s)
      local back = json.encode(v)
      if s == "[]" then assert.equal("{}", back) else assert.equal(s, back) end
    end
  end)

  it("decodes null as json.null and escapes as UTF-8", function()
    local v = json.decode('{"a":null,"b":"\\u00e9\\n"}')
    assert.equal(json.null, v.a)
    assert.equal("é\n", v.b)
  end)

  it("keeps integers up to 2^53 exact", function()
    assert.equal(2 ^ 53, json.decode("9007199254740992"))
    assert.equal("9007199254740991", json.encode(json.decode("9007199254740991")))
  end)

  it("refuses NaN, Infinity, hex and bad syntax with 'json: ' errors", function()
    for _, s in ipairs { "NaN", "Infinity", "-Infinity", "0x10", "[1,", "{'a':1}", "[1] x", "", "{\"a\":1,}" } do
      local e = err_of(json.decode, s)
      assert.equal("json: ", e:sub(1, 6), s)
      assert.is_nil(e:match("^json: [^ ]*%.lua:%d+:"), "no position prefix")
    end
    assert.equal("json: decode expects a string, got nil", err_of(json.decode, nil))
  end)

  it("limits nesting depth", function()
    assert.matches("^json: .*nested", err_of(json.decode, string.rep("[", 1001) .. string.rep("]", 1001)))
    assert.is_table(json.decode(string.rep("[", 999) .. string.rep("]", 999)))
  end)

  it("cannot be changed through the shared cjson module", function()
    local cjson = require "cjson"
    local before = cjson.decode_invalid_numbers()
    cjson.decode_invalid_numbers(true)
    local ok = pcall(json.decode, "NaN")
    cjson.decode_invalid_numbers(before)
    assert.is_false(ok)
  end)

  it("try_decode returns true, value or false, the error decode raises", function()
    local ok, v = json.try_decode('{"id":1,"p":[1,"a"]}')
    assert.is_true(ok)
    assert.same({ id = 1, p = { 1, "a" } }, v)
    local bad, e = json.try_decode("[1,")
    assert.is_false(bad)
    local _, raised = pcall(json.decode, "[1,")
    assert.are.equal(raised, e)
    assert.truthy(e:find("^json: "), e)
  end)

  it("decode_safe returns nil, err instead of raising", function()
    local v, e = json.decode_safe("[1,")
    assert.is_nil(v)
    assert.matches("^json: ", e)
    assert.same({ 1 }, (json.decode_safe("[1]")))
  end)
end)

describe("json.utf8_valid and json.clean", function()
  it("tell valid UTF-8 (RFC 3629) from the rest", function()
    for _, ok in ipairs { "", "abc", "h\u{e9}", "\u{20ac}", "\u{10ffff}", "\u{1f600}x" } do
      assert.is_true(json.utf8_valid(ok), ok)
    end
    for _, bad in ipairs { "\xff", "a\xc3", "\xc0\xaf", "\xe0\x80\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80",
                           "\xe2\x82", "\x80", "\xf8\x88\x80\x80\x80" } do
      assert.is_false(json.utf8_valid(bad), bad)
    end
  end)
  it("escape the bytes that are not UTF-8 as \\u00XX and keep the rest", function()
    assert.are.equal("abc", json.clean("abc"))
    assert.are.equal('"a\\u00ffb\u{e9}"', json.clean(json.encode("a\xffb\u{e9}")))
    assert.are.equal("a\u{ff}b\u{e9}", json.decode(json.clean(json.encode("a\xffb\u{e9}"))))
    assert.are.equal('\\u00e2\\u0082x', json.clean("\xe2\x82x"))
  end)
end)
