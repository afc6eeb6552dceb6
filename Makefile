# Kiln: `make run` installs, builds and runs the demo; `make test` installs, builds and runs the tests.
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=
ifeq ($(CI),true)
CMAKE_FLAGS += -DKILN_WERROR=ON
endif

DEB_PACKAGES = build-essential cmake pkg-config libzmq3-dev cppzmq-dev libmsgpack-cxx-dev libyaml-cpp-dev \
  prometheus-cpp-dev catch2 libsqlite3-dev libcpp-httplib-dev libssl-dev nlohmann-json3-dev libcli11-dev \
  libspdlog-dev libarchive-dev zlib1g-dev libopenblas-dev clang-format prometheus docker.io docker-compose debootstrap \
  python3 python3-zmq python3-yaml python3-msgpack python3-torch chromium slurm-wlm munge

.PHONY: deps build run test compose-test swarm-test slurm-test bench format format-check clean

deps:
	@missing=""; for p in $(DEB_PACKAGES); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "install ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "make deps: installing$$missing"; \
	  SUDO=""; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends $$missing; \
	else echo "make deps: all packages present"; fi

$(BUILD)/CMakeCache.txt:
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo $(CMAKE_FLAGS)

build: deps $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j $(JOBS)

run: build
	$(BUILD)/bin/kiln up --demo

# The compose and Swarm stack tests run after the suite wherever a Docker daemon answers (.ci/run starts one); the
# Slurm test wherever it can start Slurm (it says SKIP and why where it cannot). The last lines count the
# tests that ran, passed, failed and were skipped (with each skipped one's reason); the exit status is
# non-zero iff a test failed.
test: build
	@(cd $(BUILD) && ctest --output-on-failure -j $(JOBS) --timeout 600 --output-junit ctest-junit.xml); rc=$$?; \
	if [ $$rc -ne 0 ]; then :; elif docker info >/dev/null 2>&1; then $(MAKE) --no-print-directory compose-test || rc=1; \
	  [ $$rc -ne 0 ] || python3 tests/cluster/swarm_test.py --kiln $(BUILD)/bin/kiln; s=$$?; [ $$s -eq 0 ] || [ $$s -eq 77 ] || rc=1; \
	else echo "make test: compose-test and swarm-test skipped: no Docker daemon (docker/ensure-dockerd.sh starts one as root)"; fi; \
	if [ $$rc -eq 0 ]; then python3 tests/slurm/slurm_test.py --kiln $(BUILD)/bin/kiln; s=$$?; \
	  [ $$s -eq 0 ] || [ $$s -eq 77 ] || rc=1; fi; \
	python3 tests/tools/ctest_summary.py $(BUILD)/ctest-junit.xml || rc=1; exit $$rc

# Builds the images, runs docker/docker-compose.yml with 3 compilers, a campaign from the host CLI, kills
# workers mid-campaign, checks the registry volume, Prometheus and the dashboard's queries; tears down.
compose-test: build
	python3 tests/compose/compose_test.py --kiln $(BUILD)/bin/kiln

# Makes the Docker daemon a single-node swarm, deploys docker/kiln-stack.yml (`docker stack deploy`), a
# campaign from the host CLI through docker/swarm-gateway.sh; removes the stack and leaves the swarm.
swarm-test: build
	python3 tests/cluster/swarm_test.py --kiln $(BUILD)/bin/kiln

# Starts munged, slurmctld and slurmd for one node (state in a temporary folder, no systemd), `kiln up` with
# no workers, and the workers as a Slurm job (deploy/slurm/kiln-slurm); a campaign from the host CLI, then a
# scancel mid-campaign and the job again. Exit 77 (SKIP, with the reason) where Slurm cannot start here.
slurm-test: build
	python3 tests/slurm/slurm_test.py --kiln $(BUILD)/bin/kiln

bench: build
	mkdir -p bench/results
	$(BUILD)/bin/kiln-bench-broker --json bench/results/broker.json
	$(BUILD)/bin/kiln-bench-timing --json bench/results/timing.json
	$(BUILD)/bin/kiln-bench-host --out bench/results/host.json

# Kiln's own C++ in the layout of .clang-format (task packages under configs/tasks and tests/data are not
# touched: their .clang-format disables it).
format:
	git ls-files '*.cc' '*.h' '*.cu' '*.cuh' | xargs clang-format -i

# The same files checked, not changed: one line per file `make format` would change (also a ctest gate).
format-check:
	bash .ci/gates/format.sh

clean:
	rm -rf $(BUILD) .kiln
