#!/bin/sh
# p06-port-exhaustion: a client namespace whose ip_local_port_range holds 10 ports, and a client
# that closes first, so each connection leaves a TIME-WAIT socket holding its port.  Parts, in
# this order (each its own server port, so each part's TIME-WAIT sockets are its own):
#   wire        tcp_tw_reuse 2 (the default), 10 connect()s across the wire to 192.0.2.2:21090,
#               each closed at once; once the 10 sockets are all TIME-WAIT (sock_diag), the 11th:
#               it fails with EADDRNOTAVAIL
#   loopback    the same over lo inside the client namespace (127.0.0.1:21091): the 11th
#               fails too, then one connect() after another until one succeeds, once the
#               TIME-WAIT sockets are older than the reuse delay (tcp_tw_reuse 2 applies on lo)
#   wire-again  one connect() to 21090 again, its TIME-WAIT sockets now older than that delay:
#               still EADDRNOTAVAIL (mode 2 is loopback only)
#   reuse1-old  tcp_tw_reuse 1: the same connect() to 21090 succeeds at once
#   reuse1      tcp_tw_reuse 1, a fresh port (21092): the 11th fails (the sockets are younger
#               than the delay), the poll succeeds after it
#   nots        tcp_timestamps 0 (and tcp_tw_reuse 1), 21093: no timestamps, no reuse: the
#               poll never succeeds before its deadline
#   buckets     tcp_max_tw_buckets = the TIME-WAIT sockets now + 3, 21094: 3 new TIME-WAIT
#               sockets, the other closes find no room (TCPTimeWaitOverflow), all 11 succeed
#   bound       tcp_tw_reuse 0, 21097: a client that bind()s its port (SO_REUSEADDR) first;
#               the same again at once: its connect() takes over the TIME-WAIT socket (no
#               delay, no tcp_tw_reuse: check_established() without twp); without
#               SO_REUSEADDR its bind() fails
#   bind-old1, bind-old0   on the server: the server closes first, its TIME-WAIT socket holds
#               the listening port (21095: the old listener had SO_REUSEADDR, 21096: not); a
#               new listener binds it with and without SO_REUSEADDR
# The loopback part runs on lo in the client namespace (not a third namespace): its sysctls are
# the wire part's own (ip_local_port_range, tcp_tw_reuse are per namespace), so the address is
# the only difference, and the wire's TIME-WAIT sockets still hold the same 10 ports meanwhile.
# Every wait is a poll with a deadline: readiness lines, sock_diag snapshots, and the poll's
# own connect() times (CLOCK_MONOTONIC, as peer prints them).
. "$(dirname "$0")/../lib/collect.sh"

# the knobs (experiments/units): checked here too, for a run without run.sh.  ports: the size of
# the client's ip_local_port_range (even: its ends of different parity, as ip-sysctl.rst asks);
# reuse_delay: net.ipv4.tcp_tw_reuse_delay in the client's namespace (ms), set only when it is
# not the namespace's value already (1000, the kernel's default: nothing set, nothing recorded)
tl_knob_set PORTS ports "${TL_KNOB_PORTS:-10}" 4 64
tl_knob_set REUSE_DELAY reuse_delay "${TL_KNOB_REUSE_DELAY:-1000}" 200 5000
if [ $((PORTS % 2)) -ne 0 ]; then
	echo "$TL_UNIT: knob ports='$PORTS': want an even number (ends of different parity)" >&2
	exit 2
fi

tl_wire_init "$1"
LO=40000
HI=$((LO + PORTS - 1))		# different parity ends (ip-sysctl.rst, ip_local_port_range)
COUNT=$((HI - LO + 2))		# the range + 1
POLL_MS=20			# between two connect()s of a poll (sleep $POLL_S)
POLL_S=0.02
SERVERS=""
BUCKETS_EXTRA=3
BOUND_PORT=40100		# outside the range: bind() takes any port
KEEP_C="TcpActiveOpens,TcpAttemptFails,TcpEstabResets,TcpOutRsts,TcpExtTW,TcpExtTWRecycled"
KEEP_C="$KEEP_C,TcpExtTWKilled,TcpExtTCPTimeWaitOverflow,TcpExtPAWSActive,TcpExtPAWSEstab"
KEEP_S="TcpPassiveOpens,TcpEstabResets,TcpOutRsts,TcpInSegs,TcpExtTW,TcpExtTWKilled"
KEEP_S="$KEEP_S,TcpExtTCPTimeWaitOverflow"
SYSCTLS="ipv4/ip_local_port_range ipv4/ip_local_reserved_ports ipv4/tcp_tw_reuse
ipv4/tcp_tw_reuse_delay ipv4/tcp_max_tw_buckets ipv4/tcp_timestamps ipv4/tcp_fin_timeout
ipv4/tcp_rfc1337 ipv4/ip_autobind_reuse"

# set_sysctl NAME VALUE: a sysctl of the client's namespace, read back into raw/sysctl-changes.txt
# beside PART: the part it is set for (PART-end: set back after it)
set_sysctl() {
	sysctl -qw "net.ipv4.$1=$2" || tl_die "cannot set net.ipv4.$1=$2"
	echo "$PART net.ipv4.$1=$(tr -s ' \t' '  ' < "/proc/sys/net/ipv4/$1")" >> "$RAW/sysctl-changes.txt"
}

# server ADDR PORT [nsenter…]: a peer server (-n 0: until stopped) that reads to EOF and
# closes, polled until ready; its pid added to SERVERS
server() {
	_sa=$1 _sp=$2
	shift 2
	tl_bg "$RAW/server-$_sp.txt" "$@" "$TL_BIN/peer" -r server -a "$_sa" -p "$_sp" -n 0 -s drain,close
	SERVERS="$SERVERS $TL_LAST"
	tl_wait_line "$TL_LAST" "$RAW/server-$_sp.txt" '^ready ' 5
}

# begin NAME IFACE PORT: both sides' counters, the part's capture
begin() {
	PART=$1
	tl_both_counters_before "$1-"
	tl_capture "$1-capture" "$2" "$3"
}

# end NAME: the counters, the capture, the client namespace's /proc/net/sockstat
end() {
	tl_both_counters_after "$1-" "$KEEP_C" "$KEEP_S"
	tl_uncapture
	cat /proc/thread-self/net/sockstat > "$RAW/$1-sockstat.txt" || tl_die "cannot read sockstat"
}

# clients NAME ADDR PORT N: N connect()s one after another, each closed at once
clients() {
	tl_log "$1: $4 connect()s to $2:$3, each closed at once (the client closes first)"
	tl_fg "$RAW/$1-client.txt" "$TL_BIN/peer" -r client -a "$2" -p "$3" -n "$4" -s close
	tl_log "$1: $(grep -c '^connect .* ret=0 ' "$RAW/$1-client.txt") of $4 succeeded"
}

# settle NAME PORT [CMD…]: sock_diag snapshots (sockwatch -1, every state) of the sockets to
# (with WT_PORT=-P: from) PORT until there is one at least and every one is in TIME-WAIT: every
# close is done (a full socket still closing, or a timewait socket still in its FIN-WAIT-2
# substate, is not), at most 300 tries; the last snapshot is raw/NAME-tw.txt
settle() {
	settle_in TIME-WAIT "$@"
}

# settle_in STATE NAME PORT [CMD…]: settle's snapshots until every socket is in STATE; the last
# is raw/NAME-tw.txt for TIME-WAIT, else raw/NAME-fin-wait-2.txt (the one other STATE used)
settle_in() {
	_ws=$1 _wn=$2 _wp=$3
	shift 3
	_wleft=300
	_wf=$RAW/$_wn-tw.txt
	[ "$_ws" = TIME-WAIT ] || _wf=$RAW/$_wn-fin-wait-2.txt
	while :; do
		# shellcheck disable=SC2086 # WT_PORT: -p or -P
		"$@" "$TL_BIN/sockwatch" -1 -4 $WT_PORT "$_wp" > "$_wf" || tl_die "sockwatch -1 failed"
		_wall=$(grep -c '^t_s=' "$_wf") || _wall=0
		_wtw=$(grep -c "^t_s=.* state=$_ws " "$_wf") || _wtw=0
		[ "$_wall" -eq 0 ] || [ "$_wtw" -ne "$_wall" ] || return 0
		_wleft=$((_wleft - 1))
		[ "$_wleft" -gt 0 ] ||
			tl_die "$_wn: $_wall sockets on port $_wp, $_wtw of them $_ws, after 300 snapshots" \
				"($(sed -n 's/^TCP: .* \(tw [0-9]*\) .*/sockstat \1/p' /proc/thread-self/net/sockstat)," \
				"tcp_max_tw_buckets $(cat /proc/sys/net/ipv4/tcp_max_tw_buckets))"
		sleep 0.01
	done
}

# settle_all NAME: sock_diag snapshots of every IPv4 TCP socket of the client namespace until each
# is TIME-WAIT or LISTEN, at most 300 tries; the last snapshot is raw/NAME.txt.  Then no socket
# of an earlier part is still closing, to become a TIME-WAIT socket after sockstat is read and
# take the room made for the next part's (CI: the buckets part once found no TIME-WAIT socket
# of its own at all)
settle_all() {
	_sl=300
	while :; do
		"$TL_BIN/sockwatch" -1 -4 > "$RAW/$1.txt" || tl_die "sockwatch -1 failed"
		_sbusy=$(grep '^t_s=' "$RAW/$1.txt" | grep -cv ' state=\(TIME-WAIT\|LISTEN\) ') || _sbusy=0
		[ "$_sbusy" -ne 0 ] || return 0
		_sl=$((_sl - 1))
		[ "$_sl" -gt 0 ] || tl_die "$1: $_sbusy sockets neither TIME-WAIT nor LISTEN after 300 snapshots"
		sleep 0.01
	done
}

# exhaust NAME ADDR PORT: COUNT - 1 connect()s (clients), then, every close done (settle), the
# connect() number COUNT (raw/NAME-last.txt), and its close settles too (raw/NAME-after-tw.txt:
# the part's counters are read once every close is done)
exhaust() {
	clients "$1" "$2" "$3" $((COUNT - 1))
	settle "$1" "$3"
	tl_fg "$RAW/$1-last.txt" "$TL_BIN/peer" -r client -a "$2" -p "$3" -s close
	tl_log "$1: connect() #$COUNT, $(grep -c '^t_s=' "$RAW/$1-tw.txt") TIME-WAIT sockets there:" \
		"$(sed -n 's/^connect .* ret=\(-*[0-9]*\) errno=\([A-Z]*\).*/ret=\1 \2/p' "$RAW/$1-last.txt")"
	settle "$1-after" "$3"
}

# poll NAME ADDR PORT DEADLINE_MS: one connect() (peer -n 1) every POLL_MS until one succeeds
# or DEADLINE_MS have passed since the first (by the t_ns the attempts print); every attempt's
# lines go to raw/NAME-poll.txt
poll() {
	_pn=$1 _pa=$2 _pp=$3 _pd=$(($4 * 1000000)) _p0="" _ptries=0
	: > "$RAW/$_pn-poll.txt"
	tl_log "$_pn: a connect() every $POLL_MS ms until one succeeds, at most $4 ms"
	while [ "$_ptries" -lt 1000 ]; do
		_ptries=$((_ptries + 1))
		"$TL_BIN/peer" -r client -a "$_pa" -p "$_pp" -s close > "$RAW/$_pn-poll.one" ||
			tl_die "peer (poll attempt $_ptries) failed"
		cat "$RAW/$_pn-poll.one" >> "$RAW/$_pn-poll.txt"
		_pl=$(grep '^connect ' "$RAW/$_pn-poll.one") || tl_die "peer printed no connect line"
		case " $_pl " in *" ret=0 "*) break ;; esac
		_pt=${_pl##* t_ns=}
		_pt=${_pt%% *}
		[ -n "$_p0" ] || _p0=$_pt
		[ $((_pt - _p0)) -lt "$_pd" ] || break
		sleep "$POLL_S"
	done
	rm -f "$RAW/$_pn-poll.one"
	tl_log "$_pn: $(grep -c '^connect .* ret=-1 ' "$RAW/$_pn-poll.txt") failed," \
		"$(grep -c '^connect .* ret=0 ' "$RAW/$_pn-poll.txt") succeeded"
}

# try_bind NAME PORT R: a new listener on PORT with SO_REUSEADDR R in the server namespace: its
# bind() is the result (peer -R): a `bind` line (failed) or `ready` (bound: then stopped)
try_bind() {
	tl_bg "$RAW/$1.txt" nsenter --net="/run/netns/$TL_NS_SERVER" \
		"$TL_BIN/peer" -r server -a "$TL_SERVER_ADDR" -p "$2" -R "$3" -n 1 -s close
	_tb=$TL_LAST
	# a failed bind() prints its line and exits at once: tl_wait_line reads the file once more
	# when the program is gone
	tl_wait_line "$_tb" "$RAW/$1.txt" '^(bind|ready) ' 5
	if grep -q '^ready ' "$RAW/$1.txt"; then
		tl_log "$1: SO_REUSEADDR=$3: bound"
		tl_stop "$_tb"
	else
		tl_log "$1: SO_REUSEADDR=$3: $(grep '^bind ' "$RAW/$1.txt" | sed 's/.*errno=//')"
		tl_wait_exit "$_tb" 5
	fi
}

# ---- setup: the sysctls as the namespaces have them, then the small port range ---------------
tl_sysctls "$SYSCTLS" > "$RAW/sysctls.txt"
tl_sysctls "$SYSCTLS" tl_srv > "$RAW/server-sysctls.txt"
: > "$RAW/sysctl-changes.txt"
PART=setup
set_sysctl ip_local_port_range "$LO $HI"
DELAY_MS=$(cat /proc/sys/net/ipv4/tcp_tw_reuse_delay 2>/dev/null) || DELAY_MS=""
if [ -z "$DELAY_MS" ]; then
	# a kernel without tcp_tw_reuse_delay (the 5.10 to 6.12 references): the rule's clock is
	# whole seconds, so only the default
	[ "$REUSE_DELAY" -eq 1000 ] ||
		tl_die "knob reuse_delay=$REUSE_DELAY: this kernel has no net.ipv4.tcp_tw_reuse_delay"
	DELAY_MS=1000
elif [ "$DELAY_MS" -ne "$REUSE_DELAY" ]; then
	set_sysctl tcp_tw_reuse_delay "$REUSE_DELAY"
	DELAY_MS=$(cat /proc/sys/net/ipv4/tcp_tw_reuse_delay) || tl_die "cannot read tcp_tw_reuse_delay"
fi
DEADLINE_MS=$((DELAY_MS + 1000))
MAX_TW=$(cat /proc/sys/net/ipv4/tcp_max_tw_buckets) || tl_die "no tcp_max_tw_buckets"
echo "lo=$LO hi=$HI count=$COUNT poll_ms=$POLL_MS deadline_ms=$DEADLINE_MS" \
	"buckets_extra=$BUCKETS_EXTRA bound_port=$BOUND_PORT" > "$RAW/params.txt"

for _p in 21090 21092 21093 21094 21097; do
	server "$TL_SERVER_ADDR" "$_p" nsenter --net="/run/netns/$TL_NS_SERVER"
done
server 127.0.0.1 21091
# every TIME-WAIT (and FIN-WAIT-2, which may be a timewait socket already) socket of the client
# namespace as it comes and changes: when each entered TIME-WAIT
tl_bg "$RAW/sockwatch.txt" "$TL_BIN/sockwatch" -i "$TL_WATCH_US" -4 -s time-wait -s fin-wait-2
WATCH=$TL_LAST
tl_wait_line "$WATCH" "$RAW/sockwatch.txt" '^ready ' 5
WT_PORT=-p

# ---- wire: tcp_tw_reuse 2 does not apply off loopback ----------------------------------------
begin wire "$TL_CLIENT_IF" 21090
exhaust wire "$TL_SERVER_ADDR" 21090
end wire
if command -v ss >/dev/null 2>&1; then
	ss -tan state time-wait > "$RAW/wire-ss.txt" || tl_die "ss failed"
fi

# ---- loopback: the same, on lo, where mode 2 lets a TIME-WAIT socket be reused ---------------
begin loopback lo 21091
exhaust loopback 127.0.0.1 21091
poll loopback 127.0.0.1 21091 "$DEADLINE_MS"
settle loopback-after 21091
end loopback

# ---- wire-again: the wire's TIME-WAIT sockets, now older than the delay ----------------------
begin wire-again "$TL_CLIENT_IF" 21090
clients wire-again "$TL_SERVER_ADDR" 21090 1
end wire-again

# ---- tcp_tw_reuse 1 -------------------------------------------------------------------------
PART=reuse1-old
set_sysctl tcp_tw_reuse 1
begin reuse1-old "$TL_CLIENT_IF" 21090
clients reuse1-old "$TL_SERVER_ADDR" 21090 1
settle reuse1-old-after 21090
end reuse1-old

begin reuse1 "$TL_CLIENT_IF" 21092
exhaust reuse1 "$TL_SERVER_ADDR" 21092
poll reuse1 "$TL_SERVER_ADDR" 21092 "$DEADLINE_MS"
settle reuse1-after 21092
end reuse1

# ---- no timestamps: nothing to protect a reused connection, so no reuse ----------------------
PART=nots
set_sysctl tcp_timestamps 0
begin nots "$TL_CLIENT_IF" 21093
exhaust nots "$TL_SERVER_ADDR" 21093
poll nots "$TL_SERVER_ADDR" 21093 "$DEADLINE_MS"
settle nots-after 21093
end nots
PART=nots-end
set_sysctl tcp_timestamps 1

# ---- tcp_max_tw_buckets: room for BUCKETS_EXTRA more TIME-WAIT sockets -----------------------
PART=buckets
# tcp_tw_reuse 0 for this part: with 1 (the part before), the last connect() may take a port
# whose TIME-WAIT socket is older than tcp_tw_reuse_delay (1 s) and end that socket
# (TWRecycled: +2 in this part in a 7.2 guest), leaving fewer TIME-WAIT sockets than the room
# made.  Then every socket of the earlier parts settled (settle_all), and one read of sockstat,
# kept and counted: the report's TIME-WAIT count before
# the part is this file's (two reads once differed by one, under CI's load)
set_sysctl tcp_tw_reuse 0
settle_all buckets-settled
cat /proc/thread-self/net/sockstat > "$RAW/buckets-sockstat-before.txt" || tl_die "sockstat"
_tw=$(sed -n 's/^TCP: .* tw \([0-9]*\) .*/\1/p' "$RAW/buckets-sockstat-before.txt")
[ -n "$_tw" ] || tl_die "no tw in /proc/thread-self/net/sockstat"
set_sysctl tcp_max_tw_buckets $((_tw + BUCKETS_EXTRA))
begin buckets "$TL_CLIENT_IF" 21094
exhaust buckets "$TL_SERVER_ADDR" 21094
end buckets
PART=buckets-end
set_sysctl tcp_max_tw_buckets "$MAX_TW"

# ---- bind() before connect(): the bound port's TIME-WAIT socket, tcp_tw_reuse 0 -------------
PART=bound
set_sysctl tcp_tw_reuse 0
begin bound "$TL_CLIENT_IF" 21097
tl_log "bound: bind() to $BOUND_PORT with SO_REUSEADDR, connect(), close"
tl_fg "$RAW/bound-client.txt" "$TL_BIN/peer" -r client -a "$TL_SERVER_ADDR" -p 21097 \
	-B "$BOUND_PORT" -R 1 -s close
settle bound 21097
for _r in 0 1; do
	tl_fg "$RAW/bound-r$_r.txt" "$TL_BIN/peer" -r client -a "$TL_SERVER_ADDR" -p 21097 \
		-B "$BOUND_PORT" -R "$_r" -s close
	tl_log "bound: again, SO_REUSEADDR=$_r: $(grep -E '^(bind|connect) ' "$RAW/bound-r$_r.txt")"
done
settle bound-after 21097
end bound
tl_stop "$WATCH"

# ---- bind(): a listening port held by the server's own TIME-WAIT socket ---------------------
WT_PORT=-P
for _old in 1 0; do
	_port=$((21096 - _old))
	_n=bind-old$_old
	PART=$_n
	begin "$_n" "$TL_CLIENT_IF" "$_port"
	tl_log "$_n: a listener with SO_REUSEADDR=$_old accepts, closes first, exits"
	tl_bg "$RAW/$_n-server.txt" nsenter --net="/run/netns/$TL_NS_SERVER" \
		"$TL_BIN/peer" -r server -a "$TL_SERVER_ADDR" -p "$_port" -R "$_old" -n 1 -s close
	_old_srv=$TL_LAST
	tl_wait_line "$_old_srv" "$RAW/$_n-server.txt" '^ready ' 5
	# the client reads the server's FIN, then holds until the server's socket is in FIN-WAIT-2
	# (its FIN acknowledged) before its own FIN leaves: then the two cannot meet the server out
	# of order.  A CI run where they did: the server's TIME-WAIT socket answered the late ACK
	# with another ACK, the client's socket (closed by then) answered that with a RST, and
	# with tcp_rfc1337=0 the RST ended the TIME-WAIT socket this part needs
	tl_bg "$RAW/$_n-client.txt" "$TL_BIN/peer" -r client -a "$TL_SERVER_ADDR" -p "$_port" \
		-s drain,hold,close
	_old_cli=$TL_LAST
	tl_wait_line "$_old_cli" "$RAW/$_n-client.txt" '^hold ' 5
	tl_wait_exit "$_old_srv" 5
	settle_in FIN-WAIT-2 "$_n" "$_port" nsenter --net="/run/netns/$TL_NS_SERVER"
	kill -USR1 "$_old_cli" || tl_die "cannot signal the client"
	tl_wait_exit "$_old_cli" 5
	settle "$_n" "$_port" nsenter --net="/run/netns/$TL_NS_SERVER"
	if command -v ss >/dev/null 2>&1; then
		tl_srv ss -tan state time-wait "( sport = :$_port )" > "$RAW/$_n-ss.txt" ||
			tl_die "ss failed"
	fi
	try_bind "$_n-new0" "$_port" 0
	try_bind "$_n-new1" "$_port" 1
	end "$_n"
done

for _s in $SERVERS; do
	tl_stop "$_s"
done
tl_wire_record
