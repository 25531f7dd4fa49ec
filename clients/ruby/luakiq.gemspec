# frozen_string_literal: true

Gem::Specification.new do |s|
  s.name = 'luakiq'
  s.version = '0.1.0'
  s.summary = 'Enqueue jobs into luakiq (ordered background jobs on Redis) from Ruby'
  s.description = 'Checks jobs as `luakiq enqueue` does and stores them byte for byte as it does, ' \
                  'through the Redis scripts the luakiq binary embeds.'
  s.authors = ['the luakiq developers']
  s.license = 'MIT'
  s.required_ruby_version = '>= 3.0'
  # the Redis scripts are written by the luakiq build (luakiq scripts), never by hand
  s.files = Dir['lib/**/*.rb'] + Dir['lib/luakiq/scripts/*.lua'] + ['lib/luakiq/scripts/manifest.json', 'README.md']
  s.add_dependency 'redis', '>= 4.6', '< 5'
end
