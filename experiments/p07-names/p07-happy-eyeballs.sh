#!/bin/sh
# p07-happy-eyeballs: a name with an IPv6 and an IPv4 address whose IPv6 path silently drops
# SYNs, against a client that tries the answers one after another and clients that race them
# (RFC 8305, Happy Eyeballs).  The name he.p07.test is ::1 and 127.0.0.1 in the namespace's own
# /etc/hosts (/etc/netns/NAME, bind-mounted over /etc by `ip netns exec`, in a --kernel guest by
# experiments/lib/etc-exec.sh: collect.sh's IN_NS; nsswitch "hosts: files"), so glibc's RFC 6724
# sort puts ::1 first.  One nft rule per part, in the input hook,
# drops the SYNs to [::1]:PORT; the server, peer on [::] (both families), never sees them.
#
# Why loopback and not the wire: the waits this unit shows are timers (the SYN retransmission
# timer, the racing client's delay), not round trips, and one namespace's lo has both families
# already; the wire (experiments/lib/wire.sh) keeps IPv6 off, and every wire unit's bytes stay
# as they are.  The input hook, not output: the SYN crosses lo first, so the capture holds it.
# The RTTs here are loopback's (tens of us): a result depends on that only where it says so.
#   sequential  resolve_connect: connect() to [::1] blocks through the SYN retransmissions until
#               ETIMEDOUT (net.ipv4.tcp_syn_retries, the knob syn_retries, set in this
#               namespace), then 127.0.0.1 connects
#   race        resolve_connect -r DELAY: [::1] first, 127.0.0.1 started DELAY ms later (the knob
#               delay_ms), the first to connect wins, the other is closed
#   curl        Debian's curl --happy-eyeballs-timeout-ms DELAY, -v --trace-time: its own lines
#               and -w's time_connect; peer reads the request and closes (no reply: curl exits
#               52, "Empty reply from server"; the connect is what is measured)
# Each part on its own port: the capture on lo, the counters before and after; the nft
# counters are read at the end (raw/nft.txt), the cross-check of what was dropped.
. "$(dirname "$0")/../lib/collect.sh"
tl_init "$1"
# shellcheck source=experiments/lib/wire.sh
. "$TL_LIB/wire.sh"			# wire_fault: the nft rule, here in this namespace ("-")
PORT_SEQUENTIAL=21074 PORT_RACE=21075 PORT_CURL=21076
NAME=he.p07.test			# RFC 6761's .test: never a real name
tl_knob_set SYN_RETRIES syn_retries "${TL_KNOB_SYN_RETRIES:-2}" 1 4
tl_knob_set DELAY delay_ms "${TL_KNOB_DELAY_MS:-250}" 10 2000
KEEP="TcpActiveOpens,TcpPassiveOpens,TcpAttemptFails,TcpOutSegs,TcpRetransSegs"
KEEP="$KEEP,TcpExtTCPSynRetrans,TcpExtTCPTimeouts,TcpExtTCPAbortOnTimeout"

command -v curl > /dev/null || tl_skip "curl not installed (make deps: curl)"
command -v nft > /dev/null || tl_skip "nft not installed (make deps: nftables)"
tl_netns_etc
printf '::1\t%s\n127.0.0.1\t%s\n' "$NAME" "$NAME" > "$ETC/hosts" || tl_die "cannot write $ETC/hosts"
printf 'hosts: files\n' > "$ETC/nsswitch.conf" || tl_die "cannot write $ETC/nsswitch.conf"
cp "$ETC/hosts" "$RAW/hosts.txt"
"$TL_BIN/machine" > "$RAW/machine.txt" || tl_die "machine failed"
ip -6 addr show dev lo > "$RAW/lo-addresses.txt" 2>&1 || tl_die "ip -6 addr failed"
grep -q 'inet6 ::1/128' "$RAW/lo-addresses.txt" ||
	tl_skip "no ::1 on lo here (IPv6 disabled?): nothing to show"
sysctl -qw "net.ipv4.tcp_syn_retries=$SYN_RETRIES" || tl_die "cannot set net.ipv4.tcp_syn_retries"
tl_sysctls "ipv4/tcp_syn_retries ipv4/tcp_syn_linear_timeouts ipv4/tcp_rto_min_us" \
	> "$RAW/sysctls.txt"
for _port in $PORT_SEQUENTIAL $PORT_RACE $PORT_CURL; do
	_ferr=$(wire_fault - in drop ip6 daddr ::1 tcp dport "$_port" \
		'tcp flags & (syn | ack) == syn' 2>&1) || tl_die "${_ferr#wire: }"
done

# part NAME PORT CMD...: peer on [::]:PORT (reads what comes, closes), counters, the capture on
# lo, CMD through IN_NS (ip netns exec: this namespace's /etc/netns files over /etc)
part() {
	_p=$1 _port=$2
	shift 2
	tl_bg "$RAW/$_p-server.txt" "$TL_BIN/peer" -r server -a :: -p "$_port" -n 0 -s recv:4096,close
	_srv=$TL_LAST
	tl_wait_line "$_srv" "$RAW/$_p-server.txt" '^ready ' 5
	"$TL_BIN/counters" > "$RAW/$_p-counters-before.txt" || tl_die "counters failed"
	tl_capture "$_p-capture" lo "$_port"
	tl_log "$_p: $*"
	# in the background and waited for by the shell's wait, which a SIGINT/SIGTERM interrupts
	# (its trap then stops the client): a foreground client would hold the trap for its 7 s
	# shellcheck disable=SC2086 # IN_NS: a command prefix (tl_netns_etc)
	tl_bg "$RAW/$_p-client.txt" $IN_NS "$@"
	_cli=$TL_LAST
	_rc=0
	wait "$_cli" || _rc=$?
	tl_forget "$_cli"
	echo "$_rc" > "$RAW/$_p-exit.txt"
	tl_uncapture
	"$TL_BIN/counters" -d "$RAW/$_p-counters-before.txt" -k "$KEEP" \
		> "$RAW/$_p-counters-delta.txt" || tl_die "counters failed"
	tl_stop "$_srv"
}

part sequential "$PORT_SEQUENTIAL" "$TL_BIN/resolve_connect" -n "$NAME" -p "$PORT_SEQUENTIAL"
[ "$(cat "$RAW/sequential-exit.txt")" = 0 ] ||
	tl_die "resolve_connect failed: $(head -n 1 "$RAW/sequential-client.txt.err")"
tl_not_interrupted "$RAW/sequential-client.txt"
part race "$PORT_RACE" "$TL_BIN/resolve_connect" -n "$NAME" -p "$PORT_RACE" -r "$DELAY"
[ "$(cat "$RAW/race-exit.txt")" = 0 ] ||
	tl_die "resolve_connect -r failed: $(head -n 1 "$RAW/race-client.txt.err")"
# curl: -q (no ~/.curlrc), no proxy; -v --trace-time's lines go to stderr (curl-client.txt.err)
part curl "$PORT_CURL" curl -q -v --trace-time --noproxy '*' -s -o /dev/null \
	--happy-eyeballs-timeout-ms "$DELAY" \
	-w 'time_namelookup=%{time_namelookup} time_connect=%{time_connect} remote_ip=%{remote_ip} exitcode=%{exitcode}\n' \
	"http://$NAME:$PORT_CURL/"
mv "$RAW/curl-client.txt.err" "$RAW/curl-verbose.txt" || tl_die "curl wrote no -v lines"
# 52: CURLE_GOT_NOTHING, the empty reply peer gives; anything else is a failure of the part
[ "$(cat "$RAW/curl-exit.txt")" = 52 ] ||
	tl_die "curl exited $(cat "$RAW/curl-exit.txt"), not 52: $(grep -v '^[0-9:.]* [*<>{}]' "$RAW/curl-verbose.txt" | head -n 1)"

nft list ruleset > "$RAW/nft.txt" || tl_die "nft list ruleset failed"
tl_in_etc getent ahosts "$NAME" > "$RAW/getent.txt" 2>&1 ||
	tl_die "getent ahosts $NAME failed in the namespace"
curl --version | head -n 1 > "$RAW/curl-version.txt"
echo "port_sequential=$PORT_SEQUENTIAL port_race=$PORT_RACE port_curl=$PORT_CURL name=$NAME" \
	> "$RAW/params.txt"
echo "syn_retries=$SYN_RETRIES delay_ms=$DELAY" >> "$RAW/params.txt"
