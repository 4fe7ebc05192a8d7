#!/bin/sh
# p08-tls-close: three ways a TLS 1.3 server ends a connection, each part on its own port; the
# client then reads once more and prints what SSL_read and SSL_get_error said:
#   notify  SSL_shutdown (close_notify), the client's close_notify read back, close()
#   fin     close() without close_notify: the FIN alone (a truncation, to TLS)
#   rst     SO_LINGER {1, 0}, close(): a RST
. "$(dirname "$0")/../lib/collect.sh"
. "$(dirname "$0")/p08-tls-common.sh"
tl_wire_init "$1"
tls_pair
tls_part notify 21082 "-V 1.3 -e notify" "-V 1.3"
tls_part fin 21083 "-V 1.3 -e fin" "-V 1.3"
tls_part rst 21084 "-V 1.3 -e rst" "-V 1.3"
tls_done
