/* Counts the inodes the kernel's v5 bulkstat ioctl reports for a mounted
 * XFS filesystem, without formatting them, so that the kernel's own rate
 * can be measured (xfs_io -c bulkstat spends most of its time printing).
 * Usage: kbulkstat MOUNTPOINT [AG]   (prints the count) */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

/* Layouts of the v5 bulkstat interface (xfs_fs.h). */
struct ireq {
	uint64_t ino;
	uint32_t flags, icount, ocount, agno;
	uint64_t reserved[5];
};
struct bstat {
	uint64_t words[24]; /* 192 bytes; only the first word (ino) is used */
};
#define IREQ_AGNO 1u
#define IOC_BULKSTAT _IOR('X', 127, struct ireq)
#define NREC 4096

int main(int argc, char **argv)
{
	if (argc < 2 || argc > 3) {
		fprintf(stderr, "usage: kbulkstat MOUNTPOINT [AG]\n");
		return 2;
	}
	int fd = open(argv[1], O_RDONLY | O_DIRECTORY);
	if (fd < 0) {
		perror(argv[1]);
		return 1;
	}
	size_t len = sizeof(struct ireq) + NREC * sizeof(struct bstat);
	struct ireq *req = calloc(1, len);
	if (!req)
		return 1;
	if (argc == 3) {
		req->flags = IREQ_AGNO;
		req->agno = (uint32_t)atoi(argv[2]);
	}
	unsigned long long total = 0;
	for (;;) {
		req->icount = NREC;
		if (ioctl(fd, IOC_BULKSTAT, req) != 0) {
			perror("bulkstat ioctl");
			return 1;
		}
		if (req->ocount == 0)
			break;
		total += req->ocount;
	}
	printf("%llu\n", total);
	return 0;
}
