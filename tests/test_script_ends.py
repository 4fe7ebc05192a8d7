"""run.sh and vm.sh run for many minutes, and bash reads a script as it executes it: after
main() returns it reads on from the offset it had reached.  If the file was rewritten in place
meanwhile (an editor or a tool writing it back in the clone a run started from; git's
checkout replaces the file instead, which the open script does not see), that offset lands in
the new text:
a 14-minute guest run that had written every output ended with "syntax error near unexpected
token `}'" and exit 2.  `main "$@"; exit` on one line makes bash stop before reading on."""
import os
import subprocess

import pytest

TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPTS = ["run.sh", "experiments/guest/vm.sh"]


def last_code_line(path):
    with open(path) as f:
        lines = [x.strip() for x in f if x.strip() and not x.lstrip().startswith("#")]
    return lines[-1]


@pytest.mark.parametrize("script", SCRIPTS)
def test_main_and_exit_on_one_line(script):
    assert last_code_line(os.path.join(TOP, script)) == 'main "$@"; exit'


def test_a_script_edited_after_main_returned_is_not_read_on(tmp_path):
    """The mechanism itself, on a small script that rewrites itself longer while it runs (as an
    editor writing it back would): with `main "$@"` alone bash runs the new tail; with `; exit` it does not."""
    for ending, want_tail in (('main "$@"\n', True), ('main "$@"; exit\n', False)):
        script = tmp_path / "s.sh"
        body = ("main() {\n\techo ran\n"
                "\tcp \"$0.new\" \"$0.tmp\" && cat \"$0.tmp\" > \"$0\"\n}\n")
        script.write_text(body + ending)
        # the same file with a longer tail: the bytes after the old end are a command
        (tmp_path / "s.sh.new").write_text(body + ending + "echo TAIL-RAN\n")
        r = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=30)
        assert ("TAIL-RAN" in r.stdout) is want_tail, (ending, r.stdout, r.stderr)
