#!/usr/bin/env bash
# docker/ensure-dockerd.sh: make sure a Docker daemon answers. Where none runs and we are root with dockerd
# installed (Debian's docker.io), start one in the background (log: ${KILN_DOCKERD_LOG:-/tmp/kiln-dockerd.log}).
# Exit 0 when a daemon answers, 1 when none could be started (callers decide whether that is fatal).
set -uo pipefail
docker info >/dev/null 2>&1 && { echo "ensure-dockerd: a Docker daemon answers"; exit 0; }
command -v dockerd >/dev/null || { echo "ensure-dockerd: no dockerd installed (apt-get install docker.io)"; exit 1; }
[ "$(id -u)" = 0 ] || { echo "ensure-dockerd: not root: start the daemon with your init system"; exit 1; }
log="${KILN_DOCKERD_LOG:-/tmp/kiln-dockerd.log}"
nohup dockerd >"$log" 2>&1 &
for _ in $(seq 60); do
  docker info >/dev/null 2>&1 && { echo "ensure-dockerd: started dockerd (log $log)"; exit 0; }
  kill -0 $! 2>/dev/null || break
  sleep 1
done
echo "ensure-dockerd: dockerd did not come up; last lines of $log:"; tail -20 "$log"
exit 1
