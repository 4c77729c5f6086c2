"""recipes/bible_es_en/compare.py: reading fairseq-train logs, adopting a finished
run, and the options every run names (a changed default must not change a run)."""

import importlib.util
import os

import pytest
from conftest import REPO

SPEC = importlib.util.spec_from_file_location(
    "compare", os.path.join(REPO, "recipes", "bible_es_en", "compare.py")
)
compare = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(compare)

LOG = """\
2026-11-24 16:23:49 | INFO | train_inner | epoch 001:    100 / 560 loss=9.436, ppl=439.2, num_updates=100, lr=0.003, gnorm=0.638, clip=5, train_wall=90, wall=91
2026-11-24 16:25:56 | INFO | valid | epoch 001 | valid on 'valid' subset | loss 9.759 | nll_loss 9.021 | ppl 519.4 | wps 7940.5 | wpb 1305.2 | bsz 41.7 | num_updates 500
2026-11-24 16:29:01 | INFO | valid | epoch 002 | valid on 'valid' subset | loss 6.7 | nll_loss 5.2 | ppl 37.99 | wps 790.5 | wpb 1305.2 | bsz 41.7 | num_updates 1000 | best_loss 6.7
2026-11-24 16:29:02 | INFO | train_inner | epoch 002:    440 / 560 loss=6.4, ppl=40.1, num_updates=1000, lr=0.003, gnorm=0.4, clip=0, train_wall=600, wall=612
"""  # noqa: E501


def test_parse_log_reads_every_validation_and_the_wall():
    ppl, wall = compare.parse_log(LOG)
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
    compare.render(str(out))
    text = out.read_text()
    assert text.count("not run") == 3 * len(compare.RUNS)
