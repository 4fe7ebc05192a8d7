#!/bin/sh
# vm-selftest RAWDIR — proves a kernel-matrix guest can run a unit: which kernel, whether
# tcp_syn_linear_timeouts exists, whether the built (dynamic) programs start, whether sock_diag
# answers.  Runs on the host too.  Writes RAWDIR/selftest.txt as key=value lines.
set -eu
out=${1:?usage: vm-selftest.sh RAWDIR}
mkdir -p "$out"
f=$out/selftest.txt
: >"$f"

echo "uname_r=$(uname -r)" >>"$f"
if [ -e /proc/sys/net/ipv4/tcp_syn_linear_timeouts ]; then
	echo "tcp_syn_linear_timeouts=$(cat /proc/sys/net/ipv4/tcp_syn_linear_timeouts)" >>"$f"
else
	echo "tcp_syn_linear_timeouts=absent" >>"$f"
fi
if command -v strace >/dev/null 2>&1; then
	echo "strace=available" >>"$f"
else
	echo "strace=not available" >>"$f"
fi

# Every built program must at least load: its shared libraries are in the guest.
n=0
for p in "${TL_BIN:?TL_BIN names the built programs}"/*; do
	[ -x "$p" ] || continue
	name=${p##*/}
	if "$p" -h >"$out/$name-h.txt" 2>&1; then
		echo "program=$name status=runs" >>"$f"
	else
		echo "program=$name status=exit-$?" >>"$f"
	fi
	n=$((n + 1))
done
echo "programs=$n" >>"$f"
echo "vm-selftest: $(uname -r), $n programs" >&2
