# p08-tls-common.sh: what both p08-tls collect scripts share (sourced after collect.sh).
# The actor on both sides is tls_peer (fixtures/tls_peer.c, Debian's OpenSSL): the client in this
# namespace, the server in the server's.  Each part has its capture on the client's end of the
# veth, with snaplen 65535 so the .pcap keeps every payload byte (the report decodes the TLS
# records from it) and both sides' counters.

# tls_pair: a throwaway self-signed ECDSA P-256 certificate and key in raw/ (openssl(1)); the
# key is deleted at the end of the unit (tls_done), the certificate kept
tls_pair() {
	openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
		-keyout "$RAW/key.pem" -out "$RAW/cert.pem" -days 1 -subj /CN=tcplab \
		2> "$RAW/openssl-req.err" || tl_die "openssl req failed: $(head -n 1 "$RAW/openssl-req.err")"
	rm -f "$RAW/openssl-req.err"
	openssl version > "$RAW/openssl-version.txt" || tl_die "openssl version failed"
}

# tls_part PART PORT "SERVER OPTIONS" "CLIENT OPTIONS": the server (polled until ready), both
# counters, the capture, the client to its end, the server to its end, counters, capture stopped
tls_part() {
	_p=$1 _port=$2
	# shellcheck disable=SC2086 # options, split on purpose
	tl_bg "$RAW/$_p-server.txt" nsenter --net="/run/netns/$TL_NS_SERVER" "$TL_BIN/tls_peer" \
		-r server -a "$TL_SERVER_ADDR" -p "$_port" -c "$RAW/cert.pem" -k "$RAW/key.pem" $3
	_srv=$TL_LAST
	tl_wait_line "$_srv" "$RAW/$_p-server.txt" '^ready ' 5
	tl_both_counters_before "$_p-"
	tl_capture "$_p-capture" "$TL_CLIENT_IF" "$_port" -s 65535
	tl_log "$_p: tls_peer server $3, client $4"
	# shellcheck disable=SC2086
	tl_bg "$RAW/$_p-client.txt" "$TL_BIN/tls_peer" -r client -a "$TL_SERVER_ADDR" -p "$_port" $4
	_cli=$TL_LAST
	tl_wait_exit "$_cli" 20
	tl_wait_exit "$_srv" 20
	tl_both_counters_after "$_p-" "$KEEP" "$KEEP"
	tl_uncapture
}

# tls_done: the key goes (a throwaway, but a private key all the same); the wire recorded
tls_done() {
	rm -f "$RAW/key.pem"
	tl_wire_record
}
KEEP="TcpActiveOpens,TcpPassiveOpens,TcpEstabResets,TcpOutRsts,TcpInSegs,TcpOutSegs"
KEEP="$KEEP,TcpRetransSegs,TcpExtTCPAbortOnClose,TcpExtTCPAbortOnLinger,TcpExtDelayedACKs"
