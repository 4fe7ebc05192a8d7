#!/bin/sh
# accept-path: (1) accept() latency with a connection already queued vs a sleeping accept()
# woken by a new one; (2) connection-per-request load on a server that accepts at once;
# (3) a slow-accept server (one accept per 100 ms, backlog 2) hit by a burst of 12 one-shot
# clients, whose dropped SYNs come back after 1 s; (4) the same server under 8 clients that
# reconnect at once.  The LISTEN socket's accept queue (sockwatch rq=) is sampled during the
# load phases, SYN-SENT sockets are watched in the slow ones, counters are taken around each.
# After a .NET write-up about accepts that complete "asynchronously but immediately".
. "$(dirname "$0")/../lib/collect.sh"
tl_init "$1"
KEEP="TcpActiveOpens,TcpPassiveOpens,TcpAttemptFails,TcpRetransSegs"
KEEP="$KEEP,TcpExtListenOverflows,TcpExtListenDrops,TcpExtTCPSynRetrans,TcpExtTCPTimeouts"

"$TL_BIN/machine" > "$RAW/machine.txt" || tl_die "machine failed"
cat /proc/loadavg > "$RAW/loadavg.txt"

# Part 1.  -c split needs two CPUs; on one CPU its failure is recorded, not fatal.
for cpus in any same split; do
	tl_log "accept latency, pending vs wake, threads on CPUs: $cpus"
	if ! "$TL_BIN/accept_latency" -p 21051 -n 300 -w 10 -c "$cpus" \
		> "$RAW/latency-$cpus.txt" 2> "$RAW/latency-$cpus.txt.err"; then
		[ "$cpus" = split ] || tl_die "accept_latency -c $cpus failed: $(cat "$RAW/latency-$cpus.txt.err")"
		tl_log "split skipped: $(cat "$RAW/latency-$cpus.txt.err")"
	fi
done

# phase NAME PORT INTERVAL_US "SERVER ARGS" "CLIENT ARGS": one server, the accept queue sampled,
# SYN-SENT sockets watched when the server accepts slowly, counters around the client.
phase() {
	_name=$1 _port=$2 _iv=$3 _sargs=$4 _cargs=$5
	tl_bg "$RAW/$_name-server.txt" "$TL_BIN/accept_server" -p "$_port" $_sargs
	_srv=$TL_LAST
	tl_wait_line "$_srv" "$RAW/$_name-server.txt" '^ready ' 5
	tl_bg "$RAW/$_name-queue.txt" "$TL_BIN/sockwatch" -4 -a -s listen -P "$_port" -i "$_iv"
	_q=$TL_LAST
	tl_wait_line "$_q" "$RAW/$_name-queue.txt" '^ready ' 5
	_syn=""
	case $_sargs in *-e*)
		tl_watch "$RAW/$_name-synsent.txt" -4 -s syn-sent -p "$_port" -i 1000
		_syn=$TL_WATCH ;;
	esac
	"$TL_BIN/counters" > "$RAW/$_name-counters-before.txt" || tl_die "counters failed"
	"$TL_BIN/accept_client" -p "$_port" $_cargs > "$RAW/$_name-client.txt" ||
		tl_die "accept_client ($_name) failed"
	"$TL_BIN/counters" -d "$RAW/$_name-counters-before.txt" -k "$KEEP" \
		> "$RAW/$_name-counters-delta.txt" || tl_die "counters failed"
	[ -z "$_syn" ] || tl_unwatch stop
	tl_stop "$_q"
	tl_stop "$_srv"
	tl_log "$_name: $(head -n 1 "$RAW/$_name-client.txt" | cut -d" " -f7-13)"
	tl_log "$_name: $(grep -E 'ListenOverflows|SynRetrans' "$RAW/$_name-counters-delta.txt" | tr '\n' ' ')"
}

tl_log "connection-per-request load, 4 clients for 1 s, server accepts at once (backlog 128)"
phase fast 21052 1000 "-b 128" "-c 4 -d 1000 -t 5000"
tl_log "slow accept (1 per 100 ms, backlog 2): a burst of 12 clients, one request each"
phase burst 21053 5000 "-b 2 -e 100" "-c 12 -n 1 -t 6000 -r $RAW/burst-requests.txt"
tl_log "slow accept (1 per 100 ms, backlog 2): 8 clients reconnecting for 3 s"
phase steady 21054 5000 "-b 2 -e 100" "-c 8 -d 3000 -t 6000 -r $RAW/steady-requests.txt"
