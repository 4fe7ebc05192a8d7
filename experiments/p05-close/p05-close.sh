#!/bin/sh
# p05-close: four ways to end a connection, across the wire, one part each on its own port.
# The actor on both sides is peer (fixtures/peer.c): the client in this namespace, the server in
# the server's.  Each part has its capture (the client's end of the veth), both sides'
# sockwatch (each in its own namespace, every state but LISTEN) and both sides' counters.
#   orderly   the client closes first; the server reads EOF, holds its CLOSE-WAIT socket until
#             SIGUSR1, then closes: FIN, ACK, FIN, ACK; FIN-WAIT-1, FIN-WAIT-2, TIME-WAIT
#             against CLOSE-WAIT, LAST-ACK
#   unread    the server reads part of the request, replies, and close()s with the rest unread:
#             RST, not FIN (__tcp_close()); the client reads what it had queued, then ECONNRESET
#   lost      the same, with the reply lost on the way (nft drops it at the client's input,
#             after the capture saw it): the RST ends the connection before any retransmission
#   sendfirst the same as unread, but the client send()s before it reads: the send() gets the
#             ECONNRESET, and the reads that follow see the reply, then EOF
#   linger0   the client sets SO_LINGER {1, 0} and closes: RST, no TIME-WAIT
#   shutdown  the client shutdown(SHUT_WR)s: the server reads EOF and still sends; the client
#             still receives
# Beside each sockwatch, tcpevents (docs/tcpevents.md) on the same side and port: every state
# change from the kernel's tracepoints, so a state shorter than a sample (the server's LAST-ACK)
# is still seen.  Where it cannot run (not built; exit 4: no BTF, no privilege) the one line
# why goes to tcpevents-blind.txt, and the parts run with sockwatch alone.
. "$(dirname "$0")/../lib/collect.sh"
tl_wire_init "$1"
PORT_ORDERLY=21050 PORT_UNREAD=21051 PORT_LOST=21052 PORT_LINGER0=21053 PORT_SHUTDOWN=21054
PORT_SENDFIRST=21055
REQUEST=100		# the client's request
READ=40			# what the unread parts' server reads of it (the rest stays unread)
REPLY=200		# the server's reply
HALF=${TL_KNOB_HALF:-300}	# what the shutdown part's server sends after it read EOF (the knob half)
KEEP="TcpActiveOpens,TcpPassiveOpens,TcpEstabResets,TcpOutRsts,TcpInSegs,TcpOutSegs"
KEEP="$KEEP,TcpRetransSegs,TcpExtTCPAbortOnClose,TcpExtTCPAbortOnData,TcpExtTCPAbortOnLinger"
KEEP="$KEEP,TcpExtTCPChallengeACK,TcpExtTW,TcpExtDelayedACKs"
# every state but LISTEN (the server's listener is not the connection)
STATES="-s syn-sent -s syn-recv -s estab -s fin-wait-1 -s fin-wait-2 -s time-wait -s close-wait"
STATES="$STATES -s last-ack -s closing"
SW_C="-c rq,wq"
SYSCTLS="ipv4/tcp_fin_timeout ipv4/tcp_max_tw_buckets ipv4/tcp_tw_reuse ipv4/tcp_tw_reuse_delay
ipv4/tcp_orphan_retries ipv4/tcp_max_orphans ipv4/tcp_rfc1337 ipv4/tcp_challenge_ack_limit
ipv4/tcp_invalid_ratelimit ipv4/tcp_rmem ipv4/tcp_wmem ipv4/tcp_purge_receive_queue"

TE_BLIND=""
if [ ! -x "$TL_BIN/tcpevents" ]; then
	TE_BLIND="tcpevents: not built here (make says why: it needs clang, bpftool, libbpf-dev, BTF)"
	echo "$TE_BLIND" > "$RAW/tcpevents-blind.txt"
fi

# events_ready PID FILE: 0 once tcpevents printed its ready line; 1 if it exited 4 (it cannot
# see here: its line kept in tcpevents-blind.txt, its files removed); any other end fails
events_ready() {
	"$TL_BIN/waitfor" -p "$1" -f "$2" -e '^ready ' -t 10000
	case $? in
	0) return 0 ;;
	1) ;;
	3) tl_die "no 'ready' from tcpevents ($2) after 10 s" ;;
	*) tl_die "waitfor failed waiting for tcpevents' ready line in $2" ;;
	esac
	tl_reap "$1"
	if [ "$TL_RC" -ne 4 ]; then
		cat "$2.err" >&2 2>/dev/null
		tl_die "tcpevents ($2) exited with status $TL_RC before its ready line"
	fi
	TE_BLIND=$(head -n 1 "$2.err")
	[ -n "$TE_BLIND" ] || TE_BLIND="tcpevents: exit 4 without a reason"
	echo "$TE_BLIND" > "$RAW/tcpevents-blind.txt"
	tl_log "$TE_BLIND; sockwatch alone from here"
	rm -f "$2" "$2.err"
	return 1
}

# events PART PORT: both sides' tcpevents on the part's port, each in its side's namespace,
# polled until ready; pids in SE and CE (empty where tcpevents cannot see)
events() {
	SE="" CE=""
	[ -z "$TE_BLIND" ] || return 0
	tl_bg "$RAW/$1-server-tcpevents.txt" "$TL_BIN/tcpevents" -n "/run/netns/$TL_NS_SERVER" \
		-p "$2"
	SE=$TL_LAST
	events_ready "$SE" "$RAW/$1-server-tcpevents.txt" || { SE=""; return 0; }
	tl_bg "$RAW/$1-tcpevents.txt" "$TL_BIN/tcpevents" -p "$2"
	CE=$TL_LAST
	events_ready "$CE" "$RAW/$1-tcpevents.txt" && return 0
	CE=""
	tl_stop "$SE"	# one side blind: neither is kept, so every part reads the same
	SE=""
	rm -f "$RAW/$1-server-tcpevents.txt" "$RAW/$1-server-tcpevents.txt.err"
}

# unevents PART: stop both tcpevents (the part's sockets are gone or in TIME-WAIT: every event
# is in their ring, which they empty before their end line)
unevents() {
	[ -z "$CE" ] || tl_stop "$CE"
	[ -z "$SE" ] || tl_stop "$SE"
	CE="" SE=""
}

# start PART PORT SERVER_STEPS: both tcpevents (before any socket of the part), the server
# (polled until ready), both counters, the capture, both sockwatches (polled until ready); the
# watchers' pids in CW and SW
start() {
	_p=$1 _port=$2
	events "$_p" "$_port"
	tl_bg "$RAW/$_p-server.txt" nsenter --net="/run/netns/$TL_NS_SERVER" \
		"$TL_BIN/peer" -r server -a "$TL_SERVER_ADDR" -p "$_port" -s "$3"
	SERVER=$TL_LAST
	tl_wait_line "$SERVER" "$RAW/$_p-server.txt" '^ready ' 5
	tl_both_counters_before "$_p-"
	tl_capture "$_p-capture" "$TL_CLIENT_IF" "$_port"
	# shellcheck disable=SC2086 # options, split on purpose
	tl_bg "$RAW/$_p-server-sockwatch.txt" nsenter --net="/run/netns/$TL_NS_SERVER" \
		"$TL_BIN/sockwatch" -i "$TL_WATCH_US" -4 -e $STATES -P "$_port" $SW_C
	SW=$TL_LAST
	tl_wait_line "$SW" "$RAW/$_p-server-sockwatch.txt" '^ready ' 5
	# shellcheck disable=SC2086
	tl_bg "$RAW/$_p-sockwatch.txt" "$TL_BIN/sockwatch" -i "$TL_WATCH_US" -4 $WATCH_E $STATES -p "$_port" $SW_C
	CW=$TL_LAST
	tl_wait_line "$CW" "$RAW/$_p-sockwatch.txt" '^ready ' 5
}

# client PART PORT STEPS SERVER_STEPS: the client, in the background (pid in CLIENT); the
# server's steps only for the progress line
client() {
	tl_log "$1: client -s $3 against server -s $4"
	tl_bg "$RAW/$1-client.txt" "$TL_BIN/peer" -r client -a "$TL_SERVER_ADDR" -p "$2" -s "$3"
	CLIENT=$TL_LAST
}

# watched FILE: a sockwatch that exits by itself (-e) must have seen its socket go and ended
# with its end line
watched() {
	tail -n 1 "$1" | grep -q '^end ' || tl_die "sockwatch output $1 has no end line"
	grep '^t_s=' "$1" | tail -n 1 | grep -q ' event=gone ' ||
		tl_die "sockwatch ($1) ended before its socket was gone"
}

# finish PART: both peers done (exit 0), counters, the capture, the watchers (with -e: each saw
# its socket go; without: stopped, the TIME-WAIT socket still there), then both tcpevents
finish() {
	tl_wait_exit "$CLIENT" 10
	tl_wait_exit "$SERVER" 10
	tl_both_counters_after "$1-" "$KEEP" "$KEEP"
	tl_uncapture
	if [ -n "$WATCH_E" ]; then
		tl_wait_exit "$CW" 5
		tl_wait_exit "$SW" 5
		watched "$RAW/$1-sockwatch.txt"
	else
		tl_stop "$CW"
		tl_wait_exit "$SW" 5
	fi
	watched "$RAW/$1-server-sockwatch.txt"
	unevents "$1"
	tl_log "$1: client: $(grep -c '^step ' "$RAW/$1-client.txt") steps, server:" \
		"$(grep -c '^step ' "$RAW/$1-server.txt") steps"
}

# seen PID FILE PATTERN: poll a sockwatch's output until it printed PATTERN (the state it must
# have sampled before the next step is released)
seen() {
	tl_wait_line "$1" "$2" "$3" 10
}

# release PID WHAT: SIGUSR1 to a peer in its hold step
release() {
	tl_log "$WHAT_PART: $2 (SIGUSR1)"
	kill -USR1 "$1" || tl_die "cannot signal $2"
}

tl_sysctls "$SYSCTLS" > "$RAW/sysctls.txt"
tl_sysctls "$SYSCTLS" tl_srv > "$RAW/server-sysctls.txt"
echo "request=$REQUEST read=$READ reply=$REPLY half=$HALF" > "$RAW/params.txt"

# ---- orderly: both hold ESTABLISHED until sampled; the client closes first; the server reads
# EOF and holds CLOSE-WAIT until the client's FIN-WAIT-2 was sampled, then closes.  The
# client's watcher has no -e: its TIME-WAIT socket stays for TCP_TIMEWAIT_LEN, longer than the
# part; it is stopped once it showed TIME-WAIT (and ss saw the same socket).
WHAT_PART=orderly WATCH_E=""
start orderly "$PORT_ORDERLY" drain,hold,close
client orderly "$PORT_ORDERLY" "send:$REQUEST,hold,close" drain,hold,close
tl_wait_line "$CLIENT" "$RAW/orderly-client.txt" '^hold ' 10
seen "$CW" "$RAW/orderly-sockwatch.txt" ' state=ESTAB '
seen "$SW" "$RAW/orderly-server-sockwatch.txt" ' state=ESTAB '
release "$CLIENT" "the client closes"
tl_wait_line "$SERVER" "$RAW/orderly-server.txt" '^hold ' 10
seen "$CW" "$RAW/orderly-sockwatch.txt" ' state=FIN-WAIT-2 '
seen "$SW" "$RAW/orderly-server-sockwatch.txt" ' state=CLOSE-WAIT '
release "$SERVER" "the server closes"
seen "$CW" "$RAW/orderly-sockwatch.txt" ' state=TIME-WAIT '
# the independent view of the TIME-WAIT socket and its timer
if command -v ss >/dev/null 2>&1; then
	ss -tano state time-wait "( dport = :$PORT_ORDERLY )" > "$RAW/orderly-ss.txt" 2>&1 ||
		tl_die "ss failed"
fi
finish orderly
WATCH_E=-e

# unread_part PART PORT CLIENT_RQ CLIENT_STEPS: the server reads READ of the request, replies,
# holds until both watchers sampled the queues (its unread rest, CLIENT_RQ where the reply
# arrived), then close()s
unread_part() {
	WHAT_PART=$1
	start "$1" "$2" "recv:$READ,inq,send:$REPLY,hold,close"
	client "$1" "$2" "$4" "recv:$READ,inq,send:$REPLY,hold,close"
	tl_wait_line "$SERVER" "$RAW/$1-server.txt" '^hold ' 10
	seen "$SW" "$RAW/$1-server-sockwatch.txt" " rq=$((REQUEST - READ)) "
	seen "$CW" "$RAW/$1-sockwatch.txt" " rq=$3 "
	release "$SERVER" "the server closes with $((REQUEST - READ)) bytes unread"
	finish "$1"
}

# ---- unread: the server closes with request bytes unread; its reply arrived before
READS="recv:4096,recv:4096,recv:4096,close"
unread_part unread "$PORT_UNREAD" "$REPLY" "send:$REQUEST,wait:hup,inq,$READS"

# ---- lost: the same, the reply lost on the way: nft drops it at the client's input, after
# the capture saw it (the only server segment with a payload, so the only one longer than
# 100 bytes); the client's queue stays empty
tl_fault client in drop tcp sport "$PORT_LOST" ip length gt 100
unread_part lost "$PORT_LOST" 0 "send:$REQUEST,wait:hup,inq,$READS"

# ---- sendfirst: as unread, the client's first call after the RST a send() (the lost part's
# rule stays loaded to the end, for tl_wire_record's counter; it matches only that port)
unread_part sendfirst "$PORT_SENDFIRST" "$REPLY" \
	"send:$REQUEST,wait:hup,send:10,send:10,inq,$READS"

# ---- linger0: SO_LINGER {1, 0}, then close(): an abortive close
WHAT_PART=linger0
start linger0 "$PORT_LINGER0" "wait:hup,inq,drain,close"
client linger0 "$PORT_LINGER0" "send:$REQUEST,hold,linger:0,close" "wait:hup,inq,drain,close"
tl_wait_line "$CLIENT" "$RAW/linger0-client.txt" '^hold ' 10
seen "$CW" "$RAW/linger0-sockwatch.txt" ' state=ESTAB '
seen "$SW" "$RAW/linger0-server-sockwatch.txt" " rq=$REQUEST "
release "$CLIENT" "the client sets SO_LINGER 0 and closes"
finish linger0

# ---- shutdown: SHUT_WR; the server reads EOF, then sends and holds CLOSE-WAIT; the client
# reads what it sent, then EOF once the server closed (its TIME-WAIT socket stays, as in
# orderly: its watcher is stopped)
WHAT_PART=shutdown WATCH_E=""
start shutdown "$PORT_SHUTDOWN" "drain,send:$HALF,hold,close"
client shutdown "$PORT_SHUTDOWN" "send:$REQUEST,hold,shutdown-wr,drain,close" \
	"drain,send:$HALF,hold,close"
tl_wait_line "$CLIENT" "$RAW/shutdown-client.txt" '^hold ' 10
seen "$CW" "$RAW/shutdown-sockwatch.txt" ' state=ESTAB '
seen "$SW" "$RAW/shutdown-server-sockwatch.txt" ' state=ESTAB '
release "$CLIENT" "the client shuts down its sending side"
tl_wait_line "$SERVER" "$RAW/shutdown-server.txt" '^hold ' 10
seen "$CW" "$RAW/shutdown-sockwatch.txt" ' state=FIN-WAIT-2 '
seen "$SW" "$RAW/shutdown-server-sockwatch.txt" ' state=CLOSE-WAIT '
release "$SERVER" "the server closes"
seen "$CW" "$RAW/shutdown-sockwatch.txt" ' state=TIME-WAIT '
finish shutdown

tl_wire_record
