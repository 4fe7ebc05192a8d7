# p08-tls-common.sh: what both p08-tls collect scripts share (sourced after collect.sh).
# The actor on both sides is tls_peer (fixtures/tls_peer.c, Debian's OpenSSL): the client in this
# namespace, the server in the server's.  Each part has its capture on the client's end of the
# veth, with snaplen 65535 so the .pcap keeps every payload byte (the report decodes the TLS
# records from it) and both sides' counters.

# how long a tls_peer server or a watcher may take to say ready: a bound, not a wait (a TCG guest
# beside CI's six test workers took more than 5 s to load libssl and start the server)
READY_S=30
# how long a tls_peer client or server may take to finish its part: a bound too (a TCG 6.1 guest
# on a loaded machine took more than 20 s for tls13's two handshakes)
END_S=60

# tls_pair: a throwaway self-signed ECDSA P-256 certificate and key in raw/, made by tls_peer
# with OpenSSL's API (a guest has no openssl(1)); the key is deleted at the end of the unit
# (tls_done), the certificate kept.  openssl-version.txt: the line openssl version prints.
tls_pair() {
	"$TL_BIN/tls_peer" -r cert -c "$RAW/cert.pem" -k "$RAW/key.pem" > "$RAW/cert.txt" ||
		tl_die "tls_peer -r cert failed"
	"$TL_BIN/tls_peer" -r version > "$RAW/openssl-version.txt" || tl_die "tls_peer -r version failed"
}

# tls_part PART PORT "SERVER OPTIONS" "CLIENT OPTIONS": the server (polled until ready), both
# counters, the capture, the client to its end, the server to its end, counters, capture stopped
tls_part() {
	_p=$1 _port=$2
	# shellcheck disable=SC2086 # options, split on purpose
	tl_bg "$RAW/$_p-server.txt" nsenter --net="/run/netns/$TL_NS_SERVER" "$TL_BIN/tls_peer" \
		-r server -a "$TL_SERVER_ADDR" -p "$_port" -c "$RAW/cert.pem" -k "$RAW/key.pem" $3
	_srv=$TL_LAST
	tl_wait_line "$_srv" "$RAW/$_p-server.txt" '^ready ' "$READY_S"
	tl_both_counters_before "$_p-"
	tl_capture "$_p-capture" "$TL_CLIENT_IF" "$_port" -s 65535
	tl_log "$_p: tls_peer server $3, client $4"
	# shellcheck disable=SC2086
	tl_bg "$RAW/$_p-client.txt" "$TL_BIN/tls_peer" -r client -a "$TL_SERVER_ADDR" -p "$_port" $4
	_cli=$TL_LAST
	tl_wait_exit "$_cli" "$END_S"
	tl_wait_exit "$_srv" "$END_S"
	tl_both_counters_after "$_p-" "$KEEP" "$KEEP"
	tl_uncapture
}

# tls_stat FILE: /proc/net/tls_stat of this namespace to raw/FILE, of the server's to
# raw/server-FILE (read through /proc/thread-self: the reader's own namespace)
tls_stat() {
	cat /proc/thread-self/net/tls_stat > "$RAW/$1" || tl_die "cannot read tls_stat here"
	tl_srv cat /proc/thread-self/net/tls_stat > "$RAW/server-$1" ||
		tl_die "cannot read tls_stat in the server's namespace"
}

# ktls_watch OUTFILE RECORD SIDE_ARGS...: sockwatch, every 5 ms, on the ESTAB socket of the
# part's port, printing each change of its ULP (-c ulp), its raw replies recorded (-r); it ends
# when the socket leaves ESTAB (-e).  Waits for its ready line; its pid in TL_LAST.  Its own
# bound (-d) outlasts every bound of the part after it starts: the other watcher's ready, then
# the client's start and its whole run (READY_S + END_S), twice over.  It was 30 s, and a TCG
# 6.1 guest on CI's loaded machine (ktls13: 75 s from the client's start to the next part)
# reached its client's connect after the client's watcher had stopped: "sockwatch saw no socket".
ktls_watch() {
	_o=$1 _r=$2
	shift 2
	tl_bg "$_o" "$@" -i 5000 -s estab -c ulp -e -d $((2 * (READY_S + END_S) * 1000)) -r "$_r"
	tl_wait_line "$TL_LAST" "$_o" '^ready ' "$READY_S"
}

# ktls_part PART PORT VERSION: one connection at that TLS version with kernel TLS asked for on
# both ends (tls_peer -K).  The client waits 400 ms after connect() before the handshake (-W),
# so sockwatch samples both ends connected with no ULP yet (a 6.1 TCG guest in CI, without the
# wait, had its first sample after the handshake: ulp=tls already), and 2000 ms after the
# handshake (-w) before its request, so both sockets sit as the handshake left them while
# sockwatch samples them and, in that wait (both ends' `ktls` lines printed, the client not yet
# at its request), ktls_ss records each end's socket as iproute2's ss decodes it; tls_stat is read
# on both ends before and after.  The second wait was 400 ms, enough for sockwatch, already
# running; not for two ss started in a 6.1 TCG guest on this 2-core host at load average 5.4,
# which both came after the close (issue 29).
ktls_part() {
	_p=$1 _port=$2 _v=$3
	tl_bg "$RAW/$_p-server.txt" nsenter --net="/run/netns/$TL_NS_SERVER" "$TL_BIN/tls_peer" \
		-r server -a "$TL_SERVER_ADDR" -p "$_port" -c "$RAW/cert.pem" -k "$RAW/key.pem" \
		-V "$_v" -K
	_srv=$TL_LAST
	tl_wait_line "$_srv" "$RAW/$_p-server.txt" '^ready ' "$READY_S"
	ktls_watch "$RAW/$_p-sockwatch.txt" "$RAW/$_p-sockwatch.bin" "$TL_BIN/sockwatch" -p "$_port"
	_cw=$TL_LAST
	ktls_watch "$RAW/$_p-server-sockwatch.txt" "$RAW/$_p-server-sockwatch.bin" \
		nsenter --net="/run/netns/$TL_NS_SERVER" "$TL_BIN/sockwatch" -P "$_port"
	_sw=$TL_LAST
	tls_stat "$_p-tls-stat-before.txt"
	tl_both_counters_before "$_p-"
	tl_capture "$_p-capture" "$TL_CLIENT_IF" "$_port" -s 65535
	tl_log "$_p: tls_peer -K, TLS $_v, kernel TLS asked for on both ends"
	tl_bg "$RAW/$_p-client.txt" "$TL_BIN/tls_peer" -r client -a "$TL_SERVER_ADDR" -p "$_port" \
		-V "$_v" -K -W 400 -w 2000
	_cli=$TL_LAST
	ktls_ss "$_p" "$_port" "$_cli" "$_srv"
	tl_wait_exit "$_cli" "$END_S"
	tl_wait_exit "$_srv" "$END_S"
	tl_wait_exit "$_cw" $((END_S + 5))
	tl_wait_exit "$_sw" $((END_S + 5))
	tl_both_counters_after "$_p-" "$KEEP" "$KEEP"
	tl_uncapture
	tls_stat "$_p-tls-stat-after.txt"
}

# ktls_ss PART PORT CLIENT_PID SERVER_PID: once both ends printed their `ktls` line (OpenSSL
# has handed over what it will; the client then waits 2000 ms, -w, before its request), `ss -tieH`
# of the part's ESTAB socket on each end: raw/PART-ss.txt (the client's) and
# raw/PART-server-ss.txt, the ULP as iproute2 decodes the same INET_DIAG_ULP_INFO that sockwatch
# reads (`tcp-ulp-tls version: ... cipher: ... rxconf: ... txconf: ...`), a cross-check of its
# decoding in the report.  ss needs CAP_NET_ADMIN for the ULP's details, as sockwatch does.
# The two run side by side: one after the other they outlasted a 400 ms wait in a 7.2 TCG guest,
# whose server socket was gone when its ss came (an empty file: the report says so).
ktls_ss() {
	tl_wait_line "$3" "$RAW/$1-client.txt" '^ktls ' "$END_S"
	tl_wait_line "$4" "$RAW/$1-server.txt" '^ktls ' "$END_S"
	tl_srv ss -tieH state established "( sport = :$2 )" > "$RAW/$1-server-ss.txt" &
	_ssp=$!
	ss -tieH state established "( dport = :$2 )" > "$RAW/$1-ss.txt" || tl_die "ss failed"
	wait "$_ssp" || tl_die "ss failed in the server's namespace"
}

# tls_done: the key goes (a throwaway, but a private key all the same); the wire recorded
tls_done() {
	rm -f "$RAW/key.pem"
	tl_wire_record
}
KEEP="TcpActiveOpens,TcpPassiveOpens,TcpEstabResets,TcpOutRsts,TcpInSegs,TcpOutSegs"
KEEP="$KEEP,TcpRetransSegs,TcpExtTCPAbortOnClose,TcpExtTCPAbortOnLinger,TcpExtDelayedACKs"
