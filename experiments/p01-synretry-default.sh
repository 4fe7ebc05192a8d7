#!/bin/sh
# p01-synretry-default: p01-synretry with the system default (no TCP_SYNCNT): over two minutes.
TL_UNIT=p01-synretry-default TL_SYNCNT= exec sh "$(dirname "$0")/p01-synretry.sh" "$@"
