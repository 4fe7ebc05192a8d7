/* pr_file.c — regular files in, regular files (or character devices) out; see pr_file.h. */
#include "pr_file.h"
#include "tl_util.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int not_regular(mode_t mode)
{
	errno = S_ISDIR(mode) ? EISDIR : PR_ENOTREG;
	return -1;
}

int pr_open_append(const char *path)
{
	struct stat st;
	int fd, flags, saved;

	/* O_NONBLOCK: a FIFO without a reader fails (ENXIO) instead of waiting for one */
	fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NONBLOCK, 0666);
	if (fd < 0) {
		if (errno == ENXIO)
			errno = PR_ENOTREG;
		return -1;
	}
	if (fstat(fd, &st) < 0)
		goto fail;
	if (!S_ISREG(st.st_mode) && !S_ISCHR(st.st_mode)) {
		not_regular(st.st_mode);
		goto fail;
	}
	flags = fcntl(fd, F_GETFL);
	if (flags < 0 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) < 0)
		goto fail;
	return fd;
fail:
	saved = errno;
	close(fd);
	errno = saved;
	return -1;
}

const char *pr_strerror(int e)
{
	return e == PR_ENOTREG ? "not a regular file" : strerror(e);
}
