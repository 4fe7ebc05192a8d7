#!/usr/bin/python3
"""p01-machine report: the kernel and the TCP settings the experiments ran with."""
import os
import sys

import tcplab as t  # noqa: E402

NAME = "p01-machine"


def build(rawroot, outdir):
    rawdir = t.unit_dir(rawroot, NAME)
    info, sysctls = t.read_machine(os.path.join(rawdir, "machine.txt"))
    lines = [f"{NAME}: the machine, as the kernel describes it inside a fresh network namespace",
             f"collected {t.collected_at(rawdir)}", "",
             f"kernel   {info.get('kernel')}", f"version  {info.get('version')}",
             f"arch     {info.get('machine')}",
             f"HZ       {info.get('hz')} (from {info.get('source', 'nowhere')})",
             f"CPUs     {info.get('nproc')}", "", "sysctls:"]
    width = max((len(k) for k in sysctls), default=0)
    for k, v in sysctls.items():
        lines.append(f"  {k:<{width}}  {'absent' if v is None else v}")
    vm = os.path.join(rawdir, "vm.txt")
    obj = {"experiment": NAME, "kernel": info.get("kernel"), "counters": {}, "errno": None,
           "elapsed_s": None, "version": info.get("version"), "arch": info.get("machine"),
           "hz": None if info.get("hz") in (None, "unknown") else int(info["hz"]),
           "nproc": int(info["nproc"]) if "nproc" in info else None, "sysctls": sysctls,
           "vm": t.read_line_values(vm) if os.path.exists(vm) else None}
    if obj["vm"]:
        lines += ["", "booted under QEMU: " + " ".join(f"{k}={v}" for k, v in obj["vm"].items())]
    t.write_outputs(outdir, NAME, lines, obj)


if __name__ == "__main__":
    sys.exit(t.report_main(sys.argv, build))
