/* main.c - luakiq: ordered background jobs on Redis, workers in Lua.
 * Everything user-facing (the CLI included) is Lua in scripts/luakiq/; this
 * file only hands argv to the main thread's VM (entry.c). */
#include "entry.h"

int main(int argc, char **argv) { return entry_main(argc, argv); }
