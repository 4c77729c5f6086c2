"""fairseq's command-line tools (and ours) for the tests, each command in a process of its own,
forked from a waiting process that has already imported the tool.

A fresh ``fairseq-train`` spends about 5 s importing torch, fairseq and what fairseq
imports (scikit-learn, scipy) before it reads its first argument; the suite starts over a
hundred of them. Here a tool's imports are paid once per test process: a *zygote* runs
the console script's own first line (``from fairseq_cli.<tool> import cli_main``), then
waits; each command forks it, and the child does what the rest of the console script does
(``sys.exit(cli_main())``) with the command's argv, environment, working directory and
standard streams. So every command still runs alone, through fairseq's entry point, and
the state it starts from is the one a fresh process would have after that import: the
zygote runs nothing else, and the environment is part of the zygote's key, as the
imports read it (``LOGLEVEL``, the thread-count variables).

A zygote serves one command at a time; ``start`` takes an idle one of the tool and the
environment, or starts another, so commands run side by side as ``subprocess.Popen``
would run them.
"""

import atexit
import json
import os
import subprocess
import sys
import tempfile
import threading
from importlib.metadata import entry_points


def entry_point(tool_path):
    """(module, function) of an installed console script: fairseq's, or ours."""
    name = os.path.basename(tool_path)
    found = [e for e in entry_points(group="console_scripts") if e.name == name]
    if len(found) != 1:
        raise ValueError(f"{tool_path}: {len(found)} installed console scripts are named {name}")
    return found[0].module, found[0].attr


# Modules a command imports anyway, later than its first line, at a cost worth paying
# once: torch.optim.Optimizer imports torch._dynamo (about 2.5 s) when the first optimizer
# is built. Imported after the tool's module, as in the command itself, so the logging
# that the tool's module sets up first is the same.
IMPORTED_LATER = {
    "fairseq_cli.train": ("torch._dynamo",),
    "fairseq_cli.hydra_train": ("torch._dynamo",),
}

# What a zygote runs: ``-c ZYGOTE TOOL_PATH MODULE FUNCTION REQUESTS_FD STATUSES_FD
# [LATER...]``, its stdout and stderr in files. After the imports it keeps what they
# printed (fairseq logs a line while it imports); each child prints that first, as a fresh
# process would. Then requests come as one JSON line each, and the exit status of each
# command goes back. The child puts the command's files on fds 0-2, so the zygote's own
# sys.stdin/out/err (never read, flushed before each fork) become the command's, buffered
# as a fresh process with that environment would buffer them (none is a terminal).
ZYGOTE = r"""
import json, os, sys
tool_path, module, function, requests, statuses, *later = sys.argv[1:]
sys.path[0] = os.path.dirname(tool_path)  # a console script's sys.path[0]: its bin/
sys.argv = [tool_path]
from importlib import import_module
cli_main = getattr(import_module(module), function)
for name in later:
    import_module(name)
sys.stdout.flush()
sys.stderr.flush()
printed = [os.pread(fd, os.fstat(fd).st_size, 0) for fd in (1, 2)]
requests, statuses = os.fdopen(int(requests), "r"), os.fdopen(int(statuses), "w")
for line in requests:
    command = json.loads(line)
    pid = os.fork()
    if pid == 0:
        requests.close()
        statuses.close()
        for fd, (path, flags) in enumerate(command["streams"]):
            opened = os.open(path, flags)
            os.dup2(opened, fd)
            os.close(opened)
        os.write(1, printed[0])
        os.write(2, printed[1])
        os.chdir(command["cwd"])
        os.environ.clear()
        os.environ.update(command["env"])
        sys.argv = command["argv"]
        sys.exit(cli_main())
    _, status = os.waitpid(pid, 0)
    statuses.write(f"{os.waitstatus_to_exitcode(status)}\n")
    statuses.flush()
"""


class Zygote:
    """One waiting process that has imported one tool, for one environment."""

    def __init__(self, tool_path, env, cwd):
        module, function = entry_point(tool_path)
        requests_read, requests_write = os.pipe()
        statuses_read, statuses_write = os.pipe()
        self._printed = tempfile.TemporaryDirectory(prefix="zygote_")
        with (
            open(os.path.join(self._printed.name, "out"), "w+") as out,
            open(os.path.join(self._printed.name, "err"), "w+") as err,
        ):
            self.process = subprocess.Popen(
                [sys.executable, "-c", ZYGOTE, tool_path, module, function]
                + [str(requests_read), str(statuses_write), *IMPORTED_LATER.get(module, ())],
                env=env,
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                pass_fds=(requests_read, statuses_write),
            )
        os.close(requests_read)
        os.close(statuses_write)
        self._requests = os.fdopen(requests_write, "w")
        self._statuses = os.fdopen(statuses_read, "r")

    def run(self, argv, env, cwd, streams):
        """Fork a child for one command; block until it ends; its exit status."""
        self._requests.write(json.dumps(dict(argv=argv, env=env, cwd=cwd, streams=streams)))
        self._requests.write("\n")
        self._requests.flush()
        status = self._statuses.readline()
        if not status:
            with open(os.path.join(self._printed.name, "err")) as err:
                said = err.read()[-3000:]
            raise RuntimeError(f"{argv[0]}'s zygote ended (exit {self.process.wait()}):\n{said}")
        return int(status)

    def close(self):
        self._requests.close()
        self.process.wait()
        self._statuses.close()
        self._printed.cleanup()


_idle = {}  # (tool, env) -> [Zygote]
_lock = threading.Lock()


def _take(tool_path, env, cwd):
    key = (tool_path, tuple(sorted(env.items())))
    with _lock:
        if _idle.get(key):
            return key, _idle[key].pop()
    return key, Zygote(tool_path, env, cwd)


def _give_back(key, zygote):
    with _lock:
        _idle.setdefault(key, []).append(zygote)


@atexit.register
def _close_all():
    for zygotes in _idle.values():
        for zygote in zygotes:
            zygote.close()
    _idle.clear()


class Command:
    """A fairseq tool's command, started; ``wait()`` gives (exit status, stdout, stderr)."""

    def __init__(self, tool_path, args, env, cwd, input=None):
        self._folder = tempfile.TemporaryDirectory(prefix="forked_tool_")
        paths = [os.path.join(self._folder.name, n) for n in ("stdin", "stdout", "stderr")]
        with open(paths[0], "w") as f:
            f.write(input or "")
        written = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
        streams = [(paths[0], os.O_RDONLY), (paths[1], written), (paths[2], written)]
        self._paths = paths
        argv = [tool_path, *map(str, args)]
        key, zygote = _take(tool_path, env, cwd)
        self._result = {}

        def run():
            try:
                self._result["status"] = zygote.run(argv, env, str(cwd), streams)
                _give_back(key, zygote)
            except BaseException as error:  # noqa: B036 - handed to wait()
                self._result["error"] = error

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()

    def wait(self):
        self._thread.join()
        if "error" in self._result:
            raise self._result["error"]
        with open(self._paths[1]) as out, open(self._paths[2]) as err:
            result = self._result["status"], out.read(), err.read()
        self._folder.cleanup()
        return result


def start(tool_path, args, env, cwd, input=None):
    """Start ``tool_path args`` (a fairseq console script) as Popen would, in a forked child."""
    return Command(tool_path, args, env, cwd, input)


def run(tool_path, args, env, cwd, input=None):
    """Run it to the end: (exit status, stdout, stderr)."""
    return start(tool_path, args, env, cwd, input).wait()
