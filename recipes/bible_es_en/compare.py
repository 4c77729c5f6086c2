"""Per-update comparisons at the demo's recipe: one change at a time, two seeds.

    python recipes/bible_es_en/compare.py [--runs NAME ...] [--seeds 1 2]
        [--updates 2000] [--jobs 2] [--render-only]

Every run trains the demo's model (1 x 256, 8K joint SentencePiece vocabulary,
2,000-token batches, dropout 0.2, Adam 0.003 with betas (0.9, 0.98), clip 1.0,
label smoothing 0.1: ``demo.sh``'s TRAIN_ARGS) for a fixed number of updates
and validates at 500, 1,000, 2,000 ... updates, so the runs compare learning
per update, whatever the machine's speed. ``RUNS`` below names each run by
the one thing it changes. Each finished run writes
``docs/experiments/compare/NAME.seedK.json`` (valid perplexity per validated
update, updates per second, the options); a run whose JSON exists is skipped,
so an interrupted table resumes where it stopped. ``--jobs 2`` trains two
runs at once on one thread each (faster on 2 cores than one run of two
threads); ``docs/COMPARE.md`` is rendered from the JSON files after every run.
"""

import argparse
import json
import os
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RESULTS = os.path.join(REPO, "docs", "experiments", "compare")

# demo.sh's TRAIN_ARGS without the budget, the save directory and the seed
RECIPE = [
    "--source-lang", "es", "--target-lang", "en",
    "--encoder-layers", "1", "--decoder-layers", "1",
    "--encoder-embed-dim", "256", "--encoder-hidden-size", "256",
    "--decoder-embed-dim", "256", "--decoder-hidden-size", "256",
    "--decoder-out-embed-dim", "256",
    "--share-decoder-input-output-embed", "--dropout", "0.2",
    "--optimizer", "adam", "--adam-betas", "(0.9, 0.98)", "--lr", "0.003",
    "--clip-norm", "1.0",
    "--criterion", "label_smoothed_cross_entropy", "--label-smoothing", "0.1",
    "--max-tokens", "2000", "--num-workers", "0",
]  # fmt: skip
# ours train in bf16 as the demo does (level with fp32 per update, docs/BUDGET.md);
# fairseq's `lstm` cannot, and trains in fp32
BF16 = ["--precision", "bf16"]
GLOBAL = [
    "--arch", "luong_wmt_en_de", "--attention-window", "global",
    "--attention-score", "general", "--input-feeding", *BF16,
]  # fmt: skip
LOCAL_P = [
    "--arch", "luong_wmt_en_de", "--attention-window", "local-p",
    "--attention-score", "general", "--window-size", "10",
    "--position-logit-bound", "4", "--input-feeding", *BF16,
]  # fmt: skip

# name: (what it changes, options after RECIPE); every run names all the options
# it compares, so a later change of a default does not change a run's meaning
OURS = {
    "eos-first": ["--reverse-source", "--reverse-source-eos", "--attend-source-eos"],
    "rev-words": ["--reverse-source", "--no-reverse-source-eos", "--attend-source-eos"],
    "forward": ["--no-reverse-source", "--attend-source-eos"],
    "luong-layout": ["--reverse-source", "--no-reverse-source-eos", "--no-attend-source-eos"],
    "zaremba": ["--dropout-placement", "zaremba"],
    "luong": ["--dropout-placement", "luong"],
    "fairseq": ["--dropout-placement", "fairseq"],
}
RUNS = {
    "lstm": ("fairseq's `lstm` (the peer)", ["--arch", "lstm", "--decoder-attention", "True"]),
    "global-rev-eos-first": (
        "global, reversed with `</s>` first, Zaremba dropout (the plugin before this table)",
        GLOBAL + OURS["eos-first"] + OURS["zaremba"],
    ),
    "global-rev-words": (
        "global, words reversed, `</s>` last",
        GLOBAL + OURS["rev-words"] + OURS["zaremba"],
    ),
    "global-forward": ("global, not reversed", GLOBAL + OURS["forward"] + OURS["zaremba"]),
    "global-forward-fairseq-dropout": (
        "global, not reversed, fairseq's dropout placement",
        GLOBAL + OURS["forward"] + OURS["fairseq"],
    ),
    "global-forward-luong-dropout": (
        "global, not reversed, Luong's dropout placement",
        GLOBAL + OURS["forward"] + OURS["luong"],
    ),
    "local-p-rev-eos-first": (
        "local-p, reversed with `</s>` first, Zaremba dropout (the demo before this table)",
        LOCAL_P + OURS["eos-first"] + OURS["zaremba"],
    ),
    "global-luong": (
        "global, Luong's code: words reversed, `</s>` not attended, Luong's dropout",
        GLOBAL + OURS["luong-layout"] + OURS["luong"],
    ),
    "local-p-luong": (
        "local-p, Luong's code: words reversed, `</s>` not attended, Luong's dropout",
        LOCAL_P + OURS["luong-layout"] + OURS["luong"],
    ),
    "local-p-luong-lr0.1": (
        "`local-p-luong`, `--position-lr-scale 0.1`",
        LOCAL_P + OURS["luong-layout"] + OURS["luong"] + ["--position-lr-scale", "0.1"],
    ),
    "local-p-luong-renorm": (
        "`local-p-luong`, `--renormalize-window`",
        LOCAL_P + OURS["luong-layout"] + OURS["luong"] + ["--renormalize-window"],
    ),
    "local-p-forward-renorm": (
        "`local-p-luong-renorm`, not reversed",
        LOCAL_P
        + ["--no-reverse-source", "--no-attend-source-eos"]
        + OURS["luong"]
        + ["--renormalize-window"],
    ),
    "global-forward-luong": (
        "global, not reversed, `</s>` not attended, Luong's dropout (`local-p-forward-renorm`'s"
        " settings)",
        GLOBAL + ["--no-reverse-source", "--no-attend-source-eos"] + OURS["luong"],
    ),
    "global-forward-luong-fp32": (
        "`global-forward-luong` in fp32",
        [o if o != "bf16" else "fp32" for o in GLOBAL]
        + ["--no-reverse-source", "--no-attend-source-eos"]
        + OURS["luong"],
    ),
    "global-forward-luong-fgb1": (
        "`global-forward-luong` with `--forget-gate-bias 1`",
        GLOBAL
        + ["--no-reverse-source", "--no-attend-source-eos"]
        + OURS["luong"]
        + ["--forget-gate-bias", "1"],
    ),
    "local-p-forward-renorm-fgb1": (
        "`local-p-forward-renorm` with `--forget-gate-bias 1`",
        LOCAL_P
        + ["--no-reverse-source", "--no-attend-source-eos"]
        + OURS["luong"]
        + ["--renormalize-window", "--forget-gate-bias", "1"],
    ),
    "local-p-forward-renorm-fgb1-sigma10": (
        "`local-p-forward-renorm-fgb1` with `--position-sigma 10` (σ = D, the paper's D/2 = 5)",
        LOCAL_P
        + ["--no-reverse-source", "--no-attend-source-eos"]
        + OURS["luong"]
        + ["--renormalize-window", "--forget-gate-bias", "1", "--position-sigma", "10"],
    ),
    "local-p-forward-renorm-fgb1-sigma20": (
        "`local-p-forward-renorm-fgb1` with `--position-sigma 20` (σ = 2D)",
        LOCAL_P
        + ["--no-reverse-source", "--no-attend-source-eos"]
        + OURS["luong"]
        + ["--renormalize-window", "--forget-gate-bias", "1", "--position-sigma", "20"],
    ),
    "local-p-forward-renorm-fgb1-sigma3.5": (
        "`local-p-forward-renorm-fgb1` with `--position-sigma 3.5` (narrower than D/2 = 5)",
        LOCAL_P
        + ["--no-reverse-source", "--no-attend-source-eos"]
        + OURS["luong"]
        + ["--renormalize-window", "--forget-gate-bias", "1", "--position-sigma", "3.5"],
    ),
    "local-p-forward-renorm-fgb1-d7": (
        "`local-p-forward-renorm-fgb1` with D = 7 pieces (σ = D/2 = 3.5)",
        LOCAL_P
        + ["--no-reverse-source", "--no-attend-source-eos"]
        + OURS["luong"]
        + ["--renormalize-window", "--forget-gate-bias", "1", "--window-size", "7"],
    ),
    "local-p-forward-renorm-fgb1-detach": (
        "`local-p-forward-renorm-fgb1` with `--position-detach-query`",
        LOCAL_P
        + ["--no-reverse-source", "--no-attend-source-eos"]
        + OURS["luong"]
        + ["--renormalize-window", "--forget-gate-bias", "1", "--position-detach-query"],
    ),
    "local-p-forward-renorm-fgb1-d14-sigma5": (
        "`local-p-forward-renorm-fgb1` with D = 14 and `--position-sigma 5` (the Gaussian of D = 10)",
        LOCAL_P
        + ["--no-reverse-source", "--no-attend-source-eos"]
        + OURS["luong"]
        + ["--renormalize-window", "--forget-gate-bias", "1", "--window-size", "14"]
        + ["--position-sigma", "5"],
    ),
    "local-p-forward": (
        "`local-p-forward-renorm` without `--renormalize-window` (the paper's eq. (10))",
        LOCAL_P + ["--no-reverse-source", "--no-attend-source-eos"] + OURS["luong"],
    ),
    "local-p-forward-renorm-d14": (
        "`local-p-forward-renorm` with D = 14 pieces (the paper's 10 words, in pieces)",
        LOCAL_P
        + ["--no-reverse-source", "--no-attend-source-eos"]
        + OURS["luong"]
        + ["--renormalize-window", "--window-size", "14"],
    ),
    "local-p-forward-renorm-whole": (
        "`local-p-forward-renorm` with D = 200: a window and a Gaussian wider than any verse",
        LOCAL_P
        + ["--no-reverse-source", "--no-attend-source-eos"]
        + OURS["luong"]
        + ["--renormalize-window", "--window-size", "200"],
    ),
    "local-m-forward": (
        "local-m (general), D = 10, with `global-forward-luong`'s conventions",
        ["--arch", "luong_wmt_en_de", "--attention-window"]
        + [
            "local-m",
            "--attention-score",
            "general",
            "--window-size",
            "10",
            "--input-feeding",
            "--no-reverse-source",
            "--no-attend-source-eos",
            *BF16,
        ]
        + OURS["luong"],
    ),
    "local-m-forward-fgb1-d14": (
        "`local-m-forward` with `--forget-gate-bias 1` and D = 14 (the window of `make demo`)",
        ["--arch", "luong_wmt_en_de", "--attention-window", "local-m"]
        + ["--attention-score", "general", "--window-size", "14", "--input-feeding", *BF16]
        + ["--no-reverse-source", "--no-attend-source-eos"]
        + OURS["luong"]
        + ["--forget-gate-bias", "1"],
    ),
    "local-p-forward-renorm-fgb1-whole": (
        "`local-p-forward-renorm-whole` with `--forget-gate-bias 1`",
        LOCAL_P
        + ["--no-reverse-source", "--no-attend-source-eos"]
        + OURS["luong"]
        + ["--renormalize-window", "--window-size", "200", "--forget-gate-bias", "1"],
    ),
    "local-p-forward-renorm-lr0.1": (
        "`local-p-forward-renorm`, `--position-lr-scale 0.1`",
        LOCAL_P
        + ["--no-reverse-source", "--no-attend-source-eos"]
        + OURS["luong"]
        + ["--renormalize-window", "--position-lr-scale", "0.1"],
    ),
}


def describe_commit() -> str:
    """The commit the run trains, ``+dirty`` when the package has uncommitted changes."""
    git = ["git", "-C", REPO]
    head = subprocess.run(git + ["rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    dirty = subprocess.run(
        git + ["status", "--porcelain", "luong_plugin"], capture_output=True, text=True
    )
    return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


def result_path(name: str, seed: int) -> str:
    return os.path.join(RESULTS, f"{name}.seed{seed}.json")


def done(name: str, seed: int, updates: int) -> bool:
    """Whether a result for this run, with its current options, reached ``updates``."""
    if not os.path.exists(result_path(name, seed)):
        return False
    with open(result_path(name, seed)) as f:
        r = json.load(f)
    return r["updates"] >= updates and r["options"] == RUNS[name][1]


VALID = re.compile(r"\| valid on 'valid' subset \|.*?\| ppl ([\d.]+) \|.*?\| num_updates (\d+)")
WALL = re.compile(r"\bwall[= ](\d+)")


def parse_log(text: str):
    """{updates: valid ppl} and the training wall seconds from a fairseq-train log."""
    ppl = {int(m.group(2)): float(m.group(1)) for m in VALID.finditer(text)}
    walls = [int(m.group(1)) for m in WALL.finditer(text)]
    return ppl, (walls[-1] if walls else None)


def finished(log_path: str, updates: int) -> bool:
    """Whether the log validated at ``updates``: a run trained for more updates and
    stopped after that validation counts too (the learning rate is fixed, so the
    budget does not change the run up to there)."""
    if not os.path.exists(log_path):
        return False
    with open(log_path) as f:
        return updates in parse_log(f.read())[0]


def train(name: str, seed: int, args) -> dict:
    what, options = RUNS[name]
    commit = describe_commit()
    save_dir = os.path.join(REPO, "runs", "compare", f"{name}.seed{seed}")
    os.makedirs(save_dir, exist_ok=True)
    cmd = [
        os.path.join(os.path.dirname(args.python), "fairseq-train"),
        os.path.join(args.data, "bin"), "--user-dir", os.path.join(REPO, "luong_plugin"),
        *RECIPE, *options, "--seed", str(seed),
        "--max-update", str(args.updates), "--max-epoch", "0",
        "--validate-interval-updates", str(args.validate_every), "--validate-interval", "1000",
        "--save-dir", save_dir,
        *(["--save-interval-updates", str(args.save_every), "--keep-interval-updates", "-1",
            "--no-save-optimizer-state", "--no-epoch-checkpoints", "--no-last-checkpoints"]
          if args.save_every else ["--no-save"]),
        "--no-progress-bar", "--log-format", "simple", "--log-interval", "100",
    ]  # fmt: skip
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), MKL_NUM_THREADS=str(args.threads))
    log_path = os.path.join(save_dir, "train.log")
    start = time.time()
    adopted = finished(log_path, args.updates)
    if adopted:  # trained, its result not written: read the log
        code = 0
    else:
        with open(log_path, "w") as log:
            code = subprocess.call(
                [os.path.join(REPO, "recipes", "with_tcmalloc"), *cmd],
                stdout=log, stderr=subprocess.STDOUT, env=env,
            )  # fmt: skip
    with open(log_path) as f:
        ppl, wall = parse_log(f.read())
    seconds = time.time() - start if wall is None else wall
    if code != 0 or args.updates not in ppl:
        raise RuntimeError(f"{name} seed {seed} failed (exit {code}): see {log_path}")
    result = {
        "name": name,
        "what": what,
        "seed": seed,
        "updates": args.updates,
        "valid_ppl": {str(k): v for k, v in sorted(ppl.items())},
        "seconds": round(seconds, 1),
        "threads": args.threads,
        "jobs_at_once": args.jobs,
        "options": options,
        "commit": None if adopted else commit,  # an adopted log's run: see its train.log
    }
    os.makedirs(RESULTS, exist_ok=True)
    tmp = result_path(name, seed) + ".tmp"
    with open(tmp, "w") as f:
        json.dump(result, f, indent=1)
    os.replace(tmp, result_path(name, seed))
    return result


def train_in_worker(script: str, variant: str, options, seed: int, args, log_every=100) -> str:
    """fairseq-train of RECIPE with ``options`` from ``seed`` for ``args.updates``
    updates, saving nothing, in a fresh process on one thread that runs ``script
    --worker variant -- FAIRSEQ_ARGS`` (a recipe of this directory that patches the
    plugin before it trains); returns the log, raises when the run fails."""
    argv = [
        os.path.join(args.data, "bin"), "--user-dir", os.path.join(REPO, "luong_plugin"),
        *RECIPE, *options, "--seed", str(seed),
        "--max-update", str(args.updates), "--max-epoch", "0", "--no-save",
        "--validate-interval-updates", str(args.validate_every), "--validate-interval", "1000",
        "--no-progress-bar", "--log-format", "simple", "--log-interval", str(log_every),
    ]  # fmt: skip
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONPATH=REPO)
    run = subprocess.run(
        [os.path.join(REPO, "recipes", "with_tcmalloc"), args.python, os.path.abspath(script),
         "--worker", variant, "--", *argv],
        capture_output=True, text=True, env=env,
    )  # fmt: skip
    log = run.stdout + run.stderr
    if run.returncode != 0:
        raise RuntimeError(f"{variant} seed {seed} failed (exit {run.returncode}):\n{log[-3000:]}")
    return log


def load_results():
    results = {}
    if os.path.isdir(RESULTS):
        for fname in sorted(os.listdir(RESULTS)):
            if fname.endswith(".json"):
                with open(os.path.join(RESULTS, fname)) as f:
                    r = json.load(f)
                results[(r["name"], r["seed"])] = r
    return results


def render(path: str, checkpoints=(500, 1000, 2000)) -> None:
    """docs/COMPARE.md: valid perplexity per run at each checkpoint, each seed and the mean."""
    results = load_results()
    lines = [
        "# Learning per update: ours against fairseq's `lstm`",
        "",
        "Rendered by `recipes/bible_es_en/compare.py` from `docs/experiments/compare/*.json`.",
        "Every run trains the demo's recipe (1 x 256, 8K SentencePiece vocabulary, 2,000-token",
        "batches, dropout 0.2, Adam) for a fixed number of updates, ours in bf16 as the demo",
        "trains (fairseq's `lstm` in fp32: fairseq cannot train bf16 on a CPU); the cells give the valid",
        "perplexity at 500, 1,000 and 2,000 updates as `mean (seed 1 / seed 2 / …)` over the",
        "seeds that reached it, or the one seed's value where only one did. Lower is better.",
        "",
        "| run | what it changes | " + " | ".join(f"ppl @ {c}" for c in checkpoints) + " |",
        "|---|---|" + "---|" * len(checkpoints),
    ]
    for name, (what, _) in RUNS.items():
        seeds = sorted(s for n, s in results if n == name)
        if not seeds:
            lines.append(
                f"| `{name}` | {what} | " + " | ".join("not run" for _ in checkpoints) + " |"
            )
            continue
        cells = []
        for c in checkpoints:
            values = {s: results[(name, s)]["valid_ppl"].get(str(c)) for s in seeds}
            values = {s: v for s, v in values.items() if v is not None}
            if not values:
                cells.append("")
            elif len(values) == 1:
                ((seed, value),) = values.items()
                cells.append(f"{value:.2f} (seed {seed})")
            else:
                mean = sum(values.values()) / len(values)
                cells.append(f"{mean:.2f} ({' / '.join(f'{v:.2f}' for v in values.values())})")
        lines.append(f"| `{name}` | {what} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "Runs trained one thread each, several at a time on a shared machine: their speeds say",
        "nothing and are not shown. A cell with one value ran one seed; an empty cell has no",
        "validation at that update: the run stopped before it (`updates` in its JSON) or",
        "validated at other updates (`--validate-every`, e.g. every 560; its JSON has each",
        "value, docs/LOCAL_P.md the tables). Most rows marked `not",
        "run` ran earlier with one seed, in fp32, to 1,000 updates: their results are in",
        "`docs/experiments/compare/` at commit 26e0f16. What the table shows: docs/DEMO.md,",
        '"Per update against fairseq\'s `lstm`".',
        "",
    ]
    here = os.path.dirname(os.path.abspath(__file__))
    if here not in sys.path:  # imported from a test by its path
        sys.path.insert(0, here)
    import bf16_parts  # this directory; both import this module
    import trajectory

    lines += trajectory.table_lines() + bf16_parts.table_lines()
    with open(path, "w") as f:
        f.write("\n".join(lines))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--runs",
        nargs="+",
        default=list(RUNS),
        choices=list(RUNS),
        metavar="NAME",
        help=f"runs to train, of: {', '.join(RUNS)}",
    )
    parser.add_argument("--seeds", nargs="+", type=int, default=[1, 2])
    parser.add_argument("--updates", type=int, default=2000)
    parser.add_argument("--validate-every", type=int, default=500)
    parser.add_argument(
        "--save-every",
        type=int,
        default=0,
        help="keep a checkpoint every N updates (0: none), for luong-position-trace",
    )
    parser.add_argument("--jobs", type=int, default=2, help="runs trained at once")
    parser.add_argument("--threads", type=int, default=1, help="threads per run")
    parser.add_argument("--data", default=os.path.join(REPO, "data", "bible_es_en"))
    parser.add_argument("--python", default=os.path.join(REPO, ".venv", "bin", "python"))
    parser.add_argument("--out", default=os.path.join(REPO, "docs", "COMPARE.md"))
    parser.add_argument("--render-only", action="store_true")
    args = parser.parse_args(argv)
    if args.updates < 1 or args.jobs < 1 or args.threads < 1:
        parser.error("--updates, --jobs and --threads must be >= 1")

    if not args.render_only:
        todo = [(n, s) for n in args.runs for s in args.seeds if not done(n, s, args.updates)]
        print(f"{len(todo)} runs to train, {args.jobs} at once", flush=True)

        def one(item):
            name, seed = item
            start = time.time()
            r = train(name, seed, args)
            render(args.out)
            last = r["valid_ppl"][str(args.updates)]
            print(f"done {name} seed {seed}: ppl {last} in {time.time() - start:.0f} s", flush=True)

        with ThreadPoolExecutor(args.jobs) as pool:
            for _ in pool.map(one, todo):
                pass
    render(args.out)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
