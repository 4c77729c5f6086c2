"""Every fairseq feature a user reaches for, on every model of the plugin and on
fairseq's own ``lstm`` (the control), asserting what each feature must do.

Tiny models are trained once per session (``--update-freq 2 --eval-bleu``, then
resumed from ``checkpoint_last.pt``). Decoding goes through the CLIs' own code:
each command line is parsed by fairseq's parser and run by ``fairseq_cli``'s
``main`` in this process (one start-up for the whole suite). Each test records
its outcome per model; the last test renders docs/COMPATIBILITY.md from them
(``LUONG_WRITE_DOCS=1`` rewrites it, otherwise it must match). The models, the
command lines and the table: compatibility_harness.py.
"""

import os
import re

import pytest
import torch
from compatibility_harness import (
    MODELS,
    NAMES,
    OUTCOMES,
    UPDATES,
    cli,
    fairseq_train,
    gen,
    hypotheses,
    n_test,
    positional_scores,
    record,
    render,
    run_parallel,
)
from conftest import REPO, USER_DIR, parse

pytestmark = pytest.mark.slow


@pytest.fixture(scope="session")
def trained(bible, tmp_path_factory):
    """name -> (checkpoint, first run's log, resumed run's log)."""
    root = tmp_path_factory.mktemp("compat")
    data = bible / "bin"
    first = run_parallel(
        [
            fairseq_train(data, root / str(i), MODELS[n][0], "--max-update", UPDATES)
            for i, n in enumerate(NAMES)
        ]
    )
    resumed = run_parallel(
        [
            fairseq_train(data, root / str(i), MODELS[n][0], "--max-update", UPDATES + 2)
            for i, n in enumerate(NAMES)
        ]
    )
    return {
        n: (root / str(i) / "checkpoint_last.pt", first[i], resumed[i]) for i, n in enumerate(NAMES)
    }


# ---- training: --update-freq, --eval-bleu, resume --------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_training_update_freq_eval_bleu_and_resume(trained, name):
    _, first, resumed = trained[name]
    assert f"num_updates={UPDATES}" in first.replace(" ", "")  # --update-freq 2: UPDATES updates
    assert re.search(r"valid on 'valid' subset \| .*\| bleu \d", first), first[-2000:]
    record("--update-freq 2", name)
    record("--eval-bleu", name)
    assert f"@ {UPDATES} updates" in resumed and f"num_updates {UPDATES + 2}" in resumed
    record("resume (checkpoint_last.pt)", name)


# ---- fairseq-generate --------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_beam_and_nbest(bible, trained, name):
    rows = hypotheses(gen(bible, trained, name, "--nbest", "3"))
    assert sorted(rows) == list(range(n_test(bible)))
    for hyps in rows.values():
        scores = [s for s, _ in hyps]
        assert len(hyps) == 3 and len({t for _, t in hyps}) == 3  # distinct
        assert scores == sorted(scores, reverse=True)
    record("beam search, --nbest 3 (distinct, sorted)", name)


@pytest.mark.parametrize("name", NAMES)
def test_sampling_depends_on_the_seed(bible, trained, name):
    sample = ("--sampling", "--sampling-topk", "20", "--beam", "1")
    one = hypotheses(gen(bible, trained, name, *sample, "--seed", "1"))
    again = hypotheses(gen(bible, trained, name, *sample, "--seed", "1"))
    other = hypotheses(gen(bible, trained, name, *sample, "--seed", "2"))
    assert len(one) == n_test(bible) and one == again and one != other
    record("--sampling (seeded)", name)


@pytest.mark.parametrize("name", NAMES)
def test_diverse_beam_search(bible, trained, name):
    rows = hypotheses(
        gen(bible, trained, name, "--beam", "4", "--diverse-beam-groups", "2", "--nbest", "4")
    )
    assert sorted(rows) == list(range(n_test(bible))) and all(len(h) == 4 for h in rows.values())
    record("--diverse-beam-groups", name)


@pytest.mark.parametrize("name", NAMES)
def test_prefix_is_kept(bible, trained, name):
    out = gen(bible, trained, name, "--prefix-size", "2")
    refs, hyps = parse(out, "T"), parse(out, "H")
    assert len(hyps) == n_test(bible)
    for i, hyp in hyps.items():
        assert hyp.split()[:2] == refs[i].split()[:2]
    record("--prefix-size", name)


@pytest.mark.parametrize("name", NAMES)
def test_retain_dropout_changes_scores(bible, trained, name):
    plain = positional_scores(gen(bible, trained, name, "--beam", "1"))
    again = positional_scores(gen(bible, trained, name, "--beam", "1"))
    retained = positional_scores(gen(bible, trained, name, "--beam", "1", "--retain-dropout"))
    assert plain == again  # eval mode is deterministic
    changed = sum(plain[k] != retained[k] for k in plain)
    assert changed >= n_test(bible) * 0.8, f"--retain-dropout changed {changed} of {n_test(bible)}"
    record("--retain-dropout", name)


@pytest.mark.parametrize("name", NAMES)
def test_score_reference(bible, trained, name):
    out = gen(bible, trained, name, "--score-reference")
    refs = {i: t.replace("<<unk>>", "<unk>") for i, t in parse(out, "T").items()}
    hyps = parse(out, "H")
    assert len(hyps) == n_test(bible) and hyps == refs
    record("--score-reference", name)


@pytest.mark.parametrize("kind", ["hard", "soft"])
@pytest.mark.parametrize("name", NAMES)
def test_print_alignment(bible, trained, name, kind):
    feature = f"--print-alignment {kind}"
    extra = ["--print-alignment"] + (["soft"] if kind == "soft" else [])
    if not MODELS[name][1]:
        with pytest.raises(Exception, match="--print-alignment needs attention weights") as err:
            gen(bible, trained, name, *extra)
        record(feature, name, "refused: " + str(err.value).split(";")[0] + ", model has none")
        return
    out = gen(bible, trained, name, *extra)
    sources = parse(out, "S")
    alignments = parse(out, "A")
    assert len(alignments) == n_test(bible)
    for i, line in alignments.items():
        n_src = len(sources[i].split()) + 1  # </s>
        if kind == "hard":
            links = [tuple(map(int, p.split("-"))) for p in line.split()]
            assert links and all(0 <= s < n_src for s, _ in links)
        else:
            # one weight per source token; local-p's Gaussian-weighted rows sum to at most 1
            rows = [list(map(float, r.split(","))) for r in line.split()]
            assert rows and all(len(r) == n_src and 0 < sum(r) < 1.02 for r in rows)
    record(feature, name)


@pytest.mark.parametrize("name", NAMES)
def test_print_step(bible, trained, name):
    out = gen(bible, trained, name, "--print-step")
    steps, tokens = parse(out, "I"), parse(out, "D")
    assert len(steps) == n_test(bible)
    for i, n in steps.items():
        assert int(n) == len(tokens[i].split()) + 1  # </s>
    record("--print-step", name)


@pytest.mark.parametrize("name", NAMES)
def test_ensemble_of_a_model_with_itself_equals_the_model(bible, trained, name):
    path = trained[name][0]
    single = hypotheses(gen(bible, trained, name))
    double = hypotheses(gen(bible, trained, name, path=f"{path}:{path}"))
    assert single.keys() == double.keys() and len(single) == n_test(bible)
    for i in single:
        assert [t for _, t in single[i]] == [t for _, t in double[i]]
        assert [s for s, _ in single[i]] == pytest.approx([s for s, _ in double[i]], abs=2e-4)
    record("ensemble (--path a.pt:b.pt)", name)


# ---- fairseq-interactive, fairseq-validate ----------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_interactive_buffer_size_and_constraints(bible, trained, name, tmp_path):
    sources = (bible / "spm" / "test.es").read_text().splitlines()[:5]
    constraint = "▁God"
    inputs = tmp_path / "input.txt"
    inputs.write_text("".join(f"{s}\t{constraint}\n" for s in sources))
    out = cli(
        "interactive",
        bible / "bin",
        "--user-dir",
        USER_DIR,
        "--path",
        trained[name][0],
        "--beam",
        "5",
        "--max-len-a",
        "0",
        "--max-len-b",
        "12",
        "--buffer-size",
        "3",
        "--batch-size",
        "3",
        "--constraints",
        "--input",
        inputs,
        "-s",
        "es",
        "-t",
        "en",
    )
    hyps = parse(out, "H")
    assert sorted(hyps) == list(range(5))
    assert all(constraint in h.split() for h in hyps.values())
    record("fairseq-interactive --buffer-size --constraints (constraint in output)", name)


@pytest.mark.parametrize("name", NAMES)
def test_validate(bible, trained, name):
    out = cli(
        "validate",
        bible / "bin",
        "--task",
        "translation",
        "--user-dir",
        USER_DIR,
        "--path",
        trained[name][0],
        "--valid-subset",
        "valid",
        "--max-tokens",
        "2000",
        "--log-format",
        "simple",
    )
    assert re.search(r"valid on 'valid' subset \| loss \d", out), out[-2000:]
    record("fairseq-validate", name)


# ---- the hub --------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_hub_translate_sample_generate(bible, trained, name):
    from fairseq.models.fairseq_model import BaseFairseqModel

    path = trained[name][0]
    hub = BaseFairseqModel.from_pretrained(
        str(path.parent),
        checkpoint_file=path.name,
        data_name_or_path=str(bible / "bin"),
        user_dir=USER_DIR,
        bpe="sentencepiece",
        sentencepiece_model=str(bible / "spm" / "joint.model"),
        source_lang="es",
        target_lang="en",
    )
    hub.eval()
    sentence = (bible / "raw" / "test.es").read_text().splitlines()[0]
    text = hub.translate(sentence, beam=5, max_len_a=0, max_len_b=12)
    assert isinstance(text, str) and "▁" not in text
    torch.manual_seed(1)
    sampled = hub.sample(
        [sentence, sentence], sampling=True, sampling_topk=20, beam=1, max_len_b=12
    )
    assert len(sampled) == 2
    generated = hub.generate([hub.encode(sentence)], beam=5, max_len_a=0, max_len_b=12)[0]
    assert len(generated) == 5  # the whole beam, best first
    assert hub.decode(generated[0]["tokens"]) == text
    record("hub: from_pretrained, translate, sample, generate", name)


# ---- the table -------------------------------------------------------------------------


def test_table_in_docs_is_the_suites():
    expected_rows = 16
    if len(OUTCOMES) < expected_rows or any(len(v) < len(NAMES) for v in OUTCOMES.values()):
        pytest.skip("the whole suite must run to render the table")
    path = os.path.join(REPO, "docs", "COMPATIBILITY.md")
    table = render()
    if os.environ.get("LUONG_WRITE_DOCS"):
        with open(path, "w") as f:
            f.write(table)
    with open(path) as f:
        assert (
            f.read() == table
        ), "docs/COMPATIBILITY.md is stale: LUONG_WRITE_DOCS=1 pytest tests/test_compatibility.py"
