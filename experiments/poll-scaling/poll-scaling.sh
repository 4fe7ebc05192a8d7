#!/bin/sh
# poll-scaling: an RFC 862 echo server over select, poll and epoll while K idle connections sit
# open; 8 active connections send 512-byte requests and time the replies at each K.  After a
# PHP write-up in which stream_select() slowed down as idle connections grew and failed at
# FD_SETSIZE, while epoll stayed flat up to 5000.  See docs/poll-scaling.md.
#
# Environment: TL_QUICK=1 (K = 0 256 900 2000, 0.3 s windows, one round: a few seconds);
# TL_POLL_ROUNDS (default 5 rounds of 1 s windows, 1 in a QEMU guest (TL_GUEST, set by its init):
# under TCG one round of every K takes over half the unit's limit_s; the report keeps the fastest
# round of each step: on a shared machine, five short chances beat two long ones);
# TL_POLL_PIN=0 to let the scheduler place server and client (default: server on CPU 1,
# client on CPU 0, when the unit may use CPUs 0 and 1).
. "$(dirname "$0")/../lib/collect.sh"
tl_init "$1"
PORT=21400
BACKENDS="select poll epoll"
if [ -n "${TL_QUICK:-}" ]; then
	KS="0 256 900 2000" WINDOW_MS=300 WARMUP_MS=50 ROUNDS=${TL_POLL_ROUNDS:-1}
elif [ -n "${TL_GUEST:-}" ]; then
	KS="0 256 512 900 2000 5000" WINDOW_MS=1000 WARMUP_MS=200 ROUNDS=${TL_POLL_ROUNDS:-1}
else
	KS="0 256 512 900 2000 5000" WINDOW_MS=1000 WARMUP_MS=200 ROUNDS=${TL_POLL_ROUNDS:-5}
fi
case $ROUNDS in '' | *[!0-9]* | 0) tl_die "TL_POLL_ROUNDS '$ROUNDS': want 1 or more" ;; esac

# Only the K that fit the file limit: echo_load holds K idle + 8 active sockets + FD_SLACK (32),
# and may raise its soft RLIMIT_NOFILE only up to the hard one (fixtures/echo_load.c), so a K
# above hard - 40 is not run and plan.txt says so (ks_not_run=).  A guest's init once left the
# kernel's hard 4096 (INR_OPEN_MAX) and echo_load refused K=5000 (docs/poll-scaling.md).
# shellcheck disable=SC3045 # dash and busybox ash have ulimit -S and -H
NOFILE_SOFT=$(ulimit -Sn) NOFILE_HARD=$(ulimit -Hn) LOAD_FDS=40
fit="" NOT_RUN=""
for k in $KS; do
	if [ "$NOFILE_HARD" = unlimited ] || [ $((k + LOAD_FDS)) -le "$NOFILE_HARD" ]; then
		fit="$fit $k"
	else
		NOT_RUN="$NOT_RUN $k"
		tl_log "K=$k not run: echo_load needs $((k + LOAD_FDS)) fds, the hard RLIMIT_NOFILE is $NOFILE_HARD"
	fi
done
KS=${fit# }

# Pin only when CPUs 0 and 1 are both ours: a cpuset without them would make -C fail.
SRV_PIN="" CLI_PIN="" PIN=none
allowed=$(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status)
case ${TL_POLL_PIN:-1}:$allowed in
0:*) ;;
*:0-[1-9]* | *:0,1 | *:0,1,*) SRV_PIN="-C 1" CLI_PIN="-C 0" PIN="server:1,client:0" ;;
esac

read -r UP0 _ < /proc/uptime
if [ -x "$TL_BIN/machine" ]; then
	"$TL_BIN/machine" > "$RAW/machine.txt" || tl_die "machine failed"
fi
uname -r > "$RAW/uname.txt"
{
	echo "ks=$KS" | tr ' ' ','
	echo "backends=$BACKENDS" | tr ' ' ','
	echo "window_ms=$WINDOW_MS"
	echo "warmup_ms=$WARMUP_MS"
	echo "rounds=$ROUNDS"
	echo "quick=${TL_QUICK:+1}"
	echo "guest=${TL_GUEST:+1}"
	echo "nofile_soft=$NOFILE_SOFT"
	echo "nofile_hard=$NOFILE_HARD"
	echo "load_fds=$LOAD_FDS"
	echo "ks_not_run=${NOT_RUN# }" | tr ' ' ','
	echo "pin=$PIN"
	echo "cpus_allowed=$allowed"
	echo "tcp_ehash_entries=$(cat /proc/sys/net/ipv4/tcp_ehash_entries 2>/dev/null)"
} > "$RAW/plan.txt"

# field KEY FILE LINE-PREFIX [N]: the value of KEY on the Nth (default first) line that starts
# with LINE-PREFIX.
field() {
	grep "^$3 " "$2" | sed -n "${4:-1}{s/.* $1=\([^ ]*\).*/\1/p;}"
}

# step BACKEND K ROUND: one server, one load run against it; raw files $RAW/BACKEND-kK-rROUND-*.
step() {
	_base="$RAW/$1-k$2-r$3"
	cat /proc/loadavg > "$_base-loadavg.txt"
	tl_bg "$_base-server.txt" "$TL_BIN/echo_server" -p "$PORT" -b "$1" $SRV_PIN
	_srv=$TL_LAST
	tl_wait_line "$_srv" "$_base-server.txt" '^ready ' 5
	tl_bg "$_base-load.txt" "$TL_BIN/echo_load" -p "$PORT" -k "$2" -w "$WINDOW_MS" \
		-u "$WARMUP_MS" -P "$(field pid "$_base-server.txt" ready)" $CLI_PIN
	_load=$TL_LAST
	# the memory the K idle connections take (echo_load prints `idle` once they are open, before
	# its warm-up): a guest has 512 MB
	tl_wait_line "$_load" "$_base-load.txt" '^idle ' 60
	grep -E '^(MemTotal|MemAvailable|Slab):' /proc/meminfo > "$_base-meminfo.txt"
	tl_wait_exit "$_load" 60
	kill -TERM "$_srv" 2> /dev/null
	wait "$_srv"
	_rc=$?
	tl_forget "$_srv"
	echo "$_rc" > "$_base-server.rc"
	grep -q '^result ' "$_base-load.txt" || tl_die "echo_load printed no result for $1 K=$2"
	STEP_RC=$_rc
}

# note BACKEND K ROUND: one progress line for a person.
note() {
	_base="$RAW/$1-k$2-r$3"
	_e=$(field errno "$_base-load.txt" result)
	if [ "$_e" != none ]; then
		tl_log "$1 K=$2: server exit $STEP_RC, client saw $_e"
		return
	fi
	tl_log "$1 K=$2 round $3: $(field req_s "$_base-load.txt" result) req/s," \
		"p99 $(field p99_us "$_base-load.txt" result) us;" \
		"server wait $(field wait_us_per_call "$_base-server.txt" 'stats reason=usr1' 2)" \
		"us/call, work $(field work_us_per_call "$_base-server.txt" 'stats reason=usr1' 2) us/call"
}

# selftest ROUND: the load client against its own in-process echo thread.
selftest() {
	tl_bg "$RAW/selftest-r$1.txt" "$TL_BIN/echo_load" -s -w "$WINDOW_MS" -u "$WARMUP_MS" $CLI_PIN
	tl_wait_exit "$TL_LAST" 60
	grep -q '^result ' "$RAW/selftest-r$1.txt" || tl_die "echo_load -s printed no result"
	tl_log "load client self-test round $1: $(field req_s "$RAW/selftest-r$1.txt" result) req/s"
}

tl_log "backends $BACKENDS; idle connections K = $KS; 8 active x 512 B;" \
	"${WINDOW_MS} ms windows, $ROUNDS round(s); pinning $PIN"
REFUSED_AT=""
r=1
while [ "$r" -le "$ROUNDS" ]; do
	for k in $KS; do
		for b in $BACKENDS; do
			if [ "$b" = select ] && [ -n "$REFUSED_AT" ] && [ "$k" -gt "$REFUSED_AT" ]; then
				echo "select refused fds at K=$REFUSED_AT" > "$RAW/$b-k$k-r$r-skipped.txt"
				continue
			fi
			step "$b" "$k" "$r"
			note "$b" "$k" "$r"
			case $b:$STEP_RC in
			select:3)
				[ -n "$REFUSED_AT" ] || REFUSED_AT=$k
				echo "k=$k" > "$RAW/select-refused.txt"
				tl_log "select refused at K=$k: $(cat "$RAW/$b-k$k-r$r-server.txt.err")"
				;;
			*:0) ;;
			*) tl_die "echo_server -b $b exited $STEP_RC at K=$k (see $b-k$k-r$r-server.txt.err)" ;;
			esac
		done
		[ "$k" != 0 ] || selftest "$r"
	done
	r=$((r + 1))
done
read -r UP1 _ < /proc/uptime
echo "uptime_start_s=$UP0 uptime_end_s=$UP1" > "$RAW/elapsed.txt"
