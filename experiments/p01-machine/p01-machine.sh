#!/bin/sh
# p01-machine: describe the kernel and the TCP sysctls of this experiment's namespace.
. "$(dirname "$0")/../lib/collect.sh"
tl_init "$1"
"$TL_BIN/machine" > "$RAW/machine.txt" || tl_die "machine failed"
