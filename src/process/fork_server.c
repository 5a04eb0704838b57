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
 * failed or order refused (errno). From fpmd: one byte 'o' with one fd (a
 * pool's own parent), or 's' with struct shared_order and its strings and
 * fds (a parent shared by several pools, pm.spawn = "shared": the child
 * takes the pool's output, limits, working directory, cgroup, priority,
 * user, dumpable, no_new_privs, Landlock, environment and process title
 * from it before it returns into php-cgi, in the order of
 * src/process/sandbox/mod.rs).
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
#include <grp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

struct report {
    int32_t kind;
    int32_t pid;
    int32_t status;
};

/* An 's' order (fork_server.rs writes it): after the byte 's', this, then
 * ngroups uint32 group ids, cwd_len bytes of working directory, env_len
 * bytes of NUL-terminated NAME=value entries, title_len bytes of process
 * title. Its fds: the child's listening socket, its stdout, its stderr,
 * the Landlock ruleset if landlock, then ncgroups cgroup.procs files. */
struct shared_order {
    int64_t uid, gid, switch_user, ngroups;
    int64_t rlimit_files_set, rlimit_files, rlimit_core_set, rlimit_core;
    int64_t priority_set, priority, dumpable, no_new_privs, landlock;
    int64_t ncgroups, cwd_len, env_len, title_len;
};

#define MAX_FDS 64
#define MAX_GROUPS 65536

/* The order being forked (the parent is single-threaded). A child keeps
 * its copy: its environment points into it. */
static unsigned char order_buf[1 << 17];
static size_t order_len;
static int order_fds[MAX_FDS];
static int order_nfds;

/* php-cgi's argv strings, one contiguous area a forked child writes its
 * title over (as php-fpm's children do, fpm_env.c). */
static char *args_start;
static size_t args_len;

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

/* glibc passes an ELF constructor argc, argv and the environment. */
__attribute__((constructor)) static void fpmd_fork_server_init(int argc, char **argv, char **envp) {
    (void)envp;
    libc_fork = (pid_t (*)(void))dlsym(RTLD_NEXT, "fork");
    if (argc > 0 && argv && argv[0]) {
        char *end = argv[0] + strlen(argv[0]) + 1;
        int i;
        for (i = 1; i < argc && argv[i] == end; i++) {
            end += strlen(argv[i]) + 1;
        }
        if (i == argc) {
            args_start = argv[0];
            args_len = (size_t)(end - argv[0]);
        }
    }
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

static void close_order_fds(void) {
    for (int i = 0; i < order_nfds; i++) {
        close(order_fds[i]);
    }
    order_nfds = 0;
}

/* Whether the 's' order in order_buf is whole: its sizes add up and it
 * came with the fds it names. */
static int shared_order_whole(const struct shared_order *o) {
    if (order_len < 1 + sizeof *o || o->ngroups < 0 || o->ngroups > MAX_GROUPS ||
        o->ncgroups < 0 || o->cwd_len < 0 || o->env_len < 0 || o->title_len < 0) {
        return 0;
    }
    uint64_t need = 1 + sizeof *o + 4 * (uint64_t)o->ngroups + (uint64_t)o->cwd_len +
                    (uint64_t)o->env_len + (uint64_t)o->title_len;
    return need == order_len && o->ncgroups + 3 + (o->landlock ? 1 : 0) == order_nfds &&
           (o->env_len == 0 || order_buf[order_len - o->title_len - 1] == 0);
}

/* Waits for one order and leaves it in order_buf / order_fds. fpmd gone
 * (end of file): the parent's work is over, and its children's. An order
 * that is not whole is refused ('e', EINVAL), so that fpmd's count of
 * orders in flight stays right. */
static void next_order(void) {
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
        char control[CMSG_SPACE(sizeof(int) * MAX_FDS)];
        struct iovec iov = {order_buf, sizeof order_buf};
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
        order_len = (size_t)n;
        order_nfds = 0;
        for (struct cmsghdr *c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c)) {
            if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) {
                continue;
            }
            size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
            for (size_t i = 0; i < k && order_nfds < MAX_FDS; i++) {
                memcpy(&order_fds[order_nfds++], CMSG_DATA(c) + i * sizeof(int), sizeof(int));
            }
        }
        int whole = !(m.msg_flags & (MSG_TRUNC | MSG_CTRUNC));
        if (whole && order_buf[0] == 'o') {
            whole = order_len == 1 && order_nfds == 1;
        } else if (whole && order_buf[0] == 's') {
            struct shared_order o;
            memcpy(&o, order_buf + 1, order_len > sizeof o ? sizeof o : 0);
            whole = order_len > sizeof o && shared_order_whole(&o);
        } else {
            whole = 0;
        }
        if (whole) {
            return;
        }
        close_order_fds();
        report('e', 0, EINVAL);
    }
}

/* A child of a shared parent could not take its pool's setting `what`:
 * said on its stderr (the pool's, fpmd logs it) and it exits 127, which
 * fpmd sees as a child that died at start. */
static void child_failed(const char *what) {
    char line[256];
    int e = errno;
    int n = snprintf(line, sizeof line,
                     "fpmd: a child forked by the shared php-cgi parent cannot %s: %s\n", what,
                     strerror(e));
    if (n > 0) {
        ssize_t w = write(2, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
        (void)w;
    }
    _exit(127);
}

/* In a child forked on an 's' order: the pool's settings, in the order of
 * src/process/sandbox/mod.rs (limits, chdir, cgroup, priority, user,
 * dumpable, no_new_privs, Landlock), then its environment and title. */
static void apply_shared(void) {
    struct shared_order o;
    memcpy(&o, order_buf + 1, sizeof o);
    const unsigned char *p = order_buf + 1 + sizeof o;
    const unsigned char *groups = p;
    p += 4 * o.ngroups;
    char cwd[4096];
    if ((size_t)o.cwd_len >= sizeof cwd) {
        errno = ENAMETOOLONG;
        child_failed("chdir");
    }
    memcpy(cwd, p, (size_t)o.cwd_len);
    cwd[o.cwd_len] = 0;
    p += o.cwd_len;
    char *env = (char *)p;
    p += o.env_len;
    const char *title = (const char *)p;
    int *fd = order_fds + 1;
    if (dup2(fd[0], 1) < 0 || dup2(fd[1], 2) < 0) {
        _exit(71);
    }
    close(fd[0]);
    close(fd[1]);
    fd += 2;
    int landlock = -1;
    if (o.landlock) {
        landlock = *fd++;
    }
    if (o.rlimit_files_set) {
        struct rlimit r = {(rlim_t)o.rlimit_files, (rlim_t)o.rlimit_files};
        if (setrlimit(RLIMIT_NOFILE, &r) != 0) {
            child_failed("setrlimit(RLIMIT_NOFILE) (rlimit_files)");
        }
    }
    if (o.rlimit_core_set) {
        struct rlimit r = {(rlim_t)o.rlimit_core, (rlim_t)o.rlimit_core};
        if (setrlimit(RLIMIT_CORE, &r) != 0) {
            child_failed("setrlimit(RLIMIT_CORE) (rlimit_core)");
        }
    }
    if (chdir(cwd) != 0) {
        child_failed("chdir");
    }
    for (int64_t i = 0; i < o.ncgroups; i++, fd++) {
        if (write(*fd, "0", 1) != 1) {
            child_failed("join the pool's cgroup");
        }
        close(*fd);
    }
    if (o.priority_set && setpriority(PRIO_PROCESS, 0, (int)o.priority) != 0) {
        child_failed("setpriority (process.priority)");
    }
    if (args_start && args_len > 1 && o.title_len > 0) {
        /* Before the user changes: PR_SET_MM needs CAP_SYS_RESOURCE. */
        size_t n = (size_t)o.title_len < args_len - 1 ? (size_t)o.title_len : args_len - 1;
        memset(args_start, 0, args_len);
        memcpy(args_start, title, n);
        prctl(PR_SET_MM, PR_SET_MM_ARG_END, (unsigned long)(args_start + n + 1), 0, 0);
    }
    if (o.switch_user) {
        if (geteuid() == 0) {
            gid_t list[o.ngroups ? o.ngroups : 1];
            for (int64_t i = 0; i < o.ngroups; i++) {
                uint32_t g;
                memcpy(&g, groups + 4 * i, 4);
                list[i] = g;
            }
            if (setgroups((size_t)o.ngroups, list) != 0) {
                child_failed("setgroups");
            }
        }
        if (setgid((gid_t)o.gid) != 0) {
            child_failed("setgid");
        }
        if (setuid((uid_t)o.uid) != 0) {
            child_failed("setuid");
        }
    }
    if (o.dumpable && prctl(PR_SET_DUMPABLE, 1, 0, 0, 0) != 0) {
        child_failed("prctl(PR_SET_DUMPABLE) (process.dumpable)");
    }
    if ((o.no_new_privs || landlock >= 0) && prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) {
        child_failed("prctl(PR_SET_NO_NEW_PRIVS)");
    }
    if (landlock >= 0) {
        if (syscall(SYS_landlock_restrict_self, landlock, 0) != 0) {
            child_failed("landlock_restrict_self");
        }
        close(landlock);
    }
    clearenv();
    for (char *e = env; e < env + o.env_len; e += strlen(e) + 1) {
        if (strchr(e, '=') && putenv(e) != 0) {
            child_failed("set its environment");
        }
    }
    order_nfds = 0;
}

/* A pool's own child: its title (argv[0], "php-cgi: pool NAME", set at
 * exec) alone on its command line, as php-fpm's children show "php-fpm:
 * pool NAME"; php-cgi's arguments (the pool's -d values) are its
 * parent's to show. PR_SET_MM needs CAP_SYS_RESOURCE, which the pool's
 * user lacks: the blanked bytes then stay, as NULs after the title. */
static void title_only(void) {
    if (!args_start || args_len < 2) {
        return;
    }
    size_t t = strlen(args_start) + 1;
    if (t < args_len) {
        memset(args_start + t, 0, args_len - t);
        prctl(PR_SET_MM, PR_SET_MM_ARG_END, (unsigned long)(args_start + t), 0, 0);
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
        next_order();
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
            if (dup2(order_fds[0], 0) < 0) {
                _exit(71);
            }
            close(order_fds[0]);
            if (order_buf[0] == 's') {
                apply_shared();
            } else {
                title_only();
            }
            return 0;
        }
        int err = errno;
        close_order_fds();
        if (pid > 0) {
            report('f', pid, 0);
            return pid;
        }
        /* php-cgi exits on a failed fork: fpmd hears of it and orders
         * again later. */
        report('e', 0, err);
    }
}
