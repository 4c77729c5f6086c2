"""The demo against its comparisons at one wall-time budget, one run after the other.

    python -m experiments.budget [--runs demo global lstm demo-fp32]
        [--seeds 1 2] [--minutes 15] [--render-only]

Each run is ``demo.sh`` itself (the same recipe, data, batches, 15 minutes of
training on all cores, beam-5 decoding of the test chapters, sacreBLEU and chrF)
with one thing changed, named in ``RUNS``. The runs go one after the other, seed
by seed (demo, global, lstm, ... for seed 1, then seed 2), so that every model of
a seed meets the machine in the same state; compare rows only within one
machine. Each finished run writes ``docs/experiments/budget/NAME.seedK.json``
(updates, valid perplexity at every epoch end, best valid perplexity, BLEU, chrF,
the commit; ``measured_as`` where the run was measured under another name, before
a default of demo.sh changed to it); a run whose JSON exists is skipped, so an
interrupted table resumes where it stopped (one recorded with other settings than
``RUNS`` gives now is kept and said so; ``--rerun NAME`` measures it again), and
``docs/BUDGET.md`` is rendered from the JSON files after every run.
"""

import argparse
import json
import os
import subprocess
import time

from experiments import harness
from experiments.harness import REPO, describe_commit

RESULTS = os.path.join(REPO, "docs", "experiments", "budget")
RUN_DIRS = os.path.join(REPO, "runs", "budget")
DEMO = os.path.join(REPO, "recipes", "bible_es_en", "demo.sh")

# name: (what it is, demo.sh's environment)
PAPER_INIT = {"FORGET_GATE_BIAS": "0"}  # the paper's uniform init, as before the option
D10 = {"WINDOW": "10", "SIGMA": "0"}  # the paper's D = 10, sigma = D/2: the demo's before D = 14
RUNS = {
    "demo": ("`make demo`: local-p (general), D = 14 pieces, sigma 5, renormalised window, "
             "forget-gate bias 1, bf16", {"PEER": "", "PRECISION": "bf16"}),
    "global": ("ours, global (general), otherwise the demo", {"PEER": "global", "PRECISION": "bf16"}),
    "lstm": ("fairseq's `lstm` (fp32: fairseq cannot train bf16 on a CPU)",
             {"PEER": "lstm", "PRECISION": "fp32"}),
    "demo-d10": ("the demo with the paper's D = 10 pieces and sigma = D/2 = 5 (`make demo` "
                 "before D = 14)", {"PEER": "", "PRECISION": "bf16", **D10}),
    "demo-fgb0": ("the demo with D = 10, sigma 5 and the paper's init (no forget-gate bias)",
                  {"PEER": "", "PRECISION": "bf16", **D10, **PAPER_INIT}),
    "global-fgb0": ("ours, global, with the paper's init", {"PEER": "global", "PRECISION": "bf16",
                    **PAPER_INIT}),
    "demo-fp32": ("the demo with D = 10, sigma 5, in fp32, the paper's init",
                  {"PEER": "", "PRECISION": "fp32", **D10, **PAPER_INIT}),
    "demo-d14": ("the demo with D = 14 pieces and sigma = D/2 = 7 (the paper's for this window), "
                 "the paper's init", {"PEER": "", "PRECISION": "bf16", "WINDOW": "14", "SIGMA": "0",
                 **PAPER_INIT}),
    "global-fp32": ("ours, global, in fp32", {"PEER": "global", "PRECISION": "fp32"}),
}  # fmt: skip

DEFAULT_RUNS = ["demo", "global", "lstm"]


def result_path(name: str, seed: int) -> str:
    return os.path.join(RESULTS, f"{name}.seed{seed}.json")


def run(name: str, seed: int, args) -> dict:
    what, env_change = RUNS[name]
    run_dir = os.path.join(RUN_DIRS, f"{name}.seed{seed}")
    # LENPEN=1: fairseq's default length penalty, as every committed sitting decoded (demo.sh
    # now chooses it on the valid chapters; docs/LENGTH_PENALTY.md decodes such runs again)
    env = dict(
        os.environ, RUN=run_dir, SEED=str(seed), MINUTES=str(args.minutes), EXPLORE="0",
        DATA=args.data, LENPEN="1", **env_change,
    )  # fmt: skip
    commit = describe_commit()
    started = time.strftime("%Y-%m-%d %H:%M")
    code = subprocess.call(["bash", DEMO], env=env, cwd=REPO, stdout=subprocess.DEVNULL)
    report = os.path.join(run_dir, "report.json")
    if code != 0 or not os.path.exists(report):
        raise RuntimeError(f"{name} seed {seed} failed (exit {code}): see {run_dir}/train.log")
    with open(report) as f:
        scores = json.load(f)
    with open(os.path.join(run_dir, "train.log")) as f:
        valid = harness.valid_ppl(f.read())
    result = {
        "name": name,
        "what": what,
        "seed": seed,
        "minutes": args.minutes,
        "threads": os.cpu_count(),
        "machine": harness.machine(),
        "environment": env_change,
        "updates": scores["training"]["updates"],
        "wall_s": scores["training"]["wall_s"],
        "best_valid_ppl": scores["training"]["valid_ppl"],
        "best_checkpoint": scores["training"]["best_checkpoint"],  # the one decoded
        "valid_ppl": {str(u): p for u, p in sorted(valid.items())},
        "bleu": scores["bleu"],
        "chrf": scores["chrf"],
        "lenpen": scores["lenpen"],
        "bleu_signature": scores["bleu_signature"],
        "chrf_signature": scores["chrf_signature"],
        "started": started,
        "commit": commit,
    }
    harness.write_json(result_path(name, seed), result)
    return result


def kept(name: str, seed: int, minutes: float) -> bool:
    """Whether a result of this run exists (then it is not run again). One recorded with other
    settings than ``RUNS`` now gives (a default of demo.sh changed since, say) or another
    budget is kept too, as the page reads it, and said so: ``--rerun NAME`` measures it anew."""
    path = result_path(name, seed)
    r = harness.read_json(path)
    if r is None:
        return False
    changes = []
    if r.get("environment") != RUNS[name][1]:
        changes.append(f"environment {r.get('environment')}, now {RUNS[name][1]}")
    if r.get("minutes") != minutes:
        changes.append(f"{r.get('minutes')} minutes, now {minutes:g}")
    if changes:
        as_name = f" as {r['measured_as']}" if r.get("measured_as") else ""
        print(f"kept {os.path.relpath(path, REPO)} (measured{as_name} with "
              f"{'; '.join(changes)}): --rerun {name} measures it again", flush=True)  # fmt: skip
    return True


def load_results():
    return harness.load_results(RESULTS)


def cell(values, decimals: int = 2) -> str:
    """`mean (seed 1 / seed 2)`, or one seed's value with its seed (``harness.seed_cell``)."""
    return harness.seed_cell(values, decimals, empty="not run")


def render(path: str) -> None:
    results = load_results()
    named = sorted({r["machine"] for r in results.values() if r.get("machine")})
    cores = " or ".join(str(c) for c in sorted({r["threads"] for r in results.values()
                                                if r.get("threads")}))  # fmt: skip
    machine = (
        " and ".join(named)
        if named
        else f"one machine of {cores or 'unrecorded'} cores (each JSON's `threads`; they do not "
        "name the CPU)"
    )
    lines = [
        "# The demo at its budget: 15 minutes of training, one run after the other",
        "",
        "Rendered by `python -m experiments.budget` from `docs/experiments/budget/*.json`.",
        "Every run is `recipes/bible_es_en/demo.sh` (1 x 256, 8K SentencePiece vocabulary,",
        "2,000-token batches, dropout 0.2, Adam, all cores, tcmalloc) with the one change its",
        "row names, trained for the same wall time, then beam 5 with fairseq's default length",
        "penalty (`LENPEN=1`; `make demo` now chooses it on the valid chapters: [DEMO.md](DEMO.md)) on",
        "the 999 test verses with",
        "fairseq's best checkpoint (the lowest label-smoothed valid loss); `best valid ppl` is",
        "the lowest perplexity of any validation, which can be another one (the JSON's",
        "`best_checkpoint` names the decoded one where it was recorded, from commit 4e33ba0 on).",
        "Cells are `mean (seed 1 / seed 2)`. The runs went one after the other, seed by seed, on",
        f"{machine if results else 'one machine'},",
        "in sittings whose dates and commits are listed below the table: the machine's speed",
        "changes from sitting to sitting, so compare updates and scores within one sitting, and",
        "not with another machine's numbers.",
        "",
        "| run | what | updates | best valid ppl | sacreBLEU | chrF2 |",
        "|---|---|---|---|---|---|",
    ]
    for name, (what, _) in RUNS.items():
        mine = {s: r for (n, s), r in results.items() if n == name}
        if not mine:
            continue
        lines.append(
            f"| `{name}` | {what} | "
            + " | ".join(
                cell({s: r[key] for s, r in mine.items()}, decimals)
                for key, decimals in (("updates", 0), ("best_valid_ppl", 2), ("bleu", 2), ("chrf", 2))
            )  # fmt: skip
            + " |"
        )
    wanted = set(DEFAULT_RUNS) | {n for n, _ in results}
    seeds = sorted({1, 2} | {s for _, s in results})
    todo = [f"`{n}` seed {s}" for s in seeds for n in RUNS if n in wanted and (n, s) not in results]
    lines += ["", "Valid perplexity at each epoch end (equal updates within a seed):", ""]
    for (name, seed), r in sorted(
        results.items(), key=lambda kv: (kv[0][1], list(RUNS).index(kv[0][0]))
    ):
        curve = ", ".join(f"{u}: {p:.2f}" for u, p in r["valid_ppl"].items())
        alias = f", measured as `{r['measured_as']}`" if "measured_as" in r else ""
        lines.append(
            f"- `{name}` seed {seed} ({r['started']}, commit {r['commit']}{alias}): {curve}"
        )
    if results:
        r = next(iter(results.values()))
        lines += [
            "",
            f"Signatures: `{r['bleu_signature']}` (BLEU), `{r['chrf_signature']}` (chrF2).",
        ]
    if todo:
        lines += ["", "Not run yet: " + ", ".join(todo) + "."]
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--runs",
        nargs="+",
        default=DEFAULT_RUNS,
        choices=list(RUNS),
        metavar="NAME",
        help=f"runs, in this order per seed, of: {', '.join(RUNS)}",
    )
    parser.add_argument("--seeds", nargs="+", type=int, default=[1, 2])
    parser.add_argument(
        "--rerun",
        nargs="+",
        default=[],
        choices=list(RUNS),
        metavar="NAME",
        help="runs measured again even where their JSON exists (it is replaced)",
    )
    parser.add_argument("--minutes", type=float, default=15)
    parser.add_argument("--data", default=os.path.join(REPO, "data", "bible_es_en"))
    parser.add_argument("--out", default=os.path.join(REPO, "docs", "BUDGET.md"))
    parser.add_argument("--render-only", action="store_true")
    args = parser.parse_args(argv)
    if args.minutes <= 0:
        parser.error(f"--minutes must be > 0, got {args.minutes}")
    if not args.render_only:
        todo = [
            (n, s)
            for s in args.seeds
            for n in args.runs
            if n in args.rerun or not kept(n, s, args.minutes)
        ]
        for i, (name, seed) in enumerate(todo, 1):
            print(f"[{i}/{len(todo)}] {name} seed {seed}: about {args.minutes:g} minutes "
                  f"of training ({time.strftime('%H:%M')})", flush=True)  # fmt: skip
            r = run(name, seed, args)
            render(args.out)
            print(f"  {r['updates']} updates, best valid ppl {r['best_valid_ppl']}, "
                  f"sacreBLEU {r['bleu']}, chrF2 {r['chrf']}", flush=True)  # fmt: skip
    render(args.out)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
