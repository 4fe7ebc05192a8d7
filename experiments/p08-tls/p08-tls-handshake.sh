#!/bin/sh
# p08-tls-handshake: TLS handshakes across the wire, each part on its own port:
#   tls13   TLS 1.3, two connections: a full handshake, then one resumed with the first one's
#           session ticket (tls_peer -t)
#   tls12   TLS 1.2, one connection, a full handshake
# Then kernel TLS: setsockopt(TCP_ULP, "tls") on a TCP socket, its result in ktls.txt (ENOENT
# where the kernel has no CONFIG_TLS: the part is skipped, and the report says why).
. "$(dirname "$0")/../lib/collect.sh"
. "$(dirname "$0")/p08-tls-common.sh"
tl_wire_init "$1"
PORT13=21080 PORT12=21081
tls_pair
tls_part tls13 "$PORT13" "-V 1.3 -n 2" "-V 1.3 -n 2 -t"
tls_part tls12 "$PORT12" "-V 1.2 -n 1" "-V 1.2 -n 1"
# TCP_ULP is 31 (include/uapi/linux/tcp.h); the kernel looks the ULP up (and tries to load its
# module) before it looks at the socket's state, so an unconnected socket shows whether it exists
python3 -c '
import errno, socket
s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
try:
    s.setsockopt(socket.IPPROTO_TCP, 31, b"tls")
    print("ktls setsockopt=TCP_ULP value=tls ret=0 errno=none")
except OSError as e:
    print(f"ktls setsockopt=TCP_ULP value=tls ret=-1 errno={errno.errorcode.get(e.errno, e.errno)}")
finally:
    s.close()
' > "$RAW/ktls.txt" || tl_die "the TCP_ULP probe failed"
tls_done
