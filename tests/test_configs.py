"""configs/*.yaml agree with the arch table and compose through fairseq's hydra."""

import glob
import os

import pytest
import torch
import yaml
from conftest import REPO, TinyTask, make_dictionary

from luong_plugin import models

CONFIG_DIR = os.path.join(REPO, "configs")
CONFIGS = sorted(glob.glob(os.path.join(CONFIG_DIR, "*.yaml")))
MODEL_MODULES = {"luong": models.luong}
if hasattr(models, "bahdanau"):
    MODEL_MODULES["bahdanau"] = models.bahdanau


def arch_of(path):
    return os.path.basename(path)[: -len(".yaml")]


def test_one_config_per_arch():
    archs = {a for module in MODEL_MODULES.values() for a in module.ARCHS}
    assert {arch_of(p) for p in CONFIGS} == archs


@pytest.mark.parametrize("path", CONFIGS, ids=arch_of)
def test_config_model_section_equals_arch(path):
    with open(path) as f:
        cfg = yaml.safe_load(f)
    model = dict(cfg["model"])
    module = MODEL_MODULES[model.pop("_name")]
    assert model == module.arch_config(arch_of(path))
    assert cfg["task"]["max_source_positions"] == model["max_source_positions"]


@pytest.fixture(scope="module")
def compose():
    from fairseq.dataclass.initialize import add_defaults, hydra_init
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    hydra_init("config")

    def _compose(name):
        GlobalHydra.instance().clear()
        with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.1"):
            cfg = hydra_compose(config_name=name, overrides=["task.data=/nonexistent"])
        add_defaults(cfg)
        return cfg

    return _compose


@pytest.mark.parametrize("path", CONFIGS, ids=arch_of)
def test_config_composes_and_builds_like_the_cli_arch(path, compose):
    """The hydra config and `--arch NAME` on the command line give the same model."""
    import argparse

    from fairseq.models import ARCH_CONFIG_REGISTRY, ARCH_MODEL_REGISTRY, build_model

    arch = arch_of(path)
    cfg = compose(arch)
    task = TinyTask(make_dictionary(40), make_dictionary(50))
    args = argparse.Namespace(arch=arch)
    ARCH_CONFIG_REGISTRY[arch](args)
    with torch.device("meta"):
        from_yaml = build_model(cfg.model, task)
        from_cli = ARCH_MODEL_REGISTRY[arch].build_model(args, task)
    shapes = lambda m: [(n, tuple(p.shape)) for n, p in m.named_parameters()]  # noqa: E731
    assert shapes(from_yaml) == shapes(from_cli)
    assert str(from_yaml) == str(from_cli)


def test_luong_sgd_schedule_halves_after_epoch_5_and_8():
    """§4.1: lr 1.0 for 5 epochs then halved every epoch (8 with dropout)."""
    from fairseq.optim.lr_scheduler.fixed_schedule import FixedLRSchedule
    from fairseq.optim.sgd import SGD
    from omegaconf import OmegaConf

    for name, expected in [
        ("luong_base_wmt_en_de", [1, 1, 1, 1, 1, 0.5, 0.25, 0.125, 0.0625, 0.03125]),
        ("luong_wmt_en_de", [1] * 8 + [0.5, 0.25, 0.125, 0.0625]),
    ]:
        with open(os.path.join(CONFIG_DIR, name + ".yaml")) as f:
            cfg = yaml.safe_load(f)
        optimizer = SGD(OmegaConf.create(cfg["optimizer"]), [torch.nn.Parameter(torch.zeros(1))])
        sched_cfg = dict(cfg["lr_scheduler"], lr=cfg["optimization"]["lr"], warmup_updates=0)
        sched = FixedLRSchedule(OmegaConf.create(sched_cfg), optimizer)
        lrs = []
        for epoch in range(1, cfg["optimization"]["max_epoch"] + 1):
            sched.step_begin_epoch(epoch)  # what fairseq's trainer calls each epoch
            lrs.append(optimizer.get_lr())
        assert lrs == pytest.approx(expected), name


# WMT-size models shrunk to test size; everything else (optimizer, schedule, task) as written
TINY_MODEL = {
    "luong": {
        "encoder_embed_dim": 16,
        "encoder_hidden_size": 24,
        "encoder_layers": 2,
        "decoder_embed_dim": 24,  # = out: luong_recommended shares the target embeddings
        "decoder_hidden_size": 24,
        "decoder_layers": 2,
        "decoder_out_embed_dim": 24,
    },
    "bahdanau": {
        "encoder_embed_dim": 16,
        "encoder_hidden_size": 24,
        "decoder_embed_dim": 16,
        "decoder_hidden_size": 24,
        "attention_dim": 20,
        "maxout_dim": 12,
    },
}


def hydra_train(path, data, save_dir):
    from conftest import USER_DIR, VENV_BIN

    with open(path) as f:
        model_name = yaml.safe_load(f)["model"]["_name"]
    shrink = (
        []
        if arch_of(path).endswith("_tiny")
        else [f"model.{k}={v}" for k, v in TINY_MODEL[model_name].items()]
    )
    return [
        os.path.join(VENV_BIN, "fairseq-hydra-train"),
        "--config-dir",
        CONFIG_DIR,
        "--config-name",
        arch_of(path),
        f"task.data={data}",
        "task.source_lang=es",
        "task.target_lang=en",
        f"common.user_dir={USER_DIR}",
        "optimization.max_update=2",
        "dataset.batch_size=16",
        "dataset.num_workers=0",
        "dataset.disable_validation=true",
        "checkpoint.no_save=true",
        f"checkpoint.save_dir={save_dir}",
        f"hydra.run.dir={save_dir}",
        *shrink,
    ]


@pytest.mark.slow
def test_every_config_trains_two_updates_through_fairseq_hydra_train(bible, tmp_path):
    from compatibility_harness import run_parallel

    logs = run_parallel([hydra_train(p, bible / "bin", tmp_path / arch_of(p)) for p in CONFIGS])
    for path, log in zip(CONFIGS, logs):
        assert (
            "num_updates 2 " in log or "num_updates=2," in log or "| num_updates 2" in log
        ), f"{arch_of(path)}\n{log[-2000:]}"
