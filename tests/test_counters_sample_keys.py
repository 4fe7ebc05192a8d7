"""counters -i with -k: every sample prints the keys in the same shape as -d does (a key the
files lack: "Name absent", last), and two samples of the live files never call a counter
only-now or only-before (the kernel prints a fixed list; counters pairs them by position)."""
import os
import subprocess


def test_sample_keys_present_and_absent(bindir):
    r = subprocess.run([os.path.join(bindir, "counters"), "-i", "5", "-c", "4", "-k",
                        "TcpActiveOpens,NoSuchCounterX,TcpExtListenDrops"],
                       capture_output=True, text=True, timeout=10)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    blocks = r.stdout.split("sample=")[1:]
    assert len(blocks) == 4
    for k, block in enumerate(blocks, 1):
        head, *lines = block.splitlines()
        assert head.startswith(f"{k} t_ns=")
        names = [x.split()[0] for x in lines]
        assert names.count("TcpActiveOpens") == 1 and names.count("TcpExtListenDrops") == 1
        assert names.count("NoSuchCounterX") == 1
        assert lines[-1] == "NoSuchCounterX absent"         # after every counter of the files
        assert names.index("TcpActiveOpens") < names.index("TcpExtListenDrops")   # file order
        for line in lines[:-1]:
            name, delta = line.split()
            assert delta[0] in "+-" and delta[1:].isdigit(), line
