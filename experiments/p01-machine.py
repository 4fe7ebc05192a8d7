#!/usr/bin/python3
"""p01-machine report: the kernel and the TCP settings the experiments ran with."""
import os
import sys

import tcplab as t  # noqa: E402

NAME = "p01-machine"


def build(rawroot, outdir):
    rawdir = t.unit_dir(rawroot, NAME)
    path = os.path.join(rawdir, "machine.txt")
    info, sysctls = t.read_machine(path, need=("kernel", "machine", "nproc", "hz"))
    hz = None if info["hz"] == "unknown" else info.int("hz", 1, 100_000)
    nproc = info.int("nproc", 1, 1 << 20)
    if not sysctls:
        raise t.RawError(f"{path}: no sysctl lines")
    collected = t.collected_at(rawdir)
    lines = [f"{NAME}: the machine, as the kernel describes it inside a fresh network namespace",
             t.header(None, collected), "",
             f"kernel   {info['kernel']}", f"version  {info.get('version')}",
             f"arch     {info['machine']}",
             f"HZ       {info['hz']} (from {info.get('source', 'nowhere')})",
             f"CPUs     {nproc}", "", "sysctls:"]
    width = max(len(k) for k in sysctls)
    for k, v in sysctls.items():
        lines.append(f"  {k:<{width}}  {'absent' if v is None else v}")
    vm = t.read_vm(rawdir)
    obj = {"experiment": NAME, "kernel": info["kernel"], "collected_at": collected,
           "load_average": None, "counters": None, "result": None, "errno": None,
           "elapsed_s": None, "version": info.get("version"), "arch": info["machine"],
           "hz": hz, "nproc": nproc, "sysctls": t.sysctls_json(sysctls), "vm": vm}
    if vm:
        lines += ["", "booted under QEMU: " + " ".join(f"{k}={v}" for k, v in vm.items())]
    t.write_outputs(outdir, NAME, lines, obj)


if __name__ == "__main__":
    sys.exit(t.report_main(sys.argv, build))
