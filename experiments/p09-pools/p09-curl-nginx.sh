#!/bin/sh
# p09-curl-nginx: a real pool against a real server.  curl_pool (here) runs GETs on one libcurl
# easy handle, so libcurl's connection cache keeps the connection between them; nginx (Debian's
# nginx-light), in the server's namespace, closes a kept connection idle for keepalive_timeout
# (the knob keepalive_ms).  Three parts, each with its own nginx on its own port:
#   kept  REQUESTS GETs back to back, closer together than keepalive_timeout: one connection
#   idle  one GET, then the client holds the handle until nginx closed the idle connection (its
#         FIN on the wire, the client's socket in CLOSE-WAIT in sockwatch), then the next GETs:
#         libcurl checks the cached connection before reuse (poll, recv MSG_PEEK: 0 is the
#         FIN), drops it and connects again (p09-stale-reuse's client writes on it instead)
#   finlost  the same, but nginx's FIN is lost on the way (nft drops it at the client's input,
#         after the capture saw it): the check passes, the GET goes out on the connection,
#         nginx's kernel answers with a RST, and libcurl retries the request on a new one
# nginx runs in the foreground as one process (daemon off, master_process off) with a config
# written here (raw/PART-nginx.conf); its pid file and temporary paths are in a private
# directory under RAW that is removed at the part's end and by the trap; its error log (debug:
# its keepalive timer and closes) and access log ($connection, $connection_requests) go to raw/.
# It is stopped at the part's end, and by the trap like every program; the script checks it
# is gone.  Each part: the capture (the client's end of the veth), both sides' sockwatch (each
# in its own namespace), both sides' counters, libcurl's own words (raw/PART-curl-debug.txt),
# and tcpdump's reading of the .pcap (its SYNs, FINs and RSTs: raw/PART-tcpdump.txt).
. "$(dirname "$0")/../lib/collect.sh"
# nginx's keepalive_timeout (ms) and the GETs of each part
tl_knob_set KA_MS keepalive_ms "${TL_KNOB_KEEPALIVE_MS:-1000}" 200 5000
tl_knob_set REQUESTS requests "${TL_KNOB_REQUESTS:-3}" 2 20
tl_wire_init "$1"
# /usr/sbin/nginx: a user's PATH may lack /usr/sbin
NGINX_BIN=$(PATH=$PATH:/usr/sbin:/sbin command -v nginx) ||
	tl_skip "nginx not installed (make deps: nginx-light)"
PORT_KEPT=21098 PORT_IDLE=21099 PORT_FINLOST=21100
BODY="tcplab p09-curl-nginx"
KEEP="TcpActiveOpens,TcpEstabResets,TcpOutRsts,TcpInSegs,TcpOutSegs,TcpRetransSegs,TcpCurrEstab"
KEEP_S="TcpPassiveOpens,TcpEstabResets,TcpOutRsts,TcpInSegs,TcpOutSegs,TcpExtTCPAbortOnData"
STATES="-s syn-sent -s syn-recv -s estab -s fin-wait-1 -s fin-wait-2 -s close-wait -s last-ack"
STATES="$STATES -s closing -s time-wait"
SYSCTLS="ipv4/tcp_fin_timeout ipv4/tcp_timestamps"
NGX_TMP=""

# the trap: every program stopped (tl_cleanup), then nginx's private directory removed
ngx_cleanup() {
	tl_cleanup
	[ -z "$NGX_TMP" ] || rm -rf "$NGX_TMP"
	return 0
}
trap 'ngx_cleanup' EXIT
# each action's `)` line: as tl_init's
trap "ngx_cleanup; exit 130
)" INT
trap "ngx_cleanup; exit 143
)" TERM

# ngx_conf PART PORT DIR: nginx's configuration for that part, on stdout; its paths are
# relative to nginx's prefix (-p RAW), DIR a directory there.  "user root": as root nginx
# chowns its temporary paths to that user, and in a user namespace (a run without real root)
# its default, nobody, is not mapped (chown: EINVAL); one process never switches user anyway
ngx_conf() {
	cat <<-EOF
	# p09-curl-nginx, part $1: written by the collect script
	daemon off;
	master_process off;
	worker_processes 1;
	user root;
	pid $3/nginx.pid;
	error_log $1-nginx-error.log debug;
	events { worker_connections 16; }
	http {
		log_format tl 'msec=\$msec connection=\$connection requests=\$connection_requests client=\$remote_addr:\$remote_port status=\$status bytes=\$bytes_sent';
		access_log $1-nginx-access.log tl;
		keepalive_timeout ${KA_MS}ms;
		client_body_temp_path $3/body;
		proxy_temp_path $3/proxy;
		fastcgi_temp_path $3/fastcgi;
		uwsgi_temp_path $3/uwsgi;
		scgi_temp_path $3/scgi;
		server {
			listen $TL_SERVER_ADDR:$2;
			location / { return 200 "$BODY\n"; }
		}
	}
	EOF
}

# ngx_start PART PORT: nginx in the server's namespace, polled until its socket listens (its
# pid in NGINX)
ngx_start() {
	NGX_TMP=$(mktemp -d "$RAW/nginx-tmp.XXXXXX") || tl_die "cannot make nginx's directory"
	ngx_conf "$1" "$2" "${NGX_TMP##*/}" > "$RAW/$1-nginx.conf"
	tl_bg "$RAW/$1-nginx.txt" nsenter --net="/run/netns/$TL_NS_SERVER" \
		"$NGINX_BIN" -p "$RAW/" -c "$RAW/$1-nginx.conf" -e "$RAW/$1-nginx-error.log"
	NGINX=$TL_LAST
	tl_srv "$TL_BIN/sockwatch" -1 -w 5000 -4 -s listen -P "$2" > "$RAW/$1-listen.txt" ||
		tl_die "$1: nginx does not listen on port $2: $(grep -m 1 emerg "$RAW/$1-nginx-error.log")"
	tl_running "$NGINX" || tl_die "$1: nginx ended: $(cat "$RAW/$1-nginx.txt.err")"
}

# ngx_stop: nginx stopped (SIGTERM: its fast shutdown), checked gone, its directory removed
ngx_stop() {
	tl_stop "$NGINX"
	! tl_running "$NGINX" || tl_die "nginx $NGINX still runs after its stop"
	rm -rf "$NGX_TMP"
	NGX_TMP=""
}

# part NAME PORT ARGS...: nginx up, the watchers and the capture, curl_pool ARGS; for idle the
# client is released once its socket sat in CLOSE-WAIT; everything checked and stopped
part() {
	_p=$1 _port=$2
	shift 2
	ngx_start "$_p" "$_port"
	# shellcheck disable=SC2086 # options, split on purpose
	tl_part_watch "$_p" "$_port" -4 $STATES -c rq,wq
	tl_log "$_p: nginx keepalive_timeout ${KA_MS}ms; curl_pool $*"
	tl_bg "$RAW/$_p-client.txt" "$TL_BIN/curl_pool" -a "$TL_SERVER_ADDR" -p "$_port" \
		-n "$REQUESTS" -d "$RAW/$_p-curl-debug.txt" "$@"
	CLIENT=$TL_LAST
	if [ "$_p" = finlost ]; then
		tl_wait_line "$CLIENT" "$RAW/$_p-client.txt" '^hold ' 10
		# every FIN of nginx on the first connection dropped at the client's input (the
		# capture saw it first); the last connection's close is left alone
		_lp=$(sed -n 's/^request n=1 .* local_port=\([0-9][0-9]*\) .*/\1/p' "$RAW/$_p-client.txt")
		[ -n "$_lp" ] || tl_die "$_p: no local port in request 1's line"
		tl_fault client in drop tcp sport "$_port" tcp dport "$_lp" tcp flags \& fin == fin
		# nginx's keepalive timer closes the connection: its socket FIN-WAIT-1 (the FIN
		# unacknowledged), ours still ESTABLISHED
		tl_wait_line "$SW" "$RAW/$_p-server-sockwatch.txt" ' state=FIN-WAIT-1 ' \
			$((KA_MS / 1000 + 10))
		tl_log "$_p: nginx closed the idle connection, its FIN lost; libcurl's next request (SIGUSR1)"
		kill -USR1 "$CLIENT" || tl_die "cannot signal the client"
	elif [ "$_p" = idle ]; then
		tl_wait_line "$CLIENT" "$RAW/$_p-client.txt" '^hold ' 10
		# nginx's keepalive timer closes the connection: its socket FIN-WAIT-2, ours CLOSE-WAIT
		tl_wait_line "$CW" "$RAW/$_p-sockwatch.txt" ' state=CLOSE-WAIT ' $((KA_MS / 1000 + 10))
		tl_wait_line "$SW" "$RAW/$_p-server-sockwatch.txt" ' state=FIN-WAIT-2 ' 10
		if command -v ss > /dev/null 2>&1; then
			# the independent view of the socket in libcurl's cache
			ss -tno state close-wait "( dport = :$_port )" > "$RAW/$_p-ss.txt" \
				2> "$RAW/ss.err" || tl_die "ss failed: $(head -n 1 "$RAW/ss.err")"
			rm -f "$RAW/ss.err"
		fi
		tl_log "$_p: nginx closed the idle connection; libcurl's next request (SIGUSR1)"
		kill -USR1 "$CLIENT" || tl_die "cannot signal the client"
	fi
	tl_wait_exit "$CLIENT" 30
	grep -q '^exit reason=done ' "$RAW/$_p-client.txt" || tl_die "$_p: the client did not end done"
	# curl_easy_cleanup() closed the last connection: the client's socket in TIME-WAIT
	tl_wait_line "$CW" "$RAW/$_p-sockwatch.txt" ' state=TIME-WAIT ' 10
	tl_both_counters_after "$_p-" "$KEEP" "$KEEP_S"
	tl_uncapture
	if command -v tcpdump > /dev/null 2>&1; then
		# an independent reading of the part's .pcap: its SYNs (no ACK), FINs and RSTs.
		# As root of a user namespace tcpdump cannot drop to its own user, and ends: the
		# reading is then left out (the report prints it only where there is one)
		tcpdump -n -r "$RAW/$_p-capture.pcap" \
			'tcp[tcpflags] & (tcp-syn|tcp-ack) == tcp-syn or tcp[tcpflags] & (tcp-fin|tcp-rst) != 0' \
			> "$RAW/$_p-tcpdump.txt" 2> "$RAW/tcpdump.err" ||
			{ tl_log "$_p: no tcpdump reading: $(tail -n 1 "$RAW/tcpdump.err")"
			  rm -f "$RAW/$_p-tcpdump.txt"; }
		rm -f "$RAW/tcpdump.err"
	fi
	tl_stop "$CW"
	tl_stop "$SW"
	ngx_stop
	tl_log "$_p: $(grep '^request ' "$RAW/$_p-client.txt" | cut -d' ' -f2,3,7,8 | tr '\n' ';')"
}

tl_sysctls "$SYSCTLS" > "$RAW/sysctls.txt"
tl_sysctls "$SYSCTLS" tl_srv > "$RAW/server-sysctls.txt"
echo "keepalive_ms=$KA_MS requests=$REQUESTS body=$((${#BODY} + 1))" > "$RAW/params.txt"
"$NGINX_BIN" -v > "$RAW/nginx-version.txt" 2>&1 || tl_die "nginx -v failed"
part kept "$PORT_KEPT"
part idle "$PORT_IDLE" -b 2 -H
part finlost "$PORT_FINLOST" -b 2 -H
# nginx writes to its logs, not to stdout: an empty stdout file is no data (collect.sh's trap
# removes empty .err files the same way)
for _f in "$RAW"/*-nginx.txt; do [ -s "$_f" ] || rm -f "$_f"; done
tl_wire_record
