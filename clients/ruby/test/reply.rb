# frozen_string_literal: true

# For spec/clients/replies_spec.lua: one reply, by token or by key, with the
# body given as JSON text; prints the outcome, or "error: MESSAGE" and exits
# 2 for an input error.
# usage: ruby reply.rb URL NAMESPACE WORKER token|key VALUE BODY
require 'luakiq'

url, namespace, worker, how, value, body = ARGV
client = Luakiq::Client.new(url, namespace: namespace)
begin
  puts client.reply(worker, body: body, how.to_sym => value)
rescue Luakiq::InputError => e
  puts "error: #{e.message}"
  exit 2
ensure
  client.close
end
