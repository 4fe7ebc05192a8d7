# tcplab — GNU Make.  `make` builds, `make test` runs every test, `make deps` installs
# what is missing (Debian packages only).  V=1 shows the commands.
PREFIX  ?= /usr/local
DESTDIR ?=
CC      ?= cc
PYTHON  ?= /usr/bin/python3
BUILD   ?= build
FUZZ_SECONDS ?= 60

CFLAGS  ?= -O2 -g
# Flags every build needs, kept apart from CFLAGS so `make CFLAGS=…` cannot drop them.
TL_CFLAGS := -std=c11 -D_GNU_SOURCE -Wall -Wextra -Wshadow -Wformat=2 -Wstrict-prototypes \
	   -Wmissing-prototypes -Werror=implicit-function-declaration -Icommon -Inetlink
MNL_CFLAGS := $(shell pkg-config --cflags libmnl 2>/dev/null)
MNL_LIBS   := $(shell pkg-config --libs libmnl 2>/dev/null || echo -lmnl)
LDLIBS  += -lm -lpthread

ifeq ($(V),1)
Q :=
else
Q := @
endif

# Every .c directly in fixtures/ or probes/ is one program; common/ and netlink/ are libraries.
COMMON_SRC  := $(wildcard common/*.c)
NETLINK_SRC := $(wildcard netlink/*.c)
FIXTURE_SRC := $(wildcard fixtures/*.c)
PROBE_SRC   := $(wildcard probes/*.c)

COMMON_OBJ  := $(COMMON_SRC:%.c=$(BUILD)/%.o)
NETLINK_OBJ := $(NETLINK_SRC:%.c=$(BUILD)/%.o)
FIXTURES    := $(FIXTURE_SRC:fixtures/%.c=$(BUILD)/bin/%)
PROBES      := $(PROBE_SRC:probes/%.c=$(BUILD)/bin/%)
PROGRAMS    := $(FIXTURES) $(PROBES)

.PHONY: all test check bench sanitize deps install clean fuzz

all: $(PROGRAMS)

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

$(FIXTURES): $(BUILD)/bin/%: $(BUILD)/fixtures/%.o $(BUILD)/libcommon.a
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(TL_CFLAGS) $(CFLAGS) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(PROBES): $(BUILD)/bin/%: $(BUILD)/probes/%.o $(BUILD)/libtcplabnl.a $(BUILD)/libcommon.a
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(TL_CFLAGS) $(CFLAGS) $(LDFLAGS) -o $@ $^ $(MNL_LIBS) $(LDLIBS)

# pytest runs against whatever BUILD holds; `make sanitize` points it at an ASan/UBSan build.
test: all
	$(PYTHON) -m pytest -q tests $(PYTEST_ARGS)

check: test

SAN_FLAGS := -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=all
sanitize:
	$(MAKE) BUILD=build-san CFLAGS="$(SAN_FLAGS)" LDFLAGS="-fsanitize=address,undefined" all
	TCPLAB_BUILD=build-san ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
	UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
		$(PYTHON) -m pytest -q tests $(PYTEST_ARGS)

bench: all
	$(PYTHON) tests/bench.py $(BENCH_ARGS)

DEB_PACKAGES := gcc make libmnl-dev pkg-config python3 python3-pytest strace iproute2 gnuplot-nox
deps:
	@missing=""; for p in $(DEB_PACKAGES); do \
		dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q 'ok installed' || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
		echo "make deps: installing$$missing"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	else echo "make deps: all present"; fi

install: all
	install -d $(DESTDIR)$(PREFIX)/libexec/tcplab
	install -m 0755 $(PROGRAMS) $(DESTDIR)$(PREFIX)/libexec/tcplab/

clean:
	rm -rf build build-san build-fuzz build-static

-include $(COMMON_OBJ:.o=.d) $(NETLINK_OBJ:.o=.d) $(FIXTURE_SRC:%.c=$(BUILD)/%.d) $(PROBE_SRC:%.c=$(BUILD)/%.d)

# Kernel matrix (lib/vm.sh, docs/kernel-matrix.md): QEMU and what goes into the guest's initramfs.
.PHONY: deps-kernel
KERNEL_DEB_PACKAGES := qemu-system-x86 busybox-static cpio xz-utils
deps-kernel:
	@missing=""; for p in $(KERNEL_DEB_PACKAGES); do \
		dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q 'ok installed' || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
		echo "make deps-kernel: installing$$missing"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	else echo "make deps-kernel: all present"; fi
