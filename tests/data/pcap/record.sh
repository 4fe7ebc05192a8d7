#!/bin/sh
# Re-record the saved captures the decoder tests replay (root; makes its own namespace), and
# write beside each NAME.pcap the lines `capture -r NAME.pcap -p PORT` prints (NAME.lines):
#   handshake.pcap   127.0.0.1: a connection to 21013, 5 bytes each way... then both close
#                    (client first): handshake, data, ACKs, FIN, FIN, ACK
#   handshake6.pcap  the same over [::1], port 21016
#   synretry.pcap    a listener on 21013 whose queue is full (listener -m full: its own queued
#                    connection is conn 1) and connect_block -s 2: the SYN and its 2
#                    retransmissions, 1 s and 3 s later (conn 2)
#   icmp.pcap        nft rejects SYNs to 127.0.0.1:21014 with ICMP port-unreachable (connect:
#                    ECONNREFUSED at once) and to 127.0.0.2:21014 with host-unreachable
#                    (connect_block -s 1: the SYN is retransmitted, EHOSTUNREACH at the end)
#   tcpdump.pcap     written by tcpdump -w itself (microsecond pcap) during a connection to
#                    21017, the independent file the decoder must read as well as its own
# After a re-recording, read NAME.lines before committing them: the tests compare exact lines.
set -eu
top=$(cd "$(dirname "$0")/../../.." && pwd)
bin=$top/build/bin
out=$(cd "$(dirname "$0")" && pwd)
ns=capture-rec-$$
tmp=$(mktemp -d)
"$top/experiments/lib/netns.sh" create "$ns"
trap '"$top/experiments/lib/netns.sh" delete "$ns"; rm -rf "$tmp"' EXIT
run() { ip netns exec "$ns" "$@"; }
# wait_line FILE REGEX: poll (10 s at most) until FILE has a line matching REGEX
wait_line() {
	n=1000
	until grep -q "$2" "$1" 2>/dev/null; do
		n=$((n - 1))
		[ "$n" -gt 0 ] || { echo "record.sh: no '$2' in $1" >&2; exit 1; }
		sleep 0.01
	done
}
# start_capture NAME: capture on lo into NAME.pcap, in the background, once ready
start_capture() {
	ip netns exec "$ns" "$bin/capture" -i lo -w "$out/$1.pcap" > "$tmp/$1.live" &
	cap=$!
	wait_line "$tmp/$1.live" '^ready'
}
stop_capture() {
	kill -TERM "$cap"
	wait "$cap"
	grep '^end' "$tmp/$1.live" >&2
}
conversation() {	# conversation ADDR PORT: connect, 5 bytes, 6 bytes back, close both
	run /usr/bin/python3 -c '
import socket, sys
fam = socket.AF_INET6 if ":" in sys.argv[1] else socket.AF_INET
ls = socket.socket(fam)
ls.bind((sys.argv[1], int(sys.argv[2]))); ls.listen(1)
c = socket.create_connection((sys.argv[1], int(sys.argv[2])))
s, _ = ls.accept()
c.sendall(b"hello"); assert s.recv(16) == b"hello"
s.sendall(b"world!"); assert c.recv(16) == b"world!"
c.close(); assert s.recv(16) == b""; s.close(); ls.close()' "$1" "$2"
}

start_capture handshake
conversation 127.0.0.1 21013
stop_capture handshake

start_capture handshake6
conversation ::1 21016
stop_capture handshake6

start_capture synretry
ip netns exec "$ns" "$bin/listener" -p 21013 -m full > "$tmp/listener" &
lst=$!
wait_line "$tmp/listener" '^ready'
run "$bin/connect_block" -p 21013 -s 2 > "$tmp/client" || true
grep '^result' "$tmp/client" >&2
kill -TERM "$lst"
wait "$lst" || true
stop_capture synretry

run nft -f - <<'EOF'
table inet capture {
	chain in {
		type filter hook input priority 0; policy accept;
		ip daddr 127.0.0.1 tcp dport 21014 reject with icmp type port-unreachable
		ip daddr 127.0.0.2 tcp dport 21014 reject with icmp type host-unreachable
	}
}
EOF
start_capture icmp
run "$bin/connect_block" -p 21014 > "$tmp/client" || true
grep '^result' "$tmp/client" >&2
run "$bin/connect_block" -a 127.0.0.2 -p 21014 -s 1 > "$tmp/client" || true
grep '^result' "$tmp/client" >&2
stop_capture icmp
run nft delete table inet capture

rm -f "$out/tcpdump.pcap"
ip netns exec "$ns" tcpdump -i lo -U -w "$out/tcpdump.pcap" 'tcp port 21017' 2> "$tmp/tcpdump.err" &
td=$!
wait_line "$tmp/tcpdump.err" 'listening on'
conversation 127.0.0.1 21017
# tcpdump -U writes each packet as it comes: wait for the 10 of the conversation
n=1000
until [ "$(tcpdump -r "$out/tcpdump.pcap" 2>/dev/null | wc -l)" -ge 10 ] || [ "$n" -eq 0 ]; do
	n=$((n - 1))
	sleep 0.01
done
kill -TERM "$td"
wait "$td" || true
cat "$tmp/tcpdump.err" >&2

cd "$out"
for f in handshake:21013 handshake6:21016 synretry:21013 icmp:21014 tcpdump:21017; do
	"$bin/capture" -r "${f%%:*}.pcap" -p "${f#*:}" > "${f%%:*}.lines"
done
