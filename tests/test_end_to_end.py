"""End to end on real text through fairseq's own entry points:
fairseq-preprocess (recipe) -> fairseq-train -> fairseq-generate (--print-alignment,
--replace-unk, ensembles) -> fairseq-interactive, --restore-file, fairseq-hydra-train."""

import os
import re

import pytest
import torch
from conftest import REPO, USER_DIR, fairseq, generate, generate_args, parse, train

from luong_plugin.modules.windows import WINDOWS as WINDOW_NAMES

pytestmark = pytest.mark.slow
WINDOWS = list(WINDOW_NAMES)  # every registered window
MODELS = {window: ("luong_tiny", "--attention-window", window) for window in WINDOWS}
MODELS["rnnsearch"] = ("bahdanau_tiny",)


@pytest.fixture(scope="session")
def checkpoints(bible, tmp_path_factory):
    root = tmp_path_factory.mktemp("ckpt")
    paths = {}
    for name, (arch, *options) in MODELS.items():
        log = train(bible / "bin", root / name, *options, arch=arch)
        assert "done training" in log
        paths[name] = root / name / "checkpoint_last.pt"
    return paths


def test_generate_without_the_flag_loses_sentences(bible, checkpoints):
    """Documents the fairseq behaviour ALL_SENTENCES works around."""
    out = fairseq(
        "fairseq-generate",
        bible / "bin",
        "--user-dir",
        USER_DIR,
        "--path",
        checkpoints["global"],
        "--beam",
        "1",
        "--batch-size",
        "16",
        "--max-len-b",
        "2",
        "--gen-subset",
        "test",
    )
    assert len(parse(out, "H")) < 29


def soft_alignments(output):
    """{id: T x S_b list of attention rows}, columns = the sentence's real tokens."""
    return {
        i: [[float(p) for p in row.split(",")] for row in text.split()]
        for i, text in parse(output, "A").items()
    }


@pytest.mark.parametrize("model", list(MODELS))
def test_print_alignment_is_batch_independent(bible, checkpoints, model):
    """Attention maps index the source as given: a sentence decoded alone (no
    padding) and inside a left-padded batch gets the same hypothesis and the same
    attention over its own tokens (fairseq's `lstm` fails this for the shorter
    sentences of a batch, its maps being in right-padded order)."""
    batched = generate(bible / "bin", checkpoints[model], "--print-alignment", "soft")
    alone = generate(bible / "bin", checkpoints[model], "--print-alignment", "soft", batch_size=1)
    sources, hyps = parse(batched, "S"), parse(batched, "H")
    assert len(hyps) == 29  # --test 30 keeps whole chapters: 29 verses
    assert len({len(s.split()) for s in sources.values()}) > 5  # rows really are padded
    assert hyps == parse(alone, "H")
    soft, soft_alone = soft_alignments(batched), soft_alignments(alone)
    assert soft.keys() == hyps.keys()
    for i in hyps:
        n_src = len(sources[i].split()) + 1  # + EOS
        assert len(soft[i]) == len(hyps[i].split()) + 1  # + EOS
        assert all(len(row) == n_src for row in soft[i])
        torch.testing.assert_close(
            torch.tensor(soft[i]), torch.tensor(soft_alone[i]), atol=1e-4, rtol=0
        )


@pytest.mark.parametrize("model", ["local-p", "rnnsearch"])
def test_print_alignment_hard_links_are_in_range(bible, checkpoints, model):
    out = generate(bible / "bin", checkpoints[model], "--print-alignment")
    sources, hyps, links = parse(out, "S"), parse(out, "H"), parse(out, "A")
    for i, alignment in links.items():
        n_src, n_hyp = len(sources[i].split()), len(hyps[i].split())
        pairs = [tuple(map(int, p.split("-"))) for p in alignment.split()]
        assert len(pairs) == n_hyp
        assert all(0 <= s < n_src and 0 <= t < n_hyp for s, t in pairs)
    assert "BLEU4" in out


def test_ensemble_of_two_models_decodes(bible, checkpoints):
    out = generate(
        bible / "bin", f"{checkpoints['global']}:{checkpoints['local-p']}", "--print-alignment"
    )
    assert len(parse(out, "H")) == 29


def test_interactive(bible, checkpoints):
    lines = (bible / "spm" / "test.es").read_text().splitlines()[:3]
    out = fairseq(
        "fairseq-interactive",
        bible / "bin",
        "--user-dir",
        USER_DIR,
        "--path",
        checkpoints["local-p"],
        "--source-lang",
        "es",
        "--target-lang",
        "en",
        "--beam",
        "5",
        "--max-len-b",
        "20",
        input="\n".join(lines) + "\n",
    )
    assert len(parse(out, "H")) == 3


def test_restore_file_resumes_training(bible, checkpoints, tmp_path):
    log = train(
        bible / "bin",
        tmp_path,
        "--attention-window",
        "local-p",
        "--restore-file",
        checkpoints["local-p"],
        updates=35,
    )
    assert "Loaded checkpoint" in log
    assert re.search(r"num_updates 35\b", log)


def test_hydra_train_checkpoint_generates_and_resumes(bible, tmp_path):
    fairseq(
        "fairseq-hydra-train",
        "--config-dir",
        os.path.join(REPO, "configs"),
        "--config-name",
        "luong_tiny",
        f"task.data={bible / 'bin'}",
        "task.source_lang=es",
        "task.target_lang=en",
        f"common.user_dir={USER_DIR}",
        "optimization.max_update=10",
        "optimization.max_epoch=1",
        "dataset.num_workers=0",
        f"checkpoint.save_dir={tmp_path}",
        f"hydra.run.dir={tmp_path}",
    )
    checkpoint = tmp_path / "checkpoint_last.pt"
    out = generate(bible / "bin", checkpoint)
    assert len(parse(out, "H")) == 29
    line = (bible / "spm" / "test.es").read_text().splitlines()[0]
    out = fairseq(
        "fairseq-interactive",
        bible / "bin",
        "--user-dir",
        USER_DIR,
        "--path",
        checkpoint,
        "--source-lang",
        "es",
        "--target-lang",
        "en",
        "--max-len-b",
        "5",
        input=line + "\n",
    )
    assert len(parse(out, "H")) == 1
    log = train(  # the config trained with SGD, this run uses Adam
        bible / "bin",
        tmp_path / "resumed",
        "--restore-file",
        checkpoint,
        "--reset-optimizer",
        updates=12,
    )
    assert "Loaded checkpoint" in log and re.search(r"num_updates 12\b", log)


def test_replace_unk_copies_the_aligned_source_word(word_level, tmp_path):
    train(word_level / "bin", tmp_path, "--attention-window", "global", "--dataset-impl", "raw")
    args = [
        "fairseq-generate",
        *generate_args(
            word_level / "bin",
            tmp_path / "checkpoint_last.pt",
            "--print-alignment",
            "--dataset-impl",
            "raw",
            max_len_b=10,
        ),
    ]
    plain = parse(fairseq(*args), "H")
    # a bare --replace-unk takes the constant "@@ " in this fairseq and fails to open
    # it as a dictionary; "" means: copy the aligned source word
    replaced_out = fairseq(*args, "--replace-unk", "")
    replaced, sources = parse(replaced_out, "H"), parse(replaced_out, "S")
    assert sum(h.split().count("<unk>") for h in plain.values()) > 0
    assert all("<unk>" not in h for h in replaced.values())
    changed = 0
    for i in plain:
        for word, new in zip(plain[i].split(), replaced[i].split()):
            if word == "<unk>":
                changed += 1
                assert new in sources[i].split() or new == "<eos>"
    assert changed > 0
