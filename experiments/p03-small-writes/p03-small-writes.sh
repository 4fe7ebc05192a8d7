#!/bin/sh
# p03-small-writes: a client that writes each request as two small write()s (an 8-byte header,
# then a 32-byte body) and waits for the reply; a server that replies once it has both.  On the
# wire, so that each side's counters (DelayedACKs is the server's) are read in its own
# namespace.  One part per variant, each on its own port with its own rr_server:
#   baseline  two writes                    nodelay   TCP_NODELAY on the client
#   quickack  TCP_QUICKACK on the server, set again after every recv()
#   writev    one writev()                  more      header with MSG_MORE, then the body
#   cork      TCP_CORK around the two writes
#   bulk      the same two writes per message, but a stream that waits for no reply
#   pingpong3 the baseline with the server's tcp_pingpong_thresh at 3 (where it is a sysctl)
# Each part: both sides' counters (from before the connection to after its close), a capture on
# the client's end, and a sockwatch snapshot of each established socket (tcpi_ato: ato_us) while
# the connection is still open.
. "$(dirname "$0")/../lib/collect.sh"
tl_wire_init "$1"
# the knobs requests and bulk (experiments/units; run.sh checks them and also reads the older
# TL_P03_REQUESTS and TL_P03_BULK)
REQUESTS=${TL_KNOB_REQUESTS:-${TL_P03_REQUESTS:-100}}
BULK=${TL_KNOB_BULK:-${TL_P03_BULK:-2000}}
KEEP="TcpExtDelayedACKs,TcpExtDelayedACKLocked,TcpExtDelayedACKLost,TcpExtTCPPureAcks,TcpExtTCPHPAcks,TcpExtTCPAutoCorking,TcpOutSegs,TcpInSegs,TcpRetransSegs"

# the kernel's pingpong threshold where it is a sysctl (absent before it became one), and the
# other namespaced sysctls the page mentions, read in the server's namespace
for _s in tcp_pingpong_thresh tcp_autocorking tcp_comp_sack_nr; do
	if _v=$(tl_srv cat "/proc/sys/net/ipv4/$_s" 2>/dev/null); then
		echo "net.ipv4.$_s=$_v"
	else
		echo "net.ipv4.$_s=absent"
	fi
done > "$RAW/sysctls.txt"

# part NAME PORT SERVER_ARGS CLIENT_ARGS: one connection of rr_client against its own rr_server
part() {
	_p=$1 _port=$2 _sargs=$3 _cargs=$4
	# shellcheck disable=SC2086 # the argument lists are word lists
	tl_bg "$RAW/$_p-server.txt" nsenter --net="/run/netns/$TL_NS_SERVER" \
		"$TL_BIN/rr_server" -a "$TL_SERVER_ADDR" -p "$_port" $_sargs
	_srv=$TL_LAST
	tl_wait_line "$_srv" "$RAW/$_p-server.txt" '^ready ' 5
	tl_both_counters_before "$_p-"
	tl_capture "$_p-capture" "$TL_CLIENT_IF" "$_port"
	tl_log "$_p: rr_client $_cargs"
	# shellcheck disable=SC2086
	tl_bg "$RAW/$_p-client.txt" "$TL_BIN/rr_client" -a "$TL_SERVER_ADDR" -p "$_port" -k \
		-r "$RAW/$_p-requests.txt" $_cargs
	_cli=$TL_LAST
	tl_wait_line "$_cli" "$RAW/$_p-client.txt" '^(holding|result=)' 30
	tl_not_interrupted "$RAW/$_p-client.txt"
	# both sockets while the connection is still open: tcpi_ato (ato_us) among the rest
	"$TL_BIN/sockwatch" -1 -4 -s estab -p "$_port" > "$RAW/$_p-sockwatch.txt" ||
		tl_die "sockwatch -1 (client side) failed"
	tl_srv "$TL_BIN/sockwatch" -1 -4 -s estab -P "$_port" > "$RAW/$_p-server-sockwatch.txt" ||
		tl_die "sockwatch -1 (server side) failed"
	# then the close: the client's FIN carries the ACK of the last reply and the server's FIN
	# answers its EOF, so no delayed-ACK timer is left to fire after the counters are read; the
	# client's socket in TIME-WAIT says both FINs were exchanged
	tl_stop "$_cli"
	tl_wait_line "$_srv" "$RAW/$_p-server.txt" '^conn ' 5
	"$TL_BIN/sockwatch" -1 -w 2000 -4 -s time-wait -p "$_port" > "$RAW/$_p-timewait.txt" ||
		tl_die "$_p: the client's socket did not reach TIME-WAIT"
	tl_both_counters_after "$_p-" "$KEEP" "$KEEP"
	tl_uncapture
	tl_stop "$_srv"
	tl_log "$_p: $(grep '^result ' "$RAW/$_p-client.txt")"
}

part baseline 21030 "" "-n $REQUESTS"
part nodelay 21031 "" "-n $REQUESTS -N"
part quickack 21032 "-q" "-n $REQUESTS"
part writev 21033 "" "-n $REQUESTS -w writev"
part more 21034 "" "-n $REQUESTS -w more"
part cork 21035 "" "-n $REQUESTS -w cork"
part bulk 21036 "" "-n $BULK -b"
# the baseline again with the server's pingpong threshold at 3, where it is a sysctl (6.7+):
# the threshold is read at every check, so it applies to the next request
_pp=$(sed -n 's/^net.ipv4.tcp_pingpong_thresh=//p' "$RAW/sysctls.txt")
if [ "$_pp" != absent ]; then
	tl_srv sysctl -qw net.ipv4.tcp_pingpong_thresh=3 || tl_die "sysctl tcp_pingpong_thresh=3 failed"
	part pingpong3 21037 "" "-n $REQUESTS"
	tl_srv sysctl -qw "net.ipv4.tcp_pingpong_thresh=$_pp" || tl_die "sysctl tcp_pingpong_thresh back failed"
fi
tl_wire_record
