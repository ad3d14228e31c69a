/* texttrace.so: which pages of a program's code it runs (for bench/text-order.sh).
 *
 * Preloaded (LD_PRELOAD) into a dynamically linked program, it makes the program's own
 * executable mapping inaccessible before the program starts. Each first run of a page then
 * faults; the SIGSEGV handler (here, outside that mapping) makes that one page executable again
 * and returns. At any moment the mapping's executable sub-ranges in /proc/PID/maps are the pages
 * run so far, at 4 KiB precision, where the kernel's own resident set maps 64 KiB around each
 * fault. The program's own SIGSEGV/SIGBUS handlers (Rust's stack-overflow guard) are not
 * installed while tracing. A development tool: never part of a build that ships.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static unsigned long lo, hi;
static int (*real_sigaction)(int, const struct sigaction *, struct sigaction *);

static void on_fault(int sig, siginfo_t *si, void *uc) {
    (void)uc;
    unsigned long a = (unsigned long)si->si_addr;
    if (a >= lo && a < hi) {
        mprotect((void *)(a & ~4095UL), 4096, PROT_READ | PROT_EXEC);
        return;
    }
    signal(sig, SIG_DFL); /* a real fault: crash as the program would */
}

int sigaction(int sig, const struct sigaction *act, struct sigaction *old) {
    if (!real_sigaction)
        real_sigaction = dlsym(RTLD_NEXT, "sigaction");
    if ((sig == SIGSEGV || sig == SIGBUS) && act && lo) {
        if (old)
            memset(old, 0, sizeof *old);
        return 0;
    }
    return real_sigaction(sig, act, old);
}

__attribute__((constructor)) static void start(void) {
    real_sigaction = dlsym(RTLD_NEXT, "sigaction");
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n < 0)
        return;
    exe[n] = 0;
    FILE *maps = fopen("/proc/self/maps", "r");
    if (!maps)
        return;
    char line[8192];
    while (fgets(line, sizeof line, maps)) {
        unsigned long a, b;
        char perm[8], path[4096] = "";
        if (sscanf(line, "%lx-%lx %7s %*s %*s %*s %4095s", &a, &b, perm, path) >= 3 &&
            !strcmp(path, exe) && perm[2] == 'x') {
            lo = a;
            hi = b;
        }
    }
    fclose(maps);
    unsetenv("LD_PRELOAD"); /* not into the program's children */
    if (!lo)
        return;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_fault;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER | SA_RESTART;
    real_sigaction(SIGSEGV, &sa, NULL);
    real_sigaction(SIGBUS, &sa, NULL);
    mprotect((void *)lo, hi - lo, PROT_NONE);
}
