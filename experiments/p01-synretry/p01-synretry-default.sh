#!/bin/sh
# p01-synretry-default: p01-synretry with the system default (no TCP_SYNCNT): over two minutes.
# Its facts are SYN timers of 1 s and more: in a QEMU guest its watcher samples every 10 ms, and
# between retransmissions (the full listener answers none) sleeps until one interval before the
# next is due, a second at most (sockwatch -T; docs/kernel-matrix.md, "Sampling in a guest").
TL_UNIT=p01-synretry-default TL_SYNCNT= TL_GUEST_WATCH_US=10000 TL_GUEST_TIMER_LED_MS=1000 \
	exec sh "$(dirname "$0")/p01-synretry.sh" "$@"
