#!/bin/sh
# p07-dns-truncated: an answer too big for a plain DNS datagram.  dnsmasq, in the server's
# namespace, answers one name with RECORDS addresses (the knob records, from a hosts file of its
# own); the client namespace's resolv.conf names it alone.  Three parts, each a getaddrinfo()
# by resolve_connect through `ip netns exec` (IN_NS: the namespace's /etc/netns/NAME files) with
# its own resolv.conf options, and a connect() to the first answer:
#   udp512   no options: glibc asks without EDNS0, so an answer may be at most 512 bytes (RFC
#            1035 4.2.1); dnsmasq sends what fits with the TC bit set, and glibc asks again over
#            TCP (RFC 7766), port 53: a TCP handshake before the name is known
#   edns0    `options edns0`: the query carries an OPT record offering a larger datagram, and
#            the whole answer comes in one
#   single   `options edns0 single-request`: the A and AAAA queries one after the other, not
#            both at once from one socket (resolv.conf(5))
# The capture on the client's veth holds the DNS over UDP and TCP beside the connect(); tcpdump
# decodes it as the independent cross-check.  dnsmasq is started here and stopped by the trap;
# /etc/netns/NAME is made here and removed by the trap.
. "$(dirname "$0")/../lib/collect.sh"
tl_knob_set RECORDS records "${TL_KNOB_RECORDS:-40}" 1 200
tl_wire_init "$1"
PORT=21074
NAME=many.p07.test			# RFC 6761's .test: never a real name
KEEP="TcpActiveOpens,TcpAttemptFails,TcpOutRsts,UdpOutDatagrams,UdpInDatagrams,UdpNoPorts"
KEEP="$KEEP,IcmpOutDestUnreachs,IpOutNoRoutes"
KEEP_S="TcpPassiveOpens,TcpOutRsts,UdpInDatagrams,UdpOutDatagrams,IcmpInDestUnreachs"

command -v dnsmasq > /dev/null || tl_skip "dnsmasq not installed (make deps: dnsmasq-base)"
command -v tcpdump > /dev/null || tl_skip "tcpdump not installed (make deps)"
tl_netns_etc
printf 'hosts: files dns\n' > "$ETC/nsswitch.conf" || tl_die "cannot write $ETC/nsswitch.conf"
printf '127.0.0.1\tlocalhost\n' > "$ETC/hosts" || tl_die "cannot write $ETC/hosts"

# the answer: the server's own address first (the one the client connects to), then documentation
# addresses (RFC 5737's 198.51.100.0/24) that nothing owns; each an --address of dnsmasq, which
# answers all of a name's (the list also in raw/, as a hosts file)
set -- --address="/$NAME/$TL_SERVER_ADDR"
printf '%s\t%s\n' "$TL_SERVER_ADDR" "$NAME" > "$RAW/answer-hosts.txt" || tl_die "cannot write $RAW/answer-hosts.txt"
i=1
while [ "$i" -lt "$RECORDS" ]; do
	set -- "$@" --address="/$NAME/198.51.100.$i"
	printf '198.51.100.%s\t%s\n' "$i" "$NAME" >> "$RAW/answer-hosts.txt" || tl_die "cannot write $RAW/answer-hosts.txt"
	i=$((i + 1))
done

# dnsmasq: no config file, no /etc/hosts, no upstream, only those addresses; TCP on port 53 too,
# as always; logs each query
tl_bg "$RAW/dnsmasq.txt" nsenter --net="/run/netns/$TL_NS_SERVER" sh -c 'exec "$@" 2>&1' sh \
	dnsmasq --conf-file=/dev/null --keep-in-foreground --log-facility=- --log-queries \
	--no-resolv --no-hosts --no-poll --bind-interfaces --listen-address="$TL_SERVER_ADDR" \
	--except-interface=lo --pid-file= --local=/p07.test/ "$@"
DNSMASQ=$TL_LAST
tl_wait_line "$DNSMASQ" "$RAW/dnsmasq.txt" 'started, version' 5
tl_srv_listener "$RAW/listener.txt" -a "$TL_SERVER_ADDR" -p "$PORT" -m close

# part NAME OPTIONS: resolv.conf with OPTIONS, then the client, its capture and counters
part() {
	{
		echo "nameserver $TL_SERVER_ADDR"
		echo "options timeout:2 attempts:1${2:+ $2}"
	} > "$ETC/resolv.conf" || tl_die "cannot write $ETC/resolv.conf"
	cp "$ETC/resolv.conf" "$RAW/$1-resolv.conf.txt"
	tl_both_counters_before "$1-"
	tl_capture "$1-capture" "$TL_CLIENT_IF" "$PORT" -f "port 53 or tcp port $PORT or icmp" -s 65535
	tl_log "$1: resolve_connect -n $NAME -p $PORT (resolv.conf options: timeout:2 attempts:1${2:+ $2})"
	tl_in_etc "$TL_BIN/resolve_connect" -n "$NAME" -p "$PORT" \
		> "$RAW/$1-client.txt" 2> "$RAW/$1-client.txt.err" ||
		tl_die "$1: resolve_connect failed: $(head -n 1 "$RAW/$1-client.txt.err")"
	[ -s "$RAW/$1-client.txt.err" ] || rm -f "$RAW/$1-client.txt.err"
	tl_uncapture
	tl_both_counters_after "$1-" "$KEEP" "$KEEP_S"
	tcpdump -n -tt -r "$RAW/$1-capture.pcap" 'port 53' > "$RAW/$1-tcpdump-dns.txt" 2> /dev/null ||
		tl_die "tcpdump could not read $RAW/$1-capture.pcap"
	tcpdump -n -tt -r "$RAW/$1-capture.pcap" icmp > "$RAW/$1-tcpdump-icmp.txt" 2> /dev/null ||
		tl_die "tcpdump could not read $RAW/$1-capture.pcap"
	[ -s "$RAW/$1-tcpdump-icmp.txt" ] || rm -f "$RAW/$1-tcpdump-icmp.txt"
}
part udp512 ""
part edns0 "edns0"
part single "edns0 single-request"
tl_stop "$TL_LISTENER"
tl_stop "$DNSMASQ"
echo "port=$PORT records=$RECORDS name=$NAME server=$TL_SERVER_ADDR" > "$RAW/params.txt"
