#!/bin/sh
# p07-localhost: "localhost" against a server bound to 127.0.0.1 only.  The namespace gets its
# own /etc/hosts (127.0.0.1 and ::1 both named localhost) the way iproute2 gives one: files in
# /etc/netns/NAME/, which `ip netns exec NAME` bind-mounts over /etc/ (ip-netns(8)); in a
# --kernel guest experiments/lib/etc-exec.sh does the same (collect.sh's IN_NS).  The client
# is resolve_connect (fixtures/resolve_connect.c): getaddrinfo("localhost"), then a blocking
# connect() to each answer in turn until one connects.
#   default  no /etc/gai.conf: glibc's RFC 3484/6724 sort puts ::1 first (precedence 50 against
#            10 for IPv4 in glibc's built-in table): the connect to [::1] is answered by a RST
#            (ECONNREFUSED), then 127.0.0.1 connects
#   gaiconf  /etc/gai.conf: the built-in table with "precedence ::ffff:0:0/96 100": 127.0.0.1
#            first, one attempt
# Each part on its own port: a capture on lo, the counters before and after, and getent ahosts
# (glibc's getaddrinfo through another program) as the cross-check of the order.
# Everything under /etc/netns/NAME is this script's: made here, removed by its trap (and, after
# a SIGKILL, by experiments/lib/netns.sh when run.sh deletes the namespace).
. "$(dirname "$0")/../lib/collect.sh"
tl_init "$1"
PORT_DEFAULT=21070 PORT_GAICONF=21071
KEEP="TcpActiveOpens,TcpPassiveOpens,TcpAttemptFails,TcpOutRsts,TcpInSegs,TcpOutSegs"
KEEP="$KEEP,TcpEstabResets,TcpInErrs"

tl_netns_etc
printf '127.0.0.1\tlocalhost\n::1\tlocalhost\n' > "$ETC/hosts" || tl_die "cannot write $ETC/hosts"
# nsswitch: files only, so no name ever leaves the namespace
printf 'hosts: files\n' > "$ETC/nsswitch.conf" || tl_die "cannot write $ETC/nsswitch.conf"
"$TL_BIN/machine" > "$RAW/machine.txt" || tl_die "machine failed"
ip -6 addr show dev lo > "$RAW/lo-addresses.txt" 2>&1 || tl_die "ip -6 addr failed"
grep -q 'inet6 ::1/128' "$RAW/lo-addresses.txt" ||
	tl_skip "no ::1 on lo here (IPv6 disabled?): nothing to show"

# part NAME PORT: the listener on 127.0.0.1 only, counters, capture on lo, the client through
# IN_NS (ip netns exec: this namespace's /etc/netns files over /etc), getent ahosts the same way
part() {
	_p=$1 _port=$2
	cp "$ETC/hosts" "$RAW/$_p-hosts.txt"
	if [ -f "$ETC/gai.conf" ]; then cp "$ETC/gai.conf" "$RAW/$_p-gai.conf.txt"; fi
	tl_bg "$RAW/$_p-listener.txt" "$TL_BIN/listener" -a 127.0.0.1 -p "$_port" -m never
	_lst=$TL_LAST
	tl_wait_line "$_lst" "$RAW/$_p-listener.txt" '^ready ' 5
	"$TL_BIN/counters" > "$RAW/$_p-counters-before.txt" || tl_die "counters failed"
	tl_capture "$_p-capture" lo "$_port"
	tl_log "$_p: resolve_connect -n localhost -p $_port"
	tl_in_etc "$TL_BIN/resolve_connect" -n localhost -p "$_port" \
		> "$RAW/$_p-client.txt" 2> "$RAW/$_p-client.txt.err" ||
		tl_die "resolve_connect failed: $(head -n 1 "$RAW/$_p-client.txt.err")"
	tl_uncapture
	"$TL_BIN/counters" -d "$RAW/$_p-counters-before.txt" -k "$KEEP" \
		> "$RAW/$_p-counters-delta.txt" || tl_die "counters failed"
	tl_stop "$_lst"
	tl_in_etc getent ahosts localhost > "$RAW/$_p-getent.txt" 2>&1 ||
		tl_die "getent ahosts localhost failed in the namespace"
}

part default "$PORT_DEFAULT"
# glibc's built-in table (RFC 3484's, gai.conf(5)) with its last line changed, as Debian's
# /etc/gai.conf suggests "for sites which prefer IPv4": one precedence line replaces the whole
# built-in table, so every line of it is written out
printf 'precedence ::1/128 50\nprecedence ::/0 40\nprecedence 2002::/16 30\nprecedence ::/96 20\nprecedence ::ffff:0:0/96 100\n' \
	> "$ETC/gai.conf" || tl_die "cannot write $ETC/gai.conf"
part gaiconf "$PORT_GAICONF"
echo "port_default=$PORT_DEFAULT port_gaiconf=$PORT_GAICONF" > "$RAW/params.txt"
