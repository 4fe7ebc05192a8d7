#!/bin/sh
# Re-record the saved sock_diag dumps the decoder tests replay (root; makes its own namespace).
#   listen-estab.bin   a listener (backlog 8) that never accepts + one connection: LISTEN Recv-Q 1
#                      Send-Q 8 and both ESTAB ends, IPv4; plus a listener on [::1]:21020
#   synsent.bin        samples of a SYN-SENT socket to a full listener across 2 retransmissions
#   persist.bin        samples of a connection whose receiver never reads (SO_RCVBUF 4096): its
#                      window closes, and the sender's zero-window probe timer (idiag_timer 4,
#                      ss's "persist") runs while Send-Q holds what it could not send
#   timers.bin         one sample holding the other timer kinds: an idle connection with
#                      SO_KEEPALIVE (idiag_timer 2), a TIME-WAIT socket (3, no tcp_info), and a
#                      SYN-RECV request whose final ACK nft dropped (1, no tcp_info)
# Every socket carries INET_DIAG_SKMEMINFO where the kernel sends it (not for TIME-WAIT or
# request sockets).
# The tests assert what these scenarios must show, so a re-recording on any kernel still passes.
set -eu
top=$(cd "$(dirname "$0")/../../.." && pwd)
bin=$top/build/bin
out=$(cd "$(dirname "$0")" && pwd)
ns=tcplab-rec-$$
ip netns add "$ns"
trap 'for p in $(ip netns pids "$ns"); do kill -KILL "$p"; done; ip netns del "$ns"' EXIT
ip -n "$ns" link set lo up
run() { ip netns exec "$ns" "$@"; }
wait_ready() { while ! grep -q "$2" "$1" 2>/dev/null; do sleep 0.01; done; }

run "$bin/listener" -p 21010 -b 8 -m never > /tmp/rec-l1.$$ &
run "$bin/listener" -a ::1 -p 21020 -m never > /tmp/rec-l2.$$ &
wait_ready /tmp/rec-l1.$$ '^ready'
wait_ready /tmp/rec-l2.$$ '^ready'
run "$bin/connect_block" -p 21010 -H > /tmp/rec-c.$$ &
wait_ready /tmp/rec-c.$$ '^holding'
rm -f "$out/listen-estab.bin" "$out/synsent.bin" "$out/persist.bin" "$out/timers.bin"
run "$bin/sockwatch" -1 -r "$out/listen-estab.bin" > /dev/null

run "$bin/listener" -p 21013 -m full > /tmp/rec-l3.$$ &
wait_ready /tmp/rec-l3.$$ '^ready'
run "$bin/connect_block" -p 21013 -s 2 > /dev/null &
run "$bin/sockwatch" -4 -s syn-sent -p 21013 -i 500000 -d 2600 -r "$out/synsent.bin" > /dev/null
run python3 -c '
import socket, struct, sys, time
ls = socket.socket()
ls.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
ls.bind(("127.0.0.1", 21030)); ls.listen(1)
c = socket.create_connection(("127.0.0.1", 21030))
s, _ = ls.accept()                      # never reads: its window closes
c.setblocking(False)
try:
    while True:
        c.send(b"x" * 65536)
except BlockingIOError:
    pass
while struct.unpack_from("=I", c.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 232), 228)[0]:
    time.sleep(0.01)                    # until tcpi_snd_wnd is 0: the window has closed
print("filled", flush=True)
time.sleep(30)' > /tmp/rec-zw.$$ &
wait_ready /tmp/rec-zw.$$ '^filled'
run "$bin/sockwatch" -4 -a -p 21030 -i 100000 -d 1500 -r "$out/persist.bin" > /dev/null

# keepalive (port 21040), TIME-WAIT (21041: the client closes first), SYN-RECV (21042: the
# handshake's final ACK is dropped by nft in this namespace, so the request waits for it)
printf '%s\n' 'table inet tcplabrec {' ' chain out {' '  type filter hook output priority 0;' \
	'  tcp dport 21042 tcp flags & (syn | ack) == ack drop' ' }' '}' | run nft -f -
run python3 -c '
import socket, time
for port in (21040, 21041, 21042):
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.1", port)); ls.listen(4)
    globals()["l%d" % port] = ls
ka = socket.create_connection(("127.0.0.1", 21040))
ka.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
ka.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, 600)
tw = socket.create_connection(("127.0.0.1", 21041))
peer, _ = l21041.accept()
tw.close(); peer.recv(1); peer.close()       # client: FIN_WAIT2 -> TIME_WAIT
sr = socket.socket(); sr.setblocking(False)
try:
    sr.connect(("127.0.0.1", 21042))          # the client sees ESTABLISHED, the server SYN-RECV
except BlockingIOError:
    pass
print("set", flush=True)
time.sleep(30)' > /tmp/rec-tm.$$ &
wait_ready /tmp/rec-tm.$$ '^set'
run "$bin/sockwatch" -1 -s estab -s time-wait -s syn-recv -r "$out/timers.bin" > /tmp/rec-tm-out.$$
rm -f /tmp/rec-*.$$
