"""A command run through forked_tools prints and exits as the console script run as a
process of its own does."""

import os
import re
import subprocess

import forked_tools
from conftest import REPO, USER_DIR, VENV_BIN, tool_env

TRAIN = os.path.join(VENV_BIN, "fairseq-train")
BAD = ["/no/data", "--user-dir", USER_DIR, "--arch", "luong_tiny", "--attention-window", "x"]


def without_times(text):
    return re.sub(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", "<time>", text)


def test_a_refused_option_prints_and_exits_as_the_console_script_does():
    env = tool_env()
    plain = subprocess.run([TRAIN, *BAD], capture_output=True, text=True, env=env, cwd=REPO)
    for _ in range(2):  # the zygote's first command, and a later one from the same zygote
        status, out, err = forked_tools.run(TRAIN, BAD, env, REPO)
        assert status == plain.returncode == 2
        assert without_times(out) == without_times(plain.stdout)
        assert err == plain.stderr
    assert "invalid choice: 'x'" in err.splitlines()[-1]


def test_the_environment_read_while_importing_is_the_commands():
    """fairseq logs a line at INFO while it imports; LOGLEVEL=WARNING, read at import,
    silences it. So a command with another environment must get another zygote."""
    quiet = dict(tool_env(), LOGLEVEL="WARNING")
    plain = subprocess.run([TRAIN, *BAD], capture_output=True, text=True, env=quiet, cwd=REPO)
    _, out, err = forked_tools.run(TRAIN, BAD, quiet, REPO)
    _, loud_out, _ = forked_tools.run(TRAIN, BAD, tool_env(), REPO)
    assert (out, err) == (plain.stdout, plain.stderr)
    assert "| INFO |" in loud_out and "| INFO |" not in out
