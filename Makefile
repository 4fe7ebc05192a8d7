# tcplab — GNU Make.  `make` builds, `make test` runs every test, `make deps` installs
# what is missing (Debian packages only).  V=1 shows the commands.
PREFIX  ?= /usr/local
DESTDIR ?=
CC      ?= cc
PYTHON  ?= /usr/bin/python3
BUILD   ?= build
FUZZ_SECONDS ?= 60
FUZZ_JOBS    ?= 1
export FUZZ_JOBS   # to tests/fuzz/run.sh through the environment, never as shell text

CFLAGS  ?= -O2 -g
# Flags every build needs, kept apart from CFLAGS so `make CFLAGS=…` cannot drop them.
TL_CFLAGS := -std=c11 -D_GNU_SOURCE -Wall -Wextra -Wshadow -Wformat=2 -Wstrict-prototypes \
	   -Wmissing-prototypes -Werror=implicit-function-declaration -Icommon -Inetlink \
	   -Ifixtures/lib -Iprobes/lib
MNL_CFLAGS := $(shell pkg-config --cflags libmnl 2>/dev/null)
MNL_LIBS   := $(shell pkg-config --libs libmnl 2>/dev/null || echo -lmnl)
LDLIBS  += -lm -lpthread

ifeq ($(V),1)
Q :=
else
Q := @
endif

# Every .c directly in fixtures/ or probes/ is one program.  Libraries: common/ (what both
# link), fixtures/lib/ (the fixture library), probes/lib/ (the probes' parsers), netlink/.
COMMON_SRC  := $(wildcard common/*.c)
FXLIB_SRC   := $(wildcard fixtures/lib/*.c)
PRLIB_SRC   := $(wildcard probes/lib/*.c)
NETLINK_SRC := $(wildcard netlink/*.c)
FIXTURE_SRC := $(wildcard fixtures/*.c)
PROBE_SRC   := $(wildcard probes/*.c)

COMMON_OBJ  := $(COMMON_SRC:%.c=$(BUILD)/%.o)
FXLIB_OBJ   := $(FXLIB_SRC:%.c=$(BUILD)/%.o)
PRLIB_OBJ   := $(PRLIB_SRC:%.c=$(BUILD)/%.o)
NETLINK_OBJ := $(NETLINK_SRC:%.c=$(BUILD)/%.o)
FIXTURES    := $(FIXTURE_SRC:fixtures/%.c=$(BUILD)/bin/%)
PROBES      := $(PROBE_SRC:probes/%.c=$(BUILD)/bin/%)

# tcpevents (docs/tcpevents.md) is a BPF program and its loader: built only where clang, bpftool,
# libbpf (libbpf-dev) and this kernel's BTF (for vmlinux.h) are; elsewhere `make` leaves it out
# and says so once.
BPF_CLANG   ?= clang
BPFTOOL     ?= $(or $(shell command -v bpftool 2> /dev/null),$(wildcard /usr/sbin/bpftool))
VMLINUX_BTF ?= /sys/kernel/btf/vmlinux
BPF_ARCH    := $(patsubst x86_64,x86,$(patsubst aarch64,arm64,$(shell uname -m)))
TCPEV_WHY   := $(strip \
	$(if $(shell command -v $(BPF_CLANG) 2> /dev/null),,no $(BPF_CLANG);) \
	$(if $(BPFTOOL),,no bpftool;) \
	$(if $(shell pkg-config --exists libbpf 2> /dev/null && echo y),,no libbpf (pkg-config libbpf);) \
	$(if $(wildcard $(VMLINUX_BTF)),,no kernel BTF ($(VMLINUX_BTF));))
ifneq ($(TCPEV_WHY),)
PROBES      := $(filter-out $(BUILD)/bin/tcpevents,$(PROBES))
endif
PROGRAMS    := $(FIXTURES) $(PROBES)

.PHONY: all test check check-rest bench sanitize deps deps-apt install uninstall clean fuzz

all: $(PROGRAMS)
ifneq ($(TCPEV_WHY),)
	@why='$(TCPEV_WHY)'; echo "make: tcpevents not built: $${why%;} (make deps installs bpftool and libbpf-dev, make deps-fuzz clang)" >&2
endif

# Objects depend on the flags they were built with: a build directory made with other CFLAGS
# (e.g. by hand, with sanitizers) is rebuilt instead of reported "up to date".
FLAGS_STAMP := $(BUILD)/.flags
FLAGS_NOW   := $(CC) $(CPPFLAGS) $(TL_CFLAGS) $(CFLAGS) $(MNL_CFLAGS) $(LDFLAGS)
$(shell mkdir -p $(BUILD) && { [ -f $(FLAGS_STAMP) ] && [ "$$(cat $(FLAGS_STAMP))" = '$(FLAGS_NOW)' ] || echo '$(FLAGS_NOW)' > $(FLAGS_STAMP); })

$(BUILD)/%.o: %.c $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC      $<")
	$(Q)$(CC) $(CPPFLAGS) $(TL_CFLAGS) $(CFLAGS) $(MNL_CFLAGS) -MMD -MP -c -o $@ $<

$(BUILD)/libcommon.a: $(COMMON_OBJ)
	$(Q)$(AR) rcs $@ $^

$(BUILD)/libtcplabnl.a: $(NETLINK_OBJ)
	$(Q)$(AR) rcs $@ $^

$(BUILD)/libfixture.a: $(FXLIB_OBJ)
	$(Q)$(AR) rcs $@ $^

$(BUILD)/libprobe.a: $(PRLIB_OBJ)
	$(Q)$(AR) rcs $@ $^

# Programs are linked to $@.tmp and renamed: an interrupted link never leaves a truncated
# program that make -q would call up to date.
$(FIXTURES): $(BUILD)/bin/%: $(BUILD)/fixtures/%.o $(BUILD)/libfixture.a $(BUILD)/libcommon.a
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(TL_CFLAGS) $(CFLAGS) $(LDFLAGS) -o $@.tmp $^ $(LDLIBS) && mv -f $@.tmp $@

$(PROBES): $(BUILD)/bin/%: $(BUILD)/probes/%.o $(BUILD)/libprobe.a $(BUILD)/libtcplabnl.a \
		$(BUILD)/libcommon.a
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(TL_CFLAGS) $(CFLAGS) $(LDFLAGS) -o $@.tmp $^ $(PROBE_LIBS) $(MNL_LIBS) $(LDLIBS) && mv -f $@.tmp $@

# machine inflates /proc/config.gz with zlib (zlib1g-dev), linked statically: the QEMU guest's
# initramfs gets a program's shared libraries from ldd (experiments/guest/vm.sh), and libz.so is
# one thing fewer that can be missing there.  `ldd build/bin/machine` lists no libz.
ZLIB_STATIC := -Wl,-Bstatic -lz -Wl,-Bdynamic
$(BUILD)/bin/machine: PROBE_LIBS := $(ZLIB_STATIC)

# capture links Debian's shared libpcap (libpcap-dev), the only program that does: a static
# libpcap.a would need libdbus-1 and libsystemd archives, which Debian does not ship
# (`pkg-config --static --libs libpcap`); the guest gets libpcap.so from ldd like the others.
PCAP_LIBS := $(shell pkg-config --libs libpcap 2>/dev/null || echo -lpcap)
$(BUILD)/bin/capture: PROBE_LIBS := $(PCAP_LIBS)

# tls_peer links Debian's shared OpenSSL (libssl-dev), the p08-tls units' TLS stack.
SSL_LIBS := $(shell pkg-config --libs openssl 2>/dev/null || echo -lssl -lcrypto)
$(BUILD)/bin/tls_peer: LDLIBS += $(SSL_LIBS)

# curl_pool links Debian's shared libcurl (libcurl4-openssl-dev), p09-curl-nginx's real pool.
CURL_CFLAGS := $(shell pkg-config --cflags libcurl 2>/dev/null)
CURL_LIBS   := $(shell pkg-config --libs libcurl 2>/dev/null || echo -lcurl)
$(BUILD)/fixtures/curl_pool.o: CPPFLAGS += $(CURL_CFLAGS)
$(BUILD)/bin/curl_pool: LDLIBS += $(CURL_LIBS)

# tcpevents: vmlinux.h from this kernel's BTF, the BPF object (clang -target bpf, never CFLAGS:
# no sanitizer or host flag reaches it), its skeleton (bpftool gen skeleton, the object embedded),
# and the loader linked with Debian's shared libbpf (ldd names it for the guest's initramfs).
LIBBPF_CFLAGS := $(shell pkg-config --cflags libbpf 2> /dev/null)
LIBBPF_LIBS   := $(shell pkg-config --libs libbpf 2> /dev/null || echo -lbpf)
$(BUILD)/vmlinux.h:
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  GEN     $@")
	$(Q)$(BPFTOOL) btf dump file $(VMLINUX_BTF) format c > $@.tmp && mv -f $@.tmp $@

$(BUILD)/probes/bpf/tcpevents.bpf.o: probes/bpf/tcpevents.bpf.c $(BUILD)/vmlinux.h
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  BPF     $<")
	$(Q)$(BPF_CLANG) -g -O2 -Wall -target bpf -D__TARGET_ARCH_$(BPF_ARCH) -I$(BUILD) -Iprobes/bpf \
		$(LIBBPF_CFLAGS) -MMD -MP -c -o $@ $<

$(BUILD)/probes/tcpevents.skel.h: $(BUILD)/probes/bpf/tcpevents.bpf.o
	@$(if $(Q),echo "  SKEL    $@")
	$(Q)$(BPFTOOL) gen skeleton $< name tcpevents_bpf > $@.tmp && mv -f $@.tmp $@

$(BUILD)/probes/tcpevents.o: $(BUILD)/probes/tcpevents.skel.h
$(BUILD)/probes/tcpevents.o: CPPFLAGS += -I$(BUILD)/probes -Iprobes/bpf $(LIBBPF_CFLAGS)
$(BUILD)/bin/tcpevents: PROBE_LIBS := $(LIBBPF_LIBS)
-include $(BUILD)/probes/bpf/tcpevents.bpf.d

# pytest runs against whatever BUILD holds; `make sanitize` points it at an ASan/UBSan build.
# Tiers (docs/reliability.md, "Test tiers"): `make test` is every test but those marked `slow`
# (the QEMU guests and the interrupt storm): at most 10 min on the 2-core VM, with a live
# test of every unit.  `make check` is the whole suite; `make check-rest` what it adds to
# `make test` (CI runs make test, then make check-rest).  Tests run in JOBS xdist workers (each
# live test has namespaces of its own, so their timer waits overlap); the tests of one
# expensive shared setup go to one worker (--dist loadgroup, tests/conftest.py), so it runs once.
JOBS    ?= 6
XDIST   := $(shell $(PYTHON) -c 'import xdist' 2> /dev/null && echo --numprocesses=$(JOBS) --dist loadgroup)
PYTEST  := $(PYTHON) -m pytest -q $(XDIST) -p no:cacheprovider
test: all
	$(PYTEST) -m "not slow" tests $(PYTEST_ARGS)

check: all
	$(PYTEST) tests $(PYTEST_ARGS)

check-rest: all
	$(PYTEST) -m slow tests $(PYTEST_ARGS)

SAN_FLAGS := -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=all
sanitize:
	$(MAKE) BUILD=build-san CFLAGS="$(SAN_FLAGS)" LDFLAGS="-fsanitize=address,undefined" all
	TCPLAB_BUILD=build-san ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
	UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
		$(PYTEST) tests $(PYTEST_ARGS)

# Floor programs (tests/bench/*.c): the least a probe's loop can cost, measured beside it.
# evfloor, tcpevents' floor, is a BPF program and its reader, built as tcpevents is and only
# where tcpevents is (TCPEV_WHY empty); bench.py says why its row is skipped elsewhere.
BENCH_SRC   := $(filter-out tests/bench/evfloor.c,$(wildcard tests/bench/*.c))
BENCH_PROGS := $(BENCH_SRC:tests/bench/%.c=$(BUILD)/bench/%)
ifeq ($(TCPEV_WHY),)
EVFLOOR     := $(BUILD)/bench/evfloor
endif
$(BENCH_PROGS): $(BUILD)/bench/%: $(BUILD)/tests/bench/%.o $(BUILD)/libtcplabnl.a $(BUILD)/libcommon.a
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(TL_CFLAGS) $(CFLAGS) $(LDFLAGS) -o $@ $^ $(MNL_LIBS) $(LDLIBS)
-include $(BENCH_SRC:%.c=$(BUILD)/%.d)

$(BUILD)/tests/bench/bpf/evfloor.bpf.o: tests/bench/bpf/evfloor.bpf.c $(BUILD)/vmlinux.h
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  BPF     $<")
	$(Q)$(BPF_CLANG) -g -O2 -Wall -target bpf -D__TARGET_ARCH_$(BPF_ARCH) -I$(BUILD) -Iprobes/bpf \
		$(LIBBPF_CFLAGS) -MMD -MP -c -o $@ $<

$(BUILD)/tests/bench/evfloor.skel.h: $(BUILD)/tests/bench/bpf/evfloor.bpf.o
	@$(if $(Q),echo "  SKEL    $@")
	$(Q)$(BPFTOOL) gen skeleton $< name evfloor_bpf > $@.tmp && mv -f $@.tmp $@

$(BUILD)/tests/bench/evfloor.o: $(BUILD)/tests/bench/evfloor.skel.h
$(BUILD)/tests/bench/evfloor.o: CPPFLAGS += -I$(BUILD)/tests/bench -Iprobes/bpf $(LIBBPF_CFLAGS)
$(BUILD)/bench/evfloor: $(BUILD)/tests/bench/evfloor.o $(BUILD)/libcommon.a
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(TL_CFLAGS) $(CFLAGS) $(LDFLAGS) -o $@ $^ $(LIBBPF_LIBS) $(LDLIBS)
-include $(BUILD)/tests/bench/evfloor.d $(BUILD)/tests/bench/bpf/evfloor.bpf.d

bench: all $(BENCH_PROGS) $(EVFLOOR)
	TCPLAB_BUILD=$(BUILD) TCPLAB_TCPEV_WHY='$(TCPEV_WHY)' $(PYTHON) tests/bench/bench.py $(BENCH_ARGS)

DEB_PACKAGES := gcc make clang tmux libmnl-dev zlib1g-dev pkg-config python3 python3-pytest python3-pytest-xdist strace iproute2 gnuplot-nox libpcap-dev nftables tcpdump mscgen perl python3-yaml lava-common groff-base man-db bpftool libbpf-dev libssl-dev dnsmasq-base libcurl4-openssl-dev nginx-light
# $(call apt_install,TARGET,PACKAGES,APT_OPTIONS): install the Debian packages that are missing.
define apt_install
	@missing=""; for p in $(2); do \
		dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q 'ok installed' || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
		echo "make $(1): installing$$missing"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(3) $$missing; \
	else echo "make $(1): all present"; fi
endef

# nginx-light's package scripts enable nginx.service and, where the machine lets them, start it
# on the host's port 80; tcplab starts its own nginx in a namespace (docs/design.md, "A real pool
# and server for p09"), so a service that make deps brought in is stopped and disabled again.
deps:
	@dpkg-query -W -f='$${Status}' nginx-light 2>/dev/null | grep -q 'ok installed'; \
	had_nginx=$$?; \
	$(MAKE) -s deps-apt && \
	if [ "$$had_nginx" != 0 ] && command -v systemctl > /dev/null && \
	   systemctl is-enabled --quiet nginx.service 2> /dev/null; then \
		echo "make deps: nginx-light enabled nginx.service; stopping and disabling it (tcplab runs its own nginx)"; \
		systemctl disable --now nginx.service > /dev/null 2>&1 || true; \
	fi

deps-apt:
	$(call apt_install,deps,$(DEB_PACKAGES),)

# ---- make install / make uninstall (docs/design.md, "Installed") ----------------------------------
# PREFIX/bin/tcplab is run.sh with TCPLAB_INSTALLED=1 and its name in messages made "tcplab";
# the programs go to libexec/tcplab, what run.sh reads at run time to share/tcplab (the same
# relative paths as in the clone, plus VERSION), every docs/man/*.[1-8] to share/man/manN, the
# completion to share/bash-completion/completions/tcplab.  share/tcplab/manifest lists every file
# install wrote and every directory it made ("f PATH", "d PATH", PATH without DESTDIR), an older
# install's lines kept; uninstall removes those files, then those directories if empty.
INST_SHARE  := $(PREFIX)/share/tcplab
MANIFEST    := $(INST_SHARE)/manifest
# experiments/: each experiment's folder, lib/, report/, tools/ and guest/ (docs/design.md, "Layout")
INST_EXP    := experiments/units $(wildcard experiments/*/*.sh experiments/*/*.py) \
	       $(wildcard experiments/guest/initramfs/*) docs/kernel-diff.md
MAN_PAGES   := $(wildcard docs/man/*.[1-8])

# tl_put MODE SOURCE PATH: SOURCE installed as $(DESTDIR)PATH; the file and each directory it
# had to make are noted in the new manifest ($$new).
INSTALL_SH := \
	tl_dir() { local d="" part; for part in $$(echo "$${1%/*}" | tr / ' '); do d=$$d/$$part; \
		[ -d "$(DESTDIR)$$d" ] || { mkdir "$(DESTDIR)$$d" && echo "d $$d" >> "$$new"; } || return 1; \
		done; }; \
	tl_put() { tl_dir "$$3" && install -m "$$1" "$$2" "$(DESTDIR)$$3" && echo "f $$3" >> "$$new"; }

# The recipes below put PREFIX and DESTDIR into shell words, PREFIX into case patterns: a blank
# split them (PREFIX="/tmp/victim dir" installed into /tmp/victim), a quote or another shell
# metacharacter would change the commands, and a relative PREFIX, or one with a . or .. part, //
# or a / at the end, lands outside $(DESTDIR)$(PREFIX) or writes a manifest uninstall refuses.
# So install and uninstall take only plain paths: checked as make reads this file, before
# anything is built or written, on their unexpanded text (a $ is refused too), and again as
# their recipes expand (for an install made as another target's prerequisite).
tl_comma := ,
define tl_newline


endef
TL_PLAIN_CHARS := a b c d e f g h i j k l m n o p q r s t u v w x y z \
	A B C D E F G H I J K L M N O P Q R S T U V W X Y Z 0 1 2 3 4 5 6 7 8 9 / . _ - + : @ $(tl_comma)
# $(call tl_unplain,TEXT,CHARS): TEXT without the characters listed in CHARS
tl_unplain = $(if $(2),$(call tl_unplain,$(subst $(firstword $(2)),,$(1)),$(wordlist 2,99,$(2))),$(1))
# $(call tl_plain,VAR): non-empty if VAR's unexpanded text is only TL_PLAIN_CHARS; a blank left
# over splits "[ ]" in two, so a blank is not plain either
tl_plain = $(filter [],[$(call tl_unplain,$(value $(1)),$(TL_PLAIN_CHARS))])
tl_show = $(1) '$(subst $(tl_newline),\n,$(value $(1)))'
tl_unplain_msg = holds a blank or a shell metacharacter; choose a plain path (letters, digits and / . _ - + , : @)
tl_odd_msg = is not a plain absolute path: start it with / and give it no . or .. part, no // and no / at the end
tl_path_error = $(or \
	$(if $(call tl_plain,PREFIX),,$(call tl_show,PREFIX) $(tl_unplain_msg)), \
	$(if $(call tl_plain,DESTDIR),,$(call tl_show,DESTDIR) $(tl_unplain_msg)), \
	$(if $(or $(filter-out /%,$(PREFIX)),$(filter %/,$(PREFIX)),$(findstring //,$(PREFIX)), \
		$(filter . ..,$(subst /, ,$(PREFIX))),$(if $(PREFIX),,empty)),$(call tl_show,PREFIX) $(tl_odd_msg)))
# $(call tl_check_paths,GOAL): make stops with one line if PREFIX or DESTDIR is not plain
tl_check_paths = $(if $(tl_path_error),$(error make $(1): $(tl_path_error)))
TL_PATH_GOAL := $(firstword $(filter install uninstall,$(MAKECMDGOALS)))
ifneq ($(TL_PATH_GOAL),)
$(call tl_check_paths,$(TL_PATH_GOAL))
endif

install: all
	@$(call tl_check_paths,$@)$(INSTALL_SH); set -e; new=$$(mktemp); trap 'rm -f "$$new" "$$new.bin"' EXIT; \
	[ -z "$(DESTDIR)" ] || mkdir -p "$(DESTDIR)"; \
	sed -e 's/^TCPLAB_INSTALLED=$$/TCPLAB_INSTALLED=1/' -e 's/^PROG=run\.sh$$/PROG=tcplab/' \
		-e 's|\./run\.sh|tcplab|g' -e 's|^                \[|              [|' run.sh > "$$new.bin"; \
	grep -q '^TCPLAB_INSTALLED=1$$' "$$new.bin" || { echo "make install: run.sh has no TCPLAB_INSTALLED= line" >&2; exit 1; }; \
	version=$$(./run.sh --version) && version=$${version#tcplab }; \
	tl_put 0755 "$$new.bin" $(PREFIX)/bin/tcplab; \
	for p in $(PROGRAMS); do tl_put 0755 $$p $(PREFIX)/libexec/tcplab/$${p##*/}; done; \
	for f in $(INST_EXP); do tl_put $$([ -x $$f ] && echo 0755 || echo 0644) $$f $(INST_SHARE)/$$f; done; \
	echo "$$version" > "$$new.bin" && tl_put 0644 "$$new.bin" $(INST_SHARE)/VERSION; \
	for m in $(MAN_PAGES); do tl_put 0644 $$m $(PREFIX)/share/man/man$${m##*.}/$${m##*/}; done; \
	tl_put 0644 experiments/lib/completion.bash $(PREFIX)/share/bash-completion/completions/tcplab; \
	echo "f $(MANIFEST)" >> "$$new"; \
	{ [ ! -f "$(DESTDIR)$(MANIFEST)" ] || cat "$(DESTDIR)$(MANIFEST)"; cat "$$new"; } | awk '!seen[$$0]++' > "$$new.bin"; \
	install -m 0644 "$$new.bin" "$(DESTDIR)$(MANIFEST)"; \
	echo "make install: tcplab $$version in $(DESTDIR)$(PREFIX) ($$(grep -c '^f ' "$(DESTDIR)$(MANIFEST)") files, listed in $(DESTDIR)$(MANIFEST))"

# Only files under PREFIX, and directories under or above it that install made, are removed.
uninstall:
	@$(call tl_check_paths,$@)set -e; m="$(DESTDIR)$(MANIFEST)"; \
	[ -f "$$m" ] || { echo "make uninstall: no $$m: tcplab is not installed in $(DESTDIR)$(PREFIX)" >&2; exit 1; }; \
	lines=$$(cat "$$m"); \
	printf '%s\n' "$$lines" | while read -r kind path; do \
		case $$path/ in */../* | */./* | *//*) kind=bad ;; esac; \
		case $$kind in \
		f) case $$path in $(PREFIX)/*) continue ;; esac ;; \
		d) case $$path in $(PREFIX) | $(PREFIX)/*) continue ;; esac; \
		   case $(PREFIX)/ in "$$path"/*) continue ;; esac ;; \
		esac; \
		echo "make uninstall: $$m: bad line '$$kind $$path' (want f or d and a path under $(PREFIX))" >&2; exit 1; \
	done; \
	printf '%s\n' "$$lines" | sed -n 's/^f //p' | while read -r f; do rm -f -- "$(DESTDIR)$$f"; done; \
	printf '%s\n' "$$lines" | sed -n 's/^d //p' | sort -r | while read -r d; do rmdir -- "$(DESTDIR)$$d" 2> /dev/null || true; done; \
	echo "make uninstall: removed $$(printf '%s\n' "$$lines" | grep -c '^f ') files from $(DESTDIR)$(PREFIX)"

clean:
	rm -rf build build-san build-fuzz build-static

-include $(COMMON_OBJ:.o=.d) $(FXLIB_OBJ:.o=.d) $(PRLIB_OBJ:.o=.d) $(NETLINK_OBJ:.o=.d) $(FIXTURE_SRC:%.c=$(BUILD)/%.d) $(PROBE_SRC:%.c=$(BUILD)/%.d)

# Kernel matrix (experiments/guest/vm.sh, docs/kernel-matrix.md): QEMU and what goes into the guest's initramfs.
# The browser the picture test lays the ladders out in (tests/test_pictures_browser.py): Debian's
# chromium, headless, and the font the pictures name.  Apart from make deps: a user running the
# lab needs neither; CI installs them, and the test says it is skipped without them.
BROWSER_DEB_PACKAGES := chromium fonts-dejavu-core
.PHONY: deps-browser
deps-browser:
	$(call apt_install,deps-browser,$(BROWSER_DEB_PACKAGES),--no-install-recommends)

.PHONY: deps-kernel
KERNEL_DEB_PACKAGES := qemu-system-x86 busybox-static cpio xz-utils
deps-kernel:
	$(call apt_install,deps-kernel,$(KERNEL_DEB_PACKAGES),--no-install-recommends)

# Fuzzing (tests/fuzz/, docs/reliability.md): libFuzzer targets built with Debian's clang under
# ASan+UBSan; `make fuzz FUZZ_SECONDS=N` runs each for N s, FUZZ_JOBS=J of them at once.  Needs `make deps-fuzz` (which
# also installs valgrind, for `make valgrind`).
.PHONY: deps-fuzz fuzz-build
FUZZ_CC      ?= clang
FUZZ_BUILD   := build-fuzz
FUZZ_FLAGS   := -g -O1 -fno-omit-frame-pointer -fsanitize=fuzzer,address,undefined \
		-fno-sanitize-recover=all
FUZZ_TARGETS := fuzz_diag fuzz_snmp fuzz_machine fuzz_args fuzz_pcap
FUZZ_BINS    := $(FUZZ_TARGETS:%=$(FUZZ_BUILD)/%)
# What each target links besides its own file: the library sources, like the programs do.
$(FUZZ_BUILD)/fuzz_diag:    $(NETLINK_SRC) common/tl_util.c
$(FUZZ_BUILD)/fuzz_snmp:    probes/lib/pr_snmp.c
$(FUZZ_BUILD)/fuzz_machine: probes/lib/pr_machine.c common/tl_util.c
$(FUZZ_BUILD)/fuzz_machine: FUZZ_LIBS := -lz
$(FUZZ_BUILD)/fuzz_args:    common/tl_util.c netlink/tl_names.c fixtures/lib/fx_names.c fixtures/lib/fx_steps.c
$(FUZZ_BUILD)/fuzz_pcap:    probes/lib/pr_pcap.c

$(FUZZ_BINS): $(FUZZ_BUILD)/%: tests/fuzz/%.c $(wildcard common/*.h fixtures/lib/*.h probes/lib/*.h netlink/*.h)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  FUZZ-LD $@")
	$(Q)$(FUZZ_CC) $(TL_CFLAGS) $(FUZZ_FLAGS) $(MNL_CFLAGS) -o $@ \
		$(filter %.c,$^) $(FUZZ_LIBS) $(MNL_LIBS) -lm

fuzz-build:
	@command -v $(FUZZ_CC) > /dev/null && \
		echo 'int LLVMFuzzerTestOneInput(const char *d, long n) { return 0; }' | \
		$(FUZZ_CC) -fsanitize=fuzzer -x c -o /dev/null - 2> /dev/null || \
		{ echo "make fuzz: needs clang with libFuzzer (run 'make deps-fuzz')" >&2; exit 4; }
	$(Q)$(MAKE) -s --no-print-directory $(FUZZ_BINS)

fuzz: fuzz-build
	$(Q)$(PYTHON) tests/fuzz/seeds.py $(FUZZ_BUILD)/seeds
	$(Q)tests/fuzz/run.sh $(FUZZ_BUILD) $(FUZZ_SECONDS) $(FUZZ_TARGETS)

# valgrind (tests/test_reliability_valgrind.py): each probe on saved inputs, no error, no leak.
.PHONY: valgrind
valgrind: all
	$(PYTHON) -m pytest -q tests/test_reliability_valgrind.py $(PYTEST_ARGS)

FUZZ_DEB_PACKAGES := clang libclang-rt-14-dev valgrind
deps-fuzz:
	$(call apt_install,deps-fuzz,$(FUZZ_DEB_PACKAGES),--no-install-recommends)
