#!/bin/sh
# experiments/guest/kernelpkg.sh — Debian's cloud kernel packages for the kernel-matrix guests,
# through an apt configuration of tcplab's own.  experiments/guest/vm.sh sources it (POSIX sh);
# run directly, it is the same code for the tests:
#
#   experiments/guest/kernelpkg.sh sources SUITE          the sources.list lines of SUITE's family
#   experiments/guest/kernelpkg.sh setup CACHE SUITE      writes CACHE/apt/SUITE/, prints the apt -o options
#   experiments/guest/kernelpkg.sh layout DIR             lays an unpacked kernel out as vm.sh expects
#
# The host's apt sources and lists are never read or written: each suite family (KP_SUITES) has
# its own sources.list, lists/, cache/, an empty dpkg status and state dirs in
# $CACHE/apt/SUITE/, passed to apt-get and apt-cache with -o (kp_apt).  Updates of one family
# are serialised with flock on $CACHE/apt/SUITE/.lock.  docs/kernel-matrix.md, "Kernels".
# Every function returns non-zero, with one line on stderr, when it fails.

# Oldest first: a series comes from the oldest family that carries it (5.10 bullseye, 6.1 and
# 6.12 bookworm, 7.2 sid), newest version within it.
KP_SUITES="bullseye bookworm trixie sid"
KP_MIRROR=${TCPLAB_APT_MIRROR:-http://deb.debian.org/debian}
KP_SECURITY=${TCPLAB_APT_SECURITY:-http://deb.debian.org/debian-security}
KP_KEYRING=/usr/share/keyrings/debian-archive-keyring.gpg
KP_MAX_AGE_MIN=1440	# lists older than a day are refreshed (sid drops old kernels quickly)

kp_err() {
	echo "kernelpkg: $*" >&2
}

# kp_sources SUITE: the sources.list lines of SUITE's family (sid has no -updates, -security).
kp_sources() {
	case $1 in
	sid) echo "deb [signed-by=$KP_KEYRING] $KP_MIRROR sid main" ;;
	bullseye | bookworm | trixie)
		echo "deb [signed-by=$KP_KEYRING] $KP_MIRROR $1 main"
		echo "deb [signed-by=$KP_KEYRING] $KP_MIRROR $1-updates main"
		echo "deb [signed-by=$KP_KEYRING] $KP_SECURITY $1-security main" ;;
	*) kp_err "unknown suite '$1' (known: $KP_SUITES)"; return 1 ;;
	esac
}

# kp_options DIR: apt's -o options, one a line, that keep apt inside DIR (a family's directory):
# sources, lists, package caches, dpkg status, state, logs; no preferences (pinning) of the
# host's; amd64 whatever the host is (the guest is qemu-system-x86_64).
kp_options() {
	printf -- '-o\n%s\n' \
		"Dir::Etc::sourcelist=$1/sources.list" "Dir::Etc::sourceparts=-" \
		"Dir::Etc::preferences=$1/preferences" "Dir::Etc::preferencesparts=-" \
		"Dir::State=$1/state" "Dir::State::Lists=$1/lists" "Dir::State::status=$1/status" \
		"Dir::State::extended_states=$1/state/extended_states" \
		"Dir::Cache=$1/cache" "Dir::Cache::pkgcache=pkgcache.bin" \
		"Dir::Cache::srcpkgcache=srcpkgcache.bin" "Dir::Log=$1/log" \
		"APT::Architecture=amd64" "APT::Architectures=amd64" "Acquire::Languages=none" \
		"Acquire::Retries=0" "Acquire::http::Timeout=30"
}

# kp_setup CACHE SUITE: makes CACHE/apt/SUITE/ with its sources.list (rewritten only when it
# changed) and the directories apt wants; sets KP_DIR.
kp_setup() {
	kp_sources "$2" >/dev/null || return 1
	KP_DIR=$1/apt/$2
	mkdir -p "$KP_DIR/lists/partial" "$KP_DIR/cache/archives/partial" "$KP_DIR/state" \
		"$KP_DIR/log" || { kp_err "cannot make $KP_DIR"; return 1; }
	kp_sources "$2" >"$KP_DIR/sources.list.tmp" || { rm -f "$KP_DIR/sources.list.tmp"; return 1; }
	if cmp -s "$KP_DIR/sources.list.tmp" "$KP_DIR/sources.list"; then
		rm -f "$KP_DIR/sources.list.tmp"
	else
		mv -f "$KP_DIR/sources.list.tmp" "$KP_DIR/sources.list"
		rm -f "$KP_DIR/updated"	# new sources: the lists are stale
	fi
	[ -f "$KP_DIR/status" ] || : >"$KP_DIR/status"
	# apt drops privileges to _apt for downloads; let it write its partial dirs
	chown _apt "$KP_DIR/lists/partial" "$KP_DIR/cache/archives/partial" 2>/dev/null || true
}

# kp_apt DIR PROGRAM ARGS...: PROGRAM (apt-get, apt-cache) with DIR's options before ARGS.
kp_apt() {
	_kp_dir=$1 _kp_prog=$2
	shift 2
	# shellcheck disable=SC2046 # one option a line: split at newlines only, no globbing
	(IFS='
'; set -f; exec "$_kp_prog" $(kp_options "$_kp_dir") "$@")
}

# kp_fresh DIR: DIR's lists were updated less than KP_MAX_AGE_MIN minutes ago.
kp_fresh() {
	[ -f "$1/updated" ] && [ -z "$(find "$1/updated" -mmin +"$KP_MAX_AGE_MIN" 2>/dev/null)" ]
}

# kp_update DIR: apt-get update of DIR's lists under DIR/.lock; a run that finds them fresh
# after waiting for the lock does not update again.  Returns 1 with apt's first error line.
kp_update() {
	(
		flock 7 || exit 1
		kp_fresh "$1" && exit 0
		if kp_apt "$1" apt-get update -q >"$1/update.log" 2>&1; then
			rm -f "$1/unfetchable"	# vm.sh's list of packages the mirror refused
			touch "$1/updated"
		else
			kp_err "apt-get update ($1): $(awk '/^(E|Err):/ { print; exit }' "$1/update.log")"
			exit 1
		fi
	) 7>"$1/.lock"
}

# kp_candidates DIR SERIES: the image packages of SERIES (5.10, 7.2) in DIR's lists, newest
# release first, one per release: linux-image-REL-cloud-amd64-unsigned where it exists (the
# classic layout), else linux-image-REL-cloud-amd64 (sid's split meta package, or a signed
# classic image).
kp_candidates() {
	_kp_re="^linux-image-$(printf '%s' "$2" | sed 's/\./\\./g')\\.[^ ]*-cloud-amd64(-unsigned)?\$"
	kp_apt "$1" apt-cache search --names-only "$_kp_re" 2>/dev/null | awk '{ print $1 }' |
		sort -u | awk '
			{ have[$1] = 1; rel = $1; sub(/-unsigned$/, "", rel); rels[rel] = 1 }
			END { for (r in rels) print (have[r "-unsigned"] ? r "-unsigned" : r) }' |
		sort -V -r
}

# kp_parts DIR PKG: the packages that make up the kernel of image package PKG, PKG first:
# PKG alone (classic), or PKG and the linux-binary-REL, linux-modules-REL and linux-base-REL it
# depends on (sid's split; REL is PKG's name without linux-image- and -unsigned).
kp_parts() {
	_kp_rel=${2#linux-image-}
	_kp_rel=${_kp_rel%-unsigned}
	echo "$2"
	kp_apt "$1" apt-cache show --no-all-versions "$2" 2>/dev/null |
		awk -v rel="$_kp_rel" '/^Depends:/ {
			sub(/^Depends: */, ""); n = split($0, d, / *[,|] */)
			for (i = 1; i <= n; i++) {
				split(d[i], w, " ")
				if (w[1] == "linux-binary-" rel || w[1] == "linux-modules-" rel || w[1] == "linux-base-" rel)
					print w[1]
			}
			exit }'
}

# kp_suite_of DIR PKG: the suite (bookworm-security, sid...) DIR's candidate of PKG comes from.
kp_suite_of() {
	kp_apt "$1" apt-cache madison "$2" 2>/dev/null |
		awk -F' [|] ' 'NR == 1 { split($3, w, " "); sub(/\/.*/, "", w[2]); print w[2] }'
}

# kp_layout DIR: an unpacked kernel (one or more .debs extracted into DIR) laid out as vm.sh
# expects, boot/vmlinuz-REL, boot/config-REL and lib/modules/REL/: sid's split packages put
# vmlinuz, config and System.map in usr/lib/modules/REL/, and newer packages put the modules
# under usr/lib; they are moved.  Prints REL; fails when DIR has no kernel image.
kp_layout() {
	set -- "$1" "$1"/boot/vmlinuz-*
	if [ -f "$2" ]; then
		_kp_rel=${2##*/vmlinuz-}
	else
		set -- "$1" "$1"/usr/lib/modules/*/vmlinuz
		[ -f "$2" ] || { kp_err "$1: no boot/vmlinuz-* and no usr/lib/modules/*/vmlinuz"; return 1; }
		_kp_rel=${2%/vmlinuz}
		_kp_rel=${_kp_rel##*/}
		mkdir -p "$1/boot" || return 1
		for _kp_f in vmlinuz config System.map; do
			[ ! -f "$1/usr/lib/modules/$_kp_rel/$_kp_f" ] ||
				mv "$1/usr/lib/modules/$_kp_rel/$_kp_f" "$1/boot/$_kp_f-$_kp_rel" || return 1
		done
	fi
	if [ -d "$1/usr/lib/modules/$_kp_rel" ] && ! [ -d "$1/lib/modules/$_kp_rel" ]; then
		mkdir -p "$1/lib/modules" && mv "$1/usr/lib/modules/$_kp_rel" "$1/lib/modules/" || return 1
	fi
	[ -d "$1/lib/modules/$_kp_rel/kernel" ] || { kp_err "$1: no modules for $_kp_rel"; return 1; }
	echo "$_kp_rel"
}

if [ "${0##*/}" = kernelpkg.sh ]; then
	case ${1:-}:$# in
	sources:2) kp_sources "$2" ;;
	setup:3) kp_setup "$2" "$3" && kp_options "$KP_DIR" ;;
	layout:2) kp_layout "$2" ;;
	*) echo "usage: experiments/guest/kernelpkg.sh sources SUITE | setup CACHE SUITE | layout DIR" >&2
		exit 2 ;;
	esac
fi
