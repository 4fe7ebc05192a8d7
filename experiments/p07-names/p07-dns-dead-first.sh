#!/bin/sh
# p07-dns-dead-first: a real DNS server (dnsmasq) in the server's namespace, and a client
# namespace whose resolv.conf names a dead nameserver first, then the live one, with
# `options timeout:1 attempts:1` (resolv.conf(5)).  The dead one is an address of the server's
# veth end whose DNS packets nft drops silently: no answer, no ICMP.  The client is
# resolve_connect (fixtures/resolve_connect.c) through `ip netns exec` (IN_NS: the namespace's
# /etc/netns/NAME files: resolv.conf, nsswitch.conf "hosts: files dns", hosts); getaddrinfo()
# waits out the timeout on the dead server, asks the live one, and the client connects to the
# answer.  The capture on the client's veth holds the queries and answers (udp port 53) beside
# the TCP handshake; tcpdump decodes the DNS in it as the independent cross-check.
# dnsmasq is started here and stopped by the trap like every fixture; /etc/netns/NAME is made
# here and removed by the trap (after a SIGKILL, by experiments/lib/netns.sh).
. "$(dirname "$0")/../lib/collect.sh"
tl_wire_init "$1"
PORT=21073
DEAD=192.0.2.53				# on the server's veth, its DNS packets dropped
NAME=svc.p07.test			# the name dnsmasq answers (RFC 6761's .test: never a real one)
TIMEOUT=${TL_KNOB_TIMEOUT:-1}		# resolv.conf options timeout:N (the knob timeout)
KEEP="TcpActiveOpens,TcpAttemptFails,TcpOutRsts,UdpOutDatagrams,UdpInDatagrams,UdpNoPorts"
KEEP_S="TcpPassiveOpens,UdpInDatagrams,UdpOutDatagrams,UdpNoPorts"

command -v dnsmasq > /dev/null || tl_skip "dnsmasq not installed (make deps: dnsmasq-base)"
command -v tcpdump > /dev/null || tl_skip "tcpdump not installed (make deps)"
tl_netns_etc
{
	echo "nameserver $DEAD"
	echo "nameserver $TL_SERVER_ADDR"
	echo "options timeout:$TIMEOUT attempts:1"
} > "$ETC/resolv.conf" || tl_die "cannot write $ETC/resolv.conf"
printf 'hosts: files dns\n' > "$ETC/nsswitch.conf" || tl_die "cannot write $ETC/nsswitch.conf"
printf '127.0.0.1\tlocalhost\n' > "$ETC/hosts" || tl_die "cannot write $ETC/hosts"
cp "$ETC/resolv.conf" "$RAW/resolv.conf.txt"

# the dead nameserver: an address the server's side owns (so ARP answers) whose DNS is dropped
tl_srv ip addr add "$DEAD/32" dev "$TL_SERVER_IF" || tl_die "cannot add $DEAD on the server side"
tl_fault server in drop ip daddr "$DEAD" udp dport 53

# dnsmasq: no config file, no /etc/hosts, no upstream; one name; logs each query to stdout
tl_bg "$RAW/dnsmasq.txt" nsenter --net="/run/netns/$TL_NS_SERVER" sh -c 'exec "$@" 2>&1' sh \
	dnsmasq --conf-file=/dev/null --keep-in-foreground --log-facility=- --log-queries \
	--no-resolv --no-hosts --no-poll --bind-interfaces --listen-address="$TL_SERVER_ADDR" \
	--except-interface=lo --pid-file= --local=/p07.test/ --host-record="$NAME,$TL_SERVER_ADDR"
DNSMASQ=$TL_LAST
tl_wait_line "$DNSMASQ" "$RAW/dnsmasq.txt" 'started, version' 5

tl_srv_listener "$RAW/listener.txt" -a "$TL_SERVER_ADDR" -p "$PORT" -m never
tl_both_counters_before ""
tl_capture capture "$TL_CLIENT_IF" "$PORT" -f "udp port 53 or tcp port $PORT or icmp"
tl_log "resolve_connect -n $NAME -p $PORT (first nameserver dead, timeout:$TIMEOUT attempts:1)"
tl_in_etc "$TL_BIN/resolve_connect" -n "$NAME" -p "$PORT" \
	> "$RAW/client.txt" 2> "$RAW/client.txt.err" ||
	tl_die "resolve_connect failed: $(head -n 1 "$RAW/client.txt.err")"
tl_uncapture
tl_both_counters_after "" "$KEEP" "$KEEP_S"
tcpdump -n -tt -r "$RAW/capture.pcap" 'udp port 53' > "$RAW/tcpdump-dns.txt" 2> /dev/null ||
	tl_die "tcpdump could not read $RAW/capture.pcap"
tl_in_etc getent ahosts "$NAME" > "$RAW/getent.txt" 2>&1 ||
	tl_die "getent ahosts $NAME failed in the client's namespace"
tl_stop "$TL_LISTENER"
tl_stop "$DNSMASQ"
tl_srv nft list ruleset > "$RAW/nft-server.txt" || tl_die "nft list ruleset failed"
echo "port=$PORT timeout_s=$TIMEOUT attempts=1" > "$RAW/params.txt"
echo "dead=$DEAD live=$TL_SERVER_ADDR name=$NAME" >> "$RAW/params.txt"
