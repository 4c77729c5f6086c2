"""experiments/corpus_compare.py: the options it refuses, which runs count as done, and a
failed run stopping the queue. No training."""

import json
import threading

import pytest

from experiments import corpus_compare
from experiments.corpus_compare import RUNS


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--updates", "0"], "--updates must be >= 1, got 0"),
        (["--validate-every", "0"], "--validate-every must be >= 1, got 0"),
        (["--jobs", "0"], "--jobs must be >= 1, got 0"),
        (["--threads", "0"], "--threads must be >= 1, got 0"),
        (["--seeds", "0"], "--seeds must be >= 1, got 0"),
        (["--seeds", "1", "2", "1"], "--seeds 1 2 1: each once"),
        (["--runs", "global", "global"], "--runs global global: each once"),
        (["--runs", "local_p"], "argument --runs: invalid choice: 'local_p'"),
    ],
)  # fmt: skip
def test_bad_options_name_the_option_and_the_allowed_values(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        corpus_compare.parse_args(["--render-only", *argv])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert message in err
    if "invalid choice" in message:
        assert all(f"'{name}'" in err for name in RUNS)


def write_result(directory, name, seed, updates, options):
    path = directory / f"{name}.seed{seed}.json"
    path.write_text(json.dumps({"name": name, "seed": seed, "updates": updates,
                                "options": options, "valid_ppl": {}}))  # fmt: skip


def test_a_run_is_done_only_with_its_options_and_enough_updates(monkeypatch, tmp_path):
    monkeypatch.setattr(corpus_compare, "results_dir", lambda corpus: str(tmp_path))
    write_result(tmp_path, "global", 1, 1500, RUNS["global"][1])
    write_result(tmp_path, "local-m", 1, 3000, RUNS["local-p"][1])  # another run's options
    assert corpus_compare.done("docs_en_fr_long", "global", 1, 1500)
    assert not corpus_compare.done("docs_en_fr_long", "global", 1, 3000)
    assert not corpus_compare.done("docs_en_fr_long", "global", 2, 1500)
    assert not corpus_compare.done("docs_en_fr_long", "local-m", 1, 1500)


def test_a_failed_run_stops_the_runs_not_started(monkeypatch, tmp_path):
    (tmp_path / "data" / "docs_en_fr_long" / "bin").mkdir(parents=True)
    monkeypatch.setattr(corpus_compare.harness, "REPO", str(tmp_path))
    monkeypatch.setattr(corpus_compare, "done", lambda *a: False)
    monkeypatch.setattr(corpus_compare, "render", lambda out: None)
    started, lock = [], threading.Lock()

    def train(corpus, name, seed, args):
        with lock:
            started.append((name, seed))
        raise RuntimeError(f"{corpus} {name} seed {seed} failed (exit 1): see its log")

    monkeypatch.setattr(corpus_compare, "train", train)
    argv = ["--runs", "global", "local-m", "lstm", "--seeds", "1", "2", "--jobs", "1"]
    with pytest.raises(RuntimeError, match="docs_en_fr_long global seed 1 failed"):
        corpus_compare.main(argv)
    assert started == [("global", 1)]


def test_the_page_gives_each_run_its_seeds_cells_and_commits(monkeypatch, tmp_path):
    monkeypatch.setattr(corpus_compare, "results_dir", lambda corpus: str(tmp_path / corpus))
    (tmp_path / "docs_en_fr_long").mkdir()
    for seed, commit, ppl in ((1, "abc1234", {"500": 40.0, "750": 30.0, "1000": 20.0}),
                              (2, "def5678", {"500": 50.0, "750": 35.0})):  # fmt: skip
        r = {"name": "global", "seed": seed, "commit": commit, "valid_ppl": ppl,
             "started": "2026-11-27 05:00", "machine": "AMD EPYC, 2 cores"}  # fmt: skip
        (tmp_path / "docs_en_fr_long" / f"global.seed{seed}.json").write_text(json.dumps(r))
    page = tmp_path / "CORPORA.md"
    corpus_compare.render(str(page))
    text = page.read_text()
    assert "| run | what | ppl @ 500 | ppl @ 1000 | commit |" in text  # multiples of 500
    row = next(line for line in text.splitlines() if line.startswith("| `global` |"))
    assert "| 45.00 (40.00 / 50.00) | 20.00 (seed 1) | abc1234 / def5678 |" in row
    assert "## `docs_en_fr` " not in text  # a corpus without results has no section
