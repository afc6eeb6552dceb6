# A Docker node in a container (Docker-in-Docker), for bench/cluster/swarm_nodes.py: Debian's docker.io,
# its own dockerd, joined into a swarm with its siblings. Runs with every capability, /var/lib/docker on a volume.
ARG BASE=debian:12
FROM ${BASE}
RUN apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      docker.io iptables ca-certificates procps iproute2 \
 && rm -rf /var/lib/apt/lists/*
ENTRYPOINT ["dockerd", "--host=unix:///var/run/docker.sock", "--storage-driver=overlay2"]
