#!/bin/sh
# p04-no-answer-default: p04-no-answer's part retries2 alone, with the kernel's own
# tcp_retries2 (15; the knob retries2 sets 6..15).  Past retries2 9 the budget stops doubling:
# tcp_model_timeout() adds tcp_rto_max (120 s) per retry beyond ilog2(120 s / 200 ms) = 9, so
# 15 gives ((2 << 9) - 1) x 200 ms + (15 - 9) x 120 s = 924.6 s, and the client waits about a
# quarter of an hour for ETIMEDOUT.  --quick leaves it out.
TL_UNIT=p04-no-answer-default exec sh "$(dirname "$0")/p04-no-answer.sh" "$@"
