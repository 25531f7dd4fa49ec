#!/usr/bin/env bash
# Installs what luakiq needs to build (with --examples, to run the examples
# with real services; with --test, to run the whole test suite), from Debian
# 12's packages and the npm registry only. Does nothing when everything is
# already there.
set -euo pipefail
cd "$(dirname "$0")/.."
# LuaJIT: OpenResty's branch (libluajit2-5.1-dev, luajit2; they replace
# libluajit-5.1-dev and luajit): Debian 12's libluajit-5.1 2.1.0~beta3+git20220320
# ends pairs() loops early in compiled code (LuaJIT issue #827; docs/architecture.md,
# "Dependencies").
pkgs=(build-essential cmake pkg-config libluajit2-5.1-dev luajit2 libhiredis-dev libevent-dev
      zlib1g-dev libcurl4-openssl-dev libssl-dev libmsgpack-dev ca-certificates lua-busted lua-cjson redis-server)
# The web specs (spec/web): curl for the API, headless Chromium driven by
# playwright-core (an npm package, tools/web-test) for the dashboard. Node from
# elsewhere (e.g. NodeSource) is fine: Debian's is only added when none is there.
tests=0 examples=0
[ "${1:-}" = "--test" ] && tests=1 examples=1
[ "${1:-}" = "--examples" ] && examples=1
# The examples with real services (examples/postgres, examples/webhook,
# examples/callback): PostgreSQL and its Lua client (lua-dbi-postgresql, see
# docs/workers.md), python3 for the webhook example's receiver and the
# callback example's provider, python3-redis for its consumer, curl for its run.sh.
if [ $examples = 1 ]; then
  pkgs+=(postgresql lua-dbi-postgresql python3 python3-redis curl)
fi
# luakiq.http's specs: python3 runs the test HTTP(S) server, openssl makes its
# self-signed certificate.
if [ $tests = 1 ]; then
  pkgs+=(curl chromium python3 openssl)
  # spec/faults/redis_spec.lua makes a language's locale (localedef) for a
  # redis-server that compares strings by it: the locale sources
  pkgs+=(locales)
  # spec/host/examples_spec.lua runs docs/redis.md's Python producer (redis-py);
  # spec/clients/python_spec.lua installs clients/python into a virtualenv
  # (pip, offline: --no-build-isolation --no-deps, setuptools and redis-py from Debian)
  pkgs+=(python3-redis python3-venv python3-setuptools)
  # spec/clients/ruby_spec.lua builds, installs and tests clients/ruby (on redis-rb)
  pkgs+=(ruby ruby-redis)
  # spec/host/examples_spec.lua runs examples/benchmark's --await, whose
  # replies over HTTP come from wrk
  pkgs+=(wrk)
  command -v node >/dev/null 2>&1 || pkgs+=(nodejs)
  command -v npm >/dev/null 2>&1 || pkgs+=(npm)
fi
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}" >&2
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# playwright-core at the version pinned in tools/web-test/package-lock.json
# (it drives /usr/bin/chromium; it downloads no browser).
if [ $tests = 1 ] && [ ! -d tools/web-test/node_modules/playwright-core ]; then
  echo "installing: playwright-core (npm ci in tools/web-test)" >&2
  (cd tools/web-test && npm ci --no-audit --no-fund --loglevel=error)
fi
# clients/node's dependency (ioredis) at the version pinned in its package-lock.json
# (spec/clients/node_spec.lua runs its tests; the interop spec its interop.js).
if [ $tests = 1 ] && [ ! -d clients/node/node_modules/ioredis ]; then
  echo "installing: ioredis (npm ci in clients/node)" >&2
  (cd clients/node && npm ci --no-audit --no-fund --loglevel=error)
fi
# promtool checks GET /metrics in spec/web/api_spec.lua. It ships in Debian's
# prometheus package, whose installation would also start a Prometheus server
# (port 9090) on machines with systemd: the package is only downloaded and
# promtool taken out of it, into build-deps/bin (ignored by git).
if [ $tests = 1 ] && ! command -v promtool >/dev/null 2>&1 && [ ! -x build-deps/bin/promtool ]; then
  echo "installing: promtool (from Debian's prometheus package, into build-deps/bin)" >&2
  tmp=$(mktemp -d)
  (cd "$tmp" && apt-get download prometheus >/dev/null 2>&1 || { SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo";
    $SUDO apt-get update -qq && apt-get download prometheus >/dev/null 2>&1; })
  dpkg-deb -x "$tmp"/prometheus_*.deb "$tmp/x"
  mkdir -p build-deps/bin
  cp "$tmp/x/usr/bin/promtool" build-deps/bin/promtool
  rm -rf "$tmp"
fi
