/* proc.h - child processes for workers (see proc.c). */
#ifndef LUAKIQ_PROC_H
#define LUAKIQ_PROC_H
#include <spawn.h>
#include <sys/types.h>

struct lua_State;

/* Spawns argv in a process group of its own with default signals and an
 * empty signal mask (a worker thread blocks every signal, and a child would
 * inherit that). search: look argv[0] up in PATH. fa: file actions or NULL.
 * Returns 0 or an errno value (the exec's own, e.g. ENOENT). Any thread. */
int proc_spawn(pid_t *pid, const char *path, char *const argv[], int search,
               const posix_spawn_file_actions_t *fa);

/* Adds core.spawn and the process metatable to the table on top of the
 * stack (the luakiq.core table being built). Any thread, for its own VM. */
void proc_register(struct lua_State *L);

#endif
