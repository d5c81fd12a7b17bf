# countdownd: build, run, test, install.
#
#   make run       install missing system packages, build, run countdownd in the foreground
#   make test      install missing system packages, build, run the whole test suite
#   make test-loaded   the same while stress-ng keeps both cores busy at a lower priority
#   make release   a release build, the Swift runtime linked in (runs without the toolchain)
#   make install   install what `make release` built (PREFIX, DESTDIR); never builds or fetches
#   make deb       the Debian package, with debhelper, checked by lintian (.build/deb/)

PREFIX     ?= /usr/local
DESTDIR    ?=
BINDIR     ?= $(PREFIX)/bin
# The configuration file's folder (countdownd.service reads $(SYSCONFDIR)/countdownd/countdownd.conf).
SYSCONFDIR ?= $(PREFIX)/etc
UNITDIR    ?= $(PREFIX)/lib/systemd/system
USERUNITDIR ?= $(PREFIX)/lib/systemd/user
SYSUSERSDIR ?= $(PREFIX)/lib/sysusers.d
MANDIR     ?= $(PREFIX)/share/man
BASHCOMPDIR ?= $(PREFIX)/share/bash-completion/completions
ZSHCOMPDIR ?= $(PREFIX)/share/zsh/site-functions
FISHCOMPDIR ?= $(PREFIX)/share/fish/vendor_completions.d
# The cluster drop-in (not enabled by installing it), the protocol and cluster guides.
DOCDIR     ?= $(PREFIX)/share/doc/countdownd
# Where `make release` leaves the binaries (SwiftPM's link to the release build directory).
RELEASEDIR ?= .build/release
SWIFT      ?= swift
# System packages the build needs (C headers for the system-library targets, pkg-config to find them).
APT_PACKAGES := libsystemd-dev libsqlite3-dev libcurl4-openssl-dev pkg-config
# Only the tests use these (zsh and fish check their completions, etcd-server is a real cluster
# for the etcd client, iproute2 and iptables make the network namespace a real partition cuts
# off, golang-go and nodejs build and run those client libraries); without them those tests are skipped with a message, so failing to
# install them does not fail the build.
TEST_PACKAGES := zsh fish etcd-server iproute2 iptables systemd-container mmdebstrap prometheus mandoc golang-go nodejs

FUZZ_BIN     := .build/fuzz-request-parser
FUZZ_SECONDS ?= 300

.PHONY: all deps test-deps build release run check test test-loaded test-package booted-image install uninstall deb deb-deps clean fuzz fuzz-smoke bench bench-smoke bench-linking bench-hostile bench-instructions bench-leaderkill bench-cluster-done bench-cluster-burst bench-cluster-partition bench-clients test-python test-clients

all: build

# Installs what is missing, non-interactively. Needs root (or sudo) only when something is missing.
deps:
	@missing=""; \
	for pkg in $(APT_PACKAGES); do \
	  dpkg-query -W -f='$${Status}' $$pkg 2>/dev/null | grep -q "install ok installed" || missing="$$missing $$pkg"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  if [ "$$(id -u)" -eq 0 ]; then SUDO=""; elif command -v sudo >/dev/null; then SUDO="sudo"; \
	  else echo "error: missing packages:$$missing; install them as root: apt-get install$$missing" >&2; exit 1; fi; \
	  $$SUDO apt-get update -qq && \
	  $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing </dev/null; \
	fi

build: deps
	$(SWIFT) build

# The Swift runtime (stdlib, Foundation, Dispatch) linked statically: the binaries need only
# Debian's libc, libstdc++, libsystemd, libsqlite3 and libcurl, not the toolchain's directory.
# Linked with full RELRO (-z relro -z now), as Debian's hardening asks.
RELEASE_FLAGS := -c release --static-swift-stdlib -Xlinker -z -Xlinker relro -Xlinker -z -Xlinker now
release: deps
	$(SWIFT) build $(RELEASE_FLAGS)

run: build
	$$($(SWIFT) build --show-bin-path)/countdownd

test-deps:
	-@missing=""; for pkg in $(TEST_PACKAGES); do \
	  dpkg-query -W -f='$${Status}' $$pkg 2>/dev/null | grep -q "install ok installed" || missing="$$missing $$pkg"; done; \
	if [ -n "$$missing" ] && [ "$$(id -u)" -eq 0 ]; then \
	  echo "installing for the tests:$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing </dev/null >/dev/null; fi

# The fast lane, for work in progress: the pure core's suites (CountdownCoreTests) and the daemon
# components' (CountdownDaemonTests) on real descriptors, without the package, the booted
# container, a real daemon, etcd or fuzzing; about a minute here. `make test` is the whole suite,
# and what CI runs.
check: deps
	$(SWIFT) build --build-tests
	$(SWIFT) test --skip-build --filter '^CountdownCoreTests\.' --filter '^CountdownDaemonTests\.' --skip '\.EtcdClientTests'

# As root, the suite also installs the package into a booted systemd (Tests/Scripts/booted-systemd.sh):
# `make deb` builds it, and a minimal bookworm root is bootstrapped once into .build/booted (a new
# name whenever the packages in it change: libpam-systemd gives lingering users a user manager).
BOOTED_IMAGE := .build/booted/bookworm-minbase-2.tar
test: deps test-deps test-package
	$(SWIFT) build --build-tests
	$(SWIFT) test --skip-build
	$(MAKE) --no-print-directory test-python
	$(MAKE) --no-print-directory test-clients

# The Python client library's own tests, against the daemon just built.
test-python:
	COUNTDOWND_BIN="$$($(SWIFT) build --show-bin-path)/countdownd" python3 -m unittest discover -s clients/python/tests -v

# One contract for every client library (clients/conformance/): each runs the same cases against the
# real daemon, faults included, through a driver of its own; the Go and Node.js libraries' own unit
# tests run first. A client whose toolchain is missing is skipped, saying why.
CONFORMANCE := python3 clients/conformance/run.py --daemon "$$($(SWIFT) build --show-bin-path)/countdownd" --
GO_ENV := GOCACHE="$(CURDIR)/.build/go-cache" GOPATH="$(CURDIR)/.build/go-path" GOFLAGS=-buildvcs=false
test-clients:
	@status=0; \
	$(CONFORMANCE) python3 clients/python/conformance_driver.py --client blocking || status=1; \
	$(CONFORMANCE) python3 clients/python/conformance_driver.py --client async || status=1; \
	$(CONFORMANCE) "$$($(SWIFT) build --show-bin-path)/ConformanceDriver" || status=1; \
	if command -v go >/dev/null; then \
	  (cd clients/go && $(GO_ENV) go vet ./... && $(GO_ENV) go test ./... && \
	   $(GO_ENV) go build -o "$(CURDIR)/.build/go-conformance-driver" ./cmd/conformance-driver) && \
	  $(CONFORMANCE) .build/go-conformance-driver || status=1; \
	else echo "SKIP the Go client: no go toolchain (apt-get install golang-go; make test does as root)"; fi; \
	if command -v node >/dev/null; then \
	  (cd clients/node && node --test test/) && $(CONFORMANCE) node clients/node/conformance-driver.js || status=1; \
	else echo "SKIP the Node.js client: no node (apt-get install nodejs; make test does as root)"; fi; \
	exit $$status

# The package must build where it can be (a failure there is a failure of make test); where
# Debian's packaging tools cannot be installed, or the root cannot be bootstrapped, the tests
# that need them are skipped and say why.
test-package:
	@if [ "$$(id -u)" -ne 0 ]; then echo "not root: the package is not built, and the package tests are skipped"; \
	elif ! $(MAKE) --no-print-directory deb-deps; then echo "cannot install Debian's packaging tools: the package tests are skipped"; \
	else $(MAKE) --no-print-directory deb && $(MAKE) --no-print-directory booted-image; fi

booted-image:
	@[ -f $(BOOTED_IMAGE) ] || { rm -rf $(BOOTED_IMAGE) $(BOOTED_IMAGE).part.tar && mkdir -p $(dir $(BOOTED_IMAGE)) && \
	  command -v mmdebstrap >/dev/null && \
	  mmdebstrap --quiet --format=tar --variant=minbase --include=systemd,systemd-sysv,dbus,libpam-systemd,libsystemd0,libsqlite3-0,libcurl4 \
	    bookworm $(BOOTED_IMAGE).part.tar && mv $(BOOTED_IMAGE).part.tar $(BOOTED_IMAGE); } || \
	  { rm -rf $(BOOTED_IMAGE).part.tar; echo "could not bootstrap a bookworm root (mmdebstrap needs Debian's mirror): the booted-systemd test is skipped"; }

# The whole suite with every core busy (stress-ng at nice 19): a test that only passes on a
# quiet machine fails here before it fails in CI. Installs stress-ng when it can.
test-loaded: deps test-deps test-package
	@command -v stress-ng >/dev/null || { [ "$$(id -u)" -eq 0 ] && apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends stress-ng </dev/null >/dev/null; }
	@command -v stress-ng >/dev/null || { echo "error: stress-ng is not installed; install it as root: apt-get install stress-ng" >&2; exit 1; }
	$(SWIFT) build --build-tests
	nice -n 19 stress-ng --cpu $$(nproc) --timeout 3600s --quiet & load=$$!; \
	trap 'kill $$load 2>/dev/null; wait $$load 2>/dev/null' EXIT; \
	$(SWIFT) test --skip-build && $(MAKE) --no-print-directory test-python && $(MAKE) --no-print-directory test-clients

# For packagers and operators: installs the release build as it is, with an explicit mode for
# every file whatever the umask; it never builds (run `make release` first) and never fetches.
install:
	@for binary in countdownd cdctl; do [ -x $(RELEASEDIR)/$$binary ] || \
	  { echo "error: $(RELEASEDIR)/$$binary is not built; run make release first (make install only installs)" >&2; exit 1; }; done
	umask 022 && install -d -m 0755 $(DESTDIR)$(BINDIR) $(DESTDIR)$(UNITDIR) $(DESTDIR)$(USERUNITDIR) $(DESTDIR)$(SYSUSERSDIR) \
	  $(DESTDIR)$(MANDIR)/man1 $(DESTDIR)$(MANDIR)/man8 $(DESTDIR)$(BASHCOMPDIR) $(DESTDIR)$(ZSHCOMPDIR) $(DESTDIR)$(FISHCOMPDIR) \
	  $(DESTDIR)$(DOCDIR) $(DESTDIR)$(SYSCONFDIR)/countdownd
	install -m 0755 $(RELEASEDIR)/countdownd $(DESTDIR)$(BINDIR)/countdownd
	install -m 0755 $(RELEASEDIR)/cdctl $(DESTDIR)$(BINDIR)/cdctl
	@staged=$$(mktemp -d) && trap 'rm -rf "$$staged"' EXIT && \
	for unit in systemd/countdownd.service systemd/countdownd.socket systemd/countdownd-cluster.conf \
	    systemd/countdownd-metrics.service systemd/countdownd-metrics.timer \
	    systemd/user/countdownd.service systemd/user/countdownd.socket; do \
	  mkdir -p "$$staged/$$(dirname $$unit)" && sed -e 's|@BINDIR@|$(BINDIR)|g' -e 's|@SYSCONFDIR@|$(SYSCONFDIR)|g' $$unit > "$$staged/$$unit" || exit 1; done && \
	install -v -m 0644 "$$staged/systemd/countdownd.service" "$$staged/systemd/countdownd.socket" \
	  "$$staged/systemd/countdownd-metrics.service" "$$staged/systemd/countdownd-metrics.timer" $(DESTDIR)$(UNITDIR)/ && \
	install -v -m 0644 "$$staged/systemd/user/countdownd.service" "$$staged/systemd/user/countdownd.socket" $(DESTDIR)$(USERUNITDIR)/ && \
	install -v -m 0644 "$$staged/systemd/countdownd-cluster.conf" $(DESTDIR)$(DOCDIR)/countdownd-cluster.conf
	install -m 0644 systemd/countdownd.sysusers $(DESTDIR)$(SYSUSERSDIR)/countdownd.conf
	install -m 0644 systemd/countdownd.conf $(DESTDIR)$(SYSCONFDIR)/countdownd/countdownd.conf
	install -m 0644 docs/man/cdctl.1 $(DESTDIR)$(MANDIR)/man1/cdctl.1
	install -m 0644 docs/man/countdownd.8 $(DESTDIR)$(MANDIR)/man8/countdownd.8
	install -m 0644 completions/cdctl.bash $(DESTDIR)$(BASHCOMPDIR)/cdctl
	install -m 0644 completions/_cdctl $(DESTDIR)$(ZSHCOMPDIR)/_cdctl
	install -m 0644 completions/cdctl.fish $(DESTDIR)$(FISHCOMPDIR)/cdctl.fish
	install -m 0644 docs/PROTOCOL.md docs/CLUSTER.md $(DESTDIR)$(DOCDIR)/

uninstall:
	rm -f $(DESTDIR)$(BINDIR)/countdownd $(DESTDIR)$(BINDIR)/cdctl
	rm -f $(DESTDIR)$(UNITDIR)/countdownd.service $(DESTDIR)$(UNITDIR)/countdownd.socket
	rm -f $(DESTDIR)$(UNITDIR)/countdownd-metrics.service $(DESTDIR)$(UNITDIR)/countdownd-metrics.timer
	rm -f $(DESTDIR)$(USERUNITDIR)/countdownd.service $(DESTDIR)$(USERUNITDIR)/countdownd.socket
	rm -f $(DESTDIR)$(SYSUSERSDIR)/countdownd.conf
	rm -f $(DESTDIR)$(SYSCONFDIR)/countdownd/countdownd.conf
	rm -f $(DESTDIR)$(MANDIR)/man1/cdctl.1 $(DESTDIR)$(MANDIR)/man8/countdownd.8
	rm -f $(DESTDIR)$(BASHCOMPDIR)/cdctl $(DESTDIR)$(ZSHCOMPDIR)/_cdctl $(DESTDIR)$(FISHCOMPDIR)/cdctl.fish
	rm -f $(DESTDIR)$(DOCDIR)/countdownd-cluster.conf $(DESTDIR)$(DOCDIR)/CLUSTER.md $(DESTDIR)$(DOCDIR)/PROTOCOL.md

# The Debian package, built by debhelper (debian/rules runs `make release` and `make install`),
# then checked by lintian; the .deb, .changes and .buildinfo end up in .build/deb/.
DEB_TOOLS := debhelper lintian dpkg-dev fakeroot
deb-deps: deps
	@missing=""; for pkg in $(DEB_TOOLS); do \
	  dpkg-query -W -f='$${Status}' $$pkg 2>/dev/null | grep -q "install ok installed" || missing="$$missing $$pkg"; done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" -ne 0 ]; then echo "error: missing packages:$$missing; install them as root: apt-get install$$missing" >&2; exit 1; fi; \
	  echo "installing:$$missing"; apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing </dev/null >/dev/null; fi

deb: deb-deps
	rm -rf .build/deb
	mkdir -p .build/deb
	version=$$(dpkg-parsechangelog -S Version) && arch=$$(dpkg-architecture -qDEB_HOST_ARCH) && \
	out="$(CURDIR)/.build/deb" && changes="$$out/countdownd_$${version}_$${arch}.changes" && \
	DEB_OUTPUT_DIR="$$out" dpkg-buildpackage -b -us -uc \
	  --changes-file="$$changes" --buildinfo-file="$$out/countdownd_$${version}_$${arch}.buildinfo" \
	  --changes-option=-u"$$out" --buildinfo-option=-u"$$out" && \
	lintian --fail-on error,warning --display-info --pedantic "$$changes" && \
	for built in "$$out"/*.deb; do \
	  echo "$$(basename "$$built"): $$(stat -c %s "$$built") bytes, installed $$(dpkg-deb -f "$$built" Installed-Size) KiB"; done

# libFuzzer over the request path (framer, parser, engine, encoder). SwiftPM cannot link a fuzzer
# executable, so the pure core is compiled with swiftc directly (Fuzz/README.md).
$(FUZZ_BIN): Sources/CountdownCore/*.swift Fuzz/RequestParserFuzz.swift
	mkdir -p .build
	swiftc -O -sanitize=fuzzer,address -parse-as-library -module-name CountdownCore \
	  Sources/CountdownCore/*.swift Fuzz/RequestParserFuzz.swift -o $@

# A long run that adds new inputs to the committed corpus (review and commit the interesting ones).
fuzz: $(FUZZ_BIN)
	$(FUZZ_BIN) -max_total_time=$(FUZZ_SECONDS) -dict=Fuzz/protocol.dict -max_len=2048 Fuzz/corpus/request-parser

# A short bounded run on a scratch copy of the corpus (the test suite runs the same).
fuzz-smoke: $(FUZZ_BIN)
	tmp=$$(mktemp -d) && cp Fuzz/corpus/request-parser/* $$tmp/ && \
	$(FUZZ_BIN) -runs=50000 -dict=Fuzz/protocol.dict -max_len=2048 $$tmp; rc=$$?; rm -rf $$tmp; exit $$rc

# The benchmark (BENCHMARKS.md): countdownd against Redis and the clock floor. Installs
# redis-server when it can (the Redis column is skipped otherwise). A few minutes; not run by CI.
# A clean release build: after a change to a struct's layout, an incremental release build has
# linked code that inlined the old layout across modules (seen here as heap corruption at start).
bench: deps
	rm -rf "$$($(SWIFT) build -c release --show-bin-path)"
	$(SWIFT) build $(RELEASE_FLAGS)
	-@command -v redis-server >/dev/null || { [ "$$(id -u)" -eq 0 ] && apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends redis-server </dev/null >/dev/null; }
	python3 bench/run.py

# countdownd under attack (BENCHMARKS.md, "Under attack"): root's PING and done while another uid
# attacks, a never-reading subscriber's memory and CPU. Needs root (setpriv). Not run by CI.
bench-hostile: deps
	rm -rf "$$($(SWIFT) build -c release --show-bin-path)"
	$(SWIFT) build $(RELEASE_FLAGS)
	python3 bench/hostile.py

# Cluster mode: a fresh client's wait before, during and after a kill -9 of the etcd leader under
# load (bench/leaderkill.py; figures into bench/notes.md by hand). Needs etcd. Not run by CI.
bench-leaderkill: deps
	$(SWIFT) build $(RELEASE_FLAGS)
	python3 bench/leaderkill.py

# Cluster mode: `done` lateness on every host in issue 21's configuration (three hosts, 3,000
# deadlines over 10 s, no faults; bench/clusterdone.py; figures into bench/notes.md by hand).
# Needs etcd. Not run by CI.
bench-cluster-done: deps
	$(SWIFT) build $(RELEASE_FLAGS)
	python3 bench/clusterdone.py

# Cluster mode under a burst (issue 38): 10,000, 30,000 and 100,000 deadlines within one second
# across three hosts, every done once on every host, lateness per host beside one host in local
# mode and beside etcd's own floor for the same writes and watches (bench/etcdfloor.go, with
# golang-go); bench/clusterburst.py, figures into bench/notes.md by hand. Needs etcd. Not run by
# CI (about 25 minutes).
bench-cluster-burst: deps
	$(SWIFT) build $(RELEASE_FLAGS)
	python3 bench/clusterburst.py

# Cluster mode across a real partition (issue 38, rows 5 and 6): one of three hosts in a network
# namespace, cut off by iptables from every etcd member for 120 s (then healed: how soon its copy
# and its subscriber are current), or from its first member only for 40 s (its dones' lateness,
# and a STATUS right after its own START); every done once, in etcd's history too;
# bench/clusterpartition.py, figures into bench/notes.md by hand. Needs root, etcd, iproute2 and
# iptables. Not run by CI (about 10 minutes).
bench-cluster-partition: deps test-deps
	$(SWIFT) build $(RELEASE_FLAGS)
	python3 bench/clusterpartition.py

# The Python client's own CPU per unpipelined START against redis-py's per SET NX PX (issue 33;
# bench/clients.py; figures into bench/notes.md by hand). Installs redis-server and redis-py when
# it can. Not run by CI.
bench-clients: release
	-@command -v redis-server >/dev/null || { [ "$$(id -u)" -eq 0 ] && apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends redis-server </dev/null >/dev/null; }
	-@python3 -c "import redis" 2>/dev/null || python3 -m pip install --quiet redis
	python3 bench/clients.py "$$($(SWIFT) build $(RELEASE_FLAGS) --show-bin-path)/countdownd"

# Instructions per event of the hot path, counted by callgrind: the engine and encoder alone (no
# I/O; they do not change with a machine's load), the driver's full run against one that only
# starts the countdowns; then the real release daemon's, per START and per delivered event, on a
# temporary socket. The driver is built with whole-module optimization, as in the release build:
# without it, generic code in the engine went through runtime metadata lookups, a third of its
# instructions. Installs valgrind.
ENGINE_DRIVER := .build/engine-driver
$(ENGINE_DRIVER): Sources/CountdownCore/*.swift bench/engine-driver.swift
	mkdir -p .build
	swiftc -O -wmo -parse-as-library -module-name CountdownCore Sources/CountdownCore/*.swift bench/engine-driver.swift -lm -o $@

bench-instructions: $(ENGINE_DRIVER) release
	@command -v valgrind >/dev/null || { [ "$$(id -u)" -eq 0 ] && apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends valgrind </dev/null >/dev/null; }
	python3 bench/instructions.py $(ENGINE_DRIVER) "$$($(SWIFT) build $(RELEASE_FLAGS) --show-bin-path)/countdownd"

# What static linking of the Swift runtime costs or saves: the packaged build against a dynamic one.
bench-linking: release
	$(SWIFT) build -c release --scratch-path .build/dynamic
	python3 bench/linking.py

# The same with tiny sizes, to check the benchmark still works (writes to /tmp, not BENCHMARKS.md).
bench-smoke: release
	python3 bench/run.py --quick --runs 1 --output /tmp/BENCHMARKS-smoke.md

clean:
	$(SWIFT) package clean
