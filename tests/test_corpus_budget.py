"""experiments/corpus_budget.py: the page rendered from hand-made results, which runs
count as done, and the options it refuses. No training."""

import json
import math
import sys

import pytest

from experiments import corpus_budget
from experiments.corpus_compare import RUNS


def result(name, seed, corpus="bible_es_en", minutes=7.0, **scores):
    r = {
        "name": name, "what": RUNS[name][0], "corpus": corpus, "seed": seed,
        "minutes": minutes, "threads": 1, "jobs_at_once": 2, "options": RUNS[name][1],
        "updates": 3000, "wall_s": 420, "best_valid_ppl": 9.5, "valid_ppl": {"560": 20.0},
        "bleu": 30.0, "chrf": 50.0, "bleu_signature": "nrefs:1|tok:13a",
        "chrf_signature": "nrefs:1|nc:6", "started": "2026-11-27 10:00", "commit": "abc1234",
        "machine": "AMD EPYC, 2 cores",
    }  # fmt: skip
    return {**r, **scores}


def save(root, r):
    path = root / r["corpus"] / f"{r['name']}.seed{r['seed']}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(r))


def row(text, name):
    return next(line for line in text.splitlines() if line.startswith(f"| `{name}` |"))


def test_the_page_shows_each_corpus_table_from_its_results(tmp_path):
    save(tmp_path, result("local-p", 1, bleu=30.0, updates=3000))
    save(tmp_path, result("local-p", 2, bleu=32.0, updates=3100))
    save(tmp_path, result("lstm", 2, bleu=28.5, chrf=49.25, best_valid_ppl=10.125))
    page = tmp_path / "PAGE.md"
    corpus_budget.render(str(page), str(tmp_path))
    text = page.read_text()
    assert text.startswith("# make demo's choices at equal time on two corpora\n")
    assert "## `bible_es_en` (`recipes/bible_es_en/prepare.sh --out data/bible_es_en`)" in text
    assert "`docs_en_fr_long`" not in text  # no results, no section
    assert "| run | what | updates | best valid ppl | sacreBLEU | chrF2 |" in text
    assert "31.00 (30.00 / 32.00)" in row(text, "local-p")
    assert "3050 (3000 / 3100)" in row(text, "local-p")
    lstm = row(text, "lstm").split(" | ")
    assert lstm[2:] == ["3000 (seed 2)", "10.13 (seed 2)", "28.50 (seed 2)", "49.25 (seed 2) |"]
    assert "| `global` |" not in text
    assert (
        "Not run yet: `local-p-d10` seed 1, `global` seed 1, `local-m` seed 1, `lstm` seed 1, "
        "`local-p-d10` seed 2, `global` seed 2, `local-m` seed 2." in text
    )
    assert "Signatures: `nrefs:1|tok:13a` (BLEU), `nrefs:1|nc:6` (chrF2)." in text
    assert "Sitting: 2026-11-27, commit abc1234, AMD EPYC, 2 cores." in text
    paragraph = " ".join(text.split("\n\n")[1].split())
    assert "(7 minutes of training, 1 thread(s) a run, 2 run(s) at once)" in paragraph


def test_a_page_of_another_budget_names_it_and_the_runs_it_asked_for(tmp_path):
    save(tmp_path, result("global", 1))
    page = tmp_path / "PAGE.md"
    corpus_budget.render(str(page), str(tmp_path), "At 15 minutes", ["local-p", "global"])
    text = page.read_text()
    assert text.startswith("# At 15 minutes\n")
    assert "Not run yet: `local-p` seed 1, `local-p` seed 2, `global` seed 2." in text


def test_the_sittings_notes_close_the_page_when_written(tmp_path):
    save(tmp_path, result("global", 1))
    page = tmp_path / "PAGE.md"
    corpus_budget.render(str(page), str(tmp_path))
    assert "Notes on the runs" not in page.read_text()
    (tmp_path / corpus_budget.NOTES).write_text("Tests ran beside seed 1.\n")
    corpus_budget.render(str(page), str(tmp_path))
    assert page.read_text().endswith(
        "## Notes on the runs\n\nFrom `%s`:\n\nTests ran beside "
        "seed 1.\n" % (tmp_path / corpus_budget.NOTES)
    )


def test_a_finished_run_is_done_only_for_its_options_and_minutes(tmp_path):
    root = str(tmp_path)
    assert not corpus_budget.done("bible_es_en", "global", 1, 7.0, root)
    save(tmp_path, result("global", 1))
    assert corpus_budget.done("bible_es_en", "global", 1, 7.0, root)
    assert not corpus_budget.done("bible_es_en", "global", 2, 7.0, root)
    assert not corpus_budget.done("docs_en_fr_long", "global", 1, 7.0, root)
    assert not corpus_budget.done("bible_es_en", "global", 1, 5.0, root)
    save(tmp_path, result("global", 1, options=RUNS["global"][1] + ["--dropout", "0.3"]))
    assert not corpus_budget.done("bible_es_en", "global", 1, 7.0, root)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--minutes", "0"], "--minutes must be > 0, got 0.0"),
        (["--minutes", "nan"], "--minutes must be > 0"),
        (["--runs", "global", "local_p"], "argument --runs: invalid choice: 'local_p'"),
        (["--corpora", "wmt"], "argument --corpora: invalid choice: 'wmt' (choose from"),
        (["--jobs", "0"], "--jobs must be >= 1, got 0"),
        (["--threads", "0"], "--threads must be >= 1, got 0"),
        (["--seeds", "1", "1"], "--seeds 1 1: each once"),
        (["--runs", "lstm", "lstm"], "--runs lstm lstm: each once"),
    ],
)  # fmt: skip
def test_bad_options_name_the_option_and_the_allowed_values(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        corpus_budget.parse_args(["--render-only", *argv])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert message in err
    if "--runs: invalid choice" in message:
        assert all(f"'{name}'" in err for name in RUNS)


def test_a_corpus_not_prepared_names_its_recipe(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(corpus_budget.harness, "REPO", str(tmp_path))
    with pytest.raises(SystemExit) as exit_:
        corpus_budget.parse_args(["--corpora", "docs_en_fr_long"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "--corpora docs_en_fr_long: no data/docs_en_fr_long/bin" in err
    assert "recipes/docs_en_fr/prepare.sh --min-words 10 --out data/docs_en_fr_long" in err


def test_a_failed_step_names_the_run_its_exit_code_and_its_log(monkeypatch, tmp_path):
    monkeypatch.setattr(corpus_budget, "RUN_DIRS", str(tmp_path / "runs"))
    monkeypatch.setattr(corpus_budget.subprocess, "call", lambda *a, **k: 3)
    args = corpus_budget.parse_args(["--render-only", "--results", str(tmp_path / "results")])
    with pytest.raises(RuntimeError) as error:
        corpus_budget.train("bible_es_en", "lstm", 2, args)
    log = tmp_path / "runs" / "bible_es_en" / "lstm.seed2" / "train.log"
    assert str(error.value) == f"bible_es_en lstm seed 2: fairseq-train failed (exit 3): see {log}"
    assert not (tmp_path / "results").exists()


GEN = """S-0\t▁E n ▁el ▁principio
H-0\t-0.25\t▁In ▁the ▁beginning
S-1\t▁la ▁casa ▁de ▁Jehová
H-1\t-0.5\t▁the ▁house ▁of ▁the ▁Lord
"""


def _finished_run(monkeypatch, tmp_path, **changed):
    """A run's folder holding its decoded test split, and its JSON as a run scored before
    the report gave BLEU's lengths wrote it (``changed`` alters that JSON)."""
    data = tmp_path / "data"
    (data / "raw").mkdir(parents=True)
    (data / "raw" / "test.en").write_text("In the beginning God created\nthe house of the Lord\n")
    monkeypatch.setitem(corpus_budget.CORPORA, "bible_es_en", ("prepare.sh", str(data), "es", "en"))
    monkeypatch.setattr(corpus_budget, "RUN_DIRS", str(tmp_path / "runs"))
    run_dir = tmp_path / "runs" / "bible_es_en" / "global.seed1"
    run_dir.mkdir(parents=True)
    (run_dir / "test.gen.txt").write_text(GEN, encoding="utf-8")
    from luong_plugin.analysis.report import main as report_main

    report_main([str(run_dir / "test.gen.txt"), "--reference", str(data / "raw" / "test.en"),
                 "--out-dir", str(run_dir)])  # fmt: skip
    scores = json.loads((run_dir / "report.json").read_text(encoding="utf-8"))
    (run_dir / "report.json").unlink()
    keep = {key: scores[key] for key in ("bleu", "chrf", "bleu_signature", "chrf_signature")}
    r = result("global", 1, **{**keep, **changed})
    save(tmp_path / "results", r)
    args = corpus_budget.parse_args(
        [
            "--rescore",
            "--corpora",
            "bible_es_en",
            "--results",
            str(tmp_path / "results"),
            "--python",
            sys.executable,
        ]
    )
    return args, tmp_path / "results" / "bible_es_en" / "global.seed1.json"


def test_rescore_adds_bleus_lengths_to_a_finished_runs_json(monkeypatch, tmp_path):
    """8 hypothesis tokens against 10: ratio 0.8, brevity penalty exp(1 - 10 / 8). No cell of
    a page changes, so it renders none (not even --out's default)."""
    args, path = _finished_run(monkeypatch, tmp_path)
    before = json.loads(path.read_text())
    monkeypatch.setattr(corpus_budget, "render", lambda *a, **k: pytest.fail("rendered a page"))
    corpus_budget.main(["--rescore", "--corpora", "bible_es_en", "--runs", "global", "lstm",
                        "--seeds", "1", "--results", args.results, "--python", sys.executable])  # fmt: skip
    after = json.loads(path.read_text())
    assert after["length_ratio"] == 0.8
    assert after["brevity_penalty"] == round(math.exp(1 - 10 / 8), 3)
    assert after["bleu_precisions"] == [100.0] * 4
    assert set(after["rescored"]) == {"commit", "at"}
    assert {k: v for k, v in after.items() if k in before} == before  # nothing else moves
    assert corpus_budget.rescore("bible_es_en", "lstm", 1, args) is None  # no JSON: skipped


def test_rescore_stops_where_the_folder_holds_another_runs_output(monkeypatch, tmp_path):
    args, path = _finished_run(monkeypatch, tmp_path, bleu=12.0)
    before = path.read_text()
    with pytest.raises(RuntimeError, match="scores bleu .*its JSON 12.0: the folder holds"):
        corpus_budget.rescore("bible_es_en", "global", 1, args)
    assert path.read_text() == before


def test_rescore_and_render_only_are_one_or_the_other(capsys):
    with pytest.raises(SystemExit):
        corpus_budget.parse_args(["--rescore", "--render-only"])
    assert "--rescore and --render-only: give one of them" in capsys.readouterr().err
