# frozen_string_literal: true

# luakiq: enqueue jobs into luakiq (ordered background jobs on Redis) from
# Ruby, byte for byte as `luakiq enqueue` does (README.md).
module Luakiq
  VERSION = '0.1.0'
end

require_relative 'luakiq/contract'
require_relative 'luakiq/client'
