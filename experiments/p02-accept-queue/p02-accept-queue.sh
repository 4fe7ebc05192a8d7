#!/bin/sh
# p02-accept-queue: a listener that never accepts, on the wire, and what its accept queue does
# to the clients.  One part per case, each on its own port with a fresh listener:
#   seq       backlog N, N+3 clients one after another: N+1 get in, the rest stay SYN-SENT
#   burst     N-1 clients queued, then N+1 whose SYNs are admitted while there is room and
#             whose ACKs come after the queue is full (nft drops each one's first ACK, standing
#             in for the round trip a veth does not have): connected, but not queued
#   abort     the same with tcp_abort_on_overflow=1: the server answers the late ACK with RST
#   somaxconn listen(1000) under net.core.somaxconn=S: capped to S
#   flood-cookies, flood-drop, flood-quarter: a burst of connects whose ACKs never come (nft
#             drops them: the flood) against backlog 8, then one ordinary client:
#             tcp_syncookies=1, =0 with a large tcp_max_syn_backlog, =0 with a small one
# The kernel log is read (kmsg_watch) only where this run may open /dev/kmsg: root of a user
# namespace may not while kernel.dmesg_restrict is 1 (it needs the host's CAP_SYSLOG); the
# attempt and that sysctl are raw/kmsg-open.txt, and the report says what was not read.
# Every sysctl a part runs under is set in the server's namespace only and recorded in
# raw/PART-sysctls.txt; snapshots (sockwatch -1, as ss would list them) of both sides,
# both sides' counters each read in its own namespace, and a capture on the server's end.
. "$(dirname "$0")/../lib/collect.sh"
# its watchers only end waits (a SYN or SYN-ACK retransmitted after 1 s or more); the report
# reads the snapshots, counters and capture, never a watcher's times: in a QEMU guest they
# sample every 10 ms
# shellcheck disable=SC2034 # read by tl_init (TL_WATCH_US)
TL_GUEST_WATCH_US=10000
tl_wire_init "$1"
N=4			# the backlog of parts burst, abort
SEQ_BACKLOG=${TL_KNOB_SEQ_BACKLOG:-$N}	# part seq's (the knob seq_backlog; experiments/units)
SYNACK_RETRIES=1	# the server's SYN-ACK retransmissions, to keep the unit short
BYTES=100		# what each client sends once connected
SOMAXCONN=8
FLOOD=20		# connects in a flood
FLOOD_BACKLOG=${TL_KNOB_FLOOD_BACKLOG:-8}	# the flood parts' listen() backlog (the knob flood_backlog)
BASE=30100		# the clients nft picks bind from here (queue_clients -B)
KEEP="TcpExtListenOverflows,TcpExtListenDrops,TcpExtTCPSynRetrans,TcpRetransSegs,TcpOutRsts"
KEEP="$KEEP,TcpEstabResets,TcpExtEmbryonicRsts,TcpExtSyncookiesSent,TcpExtSyncookiesRecv"
KEEP="$KEEP,TcpExtSyncookiesFailed,TcpExtTCPReqQFullDoCookies,TcpExtTCPReqQFullDrop"
KEEP="$KEEP,TcpActiveOpens,TcpPassiveOpens,TcpAttemptFails"
SYSCTLS="net.core.somaxconn net.ipv4.tcp_max_syn_backlog net.ipv4.tcp_syncookies"
SYSCTLS="$SYSCTLS net.ipv4.tcp_abort_on_overflow net.ipv4.tcp_synack_retries"
SYSCTLS="$SYSCTLS net.ipv4.tcp_syn_retries net.ipv4.tcp_no_metrics_save"

# /dev/kmsg: may this run read the kernel log (kmsg_watch -t), and kernel.dmesg_restrict
"$TL_BIN/kmsg_watch" -t > "$RAW/kmsg-open.txt" || tl_die "kmsg_watch -t failed"
_restrict=$(cat /proc/sys/kernel/dmesg_restrict) || tl_die "cannot read kernel.dmesg_restrict"
echo "sysctl kernel.dmesg_restrict=$_restrict" >> "$RAW/kmsg-open.txt"
KMSG=yes
grep -q '^open .* ret=0 ' "$RAW/kmsg-open.txt" || KMSG=no
[ "$KMSG" = yes ] || tl_log "the kernel log is not readable here: $(head -n 1 "$RAW/kmsg-open.txt")"

# srv_set KEY=VALUE...: sysctls in the server's namespace (never this one, never the host's)
srv_set() {
	tl_srv sysctl -qw "$@" || tl_die "sysctl -w $* in the server's namespace failed"
}

# side_sysctls SIDE VALUES...: "SIDE NAME=VALUE" for each of SYSCTLS, in order
side_sysctls() {
	_side=$1
	shift
	[ $# -eq "$(echo "$SYSCTLS" | wc -w)" ] || tl_die "sysctl -n gave $# values on the $_side side"
	for _k in $SYSCTLS; do
		echo "$_side $_k=$1"
		shift
	done
}

# rec_sysctls PART: the sysctls the part runs under, the server's and the client's (one
# sysctl -n each: the guest is slow to start processes)
rec_sysctls() {
	# shellcheck disable=SC2086 # one word per sysctl
	_sv=$(tl_srv sysctl -n $SYSCTLS) || tl_die "cannot read the sysctls in the server's namespace"
	# shellcheck disable=SC2086
	_cv=$(sysctl -n $SYSCTLS) || tl_die "cannot read the sysctls"
	{
		# shellcheck disable=SC2086 # one word per value
		side_sysctls server $_sv
		# shellcheck disable=SC2086
		side_sysctls client $_cv
		# part seq's own backlog under the name the others' has: the report reads each part's
		echo "constant backlog_n=$([ "$1" = seq ] && echo "$SEQ_BACKLOG" || echo "$N")" \
			"bytes=$BYTES flood=$FLOOD flood_backlog=$FLOOD_BACKLOG" \
			"base=$BASE"
	} > "$RAW/$1-sysctls.txt"
}

# snap PART WHEN: both sides as ss would list them, each in its own namespace
snap() {
	"$TL_BIN/sockwatch" -4 -1 -p "$PORT" > "$RAW/$1-$2-client.txt" ||
		tl_die "sockwatch -1 (client side) failed"
	tl_srv "$TL_BIN/sockwatch" -4 -1 -P "$PORT" > "$RAW/$1-$2-server.txt" ||
		tl_die "sockwatch -1 (server side) failed"
}

# begin PART PORT BACKLOG: the part's sysctls recorded, its listener, counters, capture and
# both sides' event watchers started
begin() {
	P=$1 PORT=$2
	rec_sysctls "$P"
	tl_srv_listener "$RAW/$P-listener.txt" -a "$TL_SERVER_ADDR" -p "$PORT" -b "$3" -m never
	tl_both_counters_before "$P-"
	tl_capture -s "$P-capture" "$TL_SERVER_IF" "$PORT"
	tl_bg "$RAW/$P-server-sockwatch.txt" nsenter --net="/run/netns/$TL_NS_SERVER" \
		"$TL_BIN/sockwatch" -i "$TL_WATCH_US" -4 -s syn-recv -P "$PORT"
	SWATCH=$TL_LAST
	tl_wait_line "$SWATCH" "$RAW/$P-server-sockwatch.txt" '^ready ' 5
	tl_watch "$RAW/$P-sockwatch.txt" -4 -p "$PORT"
}

# finish: counters after and the mark; then the fault removed and the clients stopped (they
# reset their sockets: queue_clients closes with SO_LINGER 0), so that no segment of this part
# is retransmitted into the next one's counters; then the watchers and the listener.  CLIENTS
# are the client pids still holding their sockets.
finish() {
	tl_both_counters_after "$P-" "$KEEP" "$KEEP"
	# when the counters had been read (its t_ns): the report counts the packets up to the
	# snapshot (taken before them) and up to this mark, and the counters lie between
	tl_srv "$TL_BIN/sockwatch" -4 -1 -s listen -P "$PORT" > "$RAW/$P-mark.txt" ||
		tl_die "sockwatch -1 (server side, the mark) failed"
	# the client's nft rules with their counters (what they dropped), when the part has any
	if nft list table inet tcplab > "$RAW/$P-nft.txt" 2> /dev/null; then
		tl_fault_clear client
	else
		rm -f "$RAW/$P-nft.txt"
	fi
	for _cp in $CLIENTS; do tl_stop "$_cp"; done
	CLIENTS=""
	tl_unwatch stop
	tl_stop "$SWATCH"
	tl_uncapture
	tl_stop "$TL_LISTENER"
}

# clients NAME ARGS...: queue_clients in the background (holding its sockets), until ready
clients() {
	_cn=$1
	shift
	tl_bg "$RAW/$P-$_cn.txt" "$TL_BIN/queue_clients" -a "$TL_SERVER_ADDR" -p "$PORT" -H "$@"
	CLIENTS="$CLIENTS $TL_LAST"
	LASTC=$TL_LAST
	tl_wait_line "$TL_LAST" "$RAW/$P-$_cn.txt" '^ready ' 10
}

srv_set "net.ipv4.tcp_synack_retries=$SYNACK_RETRIES" net.ipv4.tcp_no_metrics_save=1
CLIENTS=""

# 1. seq: SEQ_BACKLOG+3 clients one after another; the last two find the queue full at their
# SYN and stay in SYN-SENT; wait for each one's first SYN retransmission
tl_log "seq: backlog $SEQ_BACKLOG, $((SEQ_BACKLOG + 3)) clients one after another"
begin seq 21201 "$SEQ_BACKLOG"
clients clients -n $((SEQ_BACKLOG + 3)) -m seq -w 200
tl_wait_count "$TL_WATCH" "$RAW/seq-sockwatch.txt" 'state=SYN-SENT .*retrans=1 ' 2 5
snap seq end
finish

# 2. burst: N-1 queued first; then N+1 whose first ACK nft drops; their data (and their answer
# to the retransmitted SYN-ACK) is the late ACK; wait for the SYN-ACK retransmissions
tl_log "burst: backlog $N, $((N - 1)) queued, then $((N + 1)) whose ACK comes late"
begin burst 21202 "$N"
clients pre -n $((N - 1)) -m seq -w 1000
tl_fault client out "drop-first:$((N + 1))" tcp dport "$PORT" tcp sport "$BASE-$((BASE + N))" \
	tcp flags == ack
clients clients -n $((N + 1)) -m burst -B "$BASE" -s "$BYTES" -w 1000
snap burst sent
tl_wait_count "$SWATCH" "$RAW/burst-server-sockwatch.txt" 'state=SYN-RECV .*retrans=1 ' 1 5
snap burst end
finish

# 3. abort: the same with tcp_abort_on_overflow=1; wait for the resets
tl_log "abort: the same, tcp_abort_on_overflow=1"
srv_set net.ipv4.tcp_abort_on_overflow=1
begin abort 21203 "$N"
clients pre -n $((N - 1)) -m seq -w 1000
tl_fault client out "drop-first:$((N + 1))" tcp dport "$PORT" tcp sport "$BASE-$((BASE + N))" \
	tcp flags == ack
clients clients -n $((N + 1)) -m burst -B "$BASE" -s "$BYTES" -w 1000
# the late ACKs of the last N-1 (room for 2: N+1 minus the N-1 queued) are answered by RST
tl_wait_count "$LASTC" "$RAW/abort-clients.txt" '^send-after ' $((N - 1)) 5
snap abort end
finish
srv_set net.ipv4.tcp_abort_on_overflow=0

# 4. somaxconn: listen(1000) under somaxconn=S; S+2 clients, S+1 get in
tl_log "somaxconn: listen(1000) under net.core.somaxconn=$SOMAXCONN"
_orig_somaxconn=$(tl_srv cat /proc/sys/net/core/somaxconn) || tl_die "cannot read somaxconn"
srv_set "net.core.somaxconn=$SOMAXCONN"
begin somaxconn 21204 1000
clients clients -n $((SOMAXCONN + 2)) -m seq -w 100
snap somaxconn end
finish
srv_set "net.core.somaxconn=$_orig_somaxconn"

# 5. floods: FLOOD connects whose every packet after the SYN nft drops, then one client
# flood PART PORT SYNCOOKIES MAX_SYN_BACKLOG
flood() {
	tl_log "$1: tcp_syncookies=$3 tcp_max_syn_backlog=$4, $FLOOD connects, backlog $FLOOD_BACKLOG"
	srv_set "net.ipv4.tcp_syncookies=$3" "net.ipv4.tcp_max_syn_backlog=$4"
	begin "$1" "$2" "$FLOOD_BACKLOG"
	if [ "$KMSG" = yes ]; then
		tl_bg "$RAW/$1-kmsg.txt" "$TL_BIN/kmsg_watch" -g "SYN flooding on port"
		_kmsg=$TL_LAST
		tl_wait_line "$_kmsg" "$RAW/$1-kmsg.txt" '^ready ' 5
	fi
	tl_fault client out drop tcp dport "$PORT" tcp sport "$BASE-$((BASE + FLOOD - 1))" \
		tcp flags != syn
	clients flood -n "$FLOOD" -m burst -B "$BASE" -w 200
	clients client -n 1 -m seq -s "$BYTES" -w 300
	snap "$1" end
	[ "$KMSG" = no ] || tl_stop "$_kmsg"
	finish
}
flood flood-cookies 21205 1 8
flood flood-drop 21206 0 64
flood flood-quarter 21207 0 8
tl_wire_record
