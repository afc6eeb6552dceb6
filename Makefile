# Kiln: `make run` installs, builds and runs the demo (only what it needs); `make test` installs, builds and
# runs everything and the tests.
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=
ifeq ($(CI),true)
CMAKE_FLAGS += -DKILN_WERROR=ON
endif

# What `make run` needs: the compiler, the libraries of the services, the CLI and the evaluators.
RUN_PACKAGES = build-essential cmake pkg-config libzmq3-dev cppzmq-dev libmsgpack-cxx-dev libyaml-cpp-dev \
  prometheus-cpp-dev libsqlite3-dev libcpp-httplib-dev libssl-dev nlohmann-json3-dev libcli11-dev \
  libspdlog-dev libarchive-dev zlib1g-dev libopenblas-dev
# What only the tests, the compose stack and the Slurm test add: Catch2, Prometheus, Docker, a browser for
# the report test, Python for the bridge tests and the PyTorch references, Slurm.
TEST_PACKAGES = catch2 clang-format prometheus docker.io docker-compose debootstrap python3 python3-zmq python3-yaml \
  python3-msgpack python3-torch chromium slurm-wlm munge
DEB_PACKAGES = $(RUN_PACKAGES) $(TEST_PACKAGES)
# The Python the stack tests run with: Debian's, where the python3-* packages above install their modules,
# whatever other python3 PATH finds first (one without zmq or yaml fails those tests for want of a module).
PYTHON ?= $(firstword $(wildcard /usr/bin/python3) python3)

CONFIGURE = cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo $(CMAKE_FLAGS)

.PHONY: deps deps-run build build-run run test compose-test swarm-test slurm-test bench format format-check clean

# Installs the Debian packages of its argument that are missing (apt-get, with sudo unless root).
define install_missing
	@missing=""; for p in $(1); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "install ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "make $@: installing$$missing"; \
	  SUDO=""; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends $$missing; \
	else echo "make $@: all packages present"; fi
endef

deps:
	$(call install_missing,$(DEB_PACKAGES))

deps-run:
	$(call install_missing,$(RUN_PACKAGES))

# Everything: services, CLI, evaluators, tests and benchmarks.
build: deps
	@grep -qs "KILN_BUILD_TESTS:BOOL=ON" $(BUILD)/CMakeCache.txt || $(CONFIGURE) -DKILN_BUILD_TESTS=ON -DKILN_BUILD_BENCH=ON
	cmake --build $(BUILD) -j $(JOBS)

# What `kiln up` runs and nothing else (the kiln_run target): a build folder made here has no tests or
# benchmarks configured, so Catch2 need not be installed; `make build` or `make test` adds them.
build-run: deps-run
	@[ -f $(BUILD)/CMakeCache.txt ] || $(CONFIGURE) -DKILN_BUILD_TESTS=OFF -DKILN_BUILD_BENCH=OFF
	cmake --build $(BUILD) -j $(JOBS) --target kiln_run

# The demo: every service, the bundled tasks this machine can run, the results table and a report per
# campaign. Its state, logs, reports and registry go under .kiln/ (ignored by git).
run: build-run
	$(BUILD)/bin/kiln up --demo

# The compose and Swarm stack tests run after the suite wherever a Docker daemon answers (.ci/run starts one); the
# Slurm test wherever it can start Slurm (it says SKIP and why where it cannot). The last lines count the
# tests that ran, passed, failed and were skipped (with each skipped one's reason), and check that every pass
# ran something: ctest's passes equal the Catch2 test cases that executed assertions (their XML reports under
# $(BUILD)/catch-xml) plus the other entries that counted their checks (tests/tools/ctest_summary.py). The
# exit status is non-zero iff a test failed or that check fails.
test: build
	@rm -rf $(BUILD)/catch-xml; \
	(cd $(BUILD) && ctest --output-on-failure -j $(JOBS) --timeout 600 --output-junit ctest-junit.xml \
	  --test-output-size-passed 262144); rc=$$?; \
	if [ $$rc -ne 0 ]; then :; elif docker info >/dev/null 2>&1; then $(MAKE) --no-print-directory compose-test || rc=1; \
	  [ $$rc -ne 0 ] || $(PYTHON) tests/cluster/swarm_test.py --kiln $(BUILD)/bin/kiln; s=$$?; [ $$s -eq 0 ] || [ $$s -eq 77 ] || rc=1; \
	else echo "make test: compose-test and swarm-test skipped: no Docker daemon (docker/ensure-dockerd.sh starts one as root)"; fi; \
	if [ $$rc -eq 0 ]; then $(PYTHON) tests/slurm/slurm_test.py --kiln $(BUILD)/bin/kiln; s=$$?; \
	  [ $$s -eq 0 ] || [ $$s -eq 77 ] || rc=1; fi; \
	mkdir -p $(BUILD)/catch-xml; \
	$(PYTHON) tests/tools/ctest_summary.py $(BUILD)/ctest-junit.xml --catch-xml $(BUILD)/catch-xml || rc=1; exit $$rc

# Builds the images, runs docker/docker-compose.yml with 3 compilers, a campaign from the host CLI, kills
# workers mid-campaign, checks the registry volume, Prometheus and the dashboard's queries; tears down.
compose-test: build
	$(PYTHON) tests/compose/compose_test.py --kiln $(BUILD)/bin/kiln

# Makes the Docker daemon a single-node swarm, deploys docker/kiln-stack.yml (`docker stack deploy`), a
# campaign from the host CLI through docker/swarm-gateway.sh; removes the stack and leaves the swarm.
swarm-test: build
	$(PYTHON) tests/cluster/swarm_test.py --kiln $(BUILD)/bin/kiln

# Starts munged, slurmctld and slurmd for one node (state in a temporary folder, no systemd), `kiln up` with
# no workers, and the workers as a Slurm job (deploy/slurm/kiln-slurm); a campaign from the host CLI, then a
# scancel mid-campaign and the job again. Exit 77 (SKIP, with the reason) where Slurm cannot start here.
slurm-test: build
	$(PYTHON) tests/slurm/slurm_test.py --kiln $(BUILD)/bin/kiln

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
