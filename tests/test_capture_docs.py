"""docs/capture.md's synopsis is `capture -h` word for word (the house style: the synopsis
equals usage())."""
import os
import pathlib
import subprocess

DOC = pathlib.Path(__file__).resolve().parent.parent / "docs" / "capture.md"


def test_synopsis_is_the_usage(bindir):
    text = DOC.read_text()
    block = text.split("```\n", 2)[1]
    r = subprocess.run([os.path.join(bindir, "capture"), "-h"], capture_output=True, text=True)
    assert r.returncode == 0
    assert block == r.stdout
