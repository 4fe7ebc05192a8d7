#!/bin/sh
# p08-tls-records: TLS records against TCP segments, TLS 1.3, each part on its own port:
#   record         one SSL_write of record_bytes (16384: one record at the largest plaintext)
#   small-nagle    writes SSL_writes of write_bytes each, back to back (Nagle on)
#   small-nodelay  the same with TCP_NODELAY on the client
#   stall-nagle    requests exchanges, each a request in two 20-byte SSL_writes (a header,
#                  then a body) and a 100-byte reply: p03-small-writes under TLS
#   stall-nodelay  the same with TCP_NODELAY on the client
#   stall-both     the same with TCP_NODELAY on both ends
# One segment per packet on the client's end (gso_max_segs 1, read at connect()): the capture
# there sees each segment as the wire carries it, not one GSO packet of many.
. "$(dirname "$0")/../lib/collect.sh"
. "$(dirname "$0")/p08-tls-common.sh"
tl_wire_init "$1"
# the knobs (experiments/units; run.sh checks them)
RECORD=${TL_KNOB_RECORD_BYTES:-16384}
WRITES=${TL_KNOB_WRITES:-10}
WBYTES=${TL_KNOB_WRITE_BYTES:-100}
REQUESTS=${TL_KNOB_REQUESTS:-20}
KEEP="$KEEP,TcpExtTCPPureAcks,TcpExtTCPAutoCorking"
ip link set dev "$TL_CLIENT_IF" gso_max_segs 1 || tl_die "cannot set gso_max_segs on $TL_CLIENT_IF"
tls_pair
SMALL=$((WRITES * WBYTES))
tls_part record 21087 "-V 1.3 -q $RECORD -b 100" "-V 1.3 -q $RECORD -b 100"
tls_part small-nagle 21088 "-V 1.3 -q $SMALL -b 100" "-V 1.3 -q $SMALL -s $WBYTES -b 100"
tls_part small-nodelay 21089 "-V 1.3 -q $SMALL -b 100" "-V 1.3 -q $SMALL -s $WBYTES -b 100 -N"
tls_part stall-nagle 21090 "-V 1.3 -q 40 -b 100 -R $REQUESTS" \
	"-V 1.3 -q 40 -s 20 -b 100 -R $REQUESTS"
tls_part stall-nodelay 21091 "-V 1.3 -q 40 -b 100 -R $REQUESTS" \
	"-V 1.3 -q 40 -s 20 -b 100 -R $REQUESTS -N"
tls_part stall-both 21092 "-V 1.3 -q 40 -b 100 -R $REQUESTS -N" \
	"-V 1.3 -q 40 -s 20 -b 100 -R $REQUESTS -N"
tls_done
