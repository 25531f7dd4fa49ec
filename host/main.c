/* main.c - luakiq: ordered background jobs on Redis, workers in Lua.
 * Everything user-facing (the CLI included) is Lua in scripts/luakiq/; this
 * file only hands argv to the main thread's VM. */
#include "vm.h"

int main(int argc, char **argv) { return vm_main(argc, argv); }
