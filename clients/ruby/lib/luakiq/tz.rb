# frozen_string_literal: true

module Luakiq
  # UTC offsets of IANA time zones from the system's TZif files, read as luakiq
  # reads them (scripts/luakiq/lib/tz.lua): the file's transitions only, the
  # last offset kept after the last one, so a job's windows open when the host
  # says they do.
  module TZ
    Zone = Struct.new(:times, :offsets, :first) do
      # seconds east of UTC at Unix time t
      def offset(t)
        return first if times.empty? || t < times[0]

        lo = 0
        hi = times.size - 1
        while lo < hi
          mid = (lo + hi + 1) / 2
          if times[mid] <= t then lo = mid else hi = mid - 1 end
        end
        offsets[lo]
      end

      # the zone's wall-clock minute of the day (0..1439) at Unix time t
      def minute_of_day(t)
        ((t + offset(t)).floor / 60) % 1440
      end
    end

    UTC = Zone.new([], [], 0)
    @cache = {}

    def self.dir
      ENV['TZDIR'].to_s.empty? ? '/usr/share/zoneinfo' : ENV['TZDIR']
    end

    def self.parse(data)
      return [nil, 'not a TZif file'] unless data.byteslice(0, 4) == 'TZif'

      counts = ->(at) { data.byteslice(at + 20, 24).unpack('N6') }
      isutc, isstd, leap, timecnt, typecnt, charcnt = counts.call(0)
      at = 0
      tsize = 4
      if data.getbyte(4) >= 0x32 # version 2+: the 64-bit section, after the 32-bit one
        at = 44 + timecnt * 4 + timecnt + typecnt * 6 + charcnt + leap * 8 + isstd + isutc
        isutc, isstd, leap, timecnt, typecnt, charcnt = counts.call(at)
        tsize = 8
      end
      p = at + 44
      times = data.byteslice(p, timecnt * tsize).unpack(tsize == 8 ? 'q>*' : 'l>*')
      p += timecnt * tsize
      idx = data.byteslice(p, timecnt).bytes
      p += timecnt
      offs = (0...typecnt).map { |i| data.byteslice(p + i * 6, 4).unpack1('l>') }
      return [nil, 'no local time types'] if typecnt.zero?

      [Zone.new(times, idx.map { |i| offs[i] || 0 }, offs[0]), nil]
    end

    # [Zone, nil] or [nil, why], as luakiq.lib.tz.zone
    def self.zone(name)
      return [UTC, nil] if ['UTC', '', 'Etc/UTC'].include?(name)
      return [@cache[name], nil] if @cache.key?(name)
      return [nil, 'not a time zone name'] if name.include?('..') || name.start_with?('/') || name !~ %r{\A[A-Za-z0-9_+\-/]+\z}

      begin
        data = File.binread(File.join(dir, name))
      rescue SystemCallError
        return [nil, "no such time zone in #{dir} (tzdata)"]
      end
      z, err = parse(data)
      @cache[name] = z if z
      [z, err]
    end
  end
end
