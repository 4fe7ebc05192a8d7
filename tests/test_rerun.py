"""tests/data/rerun/summary.json: what a second --all run of each guest kernel (./run.sh --kernel
all --all, docs/kernel-diff.md "Two runs of one kernel under TCG") changed against the reference
set outputs/<release>/. That section explains a changed matrix row by showing the same kernel
giving two values; these tests keep the claim true. The summary is made by
tests/tools/rerun_summary.py from the two runs (the second run's files are not committed)."""
import json
import os
import re
import subprocess
import sys

import pytest

TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(TOP, "experiments", "report"))
import tcplab_matrix as M  # noqa: E402

OUT = os.path.join(TOP, "outputs")
SUMMARY = os.path.join(TOP, "tests", "data", "rerun", "summary.json")
TOOL = os.path.join(TOP, "tests", "tools", "rerun_summary.py")
DOC = os.path.join(TOP, "docs", "kernel-diff.md")
with open(SUMMARY) as _f:
    RUNS = json.load(_f)["kernels"]
KERNELS = sorted(RUNS)


def section():
    with open(DOC) as f:
        text = f.read()
    m = re.search(r"^### Two runs of one kernel under TCG\n(.*?)(?=^##)", text, re.S | re.M)
    assert m, "docs/kernel-diff.md has no section 'Two runs of one kernel under TCG'"
    return m.group(1)


def changed_within(kernel, environment=False):
    """{row key: [first, second]} of the rows that change between the two runs of kernel; the
    sysctls the kernel sizes from memory at boot (the matrix's environment rows) only with
    `environment`: a few pages more or less free at boot move tcp_rmem[2] by 32 bytes."""
    return {key: row["texts"] for key, row in RUNS[kernel]["changed"].items()
            if environment or not row["environment"]}


# How each kernel's second run ran (its raw/p01-machine/vm.txt): 5.10, 6.1 and 7.2 in one
# `./run.sh --kernel all --all`, four guests side by side (side_by_side=4); 6.12.118 in a lone
# `./run.sh --all --kernel 6.12 --out DIR`, which writes no side_by_side= line (None).
SIDE_BY_SIDE = {"5.10": "4", "6.1": "4", "6.12": None, "7.2": "4"}


def test_the_four_guest_kernels_were_run_again():
    short = [k.split(".")[0] + "." + k.split(".")[1].split("-")[0] for k in KERNELS]
    assert short == ["5.10", "6.1", "6.12", "7.2"]
    for k, series in zip(KERNELS, short):
        assert os.path.isdir(os.path.join(OUT, k)), f"summary's {k} has no reference set"
        assert RUNS[k]["vm"] == {"kernel": k, "side_by_side": SIDE_BY_SIDE[series]}, RUNS[k]["vm"]


@pytest.mark.parametrize("kernel", KERNELS)
def test_the_first_run_of_the_summary_is_the_reference_set(kernel):
    """Each changed row's first value is the committed reference set's: a regenerated
    outputs/<release>/ needs a new summary (tests/tools/rerun_summary.py)."""
    cells = {r["key"]: r["cells"][0]["text"] for r in M.build([os.path.join(OUT, kernel)])["rows"]}
    for key, (first, _second) in changed_within(kernel, environment=True).items():
        assert cells.get(key, M.NOT_LISTED) == first, (kernel, key)


def test_every_row_said_to_change_between_runs_does():
    """Each row of the section's tables changed between the two runs of every kernel it names,
    with the values it quotes."""
    text = section()
    within = {k: changed_within(k) for k in KERNELS}
    short = {k: re.match(r"[0-9]+\.[0-9]+", k).group(0) for k in KERNELS}
    rows = re.findall(r'^\| <a id="([^"]+)"></a>[^|]*\| (.*) \|$', text, re.M)
    assert len(rows) >= 40, "the section lists fewer rows than it did"
    for key, cells in rows:
        for part in cells.split("; "):
            series, _, vals = part.partition(": ")
            kernel = next(k for k in KERNELS if short[k] == series)
            assert key in within[kernel], f"{key}: the two {series} runs agree now"
            assert vals == " / ".join(within[kernel][key]).replace("|", "/"), (key, series)


def test_the_section_explains_what_the_matrix_links_to_it():
    """Every anchor of the section is a changed row of the committed matrix, linked there."""
    m = M.build([os.path.join(TOP, p) for p in (
        "outputs/5.10.0-43-cloud-amd64", "outputs/6.1.0-57-cloud-amd64",
        "outputs/6.12.118+deb12-cloud-amd64", "outputs/6.18.44-fc-v1045",
        "outputs/7.2.13+deb14-cloud-amd64")])
    rows = {r["key"]: r for r in m["rows"]}
    for key in re.findall(r'<a id="([^"]+)"></a>', section()):
        assert rows[key]["changed"], key
        assert rows[key]["explanation"] == f"docs/kernel-diff.md#{key}", key


@pytest.mark.parametrize("kernel", KERNELS)
def test_a_second_run_is_not_a_kernel_difference_where_the_kernel_is_the_same(kernel):
    """The sysctls (but those sized from memory) and the SYN schedule of one kernel do not
    change between its two runs."""
    within = changed_within(kernel)
    assert set(changed_within(kernel, environment=True)) - set(within) <= {"tcp_rmem", "tcp_wmem"}
    assert not [k for k in within if not re.match(r"(p0[1-6]|accept-path|poll|connect)", k)], \
        sorted(within)
    assert "p01-synretry-syncnt-syn-retransmissions" not in within


def test_the_summary_tool_records_a_changed_row(tmp_path):
    """rerun_summary.py on a reference set and a copy with one sysctl changed: that row, its two
    texts, and the copy's vm.txt kernel; a missing directory is one line and exit 2."""
    kernel = KERNELS[0]
    second = tmp_path / kernel
    subprocess.run(["cp", "-a", os.path.join(OUT, kernel), str(second)], check=True)
    machine = second / "p01-machine.json"
    text = machine.read_text()
    six = '"net.ipv4.tcp_syn_retries": 6,'
    assert text.count(six) == 1
    machine.write_text(text.replace(six, six.replace("6", "5")))
    r = subprocess.run([sys.executable, TOOL, OUT, str(tmp_path)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)["kernels"]
    assert list(got) == [kernel]
    assert got[kernel]["vm"]["kernel"] == kernel
    assert got[kernel]["changed"]["tcp_syn_retries"] == {"texts": ["6", "5"],
                                                         "environment": False}
    r = subprocess.run([sys.executable, TOOL, OUT, str(tmp_path / "none")], capture_output=True,
                       text=True)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and not r.stdout
