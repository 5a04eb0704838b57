// Prototype (not fpmd code): LD_PRELOAD into php-cgi's pre-fork parent.
// fork() in the parent waits for one byte (an order) on FPMD_FORK_FD,
// forks, and writes the child's pid back; wait() is php-cgi's own.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

static int ctl = -1;
static pid_t parent = 0;
static pid_t (*real_fork)(void);

__attribute__((constructor)) static void init(void) {
    const char *s = getenv("FPMD_FORK_FD");
    if (s) { ctl = atoi(s); parent = getpid(); unsetenv("FPMD_FORK_FD"); }
    real_fork = (pid_t (*)(void))dlsym(RTLD_NEXT, "fork");
}

pid_t fork(void) {
    if (ctl < 0 || getpid() != parent) return real_fork();
    char order;
    for (;;) {
        // Reap exited children meanwhile (php-cgi only waits once all exist).
        while (waitpid(-1, NULL, WNOHANG) > 0) {}
        struct pollfd p = { ctl, POLLIN, 0 };
        int r = poll(&p, 1, 1000);
        if (r < 0 && errno == EINTR) continue;
        if (r == 0) continue;
        ssize_t n = read(ctl, &order, 1);
        if (n == 1) break;
        if (n == 0) _exit(0);  // fpmd went away
    }
    pid_t pid = real_fork();
    if (pid == 0) { close(ctl); ctl = -1; return 0; }
    if (pid > 0) { (void)!write(ctl, &pid, sizeof pid); }
    return pid;
}
