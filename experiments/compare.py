"""Per-update comparisons at the demo's recipe: one change at a time, two seeds.

    python -m experiments.compare [--runs NAME ...] [--seeds 1 2]
        [--updates 2000] [--jobs 2] [--render-only]

Every run trains the demo's model (1 x 256, 8K joint SentencePiece vocabulary,
2,000-token batches, dropout 0.2, Adam 0.003 with betas (0.9, 0.98), clip 1.0,
label smoothing 0.1: ``demo.sh``'s TRAIN_ARGS) for a fixed number of updates
and validates at 500, 1,000, 2,000 ... updates, so the runs compare learning
per update, whatever the machine's speed. ``RUNS`` (compare_runs.py) names each
run by the one thing it changes. Each finished run writes
``docs/experiments/compare/NAME.seedK.json`` (valid perplexity per validated
update, updates per second, the options); a run whose JSON exists is skipped,
so an interrupted table resumes where it stopped. ``--jobs 2`` trains two
runs at once on one thread each (faster on 2 cores than one run of two
threads); ``docs/COMPARE.md`` is rendered from the JSON files after every run
(compare_page.py). ``--results DIR`` keeps a study of its own apart: its JSON files in
DIR, its logs in ``runs/<DIR's name>/``, and COMPARE.md left as it is.
"""

import argparse
import os
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor

from experiments import harness
from experiments.compare_runs import RECIPE, RUNS
from experiments.harness import REPO, describe_commit, parse_log

RESULTS = harness.results_dir("compare")


def result_path(name: str, seed: int, results: str = RESULTS) -> str:
    return harness.result_path(results, name, seed)


def done(name: str, seed: int, updates: int, results: str = RESULTS) -> bool:
    """Whether a result for this run, with its current options, reached ``updates``."""
    r = harness.read_json(result_path(name, seed, results))
    return r is not None and r["updates"] >= updates and r["options"] == RUNS[name][1]


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
    study = os.path.basename(os.path.normpath(args.results))  # compare, unless --results
    save_dir = os.path.join(REPO, "runs", study, f"{name}.seed{seed}")
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
                [harness.WITH_TCMALLOC, *cmd],
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
    harness.write_json(result_path(name, seed, args.results), result)
    return result


def worker_argv(options, seed: int, args, log_every: int = 100) -> list:
    """fairseq-train's arguments for RECIPE with ``options`` from ``seed`` for
    ``args.updates`` updates, saving nothing: a run of a study that patches the plugin in
    a worker process first (bf16_parts.py, trajectory.py; ``harness.run_worker``)."""
    return [
        os.path.join(args.data, "bin"), "--user-dir", harness.USER_DIR,
        *RECIPE, *options, "--seed", str(seed),
        "--max-update", str(args.updates), "--max-epoch", "0", "--no-save",
        "--validate-interval-updates", str(args.validate_every), "--validate-interval", "1000",
        "--no-progress-bar", "--log-format", "simple", "--log-interval", str(log_every),
    ]  # fmt: skip


def table_lines(checkpoints=(500, 1000, 2000)) -> list:
    """docs/COMPARE.md's first part: valid perplexity per run at each checkpoint, each seed
    and the mean (compare_page.py adds the other studies' tables)."""
    results = harness.load_results(RESULTS)
    commits = {}  # row: {commit: [seeds]}: the sittings a row's seeds come from
    for (name, seed), r in sorted(results.items()):
        commits.setdefault(name, {}).setdefault(r["commit"] or "not recorded", []).append(seed)
    sittings = "; ".join(
        f"`{name}` "
        + ", ".join(
            f"{c} (seed{'s' * (len(ss) > 1)} {', '.join(map(str, ss))})"
            for c, ss in commits[name].items()
        )
        for name in RUNS
        if name in commits
    )
    lines = [
        "# Learning per update: ours against fairseq's `lstm`",
        "",
        "Rendered by `python -m experiments.compare_page` from `docs/experiments/compare/*.json`.",
        "Every run trains the demo's recipe (1 x 256, 8K SentencePiece vocabulary, 2,000-token",
        "batches, dropout 0.2, Adam) for a fixed number of updates, ours in bf16 as the demo",
        "trains (fairseq's `lstm` in fp32: fairseq cannot train bf16 on a CPU); the cells give the valid",
        "perplexity at 500, 1,000 and 2,000 updates as `mean (seed 1 / seed 2 / …)` over the",
        "seeds that reached it, or the one seed's value where only one did. Lower is better.",
        "",
        "Each JSON records the commit its run trained, its thread count and how many runs",
        "shared the machine with it, but not its date or the machine; runs at different",
        "commits are compared across sittings, and so are the seeds of a row that lists",
        f"several commits. Commits: {sittings}." if sittings else "several commits.",
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
            cells.append(harness.seed_cell({s: v for s, v in values.items() if v is not None}))
        lines.append(f"| `{name}` | {what} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "Runs trained one thread each, several at a time on a shared machine: their speeds say",
        "nothing and are not shown. A cell with one value ran one seed; an empty cell has no",
        "validation at that update: the run stopped before it (`updates` in its JSON) or",
        "validated at other updates (`--validate-every`, e.g. every 560; its JSON has each",
        "value, docs/LOCAL_P.md the tables). Most rows marked `not",
        "run` ran earlier with one seed, in fp32, to 1,000 updates: their results are in",
        "`docs/experiments/local_p/first_round/` (docs/LOCAL_P.md). What the table shows: docs/DEMO.md,",
        '"Per update against fairseq\'s `lstm`".',
        "",
    ]
    return lines


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
    parser.add_argument("--data", default=harness.DATA)
    parser.add_argument("--python", default=harness.PYTHON)
    parser.add_argument("--out", default=os.path.join(REPO, "docs", "COMPARE.md"))
    parser.add_argument(
        "--results",
        default=RESULTS,
        help="folder of the runs' JSON files (COMPARE.md reads the default's)",
    )
    parser.add_argument("--render-only", action="store_true")
    args = parser.parse_args(argv)
    if args.updates < 1 or args.jobs < 1 or args.threads < 1:
        parser.error("--updates, --jobs and --threads must be >= 1")
    # COMPARE.md reads the default folder: a study kept elsewhere leaves it as it is
    own_page = os.path.abspath(args.results) == os.path.abspath(RESULTS)

    if not args.render_only:
        todo = [
            (n, s) for n in args.runs for s in args.seeds
            if not done(n, s, args.updates, args.results)
        ]  # fmt: skip
        print(f"{len(todo)} runs to train, {args.jobs} at once", flush=True)

        def one(item):
            name, seed = item
            start = time.time()
            r = train(name, seed, args)
            if own_page:
                harness.render_compare_page(args.python, args.out)
            last = r["valid_ppl"][str(args.updates)]
            print(f"done {name} seed {seed}: ppl {last} in {time.time() - start:.0f} s", flush=True)

        with ThreadPoolExecutor(args.jobs) as pool:
            for _ in pool.map(one, todo):
                pass
    if own_page:
        harness.render_compare_page(args.python, args.out)
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
