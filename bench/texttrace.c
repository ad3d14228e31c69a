/* texttrace.so: which functions of a program's code it runs (for bench/text-order.sh).
 *
 * Preloaded (LD_PRELOAD) into a dynamically linked program that keeps its symbol table, it
 * puts a breakpoint (int3) on the first byte of every function in the program's own code
 * before the program starts. A function's first run traps once; the SIGTRAP handler (here,
 * outside that code) puts the function's own first byte back and resumes the function there.
 * At any moment, a function whose first byte in the process's memory (/proc/PID/mem) is no
 * longer 0xCC has run, at the precision of one function, where the kernel's own resident set
 * maps 64 KiB around each fault and a page-precise trace keeps every function that shares a
 * page with one that ran. The program's own SIGTRAP handler is not installed, nor SIGTRAP
 * blocked, while tracing.
 * A development tool: never part of a build that ships.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <ucontext.h>
#include <unistd.h>

struct entry {
    uintptr_t addr;
    unsigned char byte; /* the function's own first byte */
};

static struct entry *entries;
static size_t count;
static uintptr_t lo, hi;
static int (*real_sigaction)(int, const struct sigaction *, struct sigaction *);

static int by_addr(const void *a, const void *b) {
    uintptr_t x = ((const struct entry *)a)->addr, y = ((const struct entry *)b)->addr;
    return x < y ? -1 : x > y;
}

static void on_trap(int sig, siginfo_t *si, void *ctx) {
    (void)si;
    ucontext_t *uc = ctx;
    uintptr_t at = (uintptr_t)uc->uc_mcontext.gregs[REG_RIP] - 1;
    size_t a = 0, b = count;
    while (a < b) {
        size_t m = (a + b) / 2;
        if (entries[m].addr < at)
            a = m + 1;
        else
            b = m;
    }
    if (a < count && entries[a].addr == at) {
        /* Another thread may have put it back already: writing it again is harmless. */
        *(volatile unsigned char *)at = entries[a].byte;
        uc->uc_mcontext.gregs[REG_RIP] = (greg_t)at;
        return;
    }
    /* The program's own breakpoint: stop as it would. */
    char msg[64];
    int len = snprintf(msg, sizeof msg, "texttrace: a trap at %#lx\n", (unsigned long)at);
    write(2, msg, len);
    signal(sig, SIG_DFL);
}

int sigaction(int sig, const struct sigaction *act, struct sigaction *old) {
    if (!real_sigaction)
        real_sigaction = dlsym(RTLD_NEXT, "sigaction");
    if (sig == SIGTRAP && act && entries) {
        if (old)
            memset(old, 0, sizeof *old);
        return 0;
    }
    return real_sigaction(sig, act, old);
}

/* A thread that blocks every signal (jemalloc's background thread does) still takes the traps. */
static int (*real_pthread_sigmask)(int, const sigset_t *, sigset_t *);

int pthread_sigmask(int how, const sigset_t *set, sigset_t *old) {
    if (!real_pthread_sigmask)
        real_pthread_sigmask = dlsym(RTLD_NEXT, "pthread_sigmask");
    sigset_t s;
    if (set && how != SIG_UNBLOCK && entries) {
        s = *set;
        sigdelset(&s, SIGTRAP);
        set = &s;
    }
    return real_pthread_sigmask(how, set, old);
}

int sigprocmask(int how, const sigset_t *set, sigset_t *old) {
    return pthread_sigmask(how, set, old);
}

static int main_program(struct dl_phdr_info *info, size_t size, void *bias) {
    (void)size;
    *(uintptr_t *)bias = info->dlpi_addr;
    return 1; /* the first object is the program itself */
}

__attribute__((constructor)) static void start(void) {
    real_sigaction = dlsym(RTLD_NEXT, "sigaction");
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n < 0)
        return;
    exe[n] = 0;
    unsetenv("LD_PRELOAD"); /* not into the program's children */
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
    uintptr_t bias = 0;
    dl_iterate_phdr(main_program, &bias);
    int fd = open(exe, O_RDONLY);
    struct stat st;
    if (!lo || fd < 0 || fstat(fd, &st) < 0)
        return;
    const unsigned char *file = mmap(NULL, st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (file == MAP_FAILED)
        return;
    const Elf64_Ehdr *eh = (const void *)file;
    const Elf64_Shdr *sh = (const void *)(file + eh->e_shoff);
    const Elf64_Shdr *symtab = NULL;
    for (int i = 0; i < eh->e_shnum; i++)
        if (sh[i].sh_type == SHT_SYMTAB)
            symtab = &sh[i];
    if (!symtab) {
        fprintf(stderr, "texttrace: %s has no symbol table\n", exe);
        return;
    }
    const Elf64_Sym *syms = (const void *)(file + symtab->sh_offset);
    size_t nsyms = symtab->sh_size / sizeof *syms;
    entries = calloc(nsyms, sizeof *entries);
    for (size_t i = 0; i < nsyms; i++) {
        uintptr_t at = bias + syms[i].st_value;
        if (ELF64_ST_TYPE(syms[i].st_info) == STT_FUNC && syms[i].st_size && at >= lo && at < hi)
            entries[count++].addr = at;
    }
    qsort(entries, count, sizeof *entries, by_addr);
    size_t kept = 0; /* one entry per address: aliases share it */
    for (size_t i = 0; i < count; i++)
        if (!kept || entries[kept - 1].addr != entries[i].addr)
            entries[kept++] = entries[i];
    count = kept;
    munmap((void *)file, st.st_size);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_trap;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER | SA_RESTART;
    real_sigaction(SIGTRAP, &sa, NULL);
    if (mprotect((void *)lo, hi - lo, PROT_READ | PROT_WRITE | PROT_EXEC)) {
        perror("texttrace: mprotect");
        return;
    }
    for (size_t i = 0; i < count; i++) {
        entries[i].byte = *(unsigned char *)entries[i].addr;
        *(unsigned char *)entries[i].addr = 0xCC;
    }
    fprintf(stderr, "texttrace: %zu functions armed in %s\n", count, exe);
}
