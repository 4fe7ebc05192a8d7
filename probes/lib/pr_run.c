/* pr_run.c — a probe's signals and its last flush; see pr_run.h. */
#include "pr_run.h"

#include <signal.h>
#include <stdio.h>

int pr_catch_stop(void (*on_stop)(int))
{
	struct sigaction sa = { .sa_handler = on_stop };

	if (sigaction(SIGINT, &sa, NULL) < 0 || sigaction(SIGTERM, &sa, NULL) < 0)
		return -1;
	return 0;
}

int pr_flush_stdout(void)
{
	if (fflush(stdout) == EOF || ferror(stdout))
		return -1;
	return 0;
}
