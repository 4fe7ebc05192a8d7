#!/usr/bin/python3
"""p01-machine report: the kernel, the TCP settings and the links the experiments ran with."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "report"))
import tcplab as t  # noqa: E402

NAME = "p01-machine"


def link_json(link):
    """One link= line of machine.txt (docs/machine.md) → its JSON object; `-` (none) → null."""
    def opt(key):
        v = link.str(key)
        return None if v == "-" else v
    flags = link.str("flags")
    return {"name": link.str("link"), "index": link.int("index", 1, 2 ** 31 - 1),
            "mtu": link.int("mtu", 0, 2 ** 32 - 1), "qdisc": opt("qdisc"),
            "state": link.str("state"), "kind": opt("kind"),
            "flags": [] if flags == "-" else flags.split(",")}


def link_lines(links):
    """The links as aligned rows: name, MTU, root qdisc, operstate, kind, flags."""
    if not links:
        return ["links: none recorded (a machine.txt without link= lines)"]
    rows = [(x["name"], str(x["mtu"]), x["qdisc"] or "-", x["state"], x["kind"] or "-",
             ",".join(x["flags"]) or "-") for x in links]
    w = [max(len(r[i]) for r in rows) for i in range(5)]
    out = ["links (RTM_GETLINK in this namespace):"]
    for r in rows:
        out.append(f"  {r[0]:<{w[0]}}  mtu {r[1]:>{w[1]}}  qdisc {r[2]:<{w[2]}}  "
                   f"state {r[3]:<{w[3]}}  kind {r[4]:<{w[4]}}  flags {r[5]}")
    return out


def build(rawroot, outdir):
    rawdir = t.unit_dir(rawroot, NAME)
    path = os.path.join(rawdir, "machine.txt")
    info, sysctls = t.read_machine(path, need=("kernel", "machine", "nproc", "hz"))
    hz = None if info["hz"] == "unknown" else info.int("hz", 1, 100_000)
    nproc = info.int("nproc", 1, 1 << 20)
    # memtotal_kb: machine prints it since tcplab recorded the host's memory; older raw lacks it
    mem = info.get("memtotal_kb")
    memtotal = None if mem in (None, "unknown") else info.int("memtotal_kb", 1, 1 << 50)
    if not sysctls:
        raise t.RawError(f"{path}: no sysctl lines")
    collected = t.collected_at(rawdir)
    lines = [f"{NAME}: the machine, as the kernel describes it inside a fresh network namespace",
             t.header(None, collected), "",
             f"kernel   {info['kernel']}", f"version  {info.get('version')}",
             f"arch     {info['machine']}",
             f"HZ       {info['hz']} (from {info.get('source', 'nowhere')})",
             f"CPUs     {nproc}"]
    if mem is not None:
        lines.append("memory   " + ("unknown (no MemTotal in /proc/meminfo)" if memtotal is None
                                    else f"{memtotal // 1024} MiB (MemTotal {memtotal} kB)"))
    lines += ["", "sysctls:"]
    width = max(len(k) for k in sysctls)
    for k, v in sysctls.items():
        lines.append(f"  {k:<{width}}  {'absent' if v is None else v}")
    links = [link_json(x) for x in info.links]
    lines += [""] + link_lines(links)
    vm = t.read_vm(rawdir)
    obj = {"experiment": NAME, "kernel": info["kernel"], "collected_at": collected,
           "load_average": None, "counters": None, "result": None, "errno": None,
           "elapsed_s": None, "version": info.get("version"), "arch": info["machine"],
           "hz": hz, "nproc": nproc, "sysctls": t.sysctls_json(sysctls), "links": links,
           "vm": vm}
    if mem is not None:     # (not in outputs made before machine printed memtotal_kb=)
        obj["memtotal_kb"] = memtotal
    if vm:
        lines += ["", "booted under QEMU: " + " ".join(f"{k}={v}" for k, v in vm.items())]
    t.write_outputs(outdir, NAME, lines, obj)


if __name__ == "__main__":
    sys.exit(t.report_main(sys.argv, build))
