"""Crash and resume: a fairseq-train run SIGKILLed mid-epoch and started again with
the same command (so from checkpoint_last.pt) ends with the parameters, optimizer
state and loss of an uninterrupted run of the same seed, dropout included; a kill
that lands while checkpoint_last.pt is being written leaves the previous
checkpoint_last.pt loadable (luong_plugin/checkpoint_atomic.py)."""

import json
import os
import re
import signal
import subprocess
import sys

import pytest
import torch
from conftest import REPO, VENV_BIN
from conftest import train_args as shared_train_args
from fairseq import checkpoint_utils

from luong_plugin.checkpoint_atomic import atomic_copy

UPDATES, SAVE_EVERY = 12, 4
# unbuffered: a SIGKILLed run must not lose the log lines it printed
ENV = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONUNBUFFERED="1")

# Runs fairseq-train's entry point after arranging for the process to SIGKILL itself
# at an exact point, so each test kills at the same place every time:
#   update N             right after the N-th update
#   copy-of NAME         once half of the bytes copied from NAME are on disk: the
#                        first read of NAME arms a file-size limit (RLIMIT_FSIZE) of
#                        half its size, and the kernel's SIGXFSZ on the write that
#                        crosses it is turned into SIGKILL
KILLER = r"""
import os, resource, signal, sys

from fairseq_cli.train import cli_main  # first: it sets up fairseq-train's logging

def die(*_):
    os.kill(os.getpid(), signal.SIGKILL)

when, what = sys.argv[1], sys.argv[2]
if when == "update":
    from fairseq.trainer import Trainer

    train_step = Trainer.train_step

    def train_step_then_die(self, *args, **kwargs):
        out = train_step(self, *args, **kwargs)
        if self.get_num_updates() == int(what):
            die()
        return out

    Trainer.train_step = train_step_then_die
elif when == "copy-of":
    def arm(event, args):
        if event == "open" and os.path.basename(str(args[0])) == what:
            if args[2] & os.O_ACCMODE == os.O_RDONLY:
                signal.signal(signal.SIGXFSZ, die)
                half = os.path.getsize(args[0]) // 2
                resource.setrlimit(resource.RLIMIT_FSIZE, (half, resource.RLIM_INFINITY))

    sys.addaudithook(arm)
else:
    raise SystemExit(f"unknown kill point {when!r}")

sys.argv = ["fairseq-train", *sys.argv[3:]]
cli_main()
"""

SCENARIOS = {
    # luong_tiny is local-p (W_p, v_p) with dropout 0.1; the kill lands in the middle
    # of writing checkpoint_last.pt at update 8, so the run resumes from update 4
    "luong_local_p": (("--arch", "luong_tiny"), ("copy-of", "checkpoint_1_8.pt"), 4),
    # a kill between two saves: updates 9-10 are lost and done again from update 8
    "bahdanau": (("--arch", "bahdanau_tiny", "--dropout", "0.2"), ("update", "10"), 8),
}


def train_args(data, save_dir, *extra):
    schedule = (
        "--max-update",
        UPDATES,
        "--save-interval-updates",
        SAVE_EVERY,
        "--disable-validation",
    )
    args = shared_train_args(
        data, save_dir, *extra, max_tokens=1000, schedule=schedule, log_format="json"
    )
    return [*args, "--log-interval", "1"]


def start(args, kill_at=None):
    """fairseq-train (or KILLER, when a kill point is given) as a running process."""
    if kill_at is None:
        cmd = [os.path.join(VENV_BIN, "fairseq-train")]
    else:
        cmd = [sys.executable, "-c", KILLER, *kill_at]
    return subprocess.Popen(
        [*cmd, *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=ENV,
        cwd=REPO,
    )


def finish(proc):
    log, _ = proc.communicate(timeout=300)
    return proc.returncode, log


def losses(log):
    """{update: logged train loss} from --log-format json --log-interval 1."""
    rows = {}
    for line in log.splitlines():
        if "| train_inner |" in line:
            row = json.loads(line.split("| train_inner | ", 1)[1])
            rows[int(row["num_updates"])] = float(row["loss"])
    return rows


def load(path):
    return checkpoint_utils.load_checkpoint_to_cpu(str(path))


def train_meters(state):
    """{meter name: its state} of the epoch's train meters (loss: last value and sum)."""
    meters = state["extra_state"]["metrics"]["train"]
    return {name: meter for _, name, _, meter in meters}


def max_difference(ours, theirs):
    """Largest |difference| over two nests of tensors with the same structure."""
    if isinstance(ours, dict):
        assert ours.keys() == theirs.keys()
        return max((max_difference(ours[k], theirs[k]) for k in ours), default=0.0)
    if isinstance(ours, (list, tuple)):
        assert len(ours) == len(theirs)
        return max((max_difference(a, b) for a, b in zip(ours, theirs)), default=0.0)
    if isinstance(ours, torch.Tensor):
        assert ours.shape == theirs.shape and ours.dtype == theirs.dtype
        return (ours.double() - theirs.double()).abs().max().item() if ours.numel() else 0.0
    assert ours == theirs
    return 0.0


@pytest.mark.slow
@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_sigkill_mid_epoch_then_resume_equals_an_uninterrupted_run(bible, tmp_path, scenario):
    model, kill_at, resumed_from = SCENARIOS[scenario]
    data = bible / "bin"
    reference = start(train_args(data, tmp_path / "reference", *model))
    killed = start(train_args(data, tmp_path / "crashed", *model), kill_at=kill_at)
    code, reference_log = finish(reference)
    assert code == 0, reference_log[-3000:]
    code, killed_log = finish(killed)
    assert code == -signal.SIGKILL, killed_log[-3000:]
    crashed_losses = losses(killed_log)
    assert resumed_from < max(crashed_losses) < UPDATES  # mid-run, after more training
    saves = re.findall(r"Saved checkpoint \S+ \(epoch 1 @ (\d+) updates", killed_log)
    assert saves[-1] == str(resumed_from)
    if kill_at[0] == "copy-of":  # the trainer wrote checkpoint_1_8.pt, then the copy began
        assert f"Finished saving checkpoint to {tmp_path / 'crashed' / kill_at[1]}" in killed_log
    last = load(tmp_path / "crashed" / "checkpoint_last.pt")
    assert last["optimizer_history"][-1]["num_updates"] == resumed_from

    # the same command again: fairseq restores checkpoint_last.pt by default
    code, resumed_log = finish(start(train_args(data, tmp_path / "crashed", *model)))
    assert code == 0, resumed_log[-3000:]
    loaded = rf"Loaded checkpoint \S+checkpoint_last\.pt \(epoch 1 @ {resumed_from} updates\)"
    assert re.search(loaded, resumed_log)

    # the logged curve: every update redone after the restart, and the final loss
    reference_losses, resumed_losses = losses(reference_log), losses(resumed_log)
    assert sorted(resumed_losses) == list(range(resumed_from + 1, UPDATES + 1))
    assert resumed_losses == {u: reference_losses[u] for u in resumed_losses}
    assert crashed_losses == {u: reference_losses[u] for u in crashed_losses}

    # full precision: every parameter, Adam's moments, the data position and the
    # loss meters (the last update's loss and the sum over the epoch)
    ours = load(tmp_path / "crashed" / "checkpoint_last.pt")
    theirs = load(tmp_path / "reference" / "checkpoint_last.pt")
    assert ours["extra_state"]["train_iterator"] == theirs["extra_state"]["train_iterator"]
    assert ours["extra_state"]["train_iterator"]["iterations_in_epoch"] == UPDATES
    assert max_difference(ours["model"], theirs["model"]) <= 1e-6
    assert max_difference(ours["last_optimizer_state"], theirs["last_optimizer_state"]) <= 1e-6
    our_meters, their_meters = train_meters(ours), train_meters(theirs)
    for name in ("loss", "gnorm", "wpb", "bsz"):
        for field in ("val", "sum", "count"):
            assert max_difference(our_meters[name][field], their_meters[name][field]) <= 1e-6


def test_checkpoint_copies_replace_the_file_in_one_step(tmp_path):
    """checkpoint_utils's copy (how checkpoint_last.pt is made when another checkpoint
    is saved first) swaps in a new file instead of rewriting the old one in place: a
    reader holding the old checkpoint_last.pt keeps reading a complete old file."""
    old, new, last = tmp_path / "old.pt", tmp_path / "new.pt", tmp_path / "checkpoint_last.pt"
    torch.save({"step": torch.tensor(1)}, old)
    torch.save({"step": torch.tensor(2), "pad": torch.zeros(1000)}, new)
    assert checkpoint_utils.PathManager.copy(str(old), str(last), overwrite=True)
    with open(last, "rb") as held:  # opened before the next save replaces the file
        assert checkpoint_utils.PathManager.copy(str(new), str(last), overwrite=True)
        assert torch.load(held, weights_only=True)["step"] == 1
    assert torch.load(last, weights_only=True)["step"] == 2
    assert not os.path.exists(f"{last}.tmp")
    assert not atomic_copy(str(old), str(last), overwrite=False)  # iopath's contract
    assert torch.load(last, weights_only=True)["step"] == 2
