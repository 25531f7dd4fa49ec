# Sourced by fetch-instructions.sh and host-instructions.sh (from the
# repository's root): LUAKIQ_BIN (build-bench's, else build's, unless set),
# valgrind present (else exit 2 with one line naming the caller), and a
# private session (tools/private-services.sh: servers stopped on exit).
if [ -z "${LUAKIQ_BIN:-}" ]; then
  for b in build-bench/luakiq build/luakiq; do [ -x "$b" ] && { export LUAKIQ_BIN=$b; break; }; done
fi
command -v valgrind >/dev/null || { echo "$(basename "$0"): needs valgrind (apt-get install valgrind)" >&2; exit 2; }
. tools/private-services.sh
private_session
