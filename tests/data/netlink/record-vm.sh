#!/bin/sh
# Record the same two sock_diag scenarios as record.sh, inside a Debian kernel booted by
# experiments/guest/vm.sh (root, QEMU; `make deps-kernel`):  tests/data/netlink/record-vm.sh 6.1
#   listen-estab-6.1.bin, synsent-6.1.bin    what that kernel's sock_diag sends: for 6.1 a
#                                            shorter tcp_info (no tcpi_total_rto, 6.7+)
# The reliability tests replay them on the host (tests/test_reliability_oldkernel.py).
set -eu
ver=${1:?usage: record-vm.sh VERSION}
top=$(cd "$(dirname "$0")/../../.." && pwd)
out=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/exp/lib" "$work/raw"
cp "$top/experiments/lib/collect.sh" "$work/exp/lib/"
cat > "$work/exp/record-diag.sh" <<'UNIT'
#!/bin/sh
. "$(dirname "$0")/lib/collect.sh"
tl_init "$1"
tl_listener "$RAW/l1.txt" -p 21010 -b 8 -m never
tl_listener "$RAW/l2.txt" -a ::1 -p 21020 -m never
tl_bg "$RAW/c1.txt" "$TL_BIN/connect_block" -p 21010 -H
tl_wait_line "$TL_LAST" "$RAW/c1.txt" '^holding' 5
"$TL_BIN/sockwatch" -1 -r "$RAW/listen-estab.bin" > "$RAW/listen-estab.txt"
tl_listener "$RAW/l3.txt" -p 21013 -m full
tl_bg "$RAW/c3.txt" "$TL_BIN/connect_block" -p 21013 -s 2
"$TL_BIN/sockwatch" -4 -s syn-sent -p 21013 -i 500000 -d 2600 -r "$RAW/synsent.bin" \
	> "$RAW/synsent.txt"
UNIT
# its line in the unit table (experiments/units: vm.sh takes the guest's timeout from limit_s)
echo "record-diag - named run no 10 30 no 1 yes" > "$work/exp/units"
TCPLAB_EXPERIMENTS=$work/exp "$top/experiments/lib/vm.sh" "$ver" "$work/raw" record-diag
cp "$work/raw/record-diag/listen-estab.bin" "$out/listen-estab-$ver.bin"
cp "$work/raw/record-diag/synsent.bin" "$out/synsent-$ver.bin"
ls -l "$out/listen-estab-$ver.bin" "$out/synsent-$ver.bin"
