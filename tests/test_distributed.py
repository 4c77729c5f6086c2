"""Distributed training through fairseq's trainer.

On CPU: 2 ranks (gloo, ``--ddp-backend legacy_ddp``, one process per
``--distributed-rank``) train exactly like one process with ``--update-freq 2``.
fairseq deals the epoch's batches round-robin to the ranks (``ShardedIterator``:
rank r takes batches r, r + 2, ...) and ``--update-freq 2`` groups consecutive
batches, so update k sees batches 2k and 2k + 1 either way; the test checks that
through the logged words and sentences per update. Dropout is off: each rank
reseeds torch with seed + update number before its batch (``Trainer._set_seed``)
while one process draws the second batch's dropout masks from where the first
batch left the generator, so with dropout the two setups are equally valid runs
that draw different masks.

pytorch_ddp (fairseq's default ``--ddp-backend``, GPUs only in this fairseq) stops
on the second update when a parameter got no gradient, unless
``--find-unused-parameters`` is given; torch's DistributedDataParallel, run here
on CPU, shows that no configuration of either model needs that flag.
"""

import json
import os
import socket
import subprocess

import pytest
import torch
import torch.distributed as dist
from conftest import REPO, VENV_BIN, build, random_batch, random_prev_output
from conftest import train_args as shared_train_args
from test_resume import load, max_difference, train_meters

from luong_plugin.modules.scores import SCORES
from luong_plugin.modules.windows import WINDOWS

UPDATES = 10
ENV = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
MODELS = {
    "luong_local_p": ("--arch", "luong_tiny", "--attention-window", "local-p"),
    "bahdanau": ("--arch", "bahdanau_tiny"),
}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def train_args(data, save_dir, *extra):
    schedule = ("--max-update", UPDATES, "--disable-validation")
    model = (*extra, "--dropout", "0", "--cpu")
    args = shared_train_args(
        data, save_dir, *model, max_tokens=1000, schedule=schedule, log_format="json"
    )
    return ["fairseq-train", *args, "--log-interval", "1"]


def rank_args(rank, port):
    return [
        "--ddp-backend",
        "legacy_ddp",
        "--distributed-backend",
        "gloo",
        "--distributed-init-method",
        f"tcp://127.0.0.1:{port}",
        "--distributed-world-size",
        "2",
        "--distributed-rank",
        rank,
        "--distributed-no-spawn",
        "--device-id",
        "0",
    ]


def run_together(log_dir, *commands):
    """Start every command, then wait for all; their logs (stdout + stderr).

    Logs go to files, not pipes: a rank blocked on a full pipe would stall the other
    rank in its next all-reduce."""
    procs, paths = [], []
    for i, cmd in enumerate(commands):
        paths.append(log_dir / f"log{i}.txt")
        with open(paths[-1], "w") as log:
            procs.append(
                subprocess.Popen(
                    [os.path.join(VENV_BIN, cmd[0]), *map(str, cmd[1:])],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=ENV,
                    cwd=REPO,
                )
            )
    try:
        for proc, path in zip(procs, paths):
            proc.wait(timeout=300)
            assert proc.returncode == 0, path.read_text()[-3000:]
    finally:
        for proc in procs:  # a rank left waiting for a dead peer
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return [path.read_text() for path in paths]


def curve(log):
    """[(update, loss, words, sentences, grad norm)] from the train_inner lines."""
    rows = []
    for line in log.splitlines():
        if "| train_inner |" in line:
            row = json.loads(line.split("| train_inner | ", 1)[1])
            rows.append(tuple(row[k] for k in ("num_updates", "loss", "wpb", "bsz", "gnorm")))
    return rows


@pytest.mark.slow
@pytest.mark.parametrize("model", list(MODELS))
def test_two_ranks_train_like_one_process_with_update_freq_2(bible, tmp_path, model):
    data, port = bible / "bin", free_port()
    rank0, rank1, single = run_together(
        tmp_path,
        train_args(data, tmp_path / "ranks", *MODELS[model], *rank_args(0, port)),
        train_args(data, tmp_path / "ranks", *MODELS[model], *rank_args(1, port)),
        train_args(data, tmp_path / "single", *MODELS[model], "--update-freq", "2"),
    )
    assert "distributed init (rank 1)" in rank1 and "distributed init (rank 0)" in rank0
    assert "'ddp_backend': 'legacy_ddp'" in rank0 and "'update_freq': [2]" in single

    # the logged curve (rank 0 logs the sums over both ranks): same sentences and
    # words in every update, same loss and gradient norm, at the log's 3 decimals
    ranks_curve, single_curve = curve(rank0), curve(single)
    assert [row[0] for row in single_curve] == [str(u) for u in range(1, UPDATES + 1)]
    assert ranks_curve == single_curve

    # full precision, from the checkpoint written at the end (rank 0 writes it)
    ours = load(tmp_path / "ranks" / "checkpoint_last.pt")
    theirs = load(tmp_path / "single" / "checkpoint_last.pt")
    assert ours["extra_state"]["train_iterator"]["iterations_in_epoch"] == UPDATES
    assert theirs["extra_state"]["train_iterator"]["iterations_in_epoch"] == 2 * UPDATES
    assert max_difference(ours["model"], theirs["model"]) <= 1e-6
    assert max_difference(ours["last_optimizer_state"], theirs["last_optimizer_state"]) <= 1e-6
    # the loss meters (last update, sum over the run): rank 0 adds up the ranks' losses
    # in float64, one process in float32, hence a relative tolerance
    our_meters, their_meters = train_meters(ours), train_meters(theirs)
    for name in ("loss", "gnorm", "wpb", "bsz"):
        for field in ("val", "sum", "count"):
            a, b = float(our_meters[name][field]), float(their_meters[name][field])
            assert abs(a - b) <= 1e-6 * abs(b), (name, field, a, b)


@pytest.fixture(scope="module")
def process_group(tmp_path_factory):
    """A one-rank gloo group: enough for DistributedDataParallel's unused-parameter check."""
    store = tmp_path_factory.mktemp("ddp") / "store"
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


NO_ATTENTION = {"attention_window": "none", "input_feeding": False, "decoder_out_embed_dim": 24}
CONFIGS = [
    *(
        ("luong_tiny", {"attention_window": window, "attention_score": score})
        for window in WINDOWS
        for score in SCORES
    ),
    ("luong_tiny", {"input_feeding": False}),
    ("luong_tiny", NO_ATTENTION),
    ("bahdanau_tiny", {"attention": "additive"}),
    ("bahdanau_tiny", {"attention": "none"}),
]
IDS = [f"{arch}-" + ",".join(f"{k}={v}" for k, v in options.items()) for arch, options in CONFIGS]


@pytest.mark.parametrize("arch,options", CONFIGS, ids=IDS)
def test_pytorch_ddp_needs_no_find_unused_parameters(process_group, arch, options):
    model = build(arch, **options).train()
    ddp = torch.nn.parallel.DistributedDataParallel(model, find_unused_parameters=False)
    src_tokens, src_lengths = random_batch(model.encoder.dictionary, [7, 5, 3])
    prev_output_tokens = random_prev_output(model.decoder.dictionary, 3, 4)
    for _ in range(2):  # an unused parameter fails at the start of the second update
        logits, _ = ddp(src_tokens, src_lengths, prev_output_tokens)  # B x T x V
        logits.log_softmax(dim=-1).mean().backward()
