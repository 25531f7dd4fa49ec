#!/usr/bin/env bash
# Installs what luakiq needs to build and test, from Debian 12's packages only.
# Does nothing when everything is already there.
set -euo pipefail
pkgs=(build-essential cmake pkg-config libluajit-5.1-dev luajit libhiredis-dev libevent-dev
      zlib1g-dev lua-busted lua-cjson redis-server)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "installing: ${missing[*]}" >&2
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
