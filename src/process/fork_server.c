/*
 * fpmd's fork server: preloaded (LD_PRELOAD) into a pool's php-cgi parent
 * under pm.spawn = "prefork", it makes php-cgi's pre-fork loop fork only
 * when fpmd orders a child (src/process/fork_server.rs is fpmd's side).
 *
 * php-cgi (sapi/cgi/cgi_main.c) forks PHP_FCGI_CHILDREN children in a loop
 * once PHP is loaded, and waits to re-fork each one that exits: by itself it
 * keeps every child alive. Here fork() in that parent blocks until fpmd
 * sends an order over FPMD_FORK_FD (a SOCK_SEQPACKET socket), which carries
 * the new child's own listening socket (SCM_RIGHTS); the child puts it on
 * fd 0, where php-cgi accepts FastCGI connections, and returns into
 * php-cgi. The parent tells fpmd each child's pid as it forks it and each
 * exit (wait status) as it reaps it, while it waits for orders. With
 * PHP_FCGI_CHILDREN raised past any count at load, php-cgi's loop never
 * reaches its own wait().
 *
 * Messages to fpmd: struct report (12 bytes): 'r' ready (the first fork(),
 * PHP loaded), 'f' forked (pid), 'x' exited (pid, wait status), 'e' fork
 * failed (errno). From fpmd: one byte 'o' with one fd.
 *
 * Without FPMD_FORK_FD, or in a process that is not PHP (a php_cgi wrapper
 * script, a program a script runs), and in any process but the parent (a
 * pcntl_fork() in a child), it does nothing: fork() is libc's. fpmd's
 * closing its end makes the parent signal its children and exit.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

struct report {
    int32_t kind;
    int32_t pid;
    int32_t status;
};

static int ctl = -1;
static pid_t parent;
static int ready_said;
static pid_t (*libc_fork)(void);
static sigset_t during_poll;

static void on_sigchld(int sig) { (void)sig; }

static void report(int kind, pid_t pid, int status) {
    struct report r = {kind, pid, status};
    while (send(ctl, &r, sizeof r, MSG_NOSIGNAL) < 0 && errno == EINTR) {
    }
}

__attribute__((constructor)) static void fpmd_fork_server_init(void) {
    libc_fork = (pid_t (*)(void))dlsym(RTLD_NEXT, "fork");
    const char *fd = getenv("FPMD_FORK_FD");
    /* Only in PHP itself: a php_cgi wrapper (a shell script that execs
     * php-cgi) loads this library too, and passes the environment and the
     * socket on untouched; its own forks are libc's. */
    if (!fd || !dlsym(RTLD_DEFAULT, "php_module_startup")) {
        return;
    }
    /* Nothing a script runs preloads this library again: fpmd put it first
     * in LD_PRELOAD, before what the pool's environment preloads. */
    const char *preload = getenv("LD_PRELOAD");
    const char *rest = preload ? strpbrk(preload, ": ") : NULL;
    if (rest && rest[1]) {
        setenv("LD_PRELOAD", rest + 1, 1);
    } else {
        unsetenv("LD_PRELOAD");
    }
    ctl = atoi(fd);
    unsetenv("FPMD_FORK_FD");
    if (ctl < 3 || fcntl(ctl, F_SETFD, FD_CLOEXEC) < 0) {
        ctl = -1;
        return;
    }
    parent = getpid();
    /* php-cgi reads it after this: its loop then never stops forking (nor
     * waits), and every fork waits for an order. */
    setenv("PHP_FCGI_CHILDREN", "2147483647", 1);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigchld;
    sigaction(SIGCHLD, &sa, NULL);
    sigset_t chld;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    /* SIGCHLD comes through only while waiting for an order, so that no
     * exit is missed between a reap and the wait (ppoll). */
    sigprocmask(SIG_BLOCK, &chld, &during_poll);
    sigdelset(&during_poll, SIGCHLD);
}

static void reap(void) {
    int status;
    pid_t pid;
    while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
        report('x', pid, status);
    }
}

/* Waits for one order; returns the listening socket it carries. fpmd gone
 * (end of file): the parent's work is over, and its children's. */
static int next_order(void) {
    for (;;) {
        reap();
        struct pollfd p = {ctl, POLLIN, 0};
        int r = ppoll(&p, 1, NULL, &during_poll);
        if (r < 0) {
            if (errno == EINTR) {
                continue;
            }
            _exit(70);
        }
        char byte;
        char control[CMSG_SPACE(sizeof(int))];
        struct iovec iov = {&byte, 1};
        struct msghdr m;
        memset(&m, 0, sizeof m);
        m.msg_iov = &iov;
        m.msg_iovlen = 1;
        m.msg_control = control;
        m.msg_controllen = sizeof control;
        ssize_t n = recvmsg(ctl, &m, MSG_CMSG_CLOEXEC);
        if (n < 0 && (errno == EINTR || errno == EAGAIN)) {
            continue;
        }
        if (n <= 0) {
            /* fpmd is gone (its end closed, maybe before its death signal
             * arrives): the children go too, as php-cgi's SIGTERM handler
             * sends them (a busy one ends its request first). */
            kill(-getpgrp(), SIGTERM);
            _exit(0);
        }
        struct cmsghdr *c = CMSG_FIRSTHDR(&m);
        if (byte != 'o' || !c || c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) {
            continue;
        }
        int fd;
        memcpy(&fd, CMSG_DATA(c), sizeof fd);
        return fd;
    }
}

pid_t fork(void) {
    if (ctl < 0 || getpid() != parent) {
        return libc_fork();
    }
    if (!ready_said) {
        ready_said = 1;
        report('r', parent, 0);
    }
    for (;;) {
        int listener = next_order();
        pid_t pid = libc_fork();
        if (pid == 0) {
            /* The child: its own socket on fd 0, nothing of the parent's
             * order channel, SIGCHLD as php-cgi left it. */
            close(ctl);
            ctl = -1;
            signal(SIGCHLD, SIG_DFL);
            sigset_t chld;
            sigemptyset(&chld);
            sigaddset(&chld, SIGCHLD);
            sigprocmask(SIG_UNBLOCK, &chld, NULL);
            if (dup2(listener, 0) < 0) {
                _exit(71);
            }
            close(listener);
            return 0;
        }
        int err = errno;
        close(listener);
        if (pid > 0) {
            report('f', pid, 0);
            return pid;
        }
        /* php-cgi exits on a failed fork: fpmd hears of it and orders
         * again later. */
        report('e', 0, err);
    }
}
