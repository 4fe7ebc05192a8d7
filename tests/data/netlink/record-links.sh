#!/bin/sh
# Re-record links.bin, the RTM_GETLINK dump the link decoder tests replay (root; makes its own
# namespace; TL_REC_NS names it, default tcplab-rec-PID):  tests/data/netlink/record-links.sh
#   links.bin      `machine -w` in a namespace holding
#                    lo                 up: state UNKNOWN (lo has no operstate of its own)
#                    veth-c / veth-s    a veth pair, both up: veth-c MTU 1400, veth-s root tbf (a token bucket)
#                    veth-x / veth-y    a pair with only veth-x up (its peer down: LOWERLAYERDOWN)
#                                       and veth-y down with root pfifo
#   links-ip.json  `ip -j -d link show` of the same namespace at the same moment: the tests check
#                  the decoder against iproute2's reading of the same state
# The tests assert what these links must show, so a re-recording on any kernel still passes
# (the indexes are the namespace's own: 1, 2, ... in order of creation).
set -eu
top=$(cd "$(dirname "$0")/../../.." && pwd)
bin=$top/build/bin
out=$(cd "$(dirname "$0")" && pwd)
ns=${TL_REC_NS:-tcplab-rec-$$}
ip netns add "$ns"
trap 'ip netns del "$ns"' EXIT
run() { ip netns exec "$ns" "$@"; }
run ip link set lo up
run ip link add veth-c type veth peer name veth-s
run ip link set veth-c mtu 1400
run tc qdisc add dev veth-s root tbf rate 1mbit burst 32kbit latency 400ms
run ip link add veth-x type veth peer name veth-y
run tc qdisc add dev veth-y root pfifo limit 10
run ip link set veth-c up
run ip link set veth-s up
run ip link set veth-x up
# operstate follows the carrier through linkwatch, which may wait up to a second: poll for it
tries=0
until run ip link show veth-c | grep -q 'state UP' && run ip link show veth-s | grep -q 'state UP' &&
	run ip link show veth-x | grep -q 'state LOWERLAYERDOWN'; do
	tries=$((tries + 1))
	[ "$tries" -lt 500 ] || { echo "record-links.sh: the veth links never came up" >&2; exit 1; }
	sleep 0.01
done
rm -f "$out/links.bin" "$out/links-ip.json"
run "$bin/machine" -w "$out/links.bin" > /dev/null
run ip -j -d link show > "$out/links-ip.json"
