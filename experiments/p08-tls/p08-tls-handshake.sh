#!/bin/sh
# p08-tls-handshake: TLS handshakes across the wire, each part on its own port:
#   tls13   TLS 1.3, two connections: a full handshake, then one resumed with the first one's
#           session ticket (tls_peer -t)
#   tls12   TLS 1.2, one connection, a full handshake
# Then kernel TLS: setsockopt(TCP_ULP, "tls") on an unconnected TCP socket (tls_peer -r ulp),
# its result in ktls.txt.  ENOENT where the kernel has no tls ULP: the part is skipped, and the
# report says why.  ENOTCONN (the ULP is there): two parts with tls_peer -K, OpenSSL handing the
# records to the kernel, each watched by sockwatch on both ends (-c ulp) and counted in
# /proc/net/tls_stat on both ends (ktls_part, p08-tls-common.sh):
#   ktls13  TLS 1.3, one connection
#   ktls12  TLS 1.2, one connection
. "$(dirname "$0")/../lib/collect.sh"
. "$(dirname "$0")/p08-tls-common.sh"
tl_wire_init "$1"
PORT13=21080 PORT12=21081
tls_pair
tls_part tls13 "$PORT13" "-V 1.3 -n 2" "-V 1.3 -n 2 -t"
tls_part tls12 "$PORT12" "-V 1.2 -n 1" "-V 1.2 -n 1"
# kernel TLS where the kernel has the tls ULP: the probe's ENOTCONN says it is there
"$TL_BIN/tls_peer" -r ulp > "$RAW/ktls.txt" || tl_die "the TCP_ULP probe failed"
if grep -q ' errno=ENOTCONN$' "$RAW/ktls.txt"; then
	ktls_part ktls13 21085 1.3
	ktls_part ktls12 21086 1.2
fi
tls_done
