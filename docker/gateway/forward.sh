#!/bin/bash
# kiln-forward PORT=HOST:PORT...: listen on each PORT and forward every connection to HOST:PORT (resolved per
# connection, so a service that moves to another node or address is followed). Exits when any forwarder does.
set -u
[ $# -gt 0 ] || { echo "usage: kiln-forward LISTEN_PORT=HOST:PORT..." >&2; exit 2; }
for spec in "$@"; do
  [[ "$spec" =~ ^([0-9]+)=([A-Za-z0-9._-]+):([0-9]+)$ ]] || { echo "kiln-forward: bad forward '$spec'" >&2; exit 2; }
  socat "TCP-LISTEN:${BASH_REMATCH[1]},fork,reuseaddr" "TCP:${BASH_REMATCH[2]}:${BASH_REMATCH[3]}" &
  echo "kiln-forward: :${BASH_REMATCH[1]} -> ${BASH_REMATCH[2]}:${BASH_REMATCH[3]}"
done
wait -n
echo "kiln-forward: a forwarder exited" >&2
exit 1
