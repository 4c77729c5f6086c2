"""The WMT recipes' train command lines (recipes/wmt*/run.sh train --dry-run) against
the papers' learning-rate schedules, optimizers and batches, through fairseq's own
parser and scheduler; errors naming the option and the choices. The recipes' data
and every recipe end to end: test_wmt_recipes.py."""

import os
import shlex
import subprocess

import pytest
import torch
from conftest import REPO

from luong_plugin.corpora import wmt, wmt_run

# ------------------------------------------------------- train command and LR schedule


def dry_run(recipe, *args):
    out = subprocess.run(
        ["bash", f"recipes/{recipe}/run.sh", "train", "--data", "/data", "--dry-run", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return shlex.split(out.strip().splitlines()[-1])


def parse_train_command(cmd):
    """The command line through fairseq-train's own parser, as the trainer sees it."""
    from fairseq import options
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    assert os.path.basename(cmd[0]) == "fairseq-train"
    parser = options.get_training_parser()
    args = options.parse_args_and_arch(parser, input_args=cmd[1:])
    return args, convert_namespace_to_omegaconf(args)


def lr_per_epoch(cfg):
    """The learning rate of each epoch, stepping fairseq's scheduler as the trainer does."""
    from fairseq import optim
    from fairseq.optim import lr_scheduler

    optimizer = optim.build_optimizer(cfg.optimizer, [torch.nn.Parameter(torch.zeros(1))])
    scheduler = lr_scheduler.build_lr_scheduler(cfg.lr_scheduler, optimizer)
    lrs = []
    for epoch in range(1, cfg.optimization.max_epoch + 1):
        scheduler.step_begin_epoch(epoch)
        scheduler.step_update(1)  # every update of the epoch keeps it
        lrs.append(optimizer.get_lr())
    return lrs


@pytest.mark.parametrize(
    "recipe, arch, epochs, halve_after",
    [
        ("wmt14_en_de", "luong_base_wmt_en_de", 10, 5),  # §4.1, no dropout
        ("wmt14_en_de", None, 12, 8),  # default arch luong_wmt_en_de: dropout
        ("wmt14_en_de", "luong_global_dot_wmt_en_de", 12, 8),
        ("wmt15_de_en", "luong_base_reverse_wmt_en_de", 10, 5),
        ("wmt15_de_en", "luong_global_location_wmt_en_de", 12, 8),
    ],
)
def test_luong_recipe_trains_with_the_papers_schedule(recipe, arch, epochs, halve_after):
    """§4.1: "we start with a learning rate of 1; after 5 epochs, we begin to halve the
    learning rate every epoch" (12 epochs, after 8, with dropout); SGD, batch 128,
    gradient norm 5."""
    cmd = dry_run(recipe, *(["--arch", arch] if arch else []))
    args, cfg = parse_train_command(cmd)
    expected = [1.0] * halve_after + [0.5**k for k in range(1, epochs - halve_after + 1)]
    assert lr_per_epoch(cfg) == pytest.approx(expected)
    assert cfg.optimizer._name == "sgd" and cfg.optimizer.momentum == 0
    assert cfg.dataset.batch_size == 128 and cfg.dataset.max_tokens is None
    assert cfg.optimization.clip_norm == 5
    assert args.arch == (arch or "luong_wmt_en_de")
    src, tgt = recipe.split("_")[1:]
    assert (cfg.task.source_lang, cfg.task.target_lang) == (src, tgt)


def test_table3_rows_without_dropout_take_the_no_dropout_schedule():
    """Luong Table 3 adds dropout only at its fourth row: the earlier attention rows
    train an attention arch with --dropout 0 and the 10-epoch schedule."""
    args, cfg = parse_train_command(dry_run(
        "wmt15_de_en", "--arch", "luong_global_location_wmt_en_de",
        "--config", "luong_base_reverse_wmt_en_de", "--", "--dropout", "0"))  # fmt: skip
    assert args.dropout == 0 and args.attention_score == "location" and args.input_feeding
    assert lr_per_epoch(cfg) == pytest.approx([1.0] * 5 + [0.5, 0.25, 0.125, 0.0625, 0.03125])


def test_bahdanau_recipe_trains_with_adadelta():
    """Appendix B.2: Adadelta (eps 1e-6, rho 0.95), minibatches of 80, gradient norm 1;
    §4.2: about 5 days."""
    args, cfg = parse_train_command(dry_run("wmt14_en_fr"))
    assert args.arch == "bahdanau_rnnsearch_wmt_en_fr"
    assert cfg.optimizer._name == "adadelta"
    assert (cfg.optimizer.adadelta_eps, cfg.optimizer.adadelta_rho) == (1e-6, 0.95)
    assert cfg.optimization.lr == [1.0] and cfg.optimization.clip_norm == 1
    assert cfg.dataset.batch_size == 80 and cfg.optimization.stop_time_hours == 120
    args, _ = parse_train_command(dry_run("wmt14_en_fr", "--arch", "bahdanau_rnnencdec_wmt_en_fr"))
    assert args.attention == "none"


def test_world_size_keeps_the_effective_batch_and_the_schedule():
    _, cfg = parse_train_command(dry_run("wmt14_en_de", "--world-size", "8"))
    assert cfg.dataset.batch_size * cfg.distributed_training.distributed_world_size == 128
    assert cfg.distributed_training.distributed_world_size == 8
    assert lr_per_epoch(cfg) == pytest.approx([1.0] * 8 + [0.5, 0.25, 0.125, 0.0625])
    with pytest.raises(ValueError, match=r"--world-size 3 .* one of \[1, 2, 4, 8, 16, 32"):
        wmt_run.config_flags(wmt_run.load_config("luong_wmt_en_de"), world_size=3)


def test_errors_name_the_option_and_the_choices():
    with pytest.raises(ValueError, match="--config 'nope'.*luong_wmt_en_de"):
        wmt_run.load_config("nope")
    with pytest.raises(ValueError, match="--recipe 'wmt16'.*wmt14_en_de, wmt15_de_en"):
        wmt.get_recipe("wmt16")
    proc = subprocess.run(
        ["bash", "recipes/wmt14_en_de/run.sh", "train", "--data", "x", "--arch", "luong",
         "--dry-run"],
        cwd=REPO, capture_output=True, text=True,
    )  # fmt: skip
    assert proc.returncode != 0 and "--config 'luong'" in proc.stderr


# ------------------------------------------------------- on a GPU: --cuda-graphs, bf16


def recipe_command(arch=None, world_size=1, extra=(), plain=False, cuda=True, config=None):
    recipe = wmt.get_recipe("wmt14_en_de")
    return wmt_run.train_command(recipe, "/data", arch, None, config, world_size, list(extra),
                                 plain, cuda)  # fmt: skip


@pytest.mark.parametrize("arch, config", [
    (None, None),
    # WMT'15's "+ feed" row: the no-dropout schedule of another arch's config
    ("luong_global_location_wmt_en_de", "luong_base_reverse_wmt_en_de"),
])  # fmt: skip
def test_on_a_gpu_a_luong_input_feeding_model_trains_graphed_in_bf16(arch, config):
    args, _ = parse_train_command(recipe_command(arch, config=config))
    assert args.cuda_graphs and args.cuda_graph_limit == 32 and args.precision == "bf16"
    args, _ = parse_train_command(recipe_command(arch, config=config, cuda=False))
    assert not args.cuda_graphs and args.precision == "fp32"


@pytest.mark.parametrize("arch, world_size, plain, extra, config", [
    # no input feeding: not graphed, whatever the config's arch
    ("luong_global_location_no_feed_wmt_en_de", 1, False, [], "luong_wmt_en_de"),
    ("luong_base_wmt_en_de", 1, False, [], None),
    (None, 8, False, [], None),  # DDP with graphs not run on GPUs
    (None, 1, True, [], None),
    (None, 1, False, ["--cpu"], None),
])  # fmt: skip
def test_on_a_gpu_the_rest_trains_as_configured(arch, world_size, plain, extra, config):
    cmd = recipe_command(arch, world_size, extra, plain, config=config)
    assert "--cuda-graphs" not in cmd and "--precision" not in cmd


def test_on_a_gpu_rnnsearch_trains_as_configured():
    recipe = wmt.get_recipe("wmt14_en_fr")
    cmd = wmt_run.train_command(recipe, "/data", cuda=True)
    assert "--cuda-graphs" not in cmd and "--precision" not in cmd


@pytest.mark.parametrize("flag", [["--fp16"], ["--amp"], ["--precision", "fp32"]])
def test_on_a_gpu_a_precision_of_ones_own_is_kept(flag):
    cmd = recipe_command(extra=flag)
    assert cmd.count("--precision") == flag.count("--precision")  # none of the recipe's
    args, _ = parse_train_command(cmd)
    assert args.cuda_graphs and args.precision == "fp32"
    assert args.fp16 == (flag == ["--fp16"]) and args.amp == (flag == ["--amp"])


@pytest.mark.parametrize("plain", [False, True])
def test_the_train_command_asks_torch_for_a_gpu_and_takes_plain(plain, monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    wmt.main(["train", "--recipe", "wmt14_en_de", "--data", "/data", "--dry-run"]
             + (["--plain"] if plain else []))  # fmt: skip
    cmd = shlex.split(capsys.readouterr().out.strip().splitlines()[-1])
    assert ("--cuda-graphs" in cmd) != plain
