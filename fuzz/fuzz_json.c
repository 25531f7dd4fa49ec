/* fuzz_json.c - libFuzzer harness over the job/JSON decoding path: every
 * input goes through fuzz_json.lua (luakiq.json.decode, the canonical
 * encoder, and the client's job validation as perform_async / luakiq enqueue
 * run it), inside a real host VM. Built with -DLUAKIQ_FUZZ=ON (clang);
 * `cmake --build BUILD --target fuzz` runs it for a fixed time. */
#include <stdint.h>
#include <stdlib.h>
#include "fuzz_lua.h"

#ifndef LUAKIQ_FUZZ_DRIVER
#error "LUAKIQ_FUZZ_DRIVER must name fuzz/fuzz_json.lua"
#endif

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (fuzz_lua_one(LUAKIQ_FUZZ_DRIVER, data, size) != 0) abort();
    return 0;
}
