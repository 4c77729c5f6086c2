"""`python -m experiments.ladder` end to end with a tiny budget on a tiny synthetic
corpus, into a temporary directory: word-level preparation, fairseq-train, the unk
dictionary, fairseq-generate plain and with both unk replacements, the JSON, the page,
and a second run that finds everything done."""

import json
import os
import random
import subprocess
import sys

import pytest
from conftest import REPO


def synthetic_corpus(raw, seed=0):
    """A word-for-word "translation" (es word i -> en word i, order kept) of 60 words of
    Zipf-like frequency: with K = 10, <unk> is the most frequent target token (mass
    H(60) - H(10) = 1.75 against en0's 1), and a model that learnt as much as the unigram
    distribution writes it."""
    rng = random.Random(seed)
    weights = [1 / (i + 1) for i in range(60)]
    sizes = {"train": 150, "valid": 12, "test": 12}
    for split, n in sizes.items():
        pairs = []
        for _ in range(n):
            ids = rng.choices(range(60), weights, k=rng.randint(3, 9))
            pairs.append((" ".join(f"es{i}" for i in ids), " ".join(f"en{i}" for i in ids)))
        for side, lang in enumerate(("es", "en")):
            with open(os.path.join(raw, f"{split}.{lang}"), "w", encoding="utf-8") as f:
                f.writelines(p[side] + "\n" for p in pairs)


@pytest.mark.slow
def test_the_ladder_command_with_a_tiny_budget(tmp_path):
    raw = tmp_path / "raw"
    raw.mkdir()
    synthetic_corpus(str(raw))
    argv = [sys.executable, "-m", "experiments.ladder", "--rows", "local_p_general", "--seeds", "1",
            "--updates", "30", "--validate-every", "30", "--lr", "0.03", "--dim", "16", "--max-tokens", "300",
            "--vocab", "10", "--jobs", "1", "--raw-dir", raw, "--data", tmp_path / "words",
            "--runs", tmp_path / "runs", "--results", tmp_path / "results",
            "--out", tmp_path / "RESULTS.md", "--plot", tmp_path / "ladder.png"]  # fmt: skip
    env = dict(os.environ, PYTHONPATH=REPO)
    first = subprocess.run(
        [str(a) for a in argv], capture_output=True, text=True, env=env, cwd=REPO
    )
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    assert "row 1 of 1: local_p_general seed 1" in first.stdout

    result = json.loads((tmp_path / "results" / "local_p_general.seed1.json").read_text())
    assert result["updates"] == 30 and result["options"]["data"]["vocab"] == 10
    assert set(result["scores"]) == {"plain", "unk_copy", "unk_dict"}
    for scores in result["scores"].values():
        assert scores["sentences"] == 12
        assert "tok:none" in scores["tokenized_bleu_signature"]
        assert "tok:13a" in scores["sacrebleu_signature"]
    assert result["unk_dict_entries"] > 0
    assert result["data"]["test_unk_rate"]["en"] > 0

    # unk replacement changes the <unk>s of the output and nothing else
    run = tmp_path / "runs" / "local_p_general.seed1"
    plain, copy, looked_up = (
        (run / f"test.{v}.hyp.tok").read_text().splitlines()
        for v in ("plain", "unk_copy", "unk_dict")
    )
    unks = 0
    for p, c, d in zip(plain, copy, looked_up):
        assert len(p.split()) == len(c.split()) == len(d.split())
        for a, b, e in zip(p.split(), c.split(), d.split()):
            unks += a == "<unk>"
            assert a == "<unk>" and b != "<unk>" and e != "<unk>" or a == b == e
    assert unks > 0 and result["scores"]["unk_copy"]["replaced"] == unks

    page = " ".join((tmp_path / "RESULTS.md").read_text().split())
    assert "1 of 32 row × seed runs done." in page and "`base` (seeds 1, 2)" in page
    assert "`local_p_general` (seed 2)" in page
    assert (tmp_path / "ladder.png").exists()
    data = json.loads((tmp_path / "results" / "data.json").read_text())
    assert data["prepare"]["vocab"] == 10 and data["batches_per_epoch"]["300"] > 0

    second = subprocess.run(
        [str(a) for a in argv], capture_output=True, text=True, env=env, cwd=REPO
    )
    assert second.returncode == 0, second.stderr[-3000:]
    assert "0 row x seed runs to train" in second.stdout and "row 1 of" not in second.stdout
