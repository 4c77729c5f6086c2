"""Checkpoints load with torch's safe unpickler: fairseq's globals are allowed,
code-running pickles are refused."""

import argparse
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

import luong_plugin  # noqa: F401  (allow-lists the globals)


class RunsCode:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def fairseq_like_state():
    return {
        "args": argparse.Namespace(arch="luong_tiny", lr=[0.1]),
        "cfg": {"model": {"_name": "luong", "dropout": 0.2}},
        "model": {"w": torch.ones(2, 2)},
        "extra_state": {
            "metrics": {
                "valid": [
                    (
                        "_bleu_counts_0",
                        "AverageMeter",
                        0,
                        {
                            "val": np.array([3, 1, 0, 0]),
                            "sum": np.array([6, 2, 0, 0], dtype=np.int64),
                        },
                    )
                ]
            },
            "best": np.float64(12.5),
            "ratio": np.float32(0.5),
        },
    }


def test_fairseq_globals_load_with_weights_only(tmp_path):
    path = tmp_path / "ckpt.pt"
    torch.save(fairseq_like_state(), path)
    state = torch.load(path, weights_only=True)
    assert state["args"].arch == "luong_tiny"
    meter = state["extra_state"]["metrics"]["valid"][0][3]
    np.testing.assert_array_equal(meter["sum"], [6, 2, 0, 0])
    assert state["extra_state"]["best"] == 12.5


def test_without_the_plugin_the_same_checkpoint_is_refused(tmp_path):
    """Proves the allow-list is what makes it load (torch alone refuses)."""
    path = tmp_path / "ckpt.pt"
    torch.save(fairseq_like_state(), path)
    code = f"import torch; torch.load({str(path)!r}, weights_only=True)"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode != 0
    assert "Unsupported global" in proc.stderr


@pytest.mark.parametrize("loader", ["torch", "fairseq"])
def test_code_running_pickle_is_refused(tmp_path, loader):
    marker = tmp_path / "pwned"
    path = tmp_path / "evil.pt"
    torch.save({"model": {}, "payload": RunsCode(marker)}, path)
    with pytest.raises(Exception) as err:
        if loader == "torch":
            torch.load(path)
        else:
            from fairseq import checkpoint_utils

            checkpoint_utils.load_checkpoint_to_cpu(str(path))
    assert "Unsupported global" in str(err.value) or "weights_only" in str(err.value)
    assert "posix.system" in str(err.value) or "os.system" in str(err.value)
    assert not marker.exists()


def test_numpy_object_arrays_do_not_smuggle_code(tmp_path):
    marker = tmp_path / "pwned"
    path = tmp_path / "evil.pt"
    arr = np.empty(1, dtype=object)
    arr[0] = RunsCode(marker)
    torch.save({"extra_state": {"x": arr}}, path)
    with pytest.raises(Exception, match="Weights only load failed"):
        torch.load(path)
    assert not marker.exists()


def test_import_is_idempotent_with_user_dir():
    """`import luong_plugin` then `--user-dir luong_plugin` registers nothing twice."""
    from fairseq import utils

    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    utils.import_user_module(argparse.Namespace(user_dir=os.path.join(repo, "luong_plugin")))
    utils.import_user_module(argparse.Namespace(user_dir=os.path.join(repo, "luong_plugin")))
    from fairseq.models import ARCH_MODEL_REGISTRY

    assert "luong_tiny" in ARCH_MODEL_REGISTRY
