#!/bin/bash
# experiments/guest/vm.sh — run tcplab experiment units inside a Debian cloud kernel booted under QEMU.
#
# usage: experiments/guest/vm.sh [-v] [--accel tcg|kvm] [--timeout S] [--mtu N] VERSION RAWROOT UNIT...
#        experiments/guest/vm.sh --resolve VERSION
#
# --resolve: only fetch (or find in the cache) the kernel of VERSION, and print one line,
# "RELEASE PACKAGE"; run.sh --kernel all fetches every kernel so before its guests start.
#
# Fetches the newest Debian cloud kernel of series VERSION (5.10, 6.1, 6.12, 7.2) with tcplab's own
# apt configuration (experiments/guest/kernelpkg.sh: a sources list and lists of its own in
# TCPLAB_CACHE/apt, default /var/cache/tcplab; the host's apt sources and lists are never
# touched) into TCPLAB_CACHE/kernels: the classic linux-image-*-unsigned .deb, or sid's split
# linux-image meta package with its linux-binary, linux-modules and linux-base, unpacked with
# dpkg-deb -x (never installed) and laid out alike.  Builds an initramfs (busybox-static,
# build/bin with the shared libraries ldd names, each unit's experiment folder, inet_diag + tcp_diag and
# boot/config-* from the same package, experiments/guest/initramfs/init), boots it under QEMU,
# and unpacks what each unit wrote into RAWROOT/UNIT/
# as a host run would.  When a unit's netns is wire or wire:MTU (experiments/units), the guest
# also gets the wire: iproute2's ip and tc, nft, experiments/lib/wire.sh and the modules veth,
# nf_tables, the nft expressions wire.sh uses and sch_netem (WIRE_MODULES); --mtu N overrides
# the table's MTU for every wire unit, as run.sh --mtu does on the host.  What a unit needs
# beyond that is its "# guest:" line in the unit table (guest_need): the kernel-TLS modules
# (tls), the per-namespace /etc of the name units (names: names_initramfs; docs/kernel-matrix.md,
# "Per-namespace /etc in the guest"), a build/bin program shipped to no other guest (bin:), the
# host's own programs it runs and a small /etc for them (host:, host_tools_initramfs).
# Writes RAWROOT/vm.txt (key=value: the packages and versions, accel, kernel release, boot
# time, status) and RAWROOT/vm-console.log.  TCPLAB_SIDE_BY_SIDE=N (run.sh --kernel all: N
# guests ran at once) adds side_by_side=N to vm.txt, and so to each unit's caveat
# (tcplab.where).
#
# Exit: 0 every unit ran and exited 0, or skipped itself (exit 3, status.txt "skipped: WHY");
#       1 a unit failed or the guest died; 2 usage;
#       3 the guest timed out (partial output kept, vm.txt status=timeout);
#       4 skip: qemu, busybox-static, KVM or the kernel package cannot be had.
# docs/kernel-matrix.md explains the choices and the measurements behind the defaults.
set -euo pipefail
export LC_ALL=C

TOP=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
CACHE=${TCPLAB_CACHE:-/var/cache/tcplab}
BUILD=${TCPLAB_BUILD:-build}
case $BUILD in /*) BINDIR=$BUILD/bin ;; *) BINDIR=$TOP/$BUILD/bin ;; esac
BINDIR=${TCPLAB_BIN:-$BINDIR}	# run.sh's programs (an installed tcplab's: libexec/tcplab)
PROG=vm.sh
# shellcheck source=experiments/lib/runstate.sh
. "$TOP/experiments/lib/runstate.sh"	# rs_reap_vm_dirs
# shellcheck source=experiments/lib/wire.sh
. "$TOP/experiments/lib/wire.sh"	# wire_mtu_ok; shipped to the guest for wire units
# shellcheck source=experiments/guest/kernelpkg.sh
. "$TOP/experiments/guest/kernelpkg.sh"	# tcplab's own apt configuration, the package layouts
EXPDIR=${TCPLAB_EXPERIMENTS:-$TOP/experiments}	# tests point this at units of their own
# What every unit needs: sock_diag's inet_diag and tcp_diag, and AF_PACKET for the capture
# (built in, CONFIG_PACKET=y, in every Debian package so far: found in modules.builtin, recorded
# as built in, not loaded).  The debs carry no modules.dep: dependencies come from .modinfo.
MODULES=(inet_diag tcp_diag af_packet)
# What the wire needs (wire.sh): the veth pair; nf_tables with numgen (drop-first/drop-nth) and
# reject (ICMP errors, TCP RST; nft_reject_inet pulls nf_reject_ipv4/ipv6 and nft_reject in by
# its depends=); sch_netem.  The inet family is built into nf_tables.ko (CONFIG_NF_TABLES_INET=y
# in every package).  Loaded only when a wire unit is selected.
WIRE_MODULES=(veth nf_tables nft_numgen nft_reject_inet sch_netem)
# Loaded when the package ships them, else part of another module: the counter expression of
# every wire.sh rule is nft_counter.ko up to 5.16 (5.10: CONFIG_NFT_COUNTER=m) and part of
# nf_tables.ko since 5.17 ("netfilter: nf_tables: make counter support built-in").  Without it
# 5.10's nft cannot add a rule with a counter: a bare initramfs autoloads no module.
# The wire units' own qdiscs and filters, where the package ships them (Debian's cloud kernels
# build them as modules): tbf (p04-mid-loss paces the server's ACKs, p04-slow-start's
# bottleneck), the ingress qdisc, u32 and mirred with the ifb device (p04-slow-start hands the
# server's input to the bottleneck), and bbr for TCP_CONGESTION (a bare initramfs autoloads none).
WIRE_MODULES_IF_SHIPPED=(nft_counter sch_tbf sch_ingress cls_u32 act_mirred ifb tcp_bbr)
# Kernel TLS (the tls need): the tls ULP, and what its software crypto asks the crypto API
# for by name when TLS_TX/TLS_RX set a key (crypto_alloc_aead("gcm(aes)"), "ccm(aes)",
# "rfc7539(chacha20,poly1305)"): gcm with its depends= (aead, gf128mul, ...), ctr and
# ghash-generic where they are modules, and chacha20poly1305.  A bare initramfs has no modprobe
# for the kernel's request_module().  Each where the package ships it: 5.10's cloud kernel has no
# CONFIG_TLS, and the unit then reports kernel TLS skipped with the kernel's ENOENT.  Loaded only
# when a selected unit needs tls (its "# guest:" line).
TLS_MODULES_IF_SHIPPED=(tls gcm ctr ghash_generic chacha20poly1305)
# Some units run host programs beside tcplab's (host:PROGRAM in their "# guest:" line: dnsmasq,
# tcpdump, nginx...), shipped as build/bin's are, each with the libraries ldd names.
# dnsmasq drops to the user nobody and tcpdump to tcpdump, and each refuses to start when the
# user is not in /etc/passwd; nginx looks up the user of its configuration's `user root;` and
# its group of the same name (getpwnam, getgrnam: "getpwnam(\"root\") failed" and it ends):
# the guest's /etc gets the host's own lines for them (HOST_USERS, HOST_GROUPS).
# A unit that runs nft without the wire (host:nft) needs nf_tables, and nft_counter where the
# package ships it (its counter: 5.10, as for the wire).
HOST_USERS='^(root|nobody|tcpdump):'
HOST_GROUPS='^(root|nogroup|tcpdump):'
NFT_MODULES=(nf_tables)
NFT_MODULES_IF_SHIPPED=(nft_counter)
# The wire's tools, the host's own, in the guest's /bin: iproute2's ip and tc (busybox's ip cannot
# make a veth pair or a named namespace, its tc has no netem), nft, util-linux's nsenter, and
# dash, which runs the wire units; and iproute2's ss, which wire units use to cross-check
# sock_diag (busybox has no ss).  Debian's busybox-static is built with FEATURE_SH_STANDALONE
# and FEATURE_PREFER_APPLETS: its ash, and every busybox applet that runs a program (nsenter,
# timeout, unshare), runs its own applet of that name before looking at PATH, so under busybox
# `ip` is busybox's ip whatever /bin/ip is.  dash and util-linux's nsenter go by PATH.
WIRE_TOOLS=(ip tc ss nft nsenter dash)
MEMORY_MB=512

ACCEL=tcg			# measured: nested KVM here is slower than TCG or fails (see docs)
TIMEOUT=""
MTU_OPT=""
MTU_SET=""
WIRE=""
KTLS=""				# guest needs of the selected units (guest_need)
NAMES=""
declare -A SHIP_BINS=() HOST_TOOLS=()
declare -A ONLY_IF_NEEDED=()	# build/bin programs some unit's line names as bin:PROGRAM
VERBOSE=0
RESOLVE=""
WORK=""
QEMU_PID=""
TIMEOUT_PID=""
START_NS=0

usage() {
	echo "usage: experiments/guest/vm.sh [-v] [--accel tcg|kvm] [--timeout S] [--mtu N] VERSION RAWROOT UNIT..."
	echo "       experiments/guest/vm.sh --resolve VERSION"
}

# One line on stderr, then exit: $1 is the status, the rest the message.
fail() {
	local rc=$1
	shift
	echo "vm.sh: $*" >&2
	exit "$rc"
}

skip() {
	fail 4 "skip: $*"
}

progress() {
	echo "vm: $*" >&2
}

cleanup() {
	local pid
	trap '' INT TERM HUP QUIT
	trap - EXIT
	# QEMU's pid only while run_qemu waits for it (TIMEOUT_PID set): once timeout has reaped it,
	# the pid in qemu.pid is free, and pids wrap here every 32768 (kernel.pid_max): a SIGTERM to
	# it could reach another process
	QEMU_PID=""
	[ -n "$WORK" ] && [ -n "$TIMEOUT_PID" ] && [ -s "$WORK/qemu.pid" ] &&
		QEMU_PID=$(cat "$WORK/qemu.pid")
	for pid in "$QEMU_PID" "$TIMEOUT_PID"; do
		if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; fi
	done
	if [ -n "$WORK" ]; then
		exec 8<&-
		rs_kill_dir_users "$WORK"	# QEMU and timeout even before their pids were known
		rm -rf -- "$WORK"
	fi
}

# $1 the signal's name, $2 the exit status.  The cleanup runs here, to its end, not through
# `exit` and the EXIT trap: a signal that came while that trap ran, before it ignored signals,
# would run this inside it, and an `exit` there would cut it short (runstate.sh's rs_on_signal
# says more).
on_signal() {
	trap '' INT TERM HUP QUIT
	echo "vm.sh: interrupted (SIG$1)" >&2
	cleanup
	exit "$2"
}

# Seconds since START_NS with one decimal.
since_start() {
	local now
	now=$(date +%s%N)
	awk -v d="$((now - START_NS))" 'BEGIN { printf "%.1f", d / 1e9 }'
}

parse_args() {
	while [ $# -gt 0 ]; do
		case $1 in
		--accel) [ $# -ge 2 ] || fail 2 "--accel needs tcg or kvm"; ACCEL=$2; shift 2 ;;
		--accel=*) ACCEL=${1#*=}; shift ;;
		--timeout) [ $# -ge 2 ] || fail 2 "--timeout needs seconds"; TIMEOUT=$2; shift 2 ;;
		--timeout=*) TIMEOUT=${1#*=}; shift ;;
		--mtu) [ $# -ge 2 ] || fail 2 "--mtu needs a number (68..65535)"; MTU_OPT=$2; MTU_SET=1; shift 2 ;;
		--mtu=*) MTU_OPT=${1#*=}; MTU_SET=1; shift ;;
		-v) VERBOSE=1; shift ;;
		--resolve) RESOLVE=1; shift ;;
		-h|--help) usage; exit 0 ;;
		--) shift; break ;;
		-*) usage >&2; fail 2 "unknown option $1" ;;
		*) break ;;
		esac
	done
	if [ -n "$RESOLVE" ]; then
		[ $# -eq 1 ] || { usage >&2; fail 2 "--resolve takes one VERSION"; }
		VERSION=$1
		[[ $VERSION =~ ^[0-9]+\.[0-9]+$ ]] || fail 2 "VERSION: '$VERSION' is not like 6.1 or 6.12"
		UNITS=()
		return 0
	fi
	[ $# -ge 3 ] || { usage >&2; fail 2 "need VERSION RAWROOT UNIT..."; }
	VERSION=$1
	RAWROOT=$2
	shift 2
	UNITS=("$@")
	case $ACCEL in tcg|kvm) ;; *) fail 2 "--accel: '$ACCEL' is not tcg or kvm" ;; esac
	if [ -n "$TIMEOUT" ] && ! [[ $TIMEOUT =~ ^[1-9][0-9]{0,4}$ ]]; then
		fail 2 "--timeout: '$TIMEOUT' is not a number of seconds in 1..99999"
	fi
	[[ $VERSION =~ ^[0-9]+\.[0-9]+$ ]] || fail 2 "VERSION: '$VERSION' is not like 6.1 or 6.12"
	if [ -n "$MTU_SET" ] && ! wire_mtu_ok "$MTU_OPT"; then
		fail 2 "--mtu: '$MTU_OPT' is not an MTU in 68..65535 (a veth's range)"
	fi
	local u netns t
	for u in "${UNITS[@]}"; do
		[[ $u =~ ^[A-Za-z0-9][A-Za-z0-9._-]*$ ]] || fail 2 "unit name '$u' is not a plain name"
		unit_lookup "$u" || case $? in
			3) fail 2 "$u: no line in $EXPDIR/units" ;;
			*) fail 2 "cannot use the unit table $EXPDIR/units (above)" ;;
			esac
		[ -f "$(unit_script "$u")" ] || fail 2 "no $(unit_script "$u")"
		netns=$(unit_netns "$u")
		case $netns in
		1) ;;
		wire | wire:[1-9]*) WIRE=1 ;;
		*) fail 2 "$u: netns '$netns' cannot run in the guest (1, wire or wire:MTU)" ;;
		esac
		for t in ${UNIT_GUEST[$u]}; do
			guest_need "$u" "$t"
		done
	done
	local bins
	bins=$(/usr/bin/python3 "$TOP/experiments/runner/tcplab_units.py" guest-bins "$EXPDIR") ||
		fail 2 "cannot use the unit table $EXPDIR/units (above)"
	for t in $bins; do
		ONLY_IF_NEEDED[$t]=1
	done
}

# guest_need UNIT NEED: one need of UNIT's "# guest:" line (experiments/units, whose parser
# checked it) noted for build_initramfs.  Each only for a unit selected that needs it: the
# libraries of curl_pool or of Debian's curl alone are about 10 MB that every TCG boot would
# unpack.
guest_need() {
	case $2 in
	tls) KTLS=1 ;;
	names) NAMES=1 ;;
	bin:?*) SHIP_BINS[${2#bin:}]=1 ;;
	host:?*) HOST_TOOLS[${2#host:}]=1 ;;
	*) fail 2 "$1: guest need '$2' in $EXPDIR/units: want tls, names, bin:PROGRAM or host:PROGRAM" ;;
	esac
}

check_tools() {
	command -v qemu-system-x86_64 >/dev/null ||
		skip "qemu-system-x86_64 not found (make deps-kernel installs qemu-system-x86)"
	[ -x /bin/busybox ] || skip "/bin/busybox not found (make deps-kernel installs busybox-static)"
	local t
	for t in cpio gzip xz dpkg-deb apt-cache apt-get flock ldd; do
		command -v "$t" >/dev/null || skip "$t not found (make deps-kernel)"
	done
	if [ -n "$WIRE" ]; then
		for t in "${WIRE_TOOLS[@]}"; do
			PATH=$PATH:/usr/sbin:/sbin command -v "$t" >/dev/null ||
				skip "$t not found: a wire unit needs iproute2 and nftables in the guest (make deps)"
		done
	fi
	if [ "$ACCEL" = kvm ] && { ! [ -r /dev/kvm ] || ! [ -w /dev/kvm ]; }; then
		skip "--accel kvm: /dev/kvm is not usable here"
	fi
	[ -d "$BINDIR" ] || fail 1 "$BINDIR does not exist: run make first"
	for t in "${!SHIP_BINS[@]}"; do
		[ -x "$BINDIR/$t" ] || fail 1 "$BINDIR/$t, which a unit's guest line needs (bin:$t), does not exist: run make first"
	done
}

# The newest kernel already unpacked in the cache for VERSION, either layout; empty when none.
newest_cached() {
	local d
	for d in "$CACHE/kernels/linux-image-$VERSION".*-cloud-amd64_* \
		"$CACHE/kernels/linux-image-$VERSION".*-cloud-amd64-unsigned_*; do
		if [ -f "$d/.complete" ]; then echo "$d"; fi
	done | sort -V | awk 'END { if (NR) print }'
}

# The complete unpacked directory of image package PKG in the cache; empty when there is none.
cached_package() {
	local d
	for d in "$CACHE/kernels/$1"_*; do
		if [ -f "$d/.complete" ]; then echo "$d"; fi
	done | sort -V | awk 'END { if (NR) print }'
}

# fetch_debs APTDIR PKG...: apt-get download (tcplab's own apt configuration APTDIR) into the
# cache, each .deb not there already; returns 1 with apt's first error line.
fetch_debs() {
	local aptdir=$1 dl p missing=() debs
	shift
	for p in "$@"; do
		debs=("$CACHE/kernels/${p}"_*.deb)
		[ -f "${debs[-1]}" ] || missing+=("$p")
	done
	[ ${#missing[@]} -gt 0 ] || return 0
	dl=$(mktemp -d "$CACHE/kernels/.download.XXXXXX")
	# apt drops privileges to _apt for downloads; let it write here.
	chown _apt "$dl" 2>/dev/null || true
	if ! (cd "$dl" && kp_apt "$aptdir" apt-get download -q "${missing[@]}") >"$dl/log" 2>&1; then
		echo "vm.sh: apt-get download ${missing[*]}: $(awk '/^E:/ { print; exit }' "$dl/log")" >&2
		rm -rf -- "$dl"
		return 1
	fi
	mv -f "$dl"/*.deb "$CACHE/kernels/"
	rm -rf -- "$dl"
}

# download_unpack APTDIR SUITE PKG [PART...]: image package PKG and the PARTs it is made of (PKG alone in the
# classic layout; sid's split adds linux-binary-, linux-modules-, linux-base-) downloaded and
# unpacked together into PKG's directory in the cache, laid out as a classic package
# (kp_layout), with .source saying what it was made of; prints that directory.
download_unpack() {
	local aptdir=$1 suite=$2 pkg=$3 p debs dir layout=classic
	shift 2
	fetch_debs "$aptdir" "$@" || return 1
	debs=("$CACHE/kernels/${pkg}"_*.deb)
	dir=${debs[-1]%.deb}
	[ $# -eq 1 ] || layout='split'
	rm -rf -- "$dir" "$dir.tmp"
	{
		echo "suite=$suite"
		echo "layout=$layout"
		for p in "$@"; do
			debs=("$CACHE/kernels/${p}"_*.deb)
			dpkg-deb -x "${debs[-1]}" "$dir.tmp" || return 1
			echo "deb.$(deb_role "$p")=$p=$(dpkg-deb -f "${debs[-1]}" Version)"
		done
	} >"$dir.source.tmp" || { rm -rf -- "$dir.tmp" "$dir.source.tmp"; return 1; }
	kp_layout "$dir.tmp" >/dev/null || { rm -rf -- "$dir.tmp" "$dir.source.tmp"; return 1; }
	mv "$dir.source.tmp" "$dir.tmp/.source"
	touch "$dir.tmp/.complete"
	mv "$dir.tmp" "$dir"
	echo "$dir"
}

# deb_role PKG: image, binary, modules or base (the vm.txt key deb.ROLE).
deb_role() {
	case $1 in
	linux-binary-*) echo binary ;;
	linux-modules-*) echo modules ;;
	linux-base-*) echo base ;;
	*) echo image ;;
	esac
}

# find_package [AFTER]: sets APTDIR, SUITE and CANDIDATES (image packages of VERSION, newest
# first) from the oldest suite family after AFTER (all of them without it) whose lists (tcplab's
# own, $CACHE/apt/SUITE, refreshed daily) carry VERSION; CANDIDATES empty when none does or the
# archive cannot be reached.
find_package() {
	local s after=${1:-}
	APTDIR="" SUITE="" CANDIDATES=()
	for s in $KP_SUITES; do
		if [ -n "$after" ]; then
			[ "$s" != "$after" ] || after=""
			continue
		fi
		kp_setup "$CACHE" "$s" || return 0
		if ! kp_fresh "$KP_DIR"; then
			progress "apt-get update $s (tcplab's own lists in $KP_DIR)"
			kp_update "$KP_DIR" || true	# offline: the lists it has, or the cache
		fi
		mapfile -t CANDIDATES < <(kp_candidates "$KP_DIR" "$VERSION")
		if [ ${#CANDIDATES[@]} -gt 0 ]; then
			APTDIR=$KP_DIR SUITE=$s
			return 0
		fi
	done
}

# Sets KDIR to the unpacked kernel of VERSION: the newest the archive serves (an older one when
# the newest cannot be downloaded: mirrors lag behind their lists), else the newest cached.
resolve_kernel() {
	{ mkdir -p "$CACHE/kernels" 2>/dev/null && [ -w "$CACHE/kernels" ]; } ||
		skip "cannot write the kernel cache $CACHE/kernels (set TCPLAB_CACHE)"
	[[ $CACHE != *$'\n'* ]] || fail 2 "TCPLAB_CACHE: a directory name with a newline"
	exec 9>"$CACHE/kernels/.lock"
	flock 9
	local pkg tries parts suite
	KDIR="" SUITE=""
	# a family none of whose candidates can be fetched (bullseye-security names 6.1 backports,
	# 6.1.0-0.deb11.N, that the mirror may not serve) gives way to the next family
	while [ -z "$KDIR" ]; do
		find_package "$SUITE"
		[ ${#CANDIDATES[@]} -gt 0 ] || break
		tries=0
		for pkg in "${CANDIDATES[@]}"; do
			KDIR=$(cached_package "$pkg")
			[ -z "$KDIR" ] || break
			# one the mirror refused since these lists were fetched is not asked for again
			! grep -qxF "$pkg" "$APTDIR/unfetchable" 2>/dev/null || continue
			[ "$tries" -lt 5 ] || break	# a mirror may lag its lists by a few uploads
			tries=$((tries + 1))
			mapfile -t parts < <(kp_parts "$APTDIR" "$pkg")
			suite=$(kp_suite_of "$APTDIR" "$pkg")
			progress "fetching ${parts[*]} ($suite) into $CACHE/kernels"
			KDIR=$(download_unpack "$APTDIR" "${suite:-$SUITE}" "${parts[@]}") && break
			KDIR=""
			echo "$pkg" >>"$APTDIR/unfetchable"
			progress "cannot fetch $pkg; trying the next older"
		done
		[ -n "$KDIR" ] || progress "no $VERSION package of $SUITE could be fetched; trying the next suite family"
	done
	[ -n "$KDIR" ] || KDIR=$(newest_cached)
	flock -u 9
	exec 9>&-
	[ -n "$KDIR" ] || skip "no linux-image-$VERSION.*-cloud-amd64 package in Debian's $KP_SUITES (tcplab's lists in $CACHE/apt) or in $CACHE/kernels"
	local images=("$KDIR"/boot/vmlinuz-*)
	VMLINUZ=${images[0]}
	[ -f "$VMLINUZ" ] || skip "$KDIR has no boot/vmlinuz-*"
	RELEASE=${VMLINUZ##*/vmlinuz-}
	MODDIR=$KDIR/lib/modules/$RELEASE
	[ -d "$MODDIR" ] || skip "$KDIR has no lib/modules/$RELEASE"
	PACKAGE=$(basename "$KDIR")
}

# What KDIR was made of, as vm.txt lines: its .source (suite, layout, deb.ROLE=NAME=VERSION),
# or for a directory unpacked before .source existed, what its name says (NAME_VERSION_ARCH).
package_source() {
	if [ -f "$KDIR/.source" ]; then
		cat "$KDIR/.source"
	else
		local base=${PACKAGE%_*}
		echo "layout=classic"
		echo "deb.image=${base%_*}=${base#*_}"
	fi
}

# Path of module NAME (dashes and underscores alike) in MODDIR; empty when absent.
module_path() {
	local want=${1//-/_} f base
	while IFS= read -r f; do
		base=${f##*/}
		base=${base%%.ko*}
		[ "${base//-/_}" = "$want" ] && { echo "$f"; return; }
	done < <(find "$MODDIR/kernel" -name '*.ko' -o -name '*.ko.xz' -o -name '*.ko.zst')
	return 0
}

# Whether module NAME is built into the kernel (its modules.builtin, shipped in every layout).
module_builtin() {
	local want=${1//-/_}
	[ -f "$MODDIR/modules.builtin" ] &&
		awk -v m="$want" '{ sub(/.*\//, ""); sub(/\.ko$/, ""); gsub(/-/, "_") } $0 == m { f = 1; exit }
			END { exit !f }' "$MODDIR/modules.builtin"
}

# module_add NAME: decompress NAME, after its dependencies (from .modinfo), into DEST/tcplab/modules;
# appends to MODLIST in load order.  A module built into the kernel goes to BUILTIN instead.
module_add() {
	local name=${1//-/_} src out deps d
	case " $MODLIST $BUILTIN " in *" $name "*) return 0 ;; esac
	src=$(module_path "$name")
	if [ -z "$src" ] && module_builtin "$name"; then
		BUILTIN="$BUILTIN $name"
		return 0
	fi
	[ -n "$src" ] || fail 1 "module $name not in $MODDIR (neither a .ko nor in modules.builtin)"
	out=$DEST/tcplab/modules/$name.ko
	case $src in
	*.xz) xz -dc "$src" >"$out" ;;
	*.zst) zstd -qdc "$src" >"$out" ;;
	*) cp "$src" "$out" ;;
	esac
	deps=$(tr '\0' '\n' <"$out" | awk '/^depends=/ && !seen { print substr($0, 9); seen = 1 }')
	for d in ${deps//,/ }; do
		module_add "$d"
	done
	MODLIST="$MODLIST $name"
}

# modules_add NAME...: module_add each one.
modules_add() {
	local a
	for a in "$@"; do
		module_add "$a"
	done
}

# modules_add_shipped NAME...: module_add each one the kernel package ships (else nothing).
modules_add_shipped() {
	local a
	for a in "$@"; do
		[ -z "$(module_path "$a")" ] || module_add "$a"
	done
}

# copy_with_libs DESTDIR FILE...: each FILE into DESTDIR, and every shared library ldd names at
# its path.  One ldd and one cp for all the files (with several files ldd heads each list with a
# "FILE:" line, left out): under --kernel all four guests build their initramfs at once on the
# host's CPUs, and a process per program was most of that time (docs/kernel-matrix.md).
copy_with_libs() {
	local dir=$1 lib
	shift
	cp -L "$@" "$dir/"
	while IFS= read -r lib; do
		[ -e "$DEST$lib" ] && continue
		mkdir -p "$DEST${lib%/*}"
		cp -L "$lib" "$DEST$lib"
	done < <(ldd "$@" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// && $1 !~ /:$/ { print $1 }' | sort -u)
}

# The unit table ($EXPDIR/units) is read through experiments/runner/tcplab_units.py, its one
# parser (docs/design.md, "Layout"): unit_lookup UNIT, run for each unit as the arguments are
# checked, keeps the unit's limit_s, collect script and netns, from its line as it is (run.sh
# checked the table; vm.sh checks what it needs itself); else 3 when the unit has no line there
# (or one whose limit_s is no number), 1 when the table cannot be read or a "# guest:" line
# is bad (said on stderr).
declare -A UNIT_LIMIT=() UNIT_SCRIPT=() UNIT_NETNS=() UNIT_GUEST=()
unit_lookup() {
	local f v
	f=$(/usr/bin/python3 "$TOP/experiments/runner/tcplab_units.py" get "$EXPDIR" "$1" limit_s script netns guest) ||
		return
	mapfile -t v <<< "$f"
	[[ ${v[0]} =~ ^[1-9][0-9]*$ ]] || return 3
	# guest is last: a unit without a "# guest:" line has it empty, a line $(...) drops
	UNIT_LIMIT[$1]=${v[0]} UNIT_SCRIPT[$1]=${v[1]} UNIT_NETNS[$1]=${v[2]} UNIT_GUEST[$1]=${v[3]:-}
}

# A unit's limit_s; empty when the unit has no line in the unit table.
unit_limit() {
	echo "${UNIT_LIMIT[$1]:-}"
}

# A unit's collect script, in its experiment's folder: the report's, or the unit's own when it
# feeds none ('-'), as run.sh finds it (docs/design.md, "Layout").
unit_script() {
	echo "${UNIT_SCRIPT[$1]:-}"
}

# A unit's netns: 1, 2, wire or wire:MTU.
unit_netns() {
	echo "${UNIT_NETNS[$1]:-}"
}

# Sum of the units' bounds (limit_s in the unit table).
units_duration() {
	local u total=0
	for u in "${UNITS[@]}"; do
		total=$((total + $(unit_limit "$u")))
	done
	echo "$total"
}

# The guest's unit list: UNIT:LIMIT_S:NETNS words, so init bounds each unit as run.sh does on
# the host and gives it the namespaces it asks for; NETNS is 1 or wire:MTU (the MTU resolved:
# --mtu, else the table's, else wire.sh's 1500).
guest_units() {
	local u out="" netns
	for u in "${UNITS[@]}"; do
		netns=$(unit_netns "$u")
		case $netns in
		wire) netns=wire:${MTU_OPT:-1500} ;;
		wire:*) netns=wire:${MTU_OPT:-${netns#wire:}} ;;
		esac
		out="$out $u:$(unit_limit "$u"):$netns"
	done
	echo "${out# }"
}

# The caller's TL_* settings (TL_QUICK, TL_CONNECTS, TL_SYNCNT...) as sh exports for the guest.
forward_env() {
	local name value
	while IFS= read -r name; do
		case $name in TL_BIN|TL_GUEST) continue ;; esac
		value=${!name}
		printf "export %s='%s'\n" "$name" "${value//\'/\'\\\'\'}"
	done < <(compgen -e | grep -E '^TL_[A-Z0-9_]+$' || true)
}

build_initramfs() {
	DEST=$WORK/root
	mkdir -p "$DEST"/{bin,dev,proc,sys,tmp,raw,usr,tcplab/bin,tcplab/experiments/lib,tcplab/modules}
	ln -s ../bin "$DEST/usr/bin"
	ln -s bin "$DEST/sbin"
	ln -s ../bin "$DEST/usr/sbin"
	mknod -m 600 "$DEST/dev/console" c 5 1 2>/dev/null || true
	copy_with_libs "$DEST/bin" /bin/busybox
	# one symlink per applet, made by busybox itself in one process (to busybox's own path,
	# /usr/bin/busybox or /bin/busybox, both /bin/busybox in the guest: usr/bin is a link to bin)
	/bin/busybox --install -s "$DEST/bin"
	local a f progs=()
	# a program named by some unit's bin: need (curl_pool) only when a selected unit needs it:
	# the shared libraries only it needs (libcurl and what that links) are about 10 MB
	for f in "$BINDIR"/*; do
		a=${f##*/}
		[ -z "${ONLY_IF_NEEDED[$a]:-}" ] || [ -n "${SHIP_BINS[$a]:-}" ] || continue
		if [ -f "$f" ] && [ -x "$f" ]; then progs+=("$f"); fi
	done
	[ ${#progs[@]} -eq 0 ] || copy_with_libs "$DEST/tcplab/bin" "${progs[@]}"
	# each unit's folder, as on the host (a unit may run a script beside it: p01-synretry-default)
	for a in "${UNITS[@]}"; do
		f=$(unit_script "$a")
		f=${f%/*}
		mkdir -p "$DEST/tcplab/experiments/${f##*/}"
		cp "$f"/*.sh "$DEST/tcplab/experiments/${f##*/}/"
	done
	cp "$EXPDIR"/lib/collect.sh "$DEST/tcplab/experiments/lib/"
	if [ -n "$WIRE" ]; then
		# the real tools replace busybox's applets of the same name in /bin
		local tools=()
		for a in "${WIRE_TOOLS[@]}"; do
			rm -f "$DEST/bin/$a"
			tools+=("$(PATH=$PATH:/usr/sbin:/sbin command -v "$a")")
		done
		copy_with_libs "$DEST/bin" "${tools[@]}"
		# the same wire code as the host's (run.sh and collect.sh source it)
		cp "$EXPDIR/lib/wire.sh" "$DEST/tcplab/experiments/lib/"
	fi
	[ ${#HOST_TOOLS[@]} -eq 0 ] || host_tools_initramfs
	[ -z "$NAMES" ] || names_initramfs
	# The package's own config, where the machine probe looks for CONFIG_HZ on any system.
	if [ -f "$KDIR/boot/config-$RELEASE" ]; then
		mkdir -p "$DEST/boot"
		cp "$KDIR/boot/config-$RELEASE" "$DEST/boot/"
	fi
	MODLIST="" BUILTIN=""
	modules_add "${MODULES[@]}"
	if [ -n "$WIRE" ]; then
		modules_add "${WIRE_MODULES[@]}"
		modules_add_shipped "${WIRE_MODULES_IF_SHIPPED[@]}"
	fi
	[ -z "$KTLS" ] || modules_add_shipped "${TLS_MODULES_IF_SHIPPED[@]}"
	if [ -n "${HOST_TOOLS[nft]:-}" ]; then
		modules_add "${NFT_MODULES[@]}"
		modules_add_shipped "${NFT_MODULES_IF_SHIPPED[@]}"
	fi
	install -m 0755 "$TOP/experiments/guest/initramfs/init" "$DEST/init"
	{
		echo "TL_UNITS='$(guest_units)'"
		echo "TL_DEADLINE_S=$GUEST_DEADLINE"
		echo "TL_MODULES='${MODLIST# }'"
		forward_env
	} >"$DEST/tcplab/config"
	(cd "$DEST" && find . -print0 | cpio --null -o -H newc -R 0:0 --quiet) | gzip -1 >"$WORK/initrd.gz"
}

# host_tools_initramfs: the host:PROGRAM needs' programs the host has (one it lacks stays out,
# and the unit skips itself as it does on the host), and /etc/passwd and /etc/group with the
# host's own lines of HOST_USERS and HOST_GROUPS.
host_tools_initramfs() {
	local t p tools=()
	for t in "${!HOST_TOOLS[@]}"; do
		p=$(PATH=$PATH:/usr/sbin:/sbin command -v "$t") || continue
		rm -f "$DEST/bin/$t"	# a busybox applet of that name would be written through
		tools+=("$p")
	done
	[ ${#tools[@]} -eq 0 ] || copy_with_libs "$DEST/bin" "${tools[@]}"
	mkdir -p "$DEST/etc"
	grep -E "$HOST_USERS" /etc/passwd >"$DEST/etc/passwd" || fail 1 "no $HOST_USERS line in /etc/passwd"
	grep -E "$HOST_GROUPS" /etc/group >"$DEST/etc/group" || fail 1 "no $HOST_GROUPS line in /etc/group"
}

# names_initramfs: what the names need brings, for a unit that gives its namespace /etc files
# of its own: etc-exec.sh (collect.sh's tl_netns_etc there), wire.sh (wire_fault, for a unit
# with an nft rule but no wire), and the host's /etc/host.conf, which ip netns exec leaves the
# host's: Debian's says `multi on`, so glibc's files backend answers every address of a name in
# /etc/hosts; without it, only the first (a 6.1 guest without it: "localhost" 127.0.0.1 alone,
# a name given ::1 and 127.0.0.1 ::1 alone).
names_initramfs() {
	cp "$EXPDIR/lib/etc-exec.sh" "$EXPDIR/lib/wire.sh" "$DEST/tcplab/experiments/lib/"
	mkdir -p "$DEST/etc"
	if [ -f /etc/host.conf ]; then cp /etc/host.conf "$DEST/etc/"; fi
}

# Echo the guest's console to stderr as it comes: "tcplab:" lines always, kernel lines with -v.
# The first "tcplab: init" line's arrival is written to WORK/boot_s.
# qemu_cpu_mark LINE: "UNIT start|done TICKS" (or "- total TICKS") into WORK/unit-cpu, TICKS
# the CPU time QEMU has used so far in clock ticks (utime + stime of /proc/PID/stat);
# unit_cpu_lines turns them into vm.txt's seconds (cpu_s.UNIT is done minus start).
# QEMU's total is not read here: the console is read up to 0.2 s late (tail -s 0.2), and a
# guest that powers off at once is gone by then (CI lost qemu_cpu_s this way); run_qemu takes
# it from the children this shell reaped instead.  For the same reason a unit's done line can
# arrive after QEMU is gone: it is marked "done-late", and unit_cpu_lines counts that unit to
# QEMU's exit (CI: a 7.2 guest of one unit lost its cpu_s.p01-synretry this way).
qemu_cpu_mark() {
	local pid stat f
	[ -s "$WORK/qemu.pid" ] || return 0
	pid=$(cat "$WORK/qemu.pid") || return 0
	if ! stat=$(cat "/proc/$pid/stat" 2>/dev/null); then
		case $1 in *": done rc="*) echo "${1%%: *} done-late -" >>"$WORK/unit-cpu" ;; esac
		return 0
	fi
	# shellcheck disable=SC2206 # the fields after "(comm)", which has no blank in QEMU's case
	f=(${stat##*) })
	case $1 in
	*": start "*) echo "${1%%: *} start $(( f[11] + f[12] ))" ;;
	*) echo "${1%%: *} done $(( f[11] + f[12] ))" ;;
	esac >>"$WORK/unit-cpu"
}

watch_console() {
	local line
	while IFS= read -r line; do
		line=${line%$'\r'}
		case $line in
		"tcplab: init: kernel"*)
			[ -f "$WORK/boot_s" ] || since_start >"$WORK/boot_s"
			progress "[$(since_start) s] ${line#tcplab: }" ;;
		"tcplab: "*)
			case $line in
			*": start (at most "* | *": done rc="*)
				qemu_cpu_mark "${line#tcplab: }" ;;
			esac
			progress "[$(since_start) s] ${line#tcplab: }" ;;
		*)
			if [[ $line =~ ^\[\ *[0-9]+\.[0-9]+\] ]]; then
				[ "$VERBOSE" = 1 ] && progress "[$(since_start) s] kernel: $line"
			else
				progress "[$(since_start) s]   $line"
			fi ;;
		esac
	done
	return 0
}

# children_ticks VAR: VAR = the user + system clock ticks of this shell's reaped children.
children_ticks() {
	local stat f
	read -r stat <"/proc/$BASHPID/stat" || fail 1 "cannot read /proc/$BASHPID/stat"
	# shellcheck disable=SC2206 # the fields after "(bash)"
	f=(${stat##*) })
	printf -v "$1" '%s' "$(( f[13] + f[14] ))"
}

run_qemu() {
	local cpu=max accel_opt=tcg append
	if [ "$ACCEL" = kvm ]; then
		cpu=${TCPLAB_VM_CPU:-host}
		accel_opt=kvm
	fi
	CPU=$cpu
	append="console=ttyS0 panic=-1"
	[ "$VERBOSE" = 1 ] && append="$append earlyprintk=serial,ttyS0" || append="$append quiet"
	: >"$WORK/console.log"
	: >"$WORK/data.txt"
	START_NS=$(date +%s%N)
	# QEMU dies with timeout, timeout with this script (PR_SET_PDEATHSIG), even after a SIGKILL
	setpriv --pdeathsig KILL timeout -k 5 "$TIMEOUT" \
		setpriv --pdeathsig KILL qemu-system-x86_64 -name "tcplab-$RELEASE" \
		-machine pc -accel "$accel_opt" -cpu "$cpu" -smp 1 -m "$MEMORY_MB" \
		-nodefaults -no-user-config -display none -no-reboot -nic none \
		-kernel "$VMLINUZ" -initrd "$WORK/initrd.gz" -append "$append" \
		-serial "file:$WORK/console.log" -serial "file:$WORK/data.txt" \
		-pidfile "$WORK/qemu.pid" 2>"$WORK/qemu.err" &
	TIMEOUT_PID=$!
	tail -s 0.2 -n +1 -F --pid="$TIMEOUT_PID" "$WORK/console.log" 2>/dev/null | watch_console &
	local watcher=$! rc=0 before after
	# QEMU's CPU time, exactly: timeout reaps QEMU and this shell reaps timeout, and each reap
	# adds the child's time to the reaper's cutime/cstime (fields 16 and 17 of /proc/PID/stat).
	# No other child of this shell ends in between (the watcher outlives timeout), and read and
	# the redirection are builtins: no fork of our own is counted.
	children_ticks before
	wait "$TIMEOUT_PID" || rc=$?
	children_ticks after
	echo "- total $((after - before))" >>"$WORK/unit-cpu"
	TIMEOUT_PID=""
	QEMU_RC=$rc
	WALL_S=$(since_start)
	wait "$watcher" || true
}

# unpack_frames: every unit frame in data.txt into RAWROOT/UNIT; sets UNIT_RC[unit].
unpack_frames() {
	local frames=$WORK/frames u f
	mkdir -p "$frames" "$RAWROOT"
	awk -v dir="$frames" '
		/^tcplab-frame-begin / { sub(/^unit=/, "", $2); out = dir "/" $2 ".b64"; printf "" > out; next }
		/^tcplab-frame-end / { sub(/^unit=/, "", $2); sub(/^rc=/, "", $3);
			print $3 > (dir "/" $2 ".rc"); close(out); out = ""; next }
		out != "" { print > out }
	' <(tr -d '\r' <"$WORK/data.txt")
	for u in "${UNITS[@]}"; do
		f=$frames/$u.b64
		if ! [ -f "$f" ]; then
			UNIT_RC[$u]=missing
			continue
		fi
		rm -rf -- "${RAWROOT:?}/$u"
		base64 -d -i <"$f" 2>/dev/null | tar -xzf - -C "$RAWROOT" 2>/dev/null || true
		if [ -f "$frames/$u.rc" ]; then
			UNIT_RC[$u]=$(cat "$frames/$u.rc")
		else
			UNIT_RC[$u]=partial
		fi
	done
}

meta_value() {
	sed -n "/^tcplab-meta $1=/{s///p;q}" "$WORK/data.txt" | tr -d '\r'
}

# boot_panicked: QEMU ended by itself (not by the timeout), the guest's init never said it
# started (no boot_s), and the console holds a kernel panic.
boot_panicked() {
	[ ! -f "$WORK/boot_s" ] && [ "$QEMU_RC" != 124 ] && [ "$QEMU_RC" != 137 ] &&
		grep -q 'Kernel panic' "$WORK/console.log"
}

# panic_line: the console's "Kernel panic - ..." line, without its timestamp.
panic_line() {
	tr -d '\r' <"$WORK/console.log" | sed -n 's/^\[ *[0-9.]*\] *//; /Kernel panic/{p;q}'
}

# Decides STATUS and the exit code from qemu's status and the units'.
judge() {
	local u done_line=0
	grep -q '^tcplab-done' "$WORK/data.txt" && done_line=1
	STATUS=ok
	for u in "${UNITS[@]}"; do
		case ${UNIT_RC[$u]} in
		0) ;;
		3)	# tl_skip: this kernel cannot run the unit; run.sh reports it skipped
			grep -q '^skipped: ' "$RAWROOT/$u/status.txt" 2>/dev/null ||
				{ [ "$STATUS" = ok ] && STATUS=failed; } ;;
		timeout) STATUS=timeout ;;
		*) [ "$STATUS" = ok ] && STATUS=failed ;;
		esac
	done
	if [ "$QEMU_RC" = 124 ] || [ "$QEMU_RC" = 137 ]; then
		STATUS=timeout
	elif [ "$done_line" = 0 ] && [ "$STATUS" != timeout ]; then
		STATUS=crashed
	fi
}

# cpu_s.UNIT=S: the CPU time (user + system, seconds) QEMU used from the unit's start line to
# its done line, as the host saw it; qemu_cpu_s: QEMU's total from its start to its exit (boot
# and power-off included).  A unit with no done line has none.  A unit whose done line came
# after QEMU's exit (done-late) is counted to that exit, its power-off included, and says so:
# cpu_s_to_exit.UNIT=1.
unit_cpu_lines() {
	[ -s "$WORK/unit-cpu" ] || return 0
	awk -v hz="$(getconf CLK_TCK)" '
		$2 == "start" { s[$1] = $3 }
		$2 == "done" && ($1 in s) { printf "cpu_s.%s=%.2f\n", $1, ($3 - s[$1]) / hz }
		$2 == "done-late" && ($1 in s) { late[$1] = s[$1] }
		$2 == "total" { total = $3; printf "qemu_cpu_s=%.2f\n", $3 / hz }
		END {
			if (total != "")
				for (u in late)
					printf "cpu_s.%s=%.2f\ncpu_s_to_exit.%s=1\n", u, (total - late[u]) / hz, u
		}
	' "$WORK/unit-cpu"
}

write_vm_txt() {
	local u qv
	qv=$(qemu-system-x86_64 --version | awk 'NR == 1')
	{
		echo "version=$VERSION"
		echo "package=$PACKAGE"
		package_source
		echo "kernel=$(meta_value uname_r)"
		echo "accel=$ACCEL"
		echo "cpu=$CPU"
		echo "smp=1"
		echo "memory_mb=$MEMORY_MB"
		echo "qemu=${qv#QEMU emulator version }"
		echo "transport=serial"
		echo "netns=$(meta_value netns)"
		echo "modules=$(sed -n "s/^TL_MODULES='\(.*\)'/\1/p" "$DEST/tcplab/config")"
		echo "modules_builtin=${BUILTIN# }"
		echo "kernel_boot_s=$(meta_value init_uptime_s)"
		echo "boot_s=$(cat "$WORK/boot_s" 2>/dev/null)"
		echo "wall_s=$WALL_S"
		echo "timeout_s=$TIMEOUT"
		echo "status=$STATUS"
		if [ -n "${BOOT_PANICS:-}" ]; then
			echo "boot_panics=$BOOT_PANICS"
			echo "boot_panic_wall_s=$BOOT_PANIC_WALL_S"
		fi
		[ -z "${TCPLAB_SIDE_BY_SIDE:-}" ] || echo "side_by_side=$TCPLAB_SIDE_BY_SIDE"
		for u in "${UNITS[@]}"; do
			echo "unit.$u=${UNIT_RC[$u]}"
		done
		unit_cpu_lines
	} >"$RAWROOT/vm.txt.tmp"
	mv -f "$RAWROOT/vm.txt.tmp" "$RAWROOT/vm.txt"
	cp "$WORK/console.log" "$RAWROOT/vm-console.log"
}

main() {
	parse_args "$@"
	check_tools
	if [ -n "$RESOLVE" ]; then
		resolve_kernel
		echo "$RELEASE $PACKAGE"
		return 0
	fi
	case ${TCPLAB_SIDE_BY_SIDE:-1} in [1-9] | [1-9][0-9]) ;; *) fail 2 "TCPLAB_SIDE_BY_SIDE: '$TCPLAB_SIDE_BY_SIDE' is not 1..99" ;; esac
	trap cleanup EXIT
	rs_trap_signals on_signal cleanup "INT 130" "TERM 143" "HUP 129" "QUIT 131"	# runstate.sh: why
	{ mkdir -p "$RAWROOT" 2>/dev/null && [ -w "$RAWROOT" ]; } || fail 1 "cannot write to $RAWROOT"
	resolve_kernel
	[ -n "$TIMEOUT" ] || TIMEOUT=$((60 + $(units_duration)))
	# The guest stops its units itself a little before the host kills it, so it can still ship.
	GUEST_DEADLINE=$((TIMEOUT > 40 ? TIMEOUT - 20 : TIMEOUT / 2))
	# The work directory (8 MB and more) is locked while this script and QEMU live, then marked:
	# a later vm.sh removes marked ones whose lock is free (runstate.sh); run.sh points TMPDIR
	# at its own temporary directory, which it removes itself.
	rs_reap_vm_dirs "${TMPDIR:-/tmp}"
	WORK=$(mktemp -d "${TMPDIR:-/tmp}/tcplab-vm.XXXXXX")
	exec 8< "$WORK"
	flock -n 8 || fail 1 "cannot lock $WORK"
	: > "$WORK/.locked"
	build_initramfs
	progress "booting $RELEASE ($ACCEL, $(du -k "$WORK/initrd.gz" | cut -f1) KiB initramfs, timeout ${TIMEOUT} s): ${UNITS[*]}"
	run_qemu
	if boot_panicked; then
		# A kernel panic before tcplab's init ran: nothing of the lab ran yet, and under TCG a
		# boot has crashed so once in CI (6.12, "Fatal exception in interrupt" at 0.95 s) and
		# then booted well.  Said, kept (vm-console-boot-panic.log), and tried once more only.
		progress "the guest's kernel panicked while booting, before tcplab's init ran: $(panic_line)"
		progress "booting once more (the panic's console: $RAWROOT/vm-console-boot-panic.log)"
		tr -d '\r' <"$WORK/console.log" >"$RAWROOT/vm-console-boot-panic.log"
		BOOT_PANICS=1 BOOT_PANIC_WALL_S=$WALL_S
		: >"$WORK/unit-cpu"
		run_qemu
	fi
	[ -s "$WORK/qemu.err" ] && progress "qemu: $(head -n 3 "$WORK/qemu.err" | tr '\n' ' ')"
	declare -gA UNIT_RC=()
	unpack_frames
	judge
	write_vm_txt
	if [ "$STATUS" = crashed ] || [ "$STATUS" = timeout ]; then
		progress "last console lines (all in $RAWROOT/vm-console.log):"
		tr -d '\r' <"$WORK/console.log" | tail -n 5 | sed 's/^/vm:   /' >&2
	fi
	progress "done in $WALL_S s: status=$STATUS, kernel $(meta_value uname_r), boot $(cat "$WORK/boot_s" 2>/dev/null || echo '?') s"
	case $STATUS in
	ok) return 0 ;;
	timeout) return 3 ;;
	*) return 1 ;;
	esac
}

# exit on the same line: bash reads a script as it runs, so a file rewritten in place (as an
# editor writes it back) while a run is under way would otherwise be read on from the old offset
# after main returns (seen: "syntax error near unexpected token" and exit 2 at the end of a
# good run).
main "$@"; exit
