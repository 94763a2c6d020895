/* The kernel's share of reading a directory source, per file: what
 * `xfskit build DIR` asks of the kernel for each small file (open, statx,
 * flistxattr, read, close), timed alone on files of a bench tree.
 *
 * Build and run:  cc -O2 -o /tmp/source_floor bench/source_floor.c
 *                 /tmp/source_floor target/bench-build/t100k/d0000
 * (the directory must hold files f0000000, f0000100, ... as made by
 * bench/build.sh a). Prints microseconds per call, averaged over 1,000
 * files, and a plain getppid() for the bare cost of a system call. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#define FILES 1000

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static void name_of(char *buf, int i) { snprintf(buf, 32, "f%07d", i * 100); }

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s DIR\n", argv[0]);
        return 2;
    }
    int dir = open(argv[1], O_RDONLY | O_DIRECTORY);
    if (dir < 0) {
        perror(argv[1]);
        return 1;
    }
    char name[32], data[8192], list[256];
    int fds[FILES];
    double t = now();
    for (int i = 0; i < 200000; i++) syscall(SYS_getppid);
    printf("getppid     %.2f us\n", (now() - t) / 200000 * 1e6);
    t = now();
    for (int i = 0; i < FILES; i++) {
        name_of(name, i);
        fds[i] = openat(dir, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
        if (fds[i] < 0) {
            perror(name);
            return 1;
        }
    }
    printf("openat      %.2f us\n", (now() - t) / FILES * 1e6);
    t = now();
    for (int i = 0; i < FILES; i++) {
        struct statx sx;
        statx(fds[i], "", AT_EMPTY_PATH, STATX_BASIC_STATS | STATX_BTIME, &sx);
    }
    printf("statx (fd)  %.2f us\n", (now() - t) / FILES * 1e6);
    t = now();
    for (int i = 0; i < FILES; i++) flistxattr(fds[i], list, sizeof list);
    printf("flistxattr  %.2f us\n", (now() - t) / FILES * 1e6);
    t = now();
    for (int i = 0; i < FILES; i++) pread(fds[i], data, sizeof data, 0);
    printf("pread       %.2f us\n", (now() - t) / FILES * 1e6);
    t = now();
    for (int i = 0; i < FILES; i++) close(fds[i]);
    printf("close       %.2f us\n", (now() - t) / FILES * 1e6);
    return 0;
}
