# frozen_string_literal: true

require 'zlib'
require_relative 'tz'

module Luakiq
  # A job (or the jobs) luakiq refuses, with the message `luakiq enqueue`
  # gives for it; nothing of the enqueue was sent.
  class InputError < ArgumentError; end

  # A value canonical JSON cannot hold ("json: <reason> at <path>").
  class JSONError < ArgumentError; end

  # The producer contract without I/O (docs/redis.md; the test vectors in
  # spec/contract/): canonical JSON, the shard of an id, the checks of a job
  # with luakiq's own messages, and the push.lua calls of an enqueue. Each
  # function mirrors the host's (scripts/luakiq/json.lua, lib/keys.lua,
  # client.lua) so that a job enqueued here is stored byte for byte as
  # `luakiq enqueue` stores it.
  #
  # Values are Ruby's: Hash (object; String or Symbol keys), Array (an empty
  # one is written {}, as the host writes an empty table), String and Symbol
  # (UTF-8 text; a binary String is its bytes), Integer, Float, true, false,
  # nil (null). A job field that is absent is "not given"; nil is JSON's null
  # (the host refuses it where a number is due).
  module Contract
    MAX_PAYLOAD_DEPTH = 256
    MAX_PAYLOAD_BYTES = 1_048_576
    MAX_TAGS = 16
    MAX_TAG_BYTES = 64
    MAX_JSON_DEPTH = 1000
    CHUNK = 1000 # jobs per push.lua call
    ALLOWED = %w[id payload score perform_in retry_count expires_at priority windows timezone tags].freeze
    ALLOWED_TEXT = ALLOWED.join(', ')
    ALLOWED_KEYS = ALLOWED.to_h { |k| [k, true] }.freeze
    TWO_53 = 2**53
    CONTROL = /[\x00-\x1f\x7f]/n.freeze

    module_function

    # numbers ------------------------------------------------------------------

    def number?(v) = v.is_a?(Integer) || v.is_a?(Float)
    def finite?(v) = number?(v) && v.to_f.finite?
    def integral?(x) = x == x.floor

    # C's %.<digits>g (inf and nan as C writes them)
    def g(x, digits)
      return 'nan' if x.nan?
      return x.positive? ? 'inf' : '-inf' if x.infinite?

      format("%.#{digits}g", x)
    end

    # Lua's tostring of a number (%.14g)
    def lua_tostring(x) = g(x.to_f, 14)

    # Canonical JSON of a number, or nil for NaN and +-Infinity.
    def number_text(v)
      return v.to_s if v.is_a?(Integer) && v > -TWO_53 && v < TWO_53

      x = v.to_f
      return nil unless x.finite?
      return format('%d', x) if integral?(x) && x > -TWO_53 && x < TWO_53 # also -0 as 0

      [15, 16, 17].each do |digits|
        s = format("%.#{digits}g", x)
        return s if s.to_f == x
      end
      format('%.17g', x)
    end

    # A number as the host sends it to Redis (host/conn.c): an integer below
    # 2^53 as its digits (-0 as "-0"), else %.17g.
    def redis_arg(v)
      x = v.to_f
      return format('%.0f', x) if integral?(x) && x.abs < TWO_53

      format('%.17g', x)
    end

    # text ---------------------------------------------------------------------

    def text?(v) = v.is_a?(String) || v.is_a?(Symbol)

    # v's bytes (a binary String)
    def bytes(v) = v.to_s.b

    def utf8_valid?(b) = b.dup.force_encoding(Encoding::UTF_8).valid_encoding?

    def utf8(b) = b.dup.force_encoding(Encoding::UTF_8)

    ESCAPES = { 34 => '\\"', 92 => '\\\\', 8 => '\\b', 12 => '\\f', 10 => '\\n', 13 => '\\r', 9 => '\\t' }.freeze

    def json_string(b)
      out = +'"'
      out.force_encoding(Encoding::BINARY)
      b.each_byte do |c|
        if c < 32 || c == 34 || c == 92
          out << (ESCAPES[c] || format('\\u%04x', c))
        else
          out << c
        end
      end
      out << '"'
    end

    # A user-given string inside an error message: one line (control
    # characters, and bytes that are not UTF-8, as \xNN), at most 100 bytes.
    def esc(s)
      if number?(s)
        s = finite?(s) && integral?(s.to_f) ? format('%.0f', s.to_f) : lua_tostring(s)
      end
      b = bytes(s)
      b = b.byteslice(0, 100) + '...' if b.bytesize > 100
      bad = utf8_valid?(b) ? CONTROL : /[\x00-\x1f\x7f-\xff]/n
      utf8(b.gsub(bad) { |c| format('\\x%02x', c.ord) })
    end

    # canonical JSON -----------------------------------------------------------

    def path_text(path)
      path.reduce(+'$') do |out, k|
        if k.is_a?(Integer) then out << "[#{k}]"
        elsif k.match?(/\A[A-Za-z_][A-Za-z0-9_]*\z/) then out << ".#{k}"
        else out << "[#{utf8(json_string(bytes(k)))}]"
        end
      end
    end

    def encode(v, path, out, seen)
      case v
      when nil then out << 'null'
      when true then out << 'true'
      when false then out << 'false'
      when String, Symbol then out << json_string(bytes(v))
      when Integer, Float
        s = number_text(v)
        raise JSONError, "json: cannot encode NaN/inf at #{path_text(path)}" unless s

        out << s
      when Hash, Array
        raise JSONError, "json: nesting deeper than #{MAX_JSON_DEPTH} at #{path_text(path)}" if path.size >= MAX_JSON_DEPTH
        raise JSONError, "json: cannot encode a cyclic table at #{path_text(path)}" if seen.key?(v.object_id)

        seen[v.object_id] = true
        if v.is_a?(Hash) && !v.empty?
          keys = v.map do |k, x|
            unless text?(k)
              raise JSONError, "json: cannot encode a table key of type #{k.class} (#{k}) at #{path_text(path)}"
            end

            [bytes(k), k, x]
          end
          out << '{'
          keys.sort_by(&:first).each_with_index do |(kb, k, x), i|
            out << ',' if i.positive?
            out << json_string(kb) << ':'
            encode(x, path + [k.to_s], out, seen)
          end
          out << '}'
        elsif v.is_a?(Array) && !v.empty?
          out << '['
          v.each_with_index do |x, i|
            out << ',' if i.positive?
            encode(x, path + [i + 1], out, seen)
          end
          out << ']'
        else
          out << '{}' # an empty array too: the host's empty table
        end
        seen.delete(v.object_id)
      else
        raise JSONError, "json: cannot encode a #{v.class} at #{path_text(path)}"
      end
    end

    # The canonical JSON bytes of v (luakiq.json.encode): keys sorted by their
    # UTF-8 bytes, no whitespace, integers below 2^53 without fraction, other
    # numbers in the fewest of 15-17 digits that read back equal.
    def canonical(v)
      out = (+'').force_encoding(Encoding::BINARY)
      encode(v, [], out, {})
      out
    end

    # ids and shards -----------------------------------------------------------

    def label(at) = at.is_a?(String) ? at : "job #{at}"

    def got(v)
      case v
      when nil then 'null'
      when true, false then "boolean #{v}"
      when Integer, Float then "number #{lua_tostring(v)}"
      when Array, Hash then 'an array or object'
      else "a #{v.class}"
      end
    end

    # The id's string form (an integer: its digits), or InputError.
    def id_string(v, at = 'id', given = true)
      return v.to_s if v.is_a?(Integer) && v > -TWO_53 && v < TWO_53 # (the common case: what follows gives the same)
      if text?(v)
        b = bytes(v)
        raise InputError, "#{label(at)}: id must not be empty" if b.empty?
        raise InputError, "#{label(at)}: id must be valid UTF-8 (got #{esc(b)})" unless utf8_valid?(b)

        return utf8(b)
      end
      return format('%.0f', v.to_f) if finite?(v) && integral?(v.to_f)

      raise InputError, "#{label(at)}: id must be a non-empty string or an integer, got #{given ? got(v) : 'none'}"
    end

    # crc32 of the id's bytes modulo shards_count (docs/redis.md)
    def shard(id, shards_count) = Zlib.crc32(id.is_a?(String) ? id : bytes(id)) % shards_count # (the bytes, whatever the encoding)

    def prefix(namespace, queue, n) = "#{namespace}:{#{queue}:#{n}}:"

    # windows ------------------------------------------------------------------

    SPAN = /\A([0-9][0-9]):([0-9][0-9])-([0-9][0-9]):([0-9][0-9])\z/n.freeze

    def minutes(h, m)
      h = h.to_i
      m = m.to_i
      return nil if m > 59 || h > 24 || (h == 24 && m != 0)

      h * 60 + m
    end

    # [[zone, spans], nil] of a job's windows text "ZONE|HH:MM-HH:MM,...", or
    # [nil, why], as luakiq.lib.windows.of_text.
    # (text and why are bytes: a zone or window may be any bytes here)
    def parse_windows(text)
      head, bar, rest = text.b.partition('|')
      return [nil, 'not ZONE|HH:MM-HH:MM,...'] if bar.empty? || rest.empty?

      z, why = TZ.zone(head)
      return [nil, "timezone '".b + head + "': ".b + why.b] unless z

      spans = []
      rest.split(',').reject(&:empty?).each do |s|
        m = SPAN.match(s)
        a = m && minutes(m[1], m[2])
        b = m && minutes(m[3], m[4])
        return [nil, "'".b + s + "' must be HH:MM-HH:MM (00:00 to 24:00)".b] if !m || a.nil? || b.nil? || a == 1440
        return [nil, "'".b + s + "' is empty (start = end)".b] if a == b

        spans << [a, b]
      end
      [[z, spans], nil]
    end

    def inside?((z, spans), t)
      m = z.minute_of_day(t)
      spans.any? { |a, b| a < b ? m >= a && m < b : m >= a || m < b }
    end

    def next_open(w, t)
      return t if inside?(w, t)

      m = (t / 60).floor * 60 + 60
      (2 * 1440).times do
        return m if inside?(w, m)

        m += 60
      end
      nil
    end

    # jobs ---------------------------------------------------------------------

    Job = Struct.new(:id, :perform_in, :retry_count, :score, :payload, :expires_at, :priority, :windows, :tags) do
      def extras? = !(expires_at.nil? && priority.nil? && windows.nil? && tags.nil?)
    end

    def num(job, name, default, where, id)
      return default unless job.key?(name)

      v = job[name]
      raise InputError, "#{where} (id #{esc(id)}): #{name} must be a finite number" unless finite?(v)

      v.to_f
    end

    def showable(v, where, id, depth)
      case v
      when String, Symbol
        raise InputError, "#{where} (id #{esc(id)}): payload: a string is not valid UTF-8" unless utf8_valid?(bytes(v))
      when Hash, Array
        if depth >= MAX_PAYLOAD_DEPTH
          raise InputError, "#{where} (id #{esc(id)}): payload nests deeper than #{MAX_PAYLOAD_DEPTH} levels"
        end

        (v.is_a?(Hash) ? v.to_a : v.map { |x| [nil, x] }).each do |k, x|
          showable(k, where, id, depth) if text?(k)
          showable(x, where, id, depth + 1)
        end
      end
    end

    # [tag bytes, nil] or [nil, why], as luakiq.client.tag_check
    def tag_check(t)
      return [nil, 'a tag must be a non-empty string'] unless text?(t) && !bytes(t).empty?

      b = bytes(t)
      return [nil, "tag #{esc(b)} is over #{MAX_TAG_BYTES} bytes"] if b.bytesize > MAX_TAG_BYTES
      return [nil, "tag #{esc(b)} is not valid UTF-8"] unless utf8_valid?(b)
      return [nil, "tag #{esc(b)} has a control character"] if b.match?(CONTROL)

      [b, nil]
    end

    def tags(v, where, id)
      unless v.is_a?(Array) && !v.empty?
        raise InputError, "#{where} (id #{esc(id)}): tags must be a non-empty array of strings"
      end

      seen = {}
      v.each do |t|
        b, why = tag_check(t)
        raise InputError, "#{where} (id #{esc(id)}): #{why}" unless b

        seen[b] = true
      end
      raise InputError, "#{where} (id #{esc(id)}): at most #{MAX_TAGS} tags, got #{seen.size}" if seen.size > MAX_TAGS

      seen.keys.sort.join("\n".b)
    end

    # [windows text, due] of a job's own windows (fields windows, timezone)
    def job_windows(job, where, id, now, memo)
      e = "#{where} (id #{esc(id)}): "
      raise InputError, "#{e}timezone goes with windows" unless job.key?('windows')

      list = job['windows']
      unless list.is_a?(Array) && !list.empty? && list.all? { |s| text?(s) }
        raise InputError, %(#{e}windows must be a non-empty array of "HH:MM-HH:MM")
      end
      if job.key?('timezone') && !(text?(job['timezone']) && !bytes(job['timezone']).empty?)
        raise InputError, "#{e}timezone must be a time zone name"
      end

      text = bytes(job.key?('timezone') ? job['timezone'] : 'UTC') + '|' + list.map { |s| bytes(s) }.join(',')
      return [text, memo[text]] if memo.key?(text)

      w, why = parse_windows(text)
      raise InputError, "#{e}windows: #{esc(why)}" unless w

      memo[text] = next_open(w, now)
      [text, memo[text]]
    end

    # A job's fields by their names as strings (a Hash with Symbol keys too).
    def fields(job) = job.each_key { |k| break nil unless k.is_a?(String) } ? job : job.transform_keys { |k| text?(k) ? k.to_s : k }

    EMPTY_PAYLOAD = '""'.b.freeze

    # A payload's bytes (canonical JSON; "" as the empty string), or InputError.
    # where: the job's label, or its number.
    def payload_data(payload, where, id, max_payload_bytes)
      return EMPTY_PAYLOAD if payload == '' || (text?(payload) && payload.to_s.empty?)

      where = label(where)
      showable(payload, where, id, 0)
      begin
        data = canonical(payload)
      rescue JSONError => err
        raise InputError, "#{where} (id #{esc(id)}): cannot dump payload: #{esc(err.message)}"
      end
      if data.bytesize > max_payload_bytes
        raise InputError, "#{where} (id #{esc(id)}): payload is #{data.bytesize} bytes, over max_payload_bytes (#{max_payload_bytes})"
      end
      data
    end

    # Checks one job (number at, 1-based) as luakiq.client does, in its
    # order; returns a Job or raises InputError.
    def check_job(job, at, now, memo, max_payload_bytes = MAX_PAYLOAD_BYTES)
      # (the usual bulk job, an id and maybe a payload: read in place, every
      # other field's default; anything else takes the whole way below)
      if job.is_a?(Hash) && job.size <= 2
        idk = job.key?('id') ? 'id' : (:id if job.key?(:id))
        pk = job.key?('payload') ? 'payload' : (:payload if job.key?(:payload))
        if idk && job.size == (pk ? 2 : 1)
          id = id_string(job[idk], at, true)
          return Job.new(id, now, -1, now, payload_data(pk ? job[pk] : '', at, id, max_payload_bytes), nil, nil, nil, nil)
        end
      end
      where = label(at)
      raise InputError, "#{where}: unknown field '1' (allowed: #{ALLOWED_TEXT})" if job.is_a?(Array) && !job.empty?

      job = {} if job.is_a?(Array)
      raise InputError, "#{where}: must be an object" unless job.is_a?(Hash)

      job = fields(job)
      job.each_key do |k|
        raise InputError, "#{where}: unknown field '#{esc(k)}' (allowed: #{ALLOWED_TEXT})" unless ALLOWED_KEYS[k]
      end
      id = id_string(job['id'], at, job.key?('id'))
      wtext = nil
      due = now
      wtext, due = job_windows(job, where, id, now, memo) if job.key?('windows') || job.key?('timezone')
      perform_in = num(job, 'perform_in', due, where, id)
      score = num(job, 'score', now, where, id)
      retry_count = num(job, 'retry_count', -1, where, id)
      raise InputError, "#{where} (id #{esc(id)}): retry_count must be an integer >= -1" if !integral?(retry_count) || retry_count < -1

      data = payload_data(job.key?('payload') ? job['payload'] : '', where, id, max_payload_bytes)
      expires_at = num(job, 'expires_at', nil, where, id)
      priority = nil
      if job.key?('priority')
        p = job['priority']
        unless finite?(p) && integral?(p.to_f) && p.to_f.abs <= 1e9
          raise InputError, "#{where} (id #{esc(id)}): priority must be an integer from -1000000000 to 1000000000"
        end

        priority = p.to_f == 100 ? nil : format('%d', p.to_f)
      end
      tag_text = job.key?('tags') ? tags(job['tags'], where, id) : nil
      Job.new(id, perform_in, retry_count, score, data, expires_at, priority, wtext, tag_text)
    end

    # Checks every job (an Array); returns the Jobs or raises InputError for
    # the first bad one (nothing is sent then).
    def check_jobs(jobs, now, max_payload_bytes = MAX_PAYLOAD_BYTES)
      raise InputError, 'jobs must be an array' unless jobs.is_a?(Array)

      memo = {}
      jobs.map.with_index(1) { |j, i| check_job(j, i, now, memo, max_payload_bytes) }
    end

    # push.lua calls -----------------------------------------------------------

    SECTIONS = [[:expires_at, 'expires_at'], [:priority, 'priority'], [:windows, 'windows'], [:tags, 'tags']].freeze

    def arg(x) = x.is_a?(String) ? x : redis_arg(x)

    # jobs sorted by their ids' bytes (String#<=> compares bytes), stably
    def by_id(jobs)
      sorted = jobs.sort_by(&:id)
      return sorted if sorted.each_cons(2).none? { |a, b| a.id == b.id } # (no id twice: stable anyway)

      jobs.each_with_index.sort_by { |j, i| [j.id, i] }.map(&:first)
    end

    # The push.lua calls of checked jobs, as luakiq.client sends them: jobs
    # grouped by shard (shards in the order their first job came), at most
    # CHUNK a call; the short forms "ids" (one perform_in, retry_count, score
    # and payload) and "pairs" (payloads differ), else groups of 5; the
    # sections; "shards". Returns [[shard, key, args, jobs]], and yields each
    # as it is made when given a block.
    def push_calls(namespace, queue, shards_count, jobs, now, channel)
      by_shard = {}
      jobs.each { |j| (by_shard[shard(j.id, shards_count)] ||= []) << j }
      extras = jobs.any?(&:extras?)
      now_s = format('%.17g', now)
      t = ->(x) { x == now ? now_s : arg(x) }
      calls = []
      by_shard.each do |s, list|
        key = prefix(namespace, queue, s)
        list.each_slice(CHUNK) do |chunk|
          args = [channel, now_s]
          f = chunk[0]
          same = chunk.all? { |j| j.perform_in == f.perform_in && j.retry_count == f.retry_count && j.score == f.score }
          one_payload = same && chunk.all? { |j| j.payload == f.payload }
          if same
            args.push('', one_payload ? 'ids' : 'pairs', t.call(f.perform_in),
                      f.retry_count == -1 ? '-1' : arg(f.retry_count), t.call(f.score))
            rows = extras ? chunk : by_id(chunk)
            if one_payload
              args << f.payload
              rows.each { |j| args << j.id }
            else
              rows.each { |j| args.push(j.id, j.payload) }
            end
          else
            chunk.each do |j|
              args.push(j.id, t.call(j.perform_in), j.retry_count == -1 ? '-1' : arg(j.retry_count), t.call(j.score),
                        j.payload)
            end
          end
          if extras
            SECTIONS.each do |field, name|
              opened = false
              chunk.each_with_index do |j, i|
                v = j[field]
                next if v.nil?

                args.push('', name) unless opened
                opened = true
                args.push((i + 1).to_s, field == :expires_at ? format('%.17g', v) : v)
              end
            end
          end
          args.push('', 'shards', shards_count.to_s)
          calls << [s, key, args, chunk]
          yield calls[-1] if block_given?
        end
      end
      calls
    end

    # replies ------------------------------------------------------------------

    MAX_REPLY_BYTES = 262_144 # reply.lua's limit (TOOBIG)
    MAX_KEY_BYTES = 1024 # waitkey.lua's
    TOKEN = /\A1\.([A-Za-z0-9_-]*)\.([A-Za-z0-9_-]+)\.[0-9]+\.[0-9A-Fa-f]+\z/n
    SPACE = " \t\n\v\f\r"

    def b64url(t) = (t.size % 4 == 1 ? nil : (t + '=' * (-t.size % 4)).tr('-_', '+/').unpack1('m').b)

    # A reply token's queue and id (binary Strings), or nil when it is not of
    # the form "1." b64url(queue) "." b64url(id) "." attempt "." mac (luakiq's
    # lib/replies.lua; whether it is genuine only reply.lua can tell).
    def split_token(token)
      return nil unless token.is_a?(String)

      m = TOKEN.match(token.b)
      queue = m && b64url(m[1])
      id = m && b64url(m[2])
      return nil if queue.nil? || id.nil? || queue.empty? || id.empty?

      [queue, id]
    end

    # The bytes a reply sends: JSON text (a String) as `luakiq reply` reads it
    # (ASCII white space around it dropped, then checked), or any other value
    # as its canonical JSON. InputError with the CLI's message.
    def reply_body(body)
      none = "give the reply's JSON as an argument or on stdin"
      raise InputError, none if body.nil?

      if body.is_a?(String)
        b = body.b.sub(/\A[#{SPACE}]+/n, '').sub(/[#{SPACE}]+\z/n, '')
        raise InputError, none if b.empty?

        begin
          JSON.parse(utf8(b), quirks_mode: true, max_nesting: false)
        rescue JSON::ParserError, EncodingError => e
          raise InputError, "invalid JSON: #{e.message}"
        end
      else
        begin
          b = canonical(body)
        rescue JSONError => e
          raise InputError, "invalid JSON: #{e.message}"
        end
      end
      raise InputError, "TOOBIG: the reply is #{b.bytesize} bytes, at most #{MAX_REPLY_BYTES}" if b.bytesize > MAX_REPLY_BYTES

      b
    end

    # A correlation key's bytes, or InputError (`luakiq reply --key`'s message).
    def reply_key(key)
      b = key.is_a?(String) ? key.b : ''.b
      raise InputError, "BADREPLY: key must be a string of 1 to #{MAX_KEY_BYTES} bytes" if b.empty? || b.bytesize > MAX_KEY_BYTES

      b
    end

    # reply.lua's ARGV for a reply: refs are the "how" words ('token', T |
    # 'key', KEY, ID, ATTEMPT), body the JSON bytes (docs/redis.md, 'reply.lua').
    def reply_args(now, channel, shards_count, refs, body) = ['reply', redis_arg(now), channel, shards_count.to_s, *refs, body]
  end
end
