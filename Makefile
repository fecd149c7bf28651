# One command per job. Both create .venv on first use and reinstall when pyproject.toml changes.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: run test test-deploy lint browser redis deploy bench clean

# The venv's own pip is used as it comes (an upgrade cost 3.3 s of a first start). The
# installs skip pip's byte-compiling of every installed module (6 s): Python compiles a
# module's bytecode when it is first imported, only what is imported, and keeps it, also
# where PYTHONDONTWRITEBYTECODE is set (as in many containers; without the bytecode every
# start compiled its imports again, 1.4 s): what make runs writes only in .venv and app/.
unexport PYTHONDONTWRITEBYTECODE
$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# numba compiles each kernel on its first call and caches it on disk (app/core/__pycache__,
# app/batch/__pycache__ for neardup dedup's; keyed on the source's contents): the install
# compiles them all (`neardup warm-up`, about 35 s on 2 cores), so that a start or the first dedup only
# loads them; $(VENV)/.kernels compiles again after a change.
KERNEL_SOURCES := $(wildcard app/core/*.py) $(wildcard app/batch/*.py) app/warmup.py

# The sources' bytecode is written too: an editable install has none, and where
# PYTHONDONTWRITEBYTECODE is set (as in many containers) every start compiled app/ again
# (some 0.3 s of a start). Stale bytecode is never used: Python compares the sources' times.
COMPILE := $(BIN)/python -m compileall -q app neardup_client

$(VENV)/.installed-run: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q --no-compile -e '.[batch]'
	$(BIN)/neardup warm-up
	$(COMPILE)
	touch $@ $(VENV)/.kernels

$(VENV)/.installed-test: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q --no-compile -e '.[test,bench,batch]'
	$(BIN)/neardup warm-up
	$(COMPILE)
	touch $@ $(VENV)/.installed-run $(VENV)/.kernels

$(VENV)/.kernels: $(KERNEL_SOURCES) | $(VENV)/.installed-run
	$(BIN)/neardup warm-up
	$(COMPILE)
	touch $@

run: $(VENV)/.installed-run $(VENV)/.kernels
	$(COMPILE)
	NEARDUP_DATA_DIR=$${NEARDUP_DATA_DIR:-./data} $(BIN)/neardup serve

lint: $(VENV)/.installed-test
	$(BIN)/ruff check app tests bench loadtest neardup_client devkit
	$(BIN)/ruff format --check app tests bench loadtest neardup_client devkit
	$(BIN)/mypy --strict app neardup_client

# The page's browser tests (tests/api/test_page.py) drive Debian's chromium and
# chromium-driver: installed here when missing and this runs as root with apt-get
# (TMPDIR: apt's sandbox user must be able to write it, which /tmp is not everywhere).
# Elsewhere, or when the install fails, those tests skip and say why.
browser:
	@if [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ]; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "make: installing chromium and chromium-driver for the browser tests"; \
		export TMPDIR=/var/tmp DEBIAN_FRONTEND=noninteractive; \
		{ apt-get update -q && apt-get install -y -q chromium chromium-driver; } \
			>$$TMPDIR/neardup-apt-chromium.log 2>&1 \
		|| { tail -5 $$TMPDIR/neardup-apt-chromium.log; \
			echo "make: chromium could not be installed: the browser tests will skip"; }; \
	else echo "make: chromium is not installed (needs root and apt-get): the browser tests will skip"; fi

# The Redis tests (tests/backends/redis/, and the contract tests on Redis) start Debian's
# redis-server and use redis-cli --cluster: installed here like chromium above; without
# them those tests skip.
redis:
	@if command -v redis-server >/dev/null && command -v redis-cli >/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "make: installing redis-server for the Redis store's tests"; \
		export TMPDIR=/var/tmp DEBIAN_FRONTEND=noninteractive; \
		{ apt-get update -q && apt-get install -y -q redis-server; } \
			>$$TMPDIR/neardup-apt-redis.log 2>&1 \
		|| { tail -5 $$TMPDIR/neardup-apt-redis.log; \
			echo "make: redis-server could not be installed: the Redis tests will skip"; }; \
	else echo "make: redis-server is not installed (needs root and apt-get): the Redis tests will skip"; fi

# The deployment tests (tests/deploy/) build the image and run it and the compose file
# with Debian's docker.io and docker-compose, on base images made with debootstrap:
# installed here like chromium above; without them those tests skip.
deploy:
	@if command -v dockerd >/dev/null && command -v docker-compose >/dev/null \
		&& command -v debootstrap >/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "make: installing docker.io, docker-compose and debootstrap for the deployment tests"; \
		export TMPDIR=/var/tmp DEBIAN_FRONTEND=noninteractive; \
		{ apt-get update -q && apt-get install -y -q docker.io docker-compose debootstrap; } \
			>$$TMPDIR/neardup-apt-docker.log 2>&1 \
		|| { tail -5 $$TMPDIR/neardup-apt-docker.log; \
			echo "make: Docker could not be installed: the deployment tests will skip"; }; \
	else echo "make: Docker is not installed (needs root and apt-get): the deployment tests will skip"; fi

test-deploy: $(VENV)/.installed-test deploy
	$(BIN)/pytest -q -m deploy tests/deploy

# Two workers, each taking whole test files: the suite is mostly one core's work (the
# servers it starts included), and halves on a 2-core machine (20 to 9.5 minutes).
# The kernels are compiled before pytest's two workers start: two processes compiling the
# same kernel into numba's cache at once can leave an index naming the other's code.
# A kernel compiled while the tests ran is a path app/warmup.py does not walk: a first
# request that takes it waits for the compile (and two workers write one cache): named.
# Not the tests' own kernels (figure_counts, in tests/api/test_startup.py's
# NOT_SERVICE_KERNELS; figure_kind, which a test calls from Python on every code point),
# nor is_cjk, which compiling them saves again.
TESTS_OWN_KERNELS := -e figure_counts- -e figure_kind- -e is_cjk-
test: lint browser redis deploy $(VENV)/.kernels
	$(COMPILE)
	$(BIN)/pytest -q -n 2 --dist loadfile
	@late=$$(find app -name '*.nbi' -newer $(VENV)/.kernels | grep -v $(TESTS_OWN_KERNELS)); \
	if [ -n "$$late" ]; then \
		echo "make: kernels compiled during the tests, not by neardup warm-up:"; \
		echo "$$late"; fi

bench: $(VENV)/.installed-test
	$(BIN)/python -m bench.fingerprints

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
