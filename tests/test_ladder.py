"""experiments/ladder*.py without training: the spread rule against hand-computed
cases, which rows x seeds are skipped or redone, resuming a training from its last
checkpoint, the page of a partly finished ladder, and bad options."""

import json
import os

import pytest

from experiments import harness, ladder, ladder_render, ladder_text, ladder_train
from experiments.ladder_rows import ENSEMBLE, MEMBERS, NAMES, ROWS, TABLE1

# ------------------------------------------------------------------ the spread rule


@pytest.mark.parametrize(
    "before, after, verdict, gain, spreads",
    [
        # gain 2.00 beyond both spreads (1.00, 1.00)
        ({1: 10.0, 2: 11.0}, {1: 12.0, 2: 13.0}, "shown", 2.0, (1.0, 1.0)),
        # gain 1.00 equal to the spreads: a tie is not shown
        ({1: 10.0, 2: 11.0}, {1: 11.0, 2: 12.0}, "within spread", 1.0, (1.0, 1.0)),
        # a tie that floating point gets wrong (10.4 - 10.2 = 0.2000000000000011 > 0.2)
        ({1: 10.1, 2: 10.3}, {1: 10.3, 2: 10.5}, "within spread", 0.2, (0.2, 0.2)),
        # beyond the spread before (0.50) but not the one after (2.00)
        ({1: 10.0, 2: 10.5}, {1: 10.2, 2: 12.2}, "within spread", 0.95, (0.5, 2.0)),
        # 0.01 beyond both
        ({1: 10.0, 2: 10.5}, {1: 10.76, 2: 10.76}, "shown", 0.51, (0.5, 0.0)),
        # a loss beyond both spreads (0.40, 0.20)
        ({1: 12.0, 2: 12.4}, {1: 10.0, 2: 10.2}, "reversed", -2.1, (0.4, 0.2)),
        # a loss within the spread before
        ({1: 12.0, 2: 13.0}, {1: 11.9, 2: 12.5}, "within spread", -0.3, (1.0, 0.6)),
        # one seed before: nothing to compare the gain with
        ({1: 10.0}, {1: 12.0, 2: 12.5}, "needs two seeds", 2.25, (0.0, 0.5)),
        # three seeds: means 10.333 and 11.4, spreads 1.0 and 0.2
        ({1: 10.0, 2: 10.0, 3: 11.0}, {1: 11.5, 2: 11.4, 3: 11.3}, "shown", 1.0667, (1.0, 0.2)),
    ],
)
def test_spread_rule(before, after, verdict, gain, spreads):
    step = ladder_render.step(before, after)
    assert step.verdict == verdict
    assert float(step.gain) == pytest.approx(gain, abs=1e-4)
    assert (step.spread_before, step.spread_after) == pytest.approx(spreads)


# ---------------------------------------------------------------- options and skips


@pytest.fixture
def args(tmp_path):
    return ladder.parse_args(
        ["--updates", "30", "--dim", "16", "--precision", "fp32", "--runs", str(tmp_path / "runs"),
         "--results", str(tmp_path / "results"), "--out", str(tmp_path / "RESULTS.md"),
         "--plot", str(tmp_path / "img" / "ladder.png")]
    )  # fmt: skip


def fake_result(name, seed, args, bleu, opts=None):
    """A row x seed's JSON as Runner.row writes it, with the given BLEU (tok.)."""
    opts = opts or ladder_train.options(name, args)
    scores = {
        variant: {"tokenized_bleu": bleu + extra, "sacrebleu": bleu + extra + 1.0,
                  "tokenized_bleu_signature": "tok:none", "sacrebleu_signature": "tok:13a",
                  "output_tokens": 100, "unk_in_output": 0 if extra else 4, "decode_s": 1.0,
                  "replaced": 4, "changed_by_dictionary": 1}
        for variant, extra in zip(opts["decode"]["variants"], (0.0, 0.5, 0.75))
    }  # fmt: skip
    return {"row": name, "seed": seed, "options": opts, "commit": "abc1234",
            "finished": f"2026-01-0{seed} 00:00:00", "updates": args.updates,
            "updates_per_epoch": 12, "epochs": 2.5, "train_wall_s": 60.0,
            "s_per_100_updates": 200.0, "best_valid_ppl": 40.0 + seed, "scores": scores}  # fmt: skip


def save(args, result):
    harness.write_json(
        ladder_train.result_path(args.results, result["row"], result["seed"]), result
    )


def test_a_result_with_the_same_options_is_skipped_another_is_redone(args):
    save(args, fake_result("base", 1, args, 5.0))
    other = ladder.parse_args(["--updates", "31", "--results", args.results])
    save(
        args,
        fake_result("base_reverse", 1, other, 5.0, ladder_train.options("base_reverse", other)),
    )
    args.rows, args.seeds = ["base", "base_reverse", "rnnsearch"], [1, 2]
    train, ensembles = ladder.plan(args)
    assert train == [("base", 2), ("base_reverse", 1), ("base_reverse", 2), ("rnnsearch", 1),
                     ("rnnsearch", 2)]  # fmt: skip
    assert ensembles == []


def test_every_option_of_the_budget_is_part_of_a_rows_options(args):
    base = ladder_train.options("local_p_general", args)
    for flag, value in (("--updates", "40"), ("--max-tokens", "999"), ("--dim", "8"),
                        ("--lr", "0.01"), ("--vocab", "77"), ("--validate-every", "7")):  # fmt: skip
        changed = ladder.parse_args(["--precision", "fp32", flag, value])
        assert ladder_train.options("local_p_general", changed) != base, flag
    lstm = ladder_train.options("fairseq_lstm", ladder.parse_args(["--precision", "bf16"]))
    assert lstm["precision"] == "fp32" and "--decoder-attention True" in lstm["train"]


def test_the_ensemble_waits_for_its_members_and_follows_them(args):
    args.rows, args.seeds = [ENSEMBLE], [1]
    assert ladder.plan(args) == ([], [1])
    assert ladder_train.ensemble_options(1, args.results, args) is None
    for name in MEMBERS:
        save(args, fake_result(name, 1, args, 10.0))
    opts = ladder_train.ensemble_options(1, args.results, args)
    save(args, dict(fake_result(MEMBERS[0], 1, args, 10.0), row=ENSEMBLE, options=opts))
    assert ladder.plan(args) == ([], [])
    save(args, dict(fake_result(MEMBERS[1], 1, args, 10.0), finished="2026-02-01 00:00:00"))
    assert ladder.plan(args) == ([], [1])  # a member trained again: the ensemble is redone


# ----------------------------------------------------------------------- resuming


@pytest.fixture
def fake_fairseq(monkeypatch):
    """ladder_train.run without fairseq: a training writes the log lines and the
    checkpoints fairseq-train would; every command is recorded."""
    calls = []

    def run(cmd, log_path, threads, append=False):
        cmd = [str(c) for c in cmd]
        calls.append(cmd)
        save_dir, updates = cmd[cmd.index("--save-dir") + 1], cmd[cmd.index("--max-update") + 1]
        with open(log_path, "a" if append else "w") as log:
            log.write(f"epoch 001:     10 / 12 loss=5\n| valid on 'valid' subset | loss 5 | "
                      f"ppl 32.5 | wps 1 | num_updates {updates}\n")  # fmt: skip
        for f in ("checkpoint_best.pt", "checkpoint_last.pt", "checkpoint_1_10.pt"):
            open(os.path.join(save_dir, f), "w").close()
        return 1.0, 1.0

    monkeypatch.setattr(ladder_train, "run", run)
    return calls


def test_training_resumes_with_the_same_options_and_restarts_with_others(
    args, fake_fairseq, capsys
):
    runner = ladder_train.Runner(args, {})
    opts = ladder_train.options("base", args)
    run_dir = runner.run_dir("base", 1)
    state = runner.train("base", 1, opts)
    assert len(fake_fairseq) == 1 and state["trained"] and state["updates_per_epoch"] == 12
    assert state["valid_ppl"] == {30: 32.5}
    assert sorted(f for f in os.listdir(run_dir) if f.startswith("checkpoint")) == [
        "checkpoint_best.pt"
    ]
    runner.train("base", 1, opts)  # trained: nothing to run
    assert len(fake_fairseq) == 1

    # interrupted: state written, not trained, checkpoint_last.pt there -> resumed in place
    with open(os.path.join(run_dir, "state.json")) as f:
        state = json.load(f)
    harness.write_json(os.path.join(run_dir, "state.json"), dict(state, trained=False))
    for f in ("checkpoint_last.pt", "kept.txt"):
        open(os.path.join(run_dir, f), "w").close()
    runner.train("base", 1, opts)
    assert len(fake_fairseq) == 2 and "resuming from checkpoint_last.pt" in capsys.readouterr().out
    assert os.path.exists(os.path.join(run_dir, "kept.txt"))
    with open(os.path.join(run_dir, "train.log")) as f:
        assert f.read().count("valid on") == 2  # the log continues

    # other options: the run directory starts afresh
    other = dict(opts, validate_every=opts["validate_every"] + 1)
    harness.write_json(os.path.join(run_dir, "state.json"), dict(state, trained=False))
    runner.train("base", 1, other)
    assert not os.path.exists(os.path.join(run_dir, "kept.txt"))
    with open(os.path.join(run_dir, "train.log")) as f:
        assert f.read().count("valid on") == 1
    assert "--validate-interval-updates" in fake_fairseq[-1]


# -------------------------------------------------------------------------- page


def test_a_partial_ladder_renders_the_rows_done_and_lists_the_rest(args):
    bleu = {
        "base": (10.0, 11.0),
        "base_reverse": (12.5, 13.0),
        "base_reverse_dropout": (12.0, 14.0),
    }
    for name, values in bleu.items():
        for seed, value in enumerate(values, 1):
            save(args, fake_result(name, seed, args, value))
    other = ladder.parse_args(["--updates", "99", "--precision", "fp32"])
    save(args, fake_result("rnnsearch", 1, other, 30.0))
    ladder.do_render(args)
    page = open(args.out, encoding="utf-8").read()
    table1 = page.split("## Luong et al. Table 1")[1].split("##")[0]
    assert "| Base | 41.50 (41.00 / 42.00) | 10.50 (10.00 / 11.00) |" in table1
    assert "| Base + reverse |" in table1 and "+2.25 (spreads 1.00 / 0.50) | yes |" in table1
    assert "+0.25 (spreads 0.50 / 2.00) | no: within the seeds' spread |" in table1
    bahdanau = page.split("## Bahdanau")[1].split("##")[0]
    assert "| RNNsearch | – | – | – |" in bahdanau and "30.00" not in bahdanau
    todo = " ".join(page.split("**Still to run:**")[1].split("\n\n")[0].split())
    missing = [f"`{n}` (seeds 1, 2)" for n in NAMES if n not in bleu and n != "rnnsearch"]
    missing.insert(missing.index("`fairseq_lstm` (seeds 1, 2)"), "`rnnsearch` (seed 2)")
    assert todo == ", ".join(missing) + "."
    other_options = page.split("**Results with other options, not shown**")[1]
    assert "`rnnsearch` (seed 1)" in " ".join(other_options.split())
    assert "6 of 32 row × seed runs done." in page
    with open(args.plot, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_an_empty_ladder_renders_every_row_as_still_to_run(args):
    ladder.do_render(args)
    page = open(args.out, encoding="utf-8").read()
    assert "0 of 32 row × seed runs done." in page
    assert "## Reading the steps" not in page
    for name in [*ROWS, ENSEMBLE]:
        assert f"`{name}` (seeds 1, 2)" in " ".join(page.split())
    for name in TABLE1:
        assert f"| {ROWS[name].label} | – | – |" in page
    assert not os.path.exists(args.plot)


def test_the_hand_written_reading_goes_between_the_tables_and_the_runs(args):
    os.makedirs(args.results)
    with open(os.path.join(args.results, "reading.md"), "w", encoding="utf-8") as f:
        f.write("- **Reverse**: within the spread.\n")
    ladder.do_render(args)
    page = open(args.out, encoding="utf-8").read()
    reading = page.split("## Reading the steps")[1].split("## Runs")[0]
    assert "## fairseq's own `lstm`" in page.split("## Reading the steps")[0]
    assert "- **Reverse**: within the spread." in reading
    link = os.path.relpath(os.path.join(args.results, "reading.md"), os.path.dirname(args.out))
    assert f"([reading.md]({link}))" in reading


def test_the_data_section_says_how_many_unks_copying_can_repair():
    lines = ladder_text.copyable_lines(
        {"copyable_unks": {"test_source_unk": 200, "in_reference": 6}}
    )
    assert "Of the 200 tokens" in " ".join(lines) and "6 (3.0%) appear verbatim" in " ".join(lines)
    assert ladder_text.copyable_lines({}) == []


# ----------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--rows", "base", "local_p"], "argument --rows: invalid choice: 'local_p' (choose from"),
        (["--precision", "fp16"], "argument --precision: invalid choice: 'fp16'"),
        (["--seeds", "0"], "argument --seeds: 0: expected an integer of 1 or more"),
        (["--seeds", "1", "1"], "--seeds 1 1: each seed once"),
        (["--updates", "-5"], "argument --updates: -5: expected an integer of 1 or more"),
        (["--dim", "1"], "--dim 1: expected 2 or more"),
    ],
)
def test_bad_options_name_the_option_and_the_allowed_values(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        ladder.parse_args(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert message in err
    if "--rows" in message:
        assert all(f"'{name}'" in err for name in NAMES)
