"""Debian kernel packages without root or QEMU (experiments/guest/kernelpkg.sh): both layouts
laid out as vm.sh expects, from tiny .debs built here with dpkg-deb -b (the classic
linux-image-*-unsigned, and sid's split linux-image meta + linux-binary + linux-modules +
linux-base); the choice of packages from apt's answers (a stand-in apt-cache on PATH); and the
private apt configuration, which names only tcplab's own directories (checked with apt-config,
apt's own reading of the options)."""
import os
import shutil
import subprocess

import pytest

import tcplab

TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KP = os.path.join(TOP, "experiments", "guest", "kernelpkg.sh")
REL = "9.9.1+deb99-cloud-amd64"

needs_dpkg = pytest.mark.skipif(shutil.which("dpkg-deb") is None, reason="dpkg-deb not installed")


def kp(*args, env=None):
    return subprocess.run([KP, *args], capture_output=True, text=True, env=env, timeout=60)


def make_deb(tmp, name, files):
    """A .deb called name holding files {path: content}, built with dpkg-deb -b."""
    root = tmp / ("src-" + name)
    (root / "DEBIAN").mkdir(parents=True)
    (root / "DEBIAN" / "control").write_text(
        f"Package: {name}\nVersion: 9.9.1-1\nArchitecture: amd64\n"
        "Maintainer: tcplab <tcplab@example.invalid>\nDescription: test\n")
    for path, content in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_bytes(content)
    deb = tmp / (name + ".deb")
    subprocess.run(["dpkg-deb", "--root-owner-group", "-b", str(root), str(deb)],
                   check=True, capture_output=True)
    return deb


def unpack(debs, dest):
    for deb in debs:
        subprocess.run(["dpkg-deb", "-x", str(deb), str(dest)], check=True)


def tree(d):
    return sorted(os.path.relpath(os.path.join(r, f), d) for r, _, fs in os.walk(d) for f in fs)


@needs_dpkg
def test_classic_layout_is_left_as_it_is(tmp_path):
    rel = "9.9.0-1-cloud-amd64"
    deb = make_deb(tmp_path, f"linux-image-{rel}-unsigned", {
        f"boot/vmlinuz-{rel}": b"kernel", f"boot/config-{rel}": b"CONFIG_HZ=250\n",
        f"lib/modules/{rel}/kernel/net/veth.ko": b"\x7fELF", f"lib/modules/{rel}/modules.builtin":
        b"kernel/net/packet/af_packet.ko\n"})
    dest = tmp_path / "k"
    unpack([deb], dest)
    before = tree(dest)
    r = kp("layout", str(dest))
    assert r.returncode == 0, r.stderr
    assert r.stdout == rel + "\n"
    assert tree(dest) == before


@needs_dpkg
def test_split_layout_is_laid_out_as_a_classic_one(tmp_path):
    mod = f"usr/lib/modules/{REL}"
    debs = [make_deb(tmp_path, f"linux-image-{REL}", {f"usr/share/doc/linux-image-{REL}/x": b""}),
            make_deb(tmp_path, f"linux-binary-{REL}", {f"{mod}/vmlinuz": b"kernel"}),
            make_deb(tmp_path, f"linux-modules-{REL}", {
                f"{mod}/kernel/drivers/net/veth.ko.xz": b"xz",
                f"{mod}/kernel/net/sched/sch_netem.ko.xz": b"xz"}),
            make_deb(tmp_path, f"linux-base-{REL}", {
                f"{mod}/config": b"CONFIG_HZ=250\n", f"{mod}/System.map": b"map",
                f"{mod}/modules.builtin": b"kernel/net/packet/af_packet.ko\n"})]
    dest = tmp_path / "k"
    unpack(debs, dest)
    r = kp("layout", str(dest))
    assert r.returncode == 0, r.stderr
    assert r.stdout == REL + "\n"
    assert (dest / "boot" / f"vmlinuz-{REL}").read_bytes() == b"kernel"
    assert (dest / "boot" / f"config-{REL}").read_text() == "CONFIG_HZ=250\n"
    assert (dest / "boot" / f"System.map-{REL}").read_bytes() == b"map"
    mods = dest / "lib" / "modules" / REL
    assert (mods / "kernel" / "drivers" / "net" / "veth.ko.xz").is_file()
    assert (mods / "kernel" / "net" / "sched" / "sch_netem.ko.xz").is_file()
    assert (mods / "modules.builtin").is_file()
    assert not (dest / "usr" / "lib" / "modules" / REL).exists()


@needs_dpkg
def test_split_without_its_modules_package_is_refused(tmp_path):
    mod = f"usr/lib/modules/{REL}"
    debs = [make_deb(tmp_path, f"linux-binary-{REL}", {f"{mod}/vmlinuz": b"kernel"}),
            make_deb(tmp_path, f"linux-base-{REL}", {f"{mod}/config": b"x"})]
    dest = tmp_path / "k"
    unpack(debs, dest)
    r = kp("layout", str(dest))
    assert r.returncode == 1
    assert r.stderr.count("\n") == 1 and f"no modules for {REL}" in r.stderr


def test_a_tree_without_a_kernel_is_refused_with_one_line(tmp_path):
    (tmp_path / "usr" / "share").mkdir(parents=True)
    r = kp("layout", str(tmp_path))
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr.count("\n") == 1 and "no boot/vmlinuz-*" in r.stderr


FAKE_APT_CACHE = r"""#!/bin/sh
# a stand-in for apt-cache: answers search, show and madison as the archive did on 2026-12-01
for a; do last=$a; done
case " $* " in
*" search "*) RE=$last awk '$1 ~ ENVIRON["RE"]' <<'E'
linux-image-5.10.0-9-cloud-amd64-unsigned - Linux 5.10 for x86-64 cloud
linux-image-5.10.0-46-cloud-amd64-dbg - Debug symbols
linux-image-5.10.0-46-cloud-amd64-unsigned - Linux 5.10 for x86-64 cloud
linux-image-5.10.0-46-cloud-amd64 - Linux 5.10 for x86-64 cloud (signed)
linux-image-7.2.13+deb14-cloud-amd64 - Linux 7.2.13 for x86-64 cloud
linux-image-7.2.9+deb14-cloud-amd64 - Linux 7.2.9 for x86-64 cloud
E
;;
*" show "*) case $last in
	linux-image-7.2.13+deb14-cloud-amd64) echo "Package: $last"
		echo "Depends: dracut | initramfs-tools (>= 0.120+deb8u2) | linux-initramfs-tool, linux-base-7.2.13+deb14-cloud-amd64 (= 7.2.13-1), linux-binary-7.2.13+deb14-cloud-amd64 (= 7.2.13-1), linux-modules-7.2.13+deb14-cloud-amd64 (= 7.2.13-1)" ;;
	*) echo "Package: $last"; echo "Depends: kmod, linux-base (>= 4.3~), initramfs-tools (>= 0.120+deb8u2) | linux-initramfs-tool" ;;
	esac ;;
*" madison "*) echo "$last | 1-1 | http://deb.debian.org/debian-security bullseye-security/main amd64 Packages" ;;
esac
"""


def kp_functions(tmp_path, script):
    """Run script with kernelpkg.sh's functions and a stand-in apt-cache first on PATH."""
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    (bindir / "apt-cache").write_text(FAKE_APT_CACHE)
    (bindir / "apt-cache").chmod(0o755)
    env = dict(os.environ, PATH=f"{bindir}:{os.environ['PATH']}")
    return subprocess.run(["sh", "-c", f". {KP}; {script}"], capture_output=True, text=True,
                          env=env, timeout=60)


def test_candidates_newest_first_unsigned_preferred(tmp_path):
    r = kp_functions(tmp_path, "kp_candidates /nowhere 5.10")
    assert r.returncode == 0, r.stderr
    # sort -V: -46 is newer than -9; -dbg and the signed twin of an -unsigned are left out
    assert r.stdout.split() == ["linux-image-5.10.0-46-cloud-amd64-unsigned",
                                "linux-image-5.10.0-9-cloud-amd64-unsigned"]
    r = kp_functions(tmp_path, "kp_candidates /nowhere 7.2")
    assert r.stdout.split() == ["linux-image-7.2.13+deb14-cloud-amd64",
                                "linux-image-7.2.9+deb14-cloud-amd64"]


def test_parts_of_each_layout(tmp_path):
    r = kp_functions(tmp_path, "kp_parts /nowhere linux-image-7.2.13+deb14-cloud-amd64")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["linux-image-7.2.13+deb14-cloud-amd64",
                                "linux-base-7.2.13+deb14-cloud-amd64",
                                "linux-binary-7.2.13+deb14-cloud-amd64",
                                "linux-modules-7.2.13+deb14-cloud-amd64"]
    # the classic package depends on the generic linux-base, which is not part of the kernel
    r = kp_functions(tmp_path, "kp_parts /nowhere linux-image-5.10.0-46-cloud-amd64-unsigned")
    assert r.stdout.split() == ["linux-image-5.10.0-46-cloud-amd64-unsigned"]
    r = kp_functions(tmp_path, "kp_suite_of /nowhere linux-image-5.10.0-46-cloud-amd64-unsigned")
    assert r.stdout == "bullseye-security\n"


@pytest.mark.parametrize("suite", ["bullseye", "bookworm", "trixie", "sid"])
def test_apt_configuration_names_only_tcplabs_own_dirs(tmp_path, suite):
    cache = tmp_path / "cache"
    r = kp("setup", str(cache), suite)
    assert r.returncode == 0, r.stderr
    opts = r.stdout.splitlines()
    assert opts[0::2] == ["-o"] * (len(opts) // 2)
    settings = dict(o.split("=", 1) for o in opts[1::2])
    own = str(cache / "apt" / suite)
    for key in ("Dir::Etc::sourcelist", "Dir::State::Lists", "Dir::Cache", "Dir::State::status",
                "Dir::State", "Dir::Log", "Dir::Etc::preferences"):
        assert settings[key].startswith(own + "/"), (key, settings[key])
    assert settings["Dir::Etc::sourceparts"] == "-"   # no /etc/apt/sources.list.d
    assert settings["Dir::Etc::preferencesparts"] == "-"
    for value in settings.values():
        assert not value.startswith(("/etc", "/var/lib", "/var/cache/apt")), value
    # what it wrote: its sources.list, an empty status, the dirs apt wants, all under own
    lines = (cache / "apt" / suite / "sources.list").read_text().splitlines()
    assert lines and all(
        line.startswith("deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http")
        for line in lines)
    assert {line.split()[3] for line in lines} == (
        {"sid"} if suite == "sid" else {suite, suite + "-updates", suite + "-security"})
    assert (cache / "apt" / suite / "status").read_text() == ""
    for root, dirs, files in os.walk(cache):
        assert root.startswith(own) or root in (str(cache), str(cache / "apt"))
    if shutil.which("apt-config"):
        dump = subprocess.run(["apt-config", *opts, "dump"], capture_output=True, text=True,
                              check=True).stdout
        for key in ("Dir::State::lists", "Dir::State::status", "Dir::Cache",
                    "Dir::Etc::sourcelist"):
            line = next(x for x in dump.splitlines() if x.startswith(key + " "))
            assert own in line, line


def test_an_unknown_suite_is_one_line_and_no_directory(tmp_path):
    r = kp("setup", str(tmp_path / "c"), "hamm")
    assert r.returncode == 1
    assert r.stderr.count("\n") == 1 and "unknown suite 'hamm'" in r.stderr
    assert not (tmp_path / "c").exists()


def test_usage(tmp_path):
    r = kp("layout")
    assert r.returncode == 2 and r.stderr.startswith("usage: ")


@pytest.mark.parametrize("series,accepted", [("5.10", True), ("7.2", True), ("4.9", False),
                                             ("7.21", False)])
def test_run_sh_accepts_the_new_series(series, accepted):
    """run.sh's kernel_series_ok passes 5.10 and 7.2 on to the unit checks (connect-modes, a
    host-only unit, is then refused: nothing boots); 4.9 and 7.21 are refused before."""
    r = subprocess.run([os.path.join(TOP, "run.sh"), "--kernel", series, "connect-modes"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1, r.stderr
    if accepted:
        assert "connect-modes cannot run under --kernel" in r.stderr, r.stderr
        # and it says why, in the unit table's own words ("# qemu no: connect-modes: ...")
        why = next(u["qemu_why"] for u in tcplab.read_units() if u["unit"] == "connect-modes")
        assert why and f"(qemu=no in experiments/units: {why})" in r.stderr, r.stderr
    else:
        assert "no such Debian cloud kernel series" in r.stderr, r.stderr
