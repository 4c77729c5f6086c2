"""experiments/budget.py: one result per run and seed from demo.sh's
outputs, the rendered table, and runs that demo.sh knows."""

import json
import os
import re
import shlex
import subprocess
from dataclasses import fields

import pytest
import torch

from experiments import budget
from luong_plugin.models.luong import LuongConfig

LOG = """\
2026-11-24 16:25:56 | INFO | valid | epoch 001 | valid on 'valid' subset | loss 9.759 | nll_loss 9.021 | ppl 51.4 | wps 7940.5 | wpb 1305.2 | bsz 41.7 | num_updates 560
2026-11-24 16:29:01 | INFO | valid | epoch 002 | valid on 'valid' subset | loss 6.7 | nll_loss 5.2 | ppl 19.9 | wps 790.5 | wpb 1305.2 | bsz 41.7 | num_updates 1120 | best_loss 6.7
"""  # noqa: E501


def fake_demo(scores):
    """A stand-in for demo.sh: writes what the real one leaves in $RUN, and records
    the environment it was given."""
    seen = []

    def call(cmd, env, cwd, stdout):
        assert cmd == ["bash", budget.DEMO] and cwd == budget.REPO
        seen.append(
            {k: env.get(k) for k in ("RUN", "SEED", "MINUTES", "PEER", "PRECISION", "EXPLORE",
                                     "LENPEN")}  # fmt: skip
        )
        os.makedirs(env["RUN"], exist_ok=True)
        with open(os.path.join(env["RUN"], "train.log"), "w") as f:
            f.write(LOG)
        with open(os.path.join(env["RUN"], "report.json"), "w") as f:
            json.dump(scores.pop(0), f)
        return 0

    return call, seen


def report(bleu, updates):
    return {
        "sentences": 999, "bleu": bleu, "chrf": bleu + 20, "lenpen": 1.0,
        "bleu_signature": "nrefs:1|tok:13a",
        "chrf_signature": "nrefs:1|nc:6",
        "training": {"updates": updates, "wall_s": 900, "valid_ppl": 19.9,
                     "best_checkpoint": {"update": 1120, "valid_loss": 4.5, "valid_ppl": 19.9}},
    }  # fmt: skip


def test_runs_write_results_render_and_resume(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(budget, "RESULTS", str(tmp_path / "results"))
    monkeypatch.setattr(budget, "RUN_DIRS", str(tmp_path / "runs"))
    reports = [report(30.0, 3000), report(29.0, 3200), report(32.0, 3100), report(33.0, 3300)]
    call, seen = fake_demo(reports)
    monkeypatch.setattr(budget.subprocess, "call", call)
    out = tmp_path / "BUDGET.md"
    monkeypatch.setenv("PRECISION", "fp32")  # the caller's environment does not leak in
    budget.main(["--runs", "demo", "global", "--seeds", "1", "--minutes", "0.5", "--out", str(out)])
    assert [(s["PEER"], s["PRECISION"]) for s in seen] == [("", "bf16"), ("global", "bf16")]
    assert seen[0]["SEED"] == "1" and seen[0]["MINUTES"] == "0.5" and seen[0]["EXPLORE"] == "0"
    assert seen[0]["LENPEN"] == "1"  # fairseq's default, as the committed sittings decoded
    assert seen[0]["RUN"] == str(tmp_path / "runs" / "demo.seed1")
    saved = json.loads((tmp_path / "results" / "demo.seed1.json").read_text())
    assert saved["updates"] == 3000 and saved["bleu"] == 30.0 and saved["chrf"] == 50.0
    assert saved["valid_ppl"] == {"560": 51.4, "1120": 19.9}
    assert saved["best_checkpoint"]["update"] == 1120  # the validation decoded
    assert saved["lenpen"] == 1.0
    # the finished runs are skipped; seed 2 of the demo runs
    budget.main(["--runs", "demo", "--seeds", "1", "2", "--minutes", "0.5", "--out", str(out)])
    assert len(seen) == 3 and seen[2]["SEED"] == "2" and seen[2]["PEER"] == ""
    text = out.read_text()
    demo_row = next(line for line in text.splitlines() if line.startswith("| `demo` |"))
    assert "31.00 (30.00 / 32.00)" in demo_row and "3050 (3000 / 3100)" in demo_row
    global_row = next(line for line in text.splitlines() if line.startswith("| `global` |"))
    assert "29.00 (seed 1)" in global_row
    assert "Not run yet: `lstm` seed 1, `global` seed 2, `lstm` seed 2." in text
    # a result of another budget is kept, and said so; --rerun measures it again
    capsys.readouterr()
    budget.main(["--runs", "demo", "--seeds", "1", "--minutes", "0.7", "--out", str(out)])
    assert len(seen) == 3
    assert "(measured with 0.5 minutes, now 0.7): --rerun demo" in capsys.readouterr().out
    budget.main(["--runs", "demo", "--seeds", "1", "--minutes", "0.7", "--rerun", "demo",
                 "--out", str(out)])  # fmt: skip
    assert len(seen) == 4 and seen[3]["MINUTES"] == "0.7"
    assert json.loads((tmp_path / "results" / "demo.seed1.json").read_text())["bleu"] == 33.0


def test_a_result_measured_under_another_name_says_so(tmp_path, monkeypatch):
    monkeypatch.setattr(budget, "RESULTS", str(tmp_path))
    result = {
        "name": "demo", "measured_as": "demo-d14-sigma5", "seed": 1, "updates": 5390,
        "best_valid_ppl": 7.81, "valid_ppl": {"5040": 7.81}, "bleu": 35.24, "chrf": 55.25,
        "bleu_signature": "b", "chrf_signature": "c", "started": "2026-11-26 02:47",
        "commit": "94fcb2f",
    }  # fmt: skip
    (tmp_path / "demo.seed1.json").write_text(json.dumps(result))
    budget.render(str(tmp_path / "B.md"))
    text = (tmp_path / "B.md").read_text()
    assert "| `demo` |" in text and "35.24 (seed 1)" in text
    assert (
        "- `demo` seed 1 (2026-11-26 02:47, commit 94fcb2f, measured as `demo-d14-sigma5`)" in text
    )


def test_a_failed_run_writes_no_result(tmp_path, monkeypatch):
    monkeypatch.setattr(budget, "RESULTS", str(tmp_path / "results"))
    monkeypatch.setattr(budget, "RUN_DIRS", str(tmp_path / "runs"))
    monkeypatch.setattr(budget.subprocess, "call", lambda *a, **k: 1)
    try:
        budget.main(["--runs", "lstm", "--seeds", "1", "--out", str(tmp_path / "B.md")])
    except RuntimeError as e:
        assert "lstm seed 1 failed (exit 1)" in str(e)
    else:
        raise AssertionError("a failed run must stop the table")
    assert not os.path.exists(tmp_path / "results" / "lstm.seed1.json")


def test_every_run_is_a_peer_that_demo_sh_knows():
    with open(budget.DEMO) as f:
        cases = re.findall(r"^  (\w*|\"\")\) RUN=", f.read(), flags=re.M)
    known = {c.strip('"') for c in cases}
    assert known == {"", "global", "lstm"}
    for name, (_, env) in budget.RUNS.items():
        assert env["PEER"] in known, name
        assert env["PRECISION"] in ("bf16", "fp32"), name


@pytest.mark.parametrize(
    "name, window, sigma",
    [("demo", "14", "5"), ("demo-d10", "10", "0"), ("demo-fgb0", "10", "0"),
     ("demo-fp32", "10", "0"), ("demo-d14", "14", "0")],
)  # fmt: skip
def test_each_local_p_run_trains_the_window_its_name_says(name, window, sigma):
    """The rows measured before the demo's default became D = 14, sigma 5 pin the
    window they were measured with (sigma 0: D/2, the paper's)."""
    _, env = budget.RUNS[name]
    model = demo_model(**env)
    assert model.attention_window == "local-p"
    assert (model.window_size, model.position_sigma) == (int(window), float(sigma))


def test_demo_sh_refuses_an_unknown_peer():
    run = subprocess.run(["bash", budget.DEMO], env=dict(os.environ, PEER="gru"),
                         capture_output=True, text=True)  # fmt: skip
    assert run.returncode == 2
    assert "PEER must be empty" in run.stderr and "'gru'" in run.stderr


@pytest.mark.parametrize("window", ["0", "x", "07", "-3", "1.5"])
def test_demo_sh_refuses_a_window_that_is_not_a_positive_whole_number(window):
    run = subprocess.run(["bash", budget.DEMO], env=dict(os.environ, WINDOW=window, DRY_RUN="1"),
                         capture_output=True, text=True)  # fmt: skip
    assert run.returncode == 2 and run.stdout == ""
    assert "WINDOW must be a positive whole number" in run.stderr and f"'{window}'" in run.stderr


@pytest.mark.parametrize(
    "variable, value, message",
    [("FORGET_GATE_BIAS", v, "FORGET_GATE_BIAS must be a decimal number")
     for v in ("x", "1e3", "0.", "--1")]
    + [("SIGMA", v, "SIGMA must be a decimal number >= 0") for v in ("x", "-1", "1e3", "5.")]
    + [("LENPEN", v, "LENPEN must be auto") for v in ("x", "-1", "1,,2", "1,")]
    + [("LENPEN", v, "LENPEN must give each value once") for v in ("1,1.0", "1,1.0000001")],
)  # fmt: skip
def test_demo_sh_refuses_a_value_that_is_not_a_decimal_number(variable, value, message):
    env = dict(os.environ, DRY_RUN="1", **{variable: value})
    run = subprocess.run(["bash", budget.DEMO], env=env, capture_output=True, text=True)
    assert run.returncode == 2 and run.stdout == ""
    assert message in run.stderr and f"'{value}'" in run.stderr


def demo_commands(**env):
    """demo.sh's training and test decoding commands for ``env``; PRECISION defaults to
    fp32 here, so that demo.sh need not start Python to ask default_precision (tested on its
    own below). ``demo_commands.search``: the --lenpen search between them, or None."""
    env = {"PRECISION": "fp32", **env}
    run = subprocess.run(["bash", budget.DEMO], env=dict(os.environ, DRY_RUN="1", **env),
                         capture_output=True, text=True, check=True)  # fmt: skip
    lines = [shlex.split(line) for line in run.stdout.splitlines()]
    assert len(lines) in (2, 3), run.stdout
    demo_commands.search = lines[1] if len(lines) == 3 else None
    return lines[0], lines[-1]


def parsed(train):
    """A fairseq-train command line (the tool first) through fairseq's own parser."""
    from fairseq import options

    return options.parse_args_and_arch(options.get_training_parser(), train[1:])


def demo_model(**env):
    return parsed(demo_commands(**env)[0])


# make demo's model before it was one arch, spelled out: the arch must stay this model
SPELLED_OUT = [
    "--arch", "luong_wmt_en_de", "--attention-window", "local-p", "--window-size", "14",
    "--position-logit-bound", "4", "--renormalize-window", "--position-sigma", "5",
    "--attention-score", "general", "--input-feeding", "--no-reverse-source",
    "--no-attend-source-eos", "--dropout-placement", "luong", "--forget-gate-bias", "1",
    "--encoder-layers", "1", "--decoder-layers", "1", "--encoder-embed-dim", "256",
    "--encoder-hidden-size", "256", "--decoder-embed-dim", "256",
    "--decoder-hidden-size", "256", "--decoder-out-embed-dim", "256",
    "--share-decoder-input-output-embed", "--dropout", "0.2",
]  # fmt: skip
MODEL_FIELDS = [f.name for f in fields(LuongConfig) if not f.name.startswith("_")]


def test_the_recommended_arch_is_the_demo_model_spelled_out():
    from conftest import parse_training_args

    demo = demo_model(PRECISION="fp32")
    spelled = parse_training_args("luong_wmt_en_de", *SPELLED_OUT[2:], "--precision", "fp32")
    assert demo.arch == "luong_recommended"
    assert {f: getattr(demo, f) for f in MODEL_FIELDS} == {
        f: getattr(spelled, f) for f in MODEL_FIELDS
    }
    glob = demo_model(PEER="global", PRECISION="fp32")
    assert glob.arch == "luong_recommended_global" and glob.attention_window == "global"
    local_p_only = {"attention_window", "window_size", "renormalize_window",
                    "position_logit_bound", "position_sigma"}  # fmt: skip
    assert {f: getattr(glob, f) for f in MODEL_FIELDS if f not in local_p_only} == {
        f: getattr(demo, f) for f in MODEL_FIELDS if f not in local_p_only
    }


def test_the_local_m_arch_is_the_model_corpus_budget_measured():
    """luong_recommended_local_m is the `local-m` run of experiments/corpus_compare.py's table
    (docs/CORPUS_BUDGET.md measured that run's options, not the arch's name)."""
    from conftest import parse_training_args

    from experiments.corpus_compare import RUNS

    options = RUNS["local-m"][1]
    measured = parse_training_args(options[1], *options[2:])
    arch = parse_training_args("luong_recommended_local_m", "--precision", measured.precision)
    assert arch.attention_window == "local-m" and arch.window_size == 14
    assert {f: getattr(arch, f) for f in MODEL_FIELDS} == {
        f: getattr(measured, f) for f in MODEL_FIELDS
    }


def test_demo_sh_trains_what_its_environment_says():
    train, generate = demo_commands(SEED="7", PRECISION="fp32", MINUTES="30", RUN="/tmp/x")
    model = parsed(train)
    assert model.attention_window == "local-p" and model.renormalize_window
    assert model.seed == 7 and model.precision == "fp32"
    assert model.stop_time_hours == 0.5 and model.save_dir == "/tmp/x"
    assert not model.reverse_source and not model.attend_source_eos
    assert generate[generate.index("--path") + 1] == "/tmp/x/checkpoint_best.pt"
    assert generate[generate.index("--print-alignment") + 1] == "soft"  # the heatmaps need it

    model = demo_model(PEER="global", PRECISION="bf16")
    assert model.attention_window == "global" and model.save_dir == "runs/demo_global"

    model = demo_model()  # the paper's 10 words, in pieces, with D = 10's Gaussian
    assert (model.window_size, model.position_sigma) == (14, 5.0)
    model = demo_model(WINDOW="10", SIGMA="0")  # the paper's D = 10 and sigma = D/2
    assert (model.window_size, model.position_sigma) == (10, 0.0)
    assert demo_model(SIGMA="7.5").position_sigma == 7.5

    for peer in ("", "global"):  # ours: the forget-gate bias, 1 unless told
        assert demo_model(PEER=peer).forget_gate_bias == 1.0
        assert demo_model(PEER=peer, FORGET_GATE_BIAS="0").forget_gate_bias == 0.0

    train, _ = demo_commands(PEER="lstm", FORGET_GATE_BIAS="0.5")
    assert train[train.index("--arch") + 1] == "lstm" and "--precision" not in train
    assert "--forget-gate-bias" not in train  # an option of ours only
    lstm = parsed(train)
    assert (lstm.encoder_layers, lstm.decoder_hidden_size, lstm.dropout) == (1, 256, 0.2)


def test_demo_sh_chooses_the_length_penalty_on_the_valid_chapters_unless_told():
    """LENPEN=auto (the default) runs lenpen.py's search on the valid chapters, decoded as
    the test chapters are but for the maps, and decodes the test with the value it prints;
    one value decodes with it and searches nothing."""
    from fairseq import options

    _, generate = demo_commands(RUN="/tmp/x")
    search = demo_commands.search
    assert generate[-2:] == ["--lenpen", "CHOSEN"]
    assert search[:3] == ["python", "-m", "luong_plugin.analysis.lenpen"]
    assert search[search.index("--lenpens") + 1] == "auto"
    assert search[search.index("--reference") + 1] == "data/bible_es_en/raw/valid.en"
    assert search[search.index("--out-dir") + 1] == "/tmp/x/valid"
    command = search[search.index("--") + 1 :]
    assert command[0] == "recipes/with_tcmalloc" and command[1].endswith("fairseq-generate")
    parser = options.get_generation_parser
    valid = options.parse_args_and_arch(parser(), command[2:])
    test = options.parse_args_and_arch(parser(), generate[1:-2])
    assert (valid.gen_subset, test.gen_subset) == ("valid", "test")
    assert (valid.print_alignment, test.print_alignment) == (None, "soft")
    same = ("path", "beam", "batch_size", "required_batch_size_multiple", "data")
    assert [getattr(valid, k) for k in same] == [getattr(test, k) for k in same]

    _, generate = demo_commands(LENPEN="1,1.4")
    assert demo_commands.search[demo_commands.search.index("--lenpens") + 1] == "1,1.4"
    _, generate = demo_commands(LENPEN="1.4")
    assert demo_commands.search is None
    assert options.parse_args_and_arch(parser(), generate[1:]).lenpen == 1.4


def test_demo_sh_takes_the_measured_default_precision():
    from luong_plugin.modules.precision import default_precision

    env = dict(os.environ)
    env.pop("PRECISION", None)
    run = subprocess.run(["bash", budget.DEMO], env=dict(env, DRY_RUN="1"),
                         capture_output=True, text=True, check=True)  # fmt: skip
    train = shlex.split(run.stdout.splitlines()[0])
    chosen = default_precision()
    assert train[train.index("--precision") + 1] == chosen
    assert ("training in fp32 on this machine" in run.stderr) == (chosen == "fp32")


@pytest.mark.parametrize(
    "cuda,native,expected",
    [(True, True, "fp32"), (True, False, "fp32"), (False, True, "bf16"), (False, False, "fp32")],
)
def test_default_precision_by_device(monkeypatch, cuda, native, expected):
    """bf16 on a CPU with native bf16 only (make bench measures it faster there); fp32
    on a GPU until bench/gpu.py has measured the precisions there."""
    from luong_plugin.modules import precision

    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    monkeypatch.setattr(precision, "cpu_has_native_bf16", lambda: native)
    assert precision.default_precision() == expected


def test_the_training_seed_does_not_change_the_data_split(tmp_path):
    """demo.sh passes SEED (the training seed) on to prepare.sh, whose chapter split
    must stay seed 1: a second seed trains and is tested on the same verses."""
    prepare = os.path.join(budget.REPO, "recipes", "bible_es_en", "prepare.sh")
    env = dict(os.environ, SEED="2", SWORD_DIR=str(tmp_path / "no-sword"))
    subprocess.run(["bash", prepare, "--out", str(tmp_path)], env=env, capture_output=True)
    # the split's parameters are recorded before the (here impossible) extraction
    assert (tmp_path / "raw" / ".params").read_text().startswith("seed=1 ")
    env["SPLIT_SEED"] = "3"
    subprocess.run(["bash", prepare, "--out", str(tmp_path)], env=env, capture_output=True)
    assert (tmp_path / "raw" / ".params").read_text().startswith("seed=3 ")
