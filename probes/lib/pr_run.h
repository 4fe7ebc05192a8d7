/* pr_run.h — what a probe's main does around its job: let SIGINT and SIGTERM end a live run
 * (the loop then prints its end line), and check that all it printed reached stdout.
 *
 * Error rule: returns -1 and sets errno; nothing here prints or exits.
 */
#ifndef PR_RUN_H
#define PR_RUN_H

/* Make SIGINT and SIGTERM call on_stop (sigaction(2), no flags: a blocking call they interrupt
 * fails with EINTR).  Returns 0, or -1 and errno. */
int pr_catch_stop(void (*on_stop)(int));

/* Flush stdout and check its error flag.  Returns 0, or -1 when something printed did not reach
 * it (errno from the write that failed). */
int pr_flush_stdout(void);

#endif
