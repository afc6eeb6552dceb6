#!/usr/bin/env bash
# docker/swarm-gateway.sh [STACK] [stop]: the host CLI's way into a Kiln stack on Docker Swarm. Swarm
# publishes a port on every interface of a node, so the stack publishes none but the CURVE bridge port;
# this starts a container `<STACK>-gateway` on the stack's overlay network that forwards ports of this
# host's loopback to the services: the broker's worker port (what `kiln` talks to), Prometheus, the
# scorer's reports and Grafana. Run it on the node you submit from (any swarm node).
#   KILN_GATEWAY_ADDR   address to publish on (default 127.0.0.1)
#   KILN_GATEWAY_PORTS  HOSTPORT=SERVICE:PORT ... (default 5555=broker:5555 9090=prometheus:9090
#                       9474=scorer:9474 3000=grafana:3000)
# Builds the small kiln-gateway image (Debian's socat) from docker/gateway/ when it is missing.
set -euo pipefail
stack="${1:-kiln}"
name="$stack-gateway"
root="$(cd "$(dirname "$0")/.." && pwd)"
if [ "${2:-}" = stop ]; then
  docker rm -f "$name" >/dev/null 2>&1 && echo "swarm-gateway: stopped $name" || echo "swarm-gateway: no $name"
  exit 0
fi
addr="${KILN_GATEWAY_ADDR:-127.0.0.1}"
ports="${KILN_GATEWAY_PORTS:-5555=broker:5555 9090=prometheus:9090 9474=scorer:9474 3000=grafana:3000}"
image="${KILN_GATEWAY_IMAGE:-kiln-gateway:latest}"
network="${stack}_kiln"
docker network inspect "$network" >/dev/null 2>&1 || {
  echo "swarm-gateway: no network $network: deploy the stack first (docker stack deploy -c docker/kiln-stack.yml $stack)" >&2
  exit 1; }
if ! docker image inspect "$image" >/dev/null 2>&1; then
  echo "swarm-gateway: building $image"
  docker build -q -f "$root/docker/gateway/Dockerfile" -t "$image" "$root" >/dev/null
fi
publish=() forwards=()
for spec in $ports; do
  [[ "$spec" =~ ^([0-9]+)=([A-Za-z0-9._-]+):([0-9]+)$ ]] || { echo "swarm-gateway: bad port '$spec' (HOSTPORT=SERVICE:PORT)" >&2; exit 2; }
  publish+=(-p "$addr:${BASH_REMATCH[1]}:${BASH_REMATCH[3]}")
  forwards+=("${BASH_REMATCH[3]}=${BASH_REMATCH[2]}:${BASH_REMATCH[3]}")
done
docker rm -f "$name" >/dev/null 2>&1 || true
docker run -d --name "$name" --restart unless-stopped --network "$network" --cap-drop ALL \
  --security-opt no-new-privileges:true --read-only "${publish[@]}" "$image" "${forwards[@]}" >/dev/null
echo "swarm-gateway: $name forwards $ports on $addr"
