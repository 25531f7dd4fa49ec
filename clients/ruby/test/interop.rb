# frozen_string_literal: true

# For spec/clients/interop_spec.lua: enqueues each call of a JSON array of
# calls (each an array of jobs) read from stdin, and prints each call's count;
# an input error prints "error: MESSAGE" and exits 2.
# usage: ruby -Ilib interop.rb URL NAMESPACE WORKER SHARDS_COUNT < calls.json
require 'json'
require 'luakiq'

url, namespace, worker, count = ARGV
client = Luakiq::Client.new(url, namespace: namespace)
begin
  JSON.parse($stdin.read, max_nesting: false).each do |jobs|
    puts client.enqueue(worker, jobs, shards_count: count.to_i)
  end
rescue Luakiq::InputError => e
  puts "error: #{e.message}"
  exit 2
ensure
  client.close
end
