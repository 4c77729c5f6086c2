"""experiments/compare.py: reading fairseq-train logs, adopting a finished
run, and the options every run names (a changed default must not change a run)."""

import argparse
import json

import pytest

from experiments import compare, compare_page, harness, trajectory

LOG = """\
2026-11-24 16:23:49 | INFO | train_inner | epoch 001:    100 / 560 loss=9.436, ppl=439.2, num_updates=100, lr=0.003, gnorm=0.638, clip=5, train_wall=90, wall=91
2026-11-24 16:25:56 | INFO | valid | epoch 001 | valid on 'valid' subset | loss 9.759 | nll_loss 9.021 | ppl 519.4 | wps 7940.5 | wpb 1305.2 | bsz 41.7 | num_updates 500
2026-11-24 16:29:01 | INFO | valid | epoch 002 | valid on 'valid' subset | loss 6.7 | nll_loss 5.2 | ppl 37.99 | wps 790.5 | wpb 1305.2 | bsz 41.7 | num_updates 1000 | best_loss 6.7
2026-11-24 16:29:02 | INFO | train_inner | epoch 002:    440 / 560 loss=6.4, ppl=40.1, num_updates=1000, lr=0.003, gnorm=0.4, clip=0, train_wall=600, wall=612
"""  # noqa: E501


def test_parse_log_reads_every_validation_and_the_wall():
    ppl, wall = harness.parse_log(LOG)
    assert ppl == {500: 519.4, 1000: 37.99}
    assert wall == 612


def test_a_run_stopped_after_its_budget_counts_as_finished(tmp_path):
    log = tmp_path / "train.log"
    assert not compare.finished(str(log), 1000)
    log.write_text(LOG)
    assert compare.finished(str(log), 1000) and compare.finished(str(log), 500)
    assert not compare.finished(str(log), 2000)


@pytest.mark.parametrize("name", [n for n in compare.RUNS if n != "lstm"])
def test_every_run_of_ours_names_the_options_it_compares(name):
    """Each run spells out the conventions whose defaults changed, so its meaning
    does not depend on the defaults of the commit that trains it."""
    _, options = compare.RUNS[name]
    for pair in (("--reverse-source", "--no-reverse-source"),
                 ("--dropout-placement",)):  # fmt: skip
        assert any(flag in options for flag in pair), (name, pair)
    assert "--arch" in options and "--attention-window" in options


def test_render_marks_missing_runs(tmp_path, monkeypatch):
    monkeypatch.setattr(compare, "RESULTS", str(tmp_path / "results"))
    out = tmp_path / "COMPARE.md"
    compare_page.render(str(out))
    text = out.read_text()
    assert text.count("not run") == 3 * len(compare.RUNS)


def test_trajectory_distance_is_over_the_updates_both_runs_logged():
    fast = {"train_loss": {"10": 9.0, "20": 8.0, "30": 7.0}}
    run = {"train_loss": {"10": 9.0, "20": 8.5, "30": 6.9, "40": 1.0}}  # 40: fast never got there
    far = trajectory.parting(run, fast)
    assert far["max"] == pytest.approx(0.5) and far["last"] == pytest.approx(0.1)
    assert far["mean"] == pytest.approx(0.6 / 3)


def test_trajectory_section_lists_every_variant_with_its_distance(tmp_path, monkeypatch):
    runs = {v: {"train_loss": {"10": 9.0}, "valid_ppl": {"100": 50.0, "200": 30.0}}
            for v in trajectory.VARIANTS}  # fmt: skip
    for v in trajectory.VARIANTS[1:]:
        runs[v]["from_fast"] = {"mean": 0.01, "max": 0.02, "last": 0.03}
    result = {"commit": "abc", "seed": 1, "updates": 200, "log_every": 10,
              "models": {"global": {"run": "global-forward-luong", "variants": runs}}}  # fmt: skip
    out = tmp_path / "trajectory.json"
    out.write_text(json.dumps(result))
    monkeypatch.setattr(trajectory, "OUT", str(out))
    lines = trajectory.table_lines()
    rows = [line for line in lines if line.startswith("| `")]
    assert [row.split("`")[1] for row in rows] == list(trajectory.VARIANTS)
    assert rows[0].endswith("| 50.00 | 30.00 |  |")  # fast: no distance from itself
    assert all(row.endswith("| 0.0100 / 0.0200 / 0.0300 |") for row in rows[1:])
    monkeypatch.setattr(trajectory, "OUT", str(tmp_path / "none.json"))
    assert trajectory.table_lines() == []


def test_results_elsewhere_keep_their_own_runs_and_logs(tmp_path, monkeypatch):
    """``--results DIR``: a run's JSON goes to DIR and its log to runs/<DIR's name>/, so a
    study of its own neither skips for nor overwrites docs/experiments/compare's runs."""
    monkeypatch.setattr(compare, "REPO", str(tmp_path))
    results = tmp_path / "docs" / "experiments" / "window_seeds"
    name = "local-p-forward-renorm-fgb1"
    log_dir = tmp_path / "runs" / "window_seeds" / f"{name}.seed2"
    log_dir.mkdir(parents=True)
    (log_dir / "train.log").write_text(LOG)  # finished: adopted, not trained
    args = argparse.Namespace(
        results=str(results), updates=1000, validate_every=500, save_every=0, threads=1,
        jobs=2, python="python", data=str(tmp_path / "data"),
    )  # fmt: skip
    assert not compare.done(name, 2, 1000, str(results))
    compare.train(name, 2, args)
    written = json.loads((results / f"{name}.seed2.json").read_text())
    assert written["valid_ppl"] == {"500": 519.4, "1000": 37.99}
    assert compare.done(name, 2, 1000, str(results))
    assert not compare.done(name, 2, 1000, str(tmp_path / "elsewhere"))


@pytest.mark.parametrize(
    "values, decimals, cell",
    [
        ({1: 31.02, 2: 31.31}, 2, "31.17 (31.02 / 31.31)"),  # 31.165: format() gives 31.16
        ({2: 5894, 1: 5613}, 0, "5754 (5613 / 5894)"),  # 5753.5, seeds in order
        ({1: 5563, 2: 6234}, 0, "5899 (5563 / 6234)"),
        ({1: 8.44, 2: 8.29, 3: 8.3, 4: 8.1}, 2, "8.28 (8.44 / 8.29 / 8.30 / 8.10)"),  # 8.2825
        ({2: 10.125}, 2, "10.13 (seed 2)"),
        ({}, 2, ""),
    ],
)
def test_a_seed_cell_rounds_the_exact_mean_half_up(values, decimals, cell):
    assert harness.seed_cell(values, decimals) == cell
