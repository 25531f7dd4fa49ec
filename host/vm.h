/* vm.h - the Lua glue: the only module that includes lua.h. */
#ifndef LUAKIQ_VM_H
#define LUAKIQ_VM_H

/* The process entry: makes the main thread's VM and runs luakiq.cli.main(argv).
 * Returns the exit code. */
int vm_main(int argc, char **argv);

/* A worker thread's entry: makes the thread's own VM and runs
 * luakiq.runner.main(boot). Returns 0, or 1 after a fatal error. */
int vm_thread_main(const char *boot);

#ifdef LUAKIQ_FUZZ
#include <stddef.h>
#include <stdint.h>
/* Fuzzing only (fuzz/): runs the Lua file driver once (it returns a
 * function(bytes)), then calls that function with data. -1 on a Lua error. */
int vm_fuzz_one(const char *driver, const uint8_t *data, size_t len);
#endif


#endif
