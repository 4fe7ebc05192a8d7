#!/usr/bin/env bash
# netns.sh — create and delete tcplab's network namespaces; one implementation for run.sh
# (which sources it) and for the tests and benchmarks (which run it):
#   experiments/lib/netns.sh create NAME    a fresh namespace with lo up
#   experiments/lib/netns.sh delete NAME    kill its processes, delete it (and a leftover creation parent)

# A fresh namespace with lo up.  Where the kernel allows (tcp_child_ehash_entries, 6.1+), it
# gets a private TCP established-hash table of 1024 buckets instead of sharing the host's: a
# sock_diag dump walks the whole table, so a private one makes a 1 ms sockwatch sample cheap.
# The table is sized by the namespace that creates the new one, hence the short-lived parent.
# Two defaults are derived from the table's size in tcp_sk_init() (net/ipv4/tcp_ipv4.c):
# tcp_max_tw_buckets (half of it) and tcp_max_syn_backlog (max(128, 1/128 of it)).  Both are
# set back to what a namespace sharing the host's table gets, so only the table size differs.
tl_netns_create() {
	local ns=$1 parent="$1-p" cnt tw syn
	cnt=$(cat /proc/sys/net/ipv4/tcp_ehash_entries 2> /dev/null || echo 0)
	cnt=${cnt#-}
	tw=$((cnt / 2))
	syn=$((cnt / 128 > 128 ? cnt / 128 : 128))
	ip netns add "$parent" || return 1
	if [ "$tw" -gt 0 ] &&
		ip netns exec "$parent" sysctl -qw net.ipv4.tcp_child_ehash_entries=1024 2> /dev/null &&
		touch "/run/netns/$ns" &&
		nsenter --net="/run/netns/$parent" unshare --net="/run/netns/$ns" true 2> /dev/null &&
		ip netns exec "$ns" sysctl -qw net.ipv4.tcp_max_tw_buckets="$tw" \
			net.ipv4.tcp_max_syn_backlog="$syn"; then
		ip netns del "$parent"
	else
		ip netns del "$parent"
		ip netns del "$ns" 2> /dev/null || rm -f "/run/netns/$ns"
		ip netns add "$ns" || return 1
	fi
	ip -n "$ns" link set lo up
}

tl_netns_delete() {
	local ns pids
	for ns in "$1" "$1-p"; do
		pids=$(ip netns pids "$ns" 2> /dev/null || true)
		[ -z "$pids" ] || kill -KILL $pids 2> /dev/null || true
		ip netns del "$ns" 2> /dev/null || true
		# what a unit put in /etc/netns/NAME (ip netns exec's per-namespace /etc files,
		# p07-localhost), when a SIGKILL kept its own trap from removing it
		case $ns in */* | .* | '') ;; *) rm -rf "/etc/netns/$ns" ;; esac
	done
	rmdir /etc/netns 2> /dev/null || true
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
	set -euo pipefail
	case ${1:-}:${2:-} in
	create:?*) tl_netns_create "$2" ;;
	delete:?*) tl_netns_delete "$2" ;;
	*) echo "usage: netns.sh create|delete NAME" >&2; exit 2 ;;
	esac
fi
