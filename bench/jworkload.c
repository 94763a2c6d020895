/* The journal benchmark's workload on a mounted filesystem, the same as
 * crates/xfskit/examples/journal_workload.rs: DIRS directories, FILES
 * files of 4 KiB (open O_CREAT, write, close), every other file renamed
 * into the next directory, every fourth unlinked, then syncfs.
 * Usage: jworkload DIR FILES DIRS   (prints seconds=... ops=...) */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: jworkload DIR FILES DIRS\n");
        return 2;
    }
    const char *top = argv[1];
    long files = atol(argv[2]), dirs = atol(argv[3]), ops = 0;
    char buf[4096], p[4096], q[4096];
    memset(buf, 0x5a, sizeof buf);
    double t0 = now();
    for (long i = 0; i < dirs; i++) {
        snprintf(p, sizeof p, "%s/d%ld", top, i);
        if (mkdir(p, 0755)) { perror(p); return 1; }
        ops++;
    }
    for (long i = 0; i < files; i++) {
        snprintf(p, sizeof p, "%s/d%ld/f%ld", top, i % dirs, i);
        int fd = open(p, O_CREAT | O_WRONLY | O_EXCL, 0644);
        if (fd < 0 || write(fd, buf, sizeof buf) != sizeof buf) { perror(p); return 1; }
        close(fd);
        ops += 2;
    }
    for (long i = 0; i < files; i += 2) {
        snprintf(p, sizeof p, "%s/d%ld/f%ld", top, i % dirs, i);
        snprintf(q, sizeof q, "%s/d%ld/r%ld", top, (i + 1) % dirs, i);
        if (rename(p, q)) { perror(p); return 1; }
        ops++;
    }
    for (long i = 1; i < files; i += 4) {
        snprintf(p, sizeof p, "%s/d%ld/f%ld", top, i % dirs, i);
        if (unlink(p)) { perror(p); return 1; }
        ops++;
    }
    int fd = open(top, O_RDONLY | O_DIRECTORY);
    if (fd < 0 || syncfs(fd)) { perror("syncfs"); return 1; }
    close(fd);
    printf("seconds=%.3f ops=%ld\n", now() - t0, ops);
    return 0;
}
