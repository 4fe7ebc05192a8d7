#!/bin/sh
# experiments/lib/etc-exec.sh DIR CMD... — `ip netns exec NS CMD...`'s /etc part, for a QEMU
# guest (collect.sh's tl_netns_etc: IN_NS there is `unshare -m sh etc-exec.sh /etc/netns/NS`).
# Run in a mount namespace of its own: each file of DIR is bind-mounted over /etc/FILE, as
# iproute2's bind_etc() does for /etc/netns/NS (ip-netns(8)), then CMD is exec'd, so its pid is
# this script's.  A bind needs a file to mount over, and a guest's /etc holds only what vm.sh
# put there: a file /etc lacks is made empty first, and stays so for the guest's later units
# (an empty gai.conf is glibc's built-in table, as a missing one is).  The guest's busybox ip
# has no `netns exec`, and a unit whose netns is 1 runs there in a namespace that has no name
# (experiments/guest/initramfs/init).
# Exit 125 when a bind fails (the reason on stderr), else CMD's status.
dir=$1
shift
for f in "$dir"/*; do
	[ -f "$f" ] || continue
	t=/etc/${f##*/}
	if [ ! -e "$t" ]; then
		: > "$t" || exit 125
	fi
	mount --bind "$f" "$t" || exit 125
done
exec "$@"
