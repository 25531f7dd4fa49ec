# frozen_string_literal: true

require 'json'
require 'uri'
require 'redis'
require_relative 'contract'

module Luakiq
  # The namespace in Redis has a layout this client does not know.
  class LayoutError < Redis::BaseError; end

  # Enqueue jobs into luakiq's queues, and read them, through redis-rb and
  # the Redis scripts the luakiq binary embeds (lib/luakiq/scripts/, written
  # by `luakiq scripts` at build time).
  #
  #   client = Luakiq::Client.new(url = nil, namespace: nil)
  #
  # url: a luakiq Redis URL (default REDIS_URL, else redis://127.0.0.1:6379/0);
  # namespace: the script directory's (default "luakiq"). A worker is named
  # by its queue (the worker's name unless its file sets queue_name).
  class Client
    SCRIPTS = File.join(__dir__, 'scripts')
    USED = %w[push register layout stats job reply waitkey].freeze
    # reply.lua's and waitkey.lua's answers that are outcomes (the others raise)
    OUTCOMES = { 'CONFLICT' => :conflict, 'STALE' => :stale, 'UNKNOWN' => :unknown }.freeze
    RESHARD_TRIES = 10 # a frozen shard is asked again every 0.1 s, 1 s in all
    RESHARD_PAUSE = 0.1
    C = Contract

    attr_reader :redis, :namespace, :url

    def initialize(url = nil, namespace: nil)
      @url = url || ENV.fetch('REDIS_URL', nil).then { |u| u.nil? || u.empty? ? nil : u } || 'redis://127.0.0.1:6379/0'
      @namespace = namespace || 'luakiq'
      @redis, @cluster = connect(@url)
      @layout, @scripts = load_scripts
      @checked = false
      @channel = nil
      @counts = {} # queue -> shards_count known to match the registry
    end

    def cluster? = @cluster

    def close
      @redis.close
    end

    # Enqueues jobs (an Array of Hashes with the fields of `luakiq enqueue`:
    # id, payload, score, perform_in, retry_count, expires_at, priority,
    # windows, timezone, tags; String or Symbol keys) into the queue `worker`;
    # returns how many. Every job is checked first (InputError, luakiq's
    # message; nothing sent). shards_count: the queue's, for a queue no host
    # registered yet.
    def enqueue(worker, jobs, shards_count: nil)
      now = Time.now.to_f
      checked = C.check_jobs(jobs, now)
      return 0 if checked.empty?

      check_layout
      count = shards_count_of(worker, shards_count)
      stored, failed, refused = push(worker, count, checked, now)
      if refused && !failed
        # resharded since the registry was read: those calls wrote nothing;
        # sent again once with the count the shard named
        @counts.delete(worker)
        count = refused[1] || registry(worker)
        more, failed, again = push(worker, count, refused[0], now)
        stored += more
        failed ||= 'luakiq push: resharded again while pushing' if again
      end
      raise Redis::CommandError, "luakiq: push failed: #{failed} (#{stored} of the #{checked.size} jobs were stored)" if failed

      checked.size
    end

    # Where job `id` of the queue `worker` is: a Hash as `luakiq job` prints
    # it ("state" "queued", "in_flight" or "dead"), or nil.
    def job(worker, id)
      jid = C.id_string(id, 'id')
      check_layout
      count = registry(worker)
      return nil unless count

      key = C.prefix(@namespace, worker, C.shard(jid, count))
      r = script('job', key, jid)
      job_record(jid, r, @redis.hget("#{key}tags", jid), Time.now.to_f)
    end

    # Every registered queue's numbers, as `luakiq stats` prints them:
    # {"total" => {length, morgue_length, lag, expired}, "by_worker" =>
    # {QUEUE => {length, morgue_length, lag, expired[, paused]}}}.
    def stats
      check_layout
      queues = @redis.hgetall("#{@namespace}:queues").transform_values(&:to_i)
      calls = []
      owners = []
      queues.keys.sort.each do |q|
        queues[q].times do |s|
          calls << ['stats', C.prefix(@namespace, q, s), []]
          owners << q
        end
      end
      replies = run(calls)
      paused = @redis.hgetall("#{@namespace}:paused")
      now = Time.now.to_f
      by = queues.keys.to_h { |q| [q, { 'length' => 0, 'morgue_length' => 0, 'lag' => 0, 'expired' => 0 }] }
      replies.each_with_index do |r, i|
        raise r if r.is_a?(StandardError)

        s = by[owners[i]]
        s['length'] += r[0].to_i + r[1].to_i
        s['morgue_length'] += r[2].to_i
        s['lag'] = [s['lag'], now - r[3].to_f].max unless r[3].empty?
        s['expired'] += r[7].to_i
      end
      total = { 'length' => 0, 'morgue_length' => 0, 'lag' => 0, 'expired' => 0 }
      by.each do |q, s|
        s['paused'] = true if paused.key?(q)
        %w[length morgue_length expired].each { |k| total[k] += s[k] }
        total['lag'] = [total['lag'], s['lag']].max
      end
      { 'total' => total, 'by_worker' => by }
    end

    # Replies to a job of the queue `worker` that waits for one
    # (luakiq.await), by its reply token or by the correlation key its await
    # named, as `luakiq reply` does (docs/redis.md, "Jobs that wait for a
    # reply"). body: JSON text (a String, sent as given but for white space
    # around it) or a value (sent as its canonical JSON). Returns :accepted,
    # :duplicate (the same bytes again), :conflict (another reply was
    # accepted), :stale (the wait is over) or :unknown (no such token, key or
    # queue). Bad input raises InputError with the CLI's message.
    def reply(worker, token: nil, key: nil, body: nil)
      raise InputError, 'reply: give a token or a key (one of them)' if token.nil? == key.nil?

      data = C.reply_body(body)
      kb = key.nil? ? nil : C.reply_key(key)
      check_layout
      unless kb
        queue, id = C.split_token(token)
        return :unknown if queue.nil? || queue != worker.to_s.b

        return reply_call(worker, id, ['token', token], data)
      end
      qkey = "#{@namespace}:{#{worker}}:"
      begin
        id, attempt = script('waitkey', qkey, 'lookup', kb)
      rescue Redis::CommandError => e
        return :unknown if error_code(e)[0] == 'UNKNOWN'

        raise
      end
      outcome = reply_call(worker, id, ['key', kb, id, attempt], data)
      script('waitkey', qkey, 'drop', kb, attempt, id) if outcome == :stale # (cleanup)
      outcome
    end

    private

    # An error reply's code word and its message without "luakiq NAME: ".
    def error_code(e)
      m = /\A(?:ERR )?([A-Z]+) (?:[^:]*?luakiq \w+: )?(.*)\z/m.match(e.message.sub(/ script: \w+, on @user_script:\d+\.\z/, ''))
      m ? [m[1], m[2]] : [nil, e.message]
    end

    # reply.lua on the id's shard (routed as a push): a shard resharded since
    # the registry was read is asked again with the new count, a frozen one
    # again after a pause.
    def reply_call(queue, id, refs, data)
      fresh = false
      frozen = 0
      loop do
        count = (!fresh && @counts[queue]) || registry(queue)
        return :unknown if count.nil?

        @counts[queue] = count
        args = C.reply_args(Time.now.to_f, wake_channel, count, refs, data)
        begin
          return script('reply', C.prefix(@namespace, queue, C.shard(id, count)), *args).to_sym
        rescue Redis::CommandError => e
          code, msg = error_code(e)
          if code == 'RESHARDED' && !fresh
            fresh = true
          elsif code == 'RESHARD' && frozen < RESHARD_TRIES
            frozen += 1
            sleep RESHARD_PAUSE
          elsif OUTCOMES.key?(code)
            return OUTCOMES[code]
          elsif %w[BADREPLY BADJSON TOOBIG].include?(code)
            raise InputError, "#{code}: #{msg}"
          else
            raise
          end
        end
      end
    end

    def load_scripts
      manifest = JSON.parse(File.read(File.join(SCRIPTS, 'manifest.json')))
      scripts = USED.to_h do |name|
        e = manifest['scripts'][name]
        [name, [e['sha1'], File.binread(File.join(SCRIPTS, e['file']))]]
      end
      [manifest['layout'], scripts]
    rescue Errno::ENOENT
      raise "luakiq: #{SCRIPTS}/manifest.json is missing: the gem was not built from a luakiq build " \
            '(cmake --build build writes it with `luakiq scripts`)'
    end

    # A redis-rb client for a luakiq Redis URL (docs/configuration.md, 'Redis
    # URLs'): redis://[[user]:password@]host[:port][,host[:port]...][/db] (a
    # Redis Cluster is found by asking the first host) or
    # unix:///path[?db=N][&user=U][&password=P].
    def connect(url)
      if url.start_with?('unix://')
        u = URI(url)
        q = URI.decode_www_form(u.query || '').to_h
        r = Redis.new(path: u.path, db: q.fetch('db', 0).to_i, username: q['user'], password: q['password'])
        r.ping # (a wrong password or socket fails here, as for redis://)
        return [r, false]
      end
      raise ArgumentError, "luakiq: bad Redis URL '#{url}': say redis://HOST:PORT/DB or unix:///PATH" unless url.start_with?('redis://')

      rest = url.delete_prefix('redis://')
      hosts_end = rest.index('/') || rest.size
      at = rest.rindex('@', hosts_end)
      userinfo = at ? rest[0...at] : ''
      hosts, db = (at ? rest[(at + 1)..] : rest).split('/', 2)
      username = password = nil
      unless userinfo.empty?
        user, colon, pw = userinfo.partition(':')
        if colon.empty? then password = URI.decode_www_form_component(user)
        else
          username = URI.decode_www_form_component(user)
          username = nil if username.empty?
          password = URI.decode_www_form_component(pw)
        end
      end
      nodes = hosts.split(',').map do |h|
        host, port = h.split(':')
        [host.to_s.empty? ? '127.0.0.1' : host, (port || 6379).to_i]
      end
      first = Redis.new(host: nodes[0][0], port: nodes[0][1], db: db.to_i, username: username, password: password)
      return [first, false] unless first.info('cluster')['cluster_enabled'] == '1'

      first.close
      [Redis.new(cluster: nodes.map { |h, p| "redis://#{h}:#{p}" }, username: username, password: password), true]
    end

    # on a cluster, the guard key in the shard's slot (docs/redis.md, 'The
    # guard key'): a call during a slot's migration waits for it
    def keys_of(key) = @cluster && key.include?('{') ? [key, "#{key}~guard"] : [key]

    def load(name)
      @redis.script(:load, @scripts[name][1]) # (on a cluster: every master)
    end

    def evalsha_command(name, key, args)
      keys = keys_of(key)
      [:evalsha, @scripts[name][0], keys.size, *keys, *args]
    end

    # The replies (or Redis::CommandError values) of [[script, key, args]]:
    # on a single Redis written at once and read after (one round trip), on
    # a cluster one by one; a call Redis did not know the script of
    # (NOSCRIPT) is sent again once the script is loaded.
    def run(calls)
      replies = if @cluster
                  (calls = calls.to_a).map { |c| call_one(*c) }
                else
                  # each command written as soon as calls yields it (an
                  # Enumerator that makes them: push), so Redis runs the first
                  # while the next are made; then every reply read
                  sent = []
                  commands = Enumerator.new { |y| calls.each { |c| sent << c; y << evalsha_command(*c) } }
                  client = @redis._client
                  client.process(commands) { sent.map { client.read } }.tap { calls = sent }
                end
      missing = replies.each_index.select { |i| replies[i].is_a?(Redis::CommandError) && replies[i].message.start_with?('NOSCRIPT') }
      missing.map { |i| calls[i][0] }.uniq.each { |name| load(name) }
      missing.each { |i| replies[i] = call_one(*calls[i]) }
      replies
    end

    # one call's reply, or its Redis::CommandError
    def call_one(name, key, args)
      @redis._client.call(evalsha_command(name, key, args))
    rescue Redis::CommandError => e
      e
    end

    def script(name, key, *args)
      r = run([[name, key, args]])[0]
      raise r if r.is_a?(StandardError)

      r
    end

    # Refuses a namespace whose layout this client does not know, once
    # (layout.lua: a new namespace is marked as this layout). Loads the
    # scripts first, so that the usual call is an EVALSHA Redis knows.
    def check_layout
      return if @checked

      USED.each { |name| load(name) }
      v = script('layout', "#{@namespace}:queues", 'check').to_s
      unless v == @layout
        why = case v
              when '1' then "is in layout 1 (written by an older luakiq) and this client reads layout #{@layout}: " \
                            'convert it with `luakiq migrate DIR`'
              when '1>2' then 'is being converted to layout 2 (a migration is running or was interrupted)'
              else "has layout '#{v}'; this client reads layout #{@layout}"
              end
        raise LayoutError, "luakiq: namespace '#{@namespace}' in Redis #{why}"
      end
      @checked = true
    end

    def wake_channel
      @channel ||= begin
        major = @redis.info('server')['redis_version'].to_i
        @cluster && major >= 7 ? '!' : "#{@namespace}:wake"
      end
    end

    def registry(queue) = @redis.hget("#{@namespace}:queues", queue)&.to_i

    # The queue's shards_count: the registry's; a queue no host registered
    # yet is registered with the given one (register.lua).
    def shards_count_of(queue, given)
      known = @counts[queue]
      return known if known && (given.nil? || given == known)

      stored = registry(queue)
      unless stored
        if given.nil?
          raise InputError, "queue '#{queue}' is not registered in #{@namespace}:queues: no luakiq host or producer " \
                            'has used it yet; pass shards_count'
        end
        raise InputError, "shards_count must be an integer >= 1, got #{given.inspect}" unless given.is_a?(Integer) && given >= 1

        r = script('register', "#{@namespace}:queues", queue, given.to_s)
        raise LayoutError, "luakiq: namespace '#{@namespace}' in Redis has layout '#{r[1]}'" if r.is_a?(Array)

        stored = r.to_i
      end
      if given && given != stored
        raise InputError, "shards_count is #{given} but queue '#{queue}' has #{stored} shards in Redis; nothing " \
                          "enqueued (see luakiq's docs/configuration.md, 'Changing shards_count')"
      end
      @counts[queue] = stored
    end

    def push(queue, count, checked, now)
      calls = []
      made = Enumerator.new do |y|
        C.push_calls(@namespace, queue, count, checked, now, wake_channel) { |c| calls << c; y << ['push', c[1], c[2]] }
      end
      replies = run(made)
      stored = 0
      failed = nil
      refused = nil
      replies.each_with_index do |r, i|
        if r.is_a?(StandardError)
          text = r.message.sub(/ script: \w+, on @user_script:\d+\.\z/, '')
          if (m = text.match(/\A(?:ERR )?RESHARDED (\d+)|resharded: queue has (\d+) shards/))
            refused ||= [[], (m[1] || m[2]).to_i]
            refused[0].concat(calls[i][3])
          else
            failed ||= text
          end
        else
          stored += calls[i][3].size
        end
      end
      [stored, failed, refused]
    end

    def payload_value(raw)
      JSON.parse(raw, quirks_mode: true, max_nesting: false)
    rescue JSON::ParserError
      raw
    end

    # job.lua's reply as luakiq.ops.admin's job record
    def job_record(id, r, tags, now)
      state = r[0]
      return nil if state.empty?

      payloads = lambda do |i|
        n = r[i].to_i
        [(1..n).map { |k| [payload_value(r[i + 2 * k - 1]), r[i + 2 * k].to_f] }, i + 2 * n + 1]
      end
      rec = { 'id' => id, 'state' => state }
      rec['tags'] = tags.split("\n") if tags && !tags.empty?
      if state == 'dead'
        rec['updated_at'] = r[1].to_f
        rec['error'] = r[2] unless r[2].empty?
        rec['payloads'] = payloads.call(3)[0]
        return rec
      end
      rec['perform_in'] = r[1].to_f
      rec['retry_count'] = r[2].to_i
      rec['error'] = r[3] unless r[3].empty?
      fields = lambda do |k|
        rec['priority'] = r[k].empty? ? 100 : r[k].to_i
        zone, bar, spans = r[k + 1].partition('|')
        unless bar.empty?
          rec['timezone'] = zone
          rec['windows'] = spans.split(',').reject(&:empty?)
        end
      end
      if state == 'queued'
        fields.call(4)
        rec['payloads'] = payloads.call(6)[0]
        return rec
      end
      holder = r[4]
      rec['host'] = holder.include?(':') ? holder[0...holder.rindex(':')] : holder unless holder.empty?
      unless r[5].empty?
        rec['fetched_at'] = r[5].to_f
        rec['running'] = [0, (now - rec['fetched_at']).floor].max
      end
      fields.call(6)
      rec['payloads'], i = payloads.call(8)
      rec['queued_payloads'] = payloads.call(i)[0] if i < r.size
      rec
    end
  end
end
