#!/usr/bin/env bash
# Builds the Debian package of luakiq with CPack (CMakeLists.txt, "Installing"):
# /usr/bin/luakiq, /usr/share/doc/luakiq (README, docs/), the systemd unit
# /usr/lib/systemd/system/luakiq@.service (runs `luakiq run /etc/luakiq/NAME`
# as the user luakiq, which postinst creates), /etc/luakiq/README; Depends:
# the libraries the binary links (dpkg-shlibdeps), libcurl4 (loaded on
# first use) and adduser.
#   tools/package.sh [DIR]    configures and builds DIR (default build-package,
#                             prefix /usr), prints the path of the .deb
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build-package}
tools/install-deps.sh
command -v dpkg-shlibdeps >/dev/null || { echo "tools/package.sh: dpkg-shlibdeps is missing (apt-get install dpkg-dev)" >&2; exit 1; }
cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_INSTALL_PREFIX=/usr >/dev/null
cmake --build "$dir" -j"$(nproc)" >/dev/null
(cd "$dir" && cpack -G DEB >/dev/null)
ls "$dir"/luakiq_*.deb
