#!/bin/sh
# wire.sh — the wire: a client and a server network namespace joined by a veth pair, and the
# faults put on it (nftables rules, netem).  POSIX sh: run.sh sources it on the host, the QEMU
# guest's init (busybox ash) too; collect.sh's tl_fault and tl_netem call wire_fault and
# wire_netem.  Run directly, it is the same code for the tests and benchmarks:
#   experiments/lib/wire.sh create CLIENT_NS SERVER_NS [MTU]   the pair, addressed and up
#   experiments/lib/wire.sh fault NS HOOK ACTION MATCH...      one nft rule in NS (table inet tcplab)
#   experiments/lib/wire.sh check-mtu MTU                      exit 0 if MTU is one a veth takes
#
# Addresses come from TEST-NET-1 (RFC 5737, 192.0.2.0/24, documentation only) and exist only
# on the pair, inside the two namespaces: nothing on the wire can reach another machine.
WIRE_CLIENT_ADDR=192.0.2.1
WIRE_SERVER_ADDR=192.0.2.2
WIRE_CLIENT_IF=veth-c
WIRE_SERVER_IF=veth-s
WIRE_MTU_DEFAULT=1500

# wire_err MESSAGE: one line on stderr (the caller returns its own status).
wire_err() {
	echo "wire: $*" >&2
}

# wire_mtu_ok MTU: a decimal MTU a veth device accepts: ETH_MIN_MTU (68) .. ETH_MAX_MTU (65535)
# (drivers/net/veth.c sets max_mtu to ETH_MAX_MTU; IPv4 needs at least 68, RFC 791).
wire_mtu_ok() {
	case $1 in '' | *[!0-9]* | 0*) return 1 ;; esac
	[ "${#1}" -le 5 ] && [ "$1" -ge 68 ] && [ "$1" -le 65535 ]
}

# wire_in NS CMD...: CMD in the network namespace NS (a name under /run/netns; "-": this one).
wire_in() {
	_wns=$1
	shift
	if [ "$_wns" = - ]; then "$@"; else nsenter --net="/run/netns/$_wns" "$@"; fi
}

# wire_create CLIENT_NS SERVER_NS MTU: veth-c in CLIENT_NS, veth-s in SERVER_NS, each made
# directly inside its namespace (never in the caller's, where parallel units would clash on
# the names), addressed, MTU set, up.  IPv6 is off on the pair (no router solicitations or DAD
# probes among the packets), and each side's neighbour entry for the other is written as
# permanent, so no ARP exchange delays the first SYN: every packet on the wire is the
# experiment's own.
wire_create() {
	_c=$1 _s=$2 _mtu=${3:-$WIRE_MTU_DEFAULT}
	wire_mtu_ok "$_mtu" || { wire_err "MTU '$_mtu': want 68..65535 (a veth's range)"; return 2; }
	ip link add "$WIRE_CLIENT_IF" netns "$_c" mtu "$_mtu" type veth \
		peer name "$WIRE_SERVER_IF" netns "$_s" mtu "$_mtu" ||
		{ wire_err "cannot create the veth pair (is veth in this kernel?)"; return 1; }
	for _side in c s; do
		if [ "$_side" = c ]; then
			_ns=$_c _if=$WIRE_CLIENT_IF _me=$WIRE_CLIENT_ADDR _peer=$WIRE_SERVER_ADDR _pif=$WIRE_SERVER_IF _pns=$_s
		else
			_ns=$_s _if=$WIRE_SERVER_IF _me=$WIRE_SERVER_ADDR _peer=$WIRE_CLIENT_ADDR _pif=$WIRE_CLIENT_IF _pns=$_c
		fi
		wire_in "$_ns" sysctl -qw "net.ipv6.conf.$_if.disable_ipv6=1" 2>/dev/null || true
		ip -n "$_ns" addr add "$_me/24" dev "$_if" &&
			ip -n "$_ns" link set "$_if" up &&
			ip -n "$_ns" link set lo up || { wire_err "cannot configure $_if in $_ns"; return 1; }
		_mac=$(ip -n "$_pns" -br link show dev "$_pif" | awk '{ print $3 }')
		[ -n "$_mac" ] || { wire_err "cannot read $_pif's address"; return 1; }
		ip -n "$_ns" neigh replace "$_peer" lladdr "$_mac" dev "$_if" nud permanent ||
			{ wire_err "cannot set the neighbour entry for $_peer in $_ns"; return 1; }
	done
	wire_wait_up "$_c" "$WIRE_CLIENT_IF" && wire_wait_up "$_s" "$WIRE_SERVER_IF"
}

# wire_wait_up NS IF: poll (10 ms, at most 5 s) until IF's operstate is UP.  Until then the
# device has no real qdisc (dev_activate() attaches it from linkwatch once the carrier is on,
# net/core/link_watch.c) and a packet sent is dropped by noop_qdisc.  A veth's event is urgent
# (its ifindex differs from its iflink, linkwatch_urgent_event()), so on this host the pair was
# UP at the first look in every try; the wait only guards a slower kernel.
wire_wait_up() {
	_left=500
	until ip -n "$1" -o link show dev "$2" 2>/dev/null | grep -q ' state UP '; do
		_left=$((_left - 1))
		[ "$_left" -gt 0 ] || { wire_err "$2 in $1 is not up after 5 s"; return 1; }
		sleep 0.01
	done
}

# wire_fault NS HOOK ACTION MATCH...: one rule in table inet tcplab of NS, chain "in" (input
# hook) or "out" (output hook), created on first use.  ACTION (docs/wire.md):
#   drop                      every packet MATCH matches (a black hole)
#   drop-first:N              the first N, then none: numgen inc counts the packets that reach
#                             it, so the rule is count-based and a run is repeatable
#   drop-nth:K                only the K-th
#   reject:host-unreachable | reject:port-unreachable | reject:admin-prohibited
#                             answered with that ICMP destination-unreachable
#   reject:tcp-reset          answered with a TCP RST (nf_reject), as a middlebox would
# Every rule has a counter.  nft's own error, if it refuses the rule, is the one line printed.
wire_fault() {
	_ns=$1 _hook=$2 _act=$3
	shift 3 2>/dev/null || { wire_err "usage: fault NS in|out ACTION MATCH..."; return 2; }
	case $_hook in in | out) ;; *) wire_err "hook '$_hook': want in or out"; return 2 ;; esac
	case $_act in
	drop) _verdict="counter drop" ;;
	drop-first:* | drop-nth:*)
		_n=${_act#*:}
		case $_n in '' | *[!0-9]* | 0*) wire_err "'$_act': want a count 1..1000000"; return 2 ;; esac
		[ "${#_n}" -le 7 ] && [ "$_n" -le 1000000 ] || { wire_err "'$_act': want a count 1..1000000"; return 2; }
		# numgen's counter runs 0, 1, 2 ... over the packets that reach it (it comes after MATCH)
		if [ "${_act%%:*}" = drop-first ]; then
			_verdict="numgen inc mod 1000000000 < $_n counter drop"
		else
			_verdict="numgen inc mod 1000000000 $((_n - 1)) counter drop"
		fi
		;;
	reject:host-unreachable | reject:port-unreachable | reject:admin-prohibited)
		_verdict="counter reject with icmp type ${_act#reject:}" ;;
	reject:tcp-reset) _verdict="counter reject with tcp reset" ;;
	*) wire_err "action '$_act': want drop, drop-first:N, drop-nth:K, reject:host-unreachable, reject:port-unreachable, reject:admin-prohibited or reject:tcp-reset"; return 2 ;;
	esac
	[ $# -gt 0 ] || { wire_err "'$_act' needs a match (e.g. tcp dport 21013)"; return 2; }
	_nfterr=$(wire_in "$_ns" nft -f - 2>&1 >/dev/null <<-EOF
	table inet tcplab {
		chain in { type filter hook input priority filter; policy accept; }
		chain out { type filter hook output priority filter; policy accept; }
	}
	add rule inet tcplab $_hook $* $_verdict
	EOF
	) || {
		wire_err "nft refused '$_act $*': $(printf '%s\n' "$_nfterr" | sed -n 's/^[^ ]*: Error: /Error: /p' | head -n 1)"
		return 1
	}
}

# wire_fault_clear NS: the table and every rule in it gone (a held drop released); fails when
# NS has no such table.
wire_fault_clear() {
	wire_in "$1" nft delete table inet tcplab
}

# wire_netem NS IF ARGS...: netem as IF's root qdisc.  Status 3 (and one line) when this
# kernel has no sch_netem, so a unit can skip rather than fail.
wire_netem() {
	_ns=$1 _if=$2
	shift 2
	_tcerr=$(wire_in "$_ns" tc qdisc replace dev "$_if" root netem "$@" 2>&1) && return 0
	case $_tcerr in
	*"kind is unknown"* | *"No such file"*)
		wire_err "this kernel has no sch_netem (CONFIG_NET_SCH_NETEM not set, no module)"
		return 3 ;;
	esac
	wire_err "tc refused netem '$*': $(printf '%s\n' "$_tcerr" | head -n 1)"
	return 1
}

# wire_record NS IF: what NS's side of the wire is, as the kernel shows it: the link (MTU,
# qdisc, state), its addresses, the qdiscs with their statistics, and the nft ruleset with
# each rule's counter.
wire_record() {
	echo "# ip -d link show dev $2"
	wire_in "$1" ip -d link show dev "$2" &&
		echo "# ip addr show dev $2" &&
		wire_in "$1" ip addr show dev "$2" &&
		echo "# tc -s qdisc show dev $2" &&
		wire_in "$1" tc -s qdisc show dev "$2" &&
		echo "# nft list ruleset" &&
		wire_in "$1" nft list ruleset
}

if [ "$(basename -- "$0")" = wire.sh ]; then
	set -eu
	case ${1:-} in
	create) [ $# -ge 3 ] && [ $# -le 4 ] || { wire_err "usage: wire.sh create CLIENT_NS SERVER_NS [MTU]"; exit 2; }
		wire_create "$2" "$3" "${4:-$WIRE_MTU_DEFAULT}" ;;
	fault) [ $# -ge 4 ] || { wire_err "usage: wire.sh fault NS in|out ACTION MATCH..."; exit 2; }
		shift; wire_fault "$@" ;;
	check-mtu) [ $# -eq 2 ] || { wire_err "usage: wire.sh check-mtu MTU"; exit 2; }
		wire_mtu_ok "$2" || { wire_err "MTU '$2': want 68..65535 (a veth's range)"; exit 2; } ;;
	*) wire_err "usage: wire.sh create|fault|check-mtu ..."; exit 2 ;;
	esac
fi
