/* Creates DIRS directories under ROOT and N empty files spread evenly over
 * them, as fast as the kernel allows (no exec per file). Used by
 * bench/bulkstat.sh to build its test image.
 * Usage: mkfiles ROOT N DIRS */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	if (argc != 4) {
		fprintf(stderr, "usage: mkfiles ROOT N DIRS\n");
		return 2;
	}
	const char *root = argv[1];
	long n = atol(argv[2]), dirs = atol(argv[3]);
	if (n < 0 || dirs < 1) {
		fprintf(stderr, "mkfiles: bad counts\n");
		return 2;
	}
	long per = (n + dirs - 1) / dirs, made = 0;
	char path[4096];
	for (long d = 0; d < dirs; d++) {
		snprintf(path, sizeof path, "%s/d%ld", root, d);
		if (mkdir(path, 0755) != 0) {
			perror(path);
			return 1;
		}
		int dfd = open(path, O_RDONLY | O_DIRECTORY);
		if (dfd < 0) {
			perror(path);
			return 1;
		}
		for (long i = 0; i < per && made < n; i++, made++) {
			char name[32];
			snprintf(name, sizeof name, "f%ld", i);
			int fd = openat(dfd, name, O_CREAT | O_EXCL | O_WRONLY, 0644);
			if (fd < 0) {
				perror(name);
				return 1;
			}
			close(fd);
		}
		close(dfd);
	}
	return 0;
}
