"""A command run through forked_tools prints and exits as the console script run as a
process of its own does."""

import os
import re
import subprocess

import forked_tools
from conftest import REPO, USER_DIR, VENV_BIN, tool_env

TRAIN = os.path.join(VENV_BIN, "fairseq-train")
BAD = ["/no/data", "--user-dir", USER_DIR, "--arch", "luong_tiny", "--attention-window", "x"]


def test_a_refused_option_prints_and_exits_as_the_console_script_does():
    """fairseq logs a line at INFO while it imports, and LOGLEVEL=WARNING, read at import,
    silences it: a command in another environment must get a zygote of its own."""
    quiet = dict(tool_env(), LOGLEVEL="WARNING")
    plain = subprocess.run([TRAIN, *BAD], capture_output=True, text=True, env=quiet, cwd=REPO)
    assert plain.returncode == 2 and "invalid choice: 'x'" in plain.stderr.splitlines()[-1]
    for _ in range(2):  # the zygote's first command, and a later one from the same zygote
        assert forked_tools.run(TRAIN, BAD, quiet, REPO) == (2, plain.stdout, plain.stderr)
    status, out, err = forked_tools.run(TRAIN, BAD, tool_env(), REPO)
    assert (status, err) == (2, plain.stderr)
    assert re.fullmatch(r"\S+ \S+ \| INFO \| fairseq\.tasks\.text_to_speech \| .*\n", out)
