"""make demo's choices on another corpus and its own: learning per update, two seeds.

    python -m experiments.corpus_compare [--corpus docs_en_fr_long] [--runs NAME ...]
        [--seeds 1 2] [--updates 1500] [--validate-every 250] [--jobs 2] [--render-only]

The demo's settings were chosen on Bible verses (experiments/compare.py, budget.py).
This study trains the same recommended models on a corpus prepared by another recipe
(``CORPORA``: recipes/docs_en_fr, Debian's manuals, English->French; ``docs_en_fr_long``
keeps the pairs of 10 English words or more; ``bible_es_en``, make demo's own corpus, so
that a setting compares per update on both corpora in one harness) for a fixed number of
updates, validating every ``--validate-every`` updates, so the runs compare learning per
update whatever the machine's speed: local-p with the demo's settings and with the
paper's D = 10 and sigma = D/2, global attention, local-m, and fairseq's `lstm` at the
same sizes; the other ``RUNS`` are the demo's local-p with one setting changed. Each
finished run writes ``docs/experiments/corpus_compare/CORPUS/NAME.seedK.json`` and
docs/CORPORA.md is rendered from every corpus's files; a run whose JSON exists with the
same options and as many updates is skipped, so the study resumes where it stopped, and
a run that fails stops the runs not started yet.
"""

import argparse
import os
import subprocess
import time

from experiments import harness
from experiments.compare_runs import OPTIMISATION, SIZES
from luong_plugin.modules.precision import default_precision

# name: (recipe that prepares it, data folder, source, target)
CORPORA = {
    "docs_en_fr": ("recipes/docs_en_fr/prepare.sh", "data/docs_en_fr", "en", "fr"),
    "docs_en_fr_long": (
        "recipes/docs_en_fr/prepare.sh --min-words 10 --out data/docs_en_fr_long",
        "data/docs_en_fr_long",
        "en",
        "fr",
    ),
    # make demo's own corpus, so that a setting compares per update on both in one harness
    "bible_es_en": (
        "recipes/bible_es_en/prepare.sh --out data/bible_es_en",
        "data/bible_es_en",
        "es",
        "en",
    ),
}
OURS_PRECISION = ["--precision", default_precision()]  # as make demo trains on this machine
# name: (what it is, options after the languages and OPTIMISATION)
RUNS = {
    "local-p": ("`luong_recommended`: make demo's local-p, D = 14, sigma 5",
                ["--arch", "luong_recommended", *OURS_PRECISION]),
    "local-p-d10": ("the same with the paper's D = 10 and sigma = D/2",
                    ["--arch", "luong_recommended", "--window-size", "10",
                     "--position-sigma", "0", *OURS_PRECISION]),
    "global": ("`luong_recommended_global`: global attention, otherwise the demo",
               ["--arch", "luong_recommended_global", *OURS_PRECISION]),
    "local-m": ("local-m, D = 14, otherwise the demo",
                ["--arch", "luong_recommended_global", "--attention-window", "local-m",
                 "--window-size", "14", *OURS_PRECISION]),
    "lstm": ("fairseq's `lstm` at the same sizes, fp32",
             ["--arch", "lstm", "--decoder-attention", "True", *SIZES]),
    # make demo's other departures from the paper, one at a time (docs/DEMO.md's table)
    "local-p-reversed": ("local-p with the paper's reversed source",
                         ["--arch", "luong_recommended", "--reverse-source", *OURS_PRECISION]),
    "local-p-no-renorm": ("local-p without the renormalised window (Luong's default)",
                          ["--arch", "luong_recommended", "--no-renormalize-window",
                           *OURS_PRECISION]),
    "local-p-fgb0": ("local-p with the paper's init (forget-gate bias 0)",
                     ["--arch", "luong_recommended", "--forget-gate-bias", "0", *OURS_PRECISION]),
    "local-p-fp32": ("local-p in fp32", ["--arch", "luong_recommended", "--precision", "fp32"]),
    # why local-p falls behind global per update late in training: one change at a time
    "local-p-sigma7": ("local-p with sigma = D/2 = 7 (the paper's sigma for the demo's D)",
                       ["--arch", "luong_recommended", "--position-sigma", "7", *OURS_PRECISION]),
    "local-p-d28": ("local-p with D = 28 and sigma = D/2 = 14 (twice the window)",
                    ["--arch", "luong_recommended", "--window-size", "28", "--position-sigma",
                     "14", *OURS_PRECISION]),
    "local-p-d28-sigma7": ("local-p with D = 28 and sigma 7 (the window of `local-p-d28`, "
                           "the Gaussian of `local-p-sigma7`)",
                           ["--arch", "luong_recommended", "--window-size", "28",
                            "--position-sigma", "7", *OURS_PRECISION]),
    # which half of local-p-d28 does it: its Gaussian in the demo's window, its window
    # with the demo's Gaussian
    "local-p-sigma14": ("local-p with sigma 14 in the demo's window (the Gaussian of "
                        "`local-p-d28`)",
                        ["--arch", "luong_recommended", "--position-sigma", "14",
                         *OURS_PRECISION]),
    "local-p-d28-sigma5": ("local-p with D = 28 and the demo's sigma 5 (the window of "
                           "`local-p-d28`)",
                           ["--arch", "luong_recommended", "--window-size", "28",
                            "--position-sigma", "5", *OURS_PRECISION]),
    "local-p-lr0.3": ("local-p with eq. (9)'s W_p and v_p moved 0.3x as far per Adam step",
                      ["--arch", "luong_recommended", "--position-lr-scale", "0.3",
                       *OURS_PRECISION]),
    "local-p-detach": ("local-p with eq. (9) passing no gradient into the decoder",
                       ["--arch", "luong_recommended", "--position-detach-query",
                        *OURS_PRECISION]),
}  # fmt: skip
# the comparison of attention and peers; the rest change one of the demo's settings
MAIN_RUNS = ["local-p", "local-p-d10", "global", "local-m", "lstm"]
PAGE = os.path.join(harness.REPO, "docs", "CORPORA.md")


def results_dir(corpus: str) -> str:
    return os.path.join(harness.results_dir("corpus_compare"), corpus)


def done(corpus: str, name: str, seed: int, updates: int) -> bool:
    r = harness.read_json(harness.result_path(results_dir(corpus), name, seed))
    return r is not None and r["updates"] >= updates and r["options"] == RUNS[name][1]


def train(corpus: str, name: str, seed: int, args) -> dict:
    _, data, src, tgt = CORPORA[corpus]
    what, options = RUNS[name]
    save_dir = os.path.join(harness.REPO, "runs", "corpus_compare", corpus, f"{name}.seed{seed}")
    os.makedirs(save_dir, exist_ok=True)
    cmd = [
        os.path.join(os.path.dirname(args.python), "fairseq-train"),
        os.path.join(harness.REPO, data, "bin"), "--user-dir", harness.USER_DIR,
        "--source-lang", src, "--target-lang", tgt, *OPTIMISATION, *options,
        "--seed", str(seed), "--max-update", str(args.updates), "--max-epoch", "0",
        "--validate-interval-updates", str(args.validate_every), "--validate-interval", "1000",
        "--no-save", "--save-dir", os.path.join(save_dir, "checkpoints"),  # fairseq checks it
        "--no-progress-bar", "--log-format", "simple", "--log-interval", "100",
        "--skip-invalid-size-inputs-valid-test",
    ]  # fmt: skip
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), MKL_NUM_THREADS=str(args.threads))
    log_path = os.path.join(save_dir, "train.log")
    commit, started = harness.describe_commit(), time.strftime("%Y-%m-%d %H:%M")
    with open(log_path, "w") as log:
        code = subprocess.call([harness.WITH_TCMALLOC, *cmd], stdout=log,
                               stderr=subprocess.STDOUT, env=env)  # fmt: skip
    with open(log_path) as f:
        ppl, wall = harness.parse_log(f.read())
    if code != 0 or args.updates not in ppl:
        raise RuntimeError(f"{corpus} {name} seed {seed} failed (exit {code}): see {log_path}")
    result = {
        "name": name, "what": what, "corpus": corpus, "seed": seed, "updates": args.updates,
        "valid_ppl": {str(k): v for k, v in sorted(ppl.items())}, "wall_s": wall,
        "threads": args.threads, "jobs_at_once": args.jobs, "options": options,
        "commit": commit, "started": started, "machine": harness.machine(),
    }  # fmt: skip
    harness.write_json(harness.result_path(results_dir(corpus), name, seed), result)
    return result


def cell(results: dict, name: str, update: int) -> str:
    values = {s: r["valid_ppl"].get(str(update)) for (n, s), r in results.items() if n == name}
    return harness.seed_cell({s: v for s, v in values.items() if v is not None})


def render(path: str = PAGE) -> None:
    lines = [
        "# make demo's choices on other corpora: learning per update",
        "",
        "Rendered by `python -m experiments.corpus_compare` from",
        "`docs/experiments/corpus_compare/CORPUS/*.json`. Each run trains the demo's sizes and",
        "optimisation (1 x 256, Adam 0.003 with betas (0.9, 0.98), 2,000-token batches, label",
        "smoothing 0.1) for a fixed number of updates (each JSON has its threads and how many",
        "runs trained at once); cells give the valid perplexity as `mean (seed 1 / seed 2)`, lower",
        "is better. Runs compare per update only: they trained beside other work, so their speeds",
        "say nothing. The last column gives each seed's commit: the fused attention step",
        "(2026-11-27) changed the rounding of our models' training, so a run repeated across it",
        "follows another trajectory from the same seed.",
        "`bible_es_en` is make demo's own corpus, trained here in this harness so that a setting",
        "compares on both corpora alike (COMPARE.md's Bible runs came through another driver).",
        "How each corpus is built and its lengths: its recipe's README. The same configurations at",
        "equal wall time, with BLEU and chrF2 on the test split: [CORPUS_BUDGET.md](CORPUS_BUDGET.md);",
        "D = 28 with sigma 14 at equal time: [CORPUS_BUDGET_D28.md](CORPUS_BUDGET_D28.md).",
    ]
    for corpus, (recipe, *_) in CORPORA.items():
        results = harness.load_results(results_dir(corpus))
        if not results:
            continue
        updates = sorted({int(u) for r in results.values() for u in r["valid_ppl"]})
        shown = [u for u in updates if u % 500 == 0] or updates[-3:]
        lines += [
            "",
            f"## `{corpus}` (`{recipe}`)",
            "",
            f"Sitting: {harness.sittings(results)}. Data: `docs/experiments/corpus_compare/{corpus}/`.",
            "",
            "| run | what | " + " | ".join(f"ppl @ {u}" for u in shown) + " | commit |",
            "|---|---|" + "---|" * len(shown) + "---|",
        ]
        for name, (what, _) in RUNS.items():
            seeds = sorted(s for n, s in results if n == name)
            if seeds:
                cells = [cell(results, name, u) for u in shown]
                commits = " / ".join(results[(name, s)]["commit"] for s in seeds)
                lines.append(f"| `{name}` | {what} | " + " | ".join(cells) + f" | {commits} |")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--corpus", default="docs_en_fr_long", choices=list(CORPORA))
    p.add_argument("--runs", nargs="+", default=MAIN_RUNS, choices=list(RUNS), metavar="NAME",
                   help=f"runs to train (default: {' '.join(MAIN_RUNS)}), of: "
                        f"{', '.join(RUNS)}")  # fmt: skip
    p.add_argument("--seeds", nargs="+", type=int, default=[1, 2])
    p.add_argument("--updates", type=int, default=1500)
    p.add_argument("--validate-every", type=int, default=250)
    p.add_argument("--jobs", type=int, default=2, help="runs trained at once")
    p.add_argument("--threads", type=int, default=1, help="threads per run")
    p.add_argument("--python", default=harness.PYTHON)
    p.add_argument("--out", default=PAGE)
    p.add_argument("--render-only", action="store_true")
    args = p.parse_args(argv)
    harness.at_least_one(p, args, ("updates", "validate_every", "jobs", "threads", "seeds"))
    for option in ("runs", "seeds"):
        harness.each_once(p, f"--{option}", getattr(args, option))
    return p, args


def main(argv=None):
    p, args = parse_args(argv)
    recipe, data, _, _ = CORPORA[args.corpus]
    if not args.render_only:
        if not os.path.isdir(os.path.join(harness.REPO, data, "bin")):
            p.error(f"no {data}/bin: prepare the corpus first with {recipe}")
        todo = [(n, s) for s in args.seeds for n in args.runs
                if not done(args.corpus, n, s, args.updates)]  # fmt: skip
        print(f"{len(todo)} runs to train, {args.jobs} at once", flush=True)

        def one(item):
            name, seed = item
            r = train(args.corpus, name, seed, args)
            render(args.out)
            print(f"done {name} seed {seed}: ppl {r['valid_ppl'][str(args.updates)]}", flush=True)

        harness.run_all(one, todo, args.jobs)
    render(args.out)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
