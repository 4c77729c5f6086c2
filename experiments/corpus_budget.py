"""make demo's choices at equal time on two corpora: BLEU after the same wall time, two seeds.

    python -m experiments.corpus_budget [--corpora bible_es_en docs_en_fr_long]
        [--runs NAME ...] [--seeds 1 2] [--minutes 7] [--jobs 2] [--threads 1]
        [--results DIR] [--out docs/CORPUS_BUDGET.md] [--title TITLE] [--render-only | --rescore]

The equal-time companion of experiments/corpus_compare.py, which compares the same runs
per update: by default ``corpus_compare.MAIN_RUNS`` (local-p with the demo's settings and
with the paper's D = 10, global attention, local-m, fairseq's `lstm` at the same sizes);
``--runs`` may add the demo's model with one of its settings changed (``RUNS``). Every run
trains for the same ``--minutes`` of wall time on ``--threads`` threads, ``--jobs`` runs at
once, validating at every epoch end as make demo does; its best checkpoint (by valid loss)
decodes the test split with demo.sh's beam 5 and is scored by luong_plugin.analysis.report
(sacreBLEU and chrF2 with their signatures), on make demo's corpus and on the long pairs of
Debian's manuals (``CORPORA``). The runs go seed by seed, then corpus by corpus, in
``RUNS`` order. Each finished run writes
``docs/experiments/corpus_budget/CORPUS/NAME.seedK.json`` (``--results`` elsewhere) and
re-renders docs/CORPUS_BUDGET.md; a run whose JSON has the same options and minutes is
skipped, so the study resumes where it stopped. ``--rescore`` trains nothing: it scores the
finished runs' test output again (their folders must still hold it) and adds BLEU's length
ratio, brevity penalty and n-gram precisions to JSONs written before they were recorded.
"""

import argparse
import json
import os
import subprocess
import textwrap
import threading
import time
from typing import Optional

from experiments import corpus_compare, harness
from experiments.budget import cell
from experiments.compare_runs import OPTIMISATION
from experiments.corpus_compare import MAIN_RUNS, RUNS

# name: (recipe that prepares it, data folder, source, target)
CORPORA = {name: corpus_compare.CORPORA[name] for name in ("bible_es_en", "docs_en_fr_long")}
RESULTS = harness.results_dir("corpus_budget")
RUN_DIRS = os.path.join(harness.REPO, "runs", "corpus_budget")
PAGE = os.path.join(harness.REPO, "docs", "CORPUS_BUDGET.md")
NOTES = "notes.md"  # beside the results: the sitting's notes, printed at the end of the page
# demo.sh's GEN_ARGS after the data and languages; report.py draws an attention
# heatmap, so the alignments are printed as demo.sh prints them
DECODE = [
    "--gen-subset", "test", "--beam", "5", "--batch-size", "64",
    "--required-batch-size-multiple", "1",  # fairseq would drop the last partial batch
    "--print-alignment", "soft",
]  # fmt: skip
# what report.json gives of a BLEU score's length (luong_plugin.analysis.report.bleu_lengths)
LENGTHS = ("length_ratio", "brevity_penalty", "bleu_precisions")
COLUMNS = (("updates", 0), ("best_valid_ppl", 2), ("bleu", 2), ("chrf", 2))  # key, decimals
_render_lock = threading.Lock()  # runs finish on several threads; one page write at a time


def results_dir(corpus: str, root: str = RESULTS) -> str:
    return os.path.join(root, corpus)


def run_folder(corpus: str, name: str, seed: int) -> str:
    """A run's folder: its training log, checkpoint and decoded test split."""
    return os.path.join(RUN_DIRS, corpus, f"{name}.seed{seed}")


def _every_run(args):
    """(corpus, name, seed) of every run asked for, seed by seed, then corpus by corpus."""
    return [(c, n, s) for s in args.seeds for c in args.corpora for n in args.runs]


def done(corpus: str, name: str, seed: int, minutes: float, root: str = RESULTS) -> bool:
    """Whether this run's JSON exists and measured the same options for the same minutes."""
    r = harness.read_json(harness.result_path(results_dir(corpus, root), name, seed))
    return r is not None and r["options"] == RUNS[name][1] and r["minutes"] == minutes


def _step(cmd, log_path: str, env: dict, what: str, stdout=None) -> None:
    """Run one command, its output in ``log_path`` (its stdout in ``stdout`` if given);
    raise naming ``what``, the exit code and the log when it fails."""
    with open(log_path, "w") as log:
        code = subprocess.call(cmd, stdout=stdout or log, stderr=log, env=env, cwd=harness.REPO)
    if code != 0:
        raise RuntimeError(f"{what} failed (exit {code}): see {log_path}")


def train(corpus: str, name: str, seed: int, args) -> dict:
    """Train, decode and score one run; write and return its result."""
    _, data, src, tgt = CORPORA[corpus]
    what, options = RUNS[name]
    data = os.path.join(harness.REPO, data)
    run_dir = run_folder(corpus, name, seed)
    os.makedirs(run_dir, exist_ok=True)
    for stale in ("checkpoint_best.pt", "checkpoint_last.pt", "test.gen.txt", "report.json"):
        if os.path.exists(os.path.join(run_dir, stale)):  # never score an earlier run's model
            os.remove(os.path.join(run_dir, stale))
    tools = os.path.dirname(args.python)
    languages = ["--source-lang", src, "--target-lang", tgt, "--user-dir", harness.USER_DIR]
    train_cmd = [
        os.path.join(tools, "fairseq-train"), os.path.join(data, "bin"), *languages,
        *OPTIMISATION, *options, "--seed", str(seed),
        "--stop-time-hours", str(args.minutes / 60), "--max-epoch", "1000",
        "--save-dir", run_dir, "--no-epoch-checkpoints", "--keep-best-checkpoints", "0",
        "--no-last-checkpoints", "--no-progress-bar", "--log-format", "simple",
        "--log-interval", "100", "--skip-invalid-size-inputs-valid-test",
    ]  # fmt: skip
    checkpoint = os.path.join(run_dir, "checkpoint_best.pt")
    generate_cmd = [os.path.join(tools, "fairseq-generate"), os.path.join(data, "bin"),
                    *languages, "--path", checkpoint, *DECODE]  # fmt: skip
    train_log, gen = os.path.join(run_dir, "train.log"), os.path.join(run_dir, "test.gen.txt")
    report_cmd = _report_cmd(args.python, run_dir, data, tgt)
    threads = str(args.threads)
    env = dict(os.environ, OMP_NUM_THREADS=threads, MKL_NUM_THREADS=threads)
    label = f"{corpus} {name} seed {seed}"
    commit, started = harness.describe_commit(), time.strftime("%Y-%m-%d %H:%M")

    _step([harness.WITH_TCMALLOC, *train_cmd], train_log, env, f"{label}: fairseq-train")
    if not os.path.exists(checkpoint):
        raise RuntimeError(f"{label}: fairseq-train (exit 0) saved no {checkpoint}: "
                           f"see {train_log}")  # fmt: skip
    with open(gen, "w") as out:
        _step([harness.WITH_TCMALLOC, *generate_cmd], os.path.join(run_dir, "generate.log"), env,
              f"{label}: fairseq-generate", stdout=out)  # fmt: skip
    _step(report_cmd, os.path.join(run_dir, "report.log"), env, f"{label}: report")
    with open(os.path.join(run_dir, "report.json"), encoding="utf-8") as f:
        scores = json.load(f)
    with open(train_log) as f:
        valid = harness.valid_ppl(f.read())
    result = {
        "name": name, "what": what, "corpus": corpus, "seed": seed, "minutes": args.minutes,
        "threads": args.threads, "jobs_at_once": args.jobs, "options": options,
        "updates": scores["training"]["updates"], "wall_s": scores["training"]["wall_s"],
        "best_valid_ppl": scores["training"]["valid_ppl"],
        "best_checkpoint": scores["training"]["best_checkpoint"],  # the one decoded
        "valid_ppl": {str(u): p for u, p in sorted(valid.items())},
        "bleu": scores["bleu"], "chrf": scores["chrf"],
        "bleu_signature": scores["bleu_signature"], "chrf_signature": scores["chrf_signature"],
        **{key: scores[key] for key in LENGTHS},
        "started": started, "commit": commit, "machine": harness.machine(),
    }  # fmt: skip
    harness.write_json(harness.result_path(results_dir(corpus, args.results), name, seed), result)
    return result


def _report_cmd(python: str, run_dir: str, data: str, tgt: str) -> list:
    """luong_plugin.analysis.report on a run's decoded test split (``data``: the corpus's
    folder, absolute): its scores in ``run_dir``/report.json."""
    return [python, "-m", "luong_plugin.analysis.report", os.path.join(run_dir, "test.gen.txt"),
            "--reference", os.path.join(data, "raw", f"test.{tgt}"),
            "--out-dir", run_dir, "--train-log", os.path.join(run_dir, "train.log")]  # fmt: skip


def rescore(corpus: str, name: str, seed: int, args) -> Optional[dict]:
    """Score a finished run's decoded test split again and add what its JSON lacks of the
    report (``LENGTHS``: BLEU's length ratio, brevity penalty and n-gram precisions, which
    runs scored before the report gave them lack), with the commit that added them
    (``rescored``). The run's folder must still hold its output, and the scores must repeat
    the JSON's: a folder that another run has written since stops it. None where the run has
    no JSON."""
    path = harness.result_path(results_dir(corpus, args.results), name, seed)
    result = harness.read_json(path)
    if result is None:
        return None
    _, data, _, tgt = CORPORA[corpus]
    run_dir = run_folder(corpus, name, seed)
    label = f"{corpus} {name} seed {seed}"
    if not os.path.exists(os.path.join(run_dir, "test.gen.txt")):
        raise RuntimeError(f"{label}: no {run_dir}/test.gen.txt to score again")
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    report_cmd = _report_cmd(args.python, run_dir, os.path.join(harness.REPO, data), tgt)
    _step(report_cmd, os.path.join(run_dir, "report.log"), env, f"{label}: report")
    with open(os.path.join(run_dir, "report.json"), encoding="utf-8") as f:
        scores = json.load(f)
    for key in ("bleu", "chrf", "bleu_signature", "chrf_signature"):
        if scores[key] != result[key]:
            raise RuntimeError(f"{label}: {run_dir} scores {key} {scores[key]}, its JSON "
                               f"{result[key]}: the folder holds another run's output")  # fmt: skip
    result.update({key: scores[key] for key in LENGTHS})
    result["rescored"] = {"commit": harness.describe_commit(),
                          "at": time.strftime("%Y-%m-%d %H:%M")}  # fmt: skip
    harness.write_json(path, result)
    return result


def _values(results: dict, key: str) -> str:
    """The distinct values of ``key`` over ``results``, joined with ' or '."""
    return " or ".join(f"{v:g}" for v in sorted({r[key] for r in results.values()}))


def _shown(path: str) -> str:
    """``path`` relative to the repository when it lies inside it."""
    rel = os.path.relpath(path, harness.REPO)
    return path if rel.startswith("..") else rel


TITLE = "make demo's choices at equal time on two corpora"


def render(path: str = PAGE, root: str = RESULTS, title: str = TITLE, runs=MAIN_RUNS) -> None:
    """The page, from the JSON files under ``root`` alone; ``runs``: those it says are
    not run yet where a seed lacks them."""
    by_corpus = {c: harness.load_results(results_dir(c, root)) for c in CORPORA}
    every = {(c, *k): r for c, results in by_corpus.items() for k, r in results.items()}
    budget = (
        f"{_values(every, 'minutes')} minutes of training, {_values(every, 'threads')} thread(s)"
        f" a run, {_values(every, 'jobs_at_once')} run(s) at once"
        if every
        else "each JSON has its minutes, threads and runs at once"
    )
    paragraph = (
        f"Rendered by `python -m experiments.corpus_budget` from `{_shown(root)}/CORPUS/*.json`. "
        "Each run trains the demo's sizes and optimisation (1 x 256, Adam 0.003 with betas "
        "(0.9, 0.98), gradient norm 1, 2,000-token batches, label smoothing 0.1) for the same "
        f"wall time ({budget}), validating at every epoch end; its best checkpoint by valid loss "
        "(label-smoothed) decodes the corpus's test split with beam 5, scored on the "
        "detokenised text with sacreBLEU and chrF2 (signatures below each table). `best valid "
        "ppl` is the lowest perplexity of any validation, which can be another one than the "
        "checkpoint decoded (the JSON's `best_checkpoint` names that one where it was recorded, "
        "from commit 4e33ba0 on). Cells are `mean (seed 1 / seed 2)`, "
        "or one seed's value with its seed. How each corpus is built and its lengths: its "
        "recipe's README."
    )
    lines = [f"# {title}", "", textwrap.fill(paragraph, 92)]
    for corpus, (recipe, data, src, tgt) in CORPORA.items():
        results = by_corpus[corpus]
        if not results:
            continue
        lines += [
            "",
            f"## `{corpus}` (`{recipe}`)",
            "",
            f"Sitting: {harness.sittings(results)}. Corpus: `{data}` ({src}->{tgt}). "
            f"Data: `{_shown(results_dir(corpus, root))}/`.",
            "",
            "| run | what | updates | best valid ppl | sacreBLEU | chrF2 |",
            "|---|---|---|---|---|---|",
        ]
        for name, (what, _) in RUNS.items():
            mine = {s: r for (n, s), r in results.items() if n == name}
            if mine:
                cells = [cell({s: r[key] for s, r in mine.items()}, d) for key, d in COLUMNS]
                lines.append(f"| `{name}` | {what} | " + " | ".join(cells) + " |")
        bleu_sigs, chrf_sigs = (
            " / ".join(f"`{s}`" for s in sorted({r[key] for r in results.values()}))
            for key in ("bleu_signature", "chrf_signature")
        )
        lines += ["", f"Signatures: {bleu_sigs} (BLEU), {chrf_sigs} (chrF2)."]
        seeds = sorted({1, 2} | {s for _, s in results})
        todo = [f"`{n}` seed {s}" for s in seeds for n in runs if (n, s) not in results]
        if todo:
            lines += ["", "Not run yet: " + ", ".join(todo) + "."]
    notes = os.path.join(root, NOTES)
    if os.path.exists(notes):  # what the JSON files cannot record: what ran beside them
        with open(notes, encoding="utf-8") as f:
            lines += [
                "",
                "## Notes on the runs",
                "",
                f"From `{_shown(notes)}`:",
                "",
                f.read().strip(),
            ]
    with _render_lock:
        with open(path, "w") as f:
            f.write("\n".join(lines) + "\n")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    # fmt: off
    p.add_argument("--corpora", nargs="+", default=list(CORPORA), choices=list(CORPORA),
                   metavar="CORPUS",
                   help=f"corpora, in this order per seed, of: {', '.join(CORPORA)}")
    p.add_argument("--runs", nargs="+", default=MAIN_RUNS, choices=list(RUNS), metavar="NAME",
                   help=f"runs, in this order per corpus (default: {' '.join(MAIN_RUNS)}), of: "
                        f"{', '.join(RUNS)}")
    p.add_argument("--seeds", nargs="+", type=int, default=[1, 2])
    p.add_argument("--minutes", type=float, default=7, help="minutes of training a run")
    p.add_argument("--jobs", type=int, default=2, help="runs trained at once")
    p.add_argument("--threads", type=int, default=1, help="threads per run")
    p.add_argument("--python", default=harness.PYTHON)
    p.add_argument("--results", default=RESULTS, help="folder of the JSON results")
    p.add_argument("--out", default=PAGE)
    p.add_argument("--title", default=TITLE, help="the page's title")
    p.add_argument("--render-only", action="store_true")
    p.add_argument("--rescore", action="store_true",
                   help="train nothing: score the finished runs' test output again and add "
                        "BLEU's length ratio, brevity penalty and precisions to their JSON")
    # fmt: on
    args = p.parse_args(argv)
    if args.rescore and args.render_only:
        p.error("--rescore and --render-only: give one of them")
    if not args.minutes > 0:  # also refuses nan
        p.error(f"--minutes must be > 0, got {args.minutes}")
    harness.at_least_one(p, args, ("jobs", "threads", "seeds"))
    for option in ("corpora", "runs", "seeds"):
        harness.each_once(p, f"--{option}", getattr(args, option))
    args.results = os.path.abspath(args.results)
    if not args.render_only:  # --rescore reads the test references too
        for corpus in args.corpora:
            recipe, data, _, tgt = CORPORA[corpus]
            test = os.path.join("raw", f"test.{tgt}")
            for needed in (test,) if args.rescore else ("bin", test):
                if not os.path.exists(os.path.join(harness.REPO, data, needed)):
                    p.error(f"--corpora {corpus}: no {data}/{needed}: prepare the corpus "
                            f"first with {recipe}")  # fmt: skip
    return args


def main(argv=None):
    args = parse_args(argv)
    if args.rescore:
        for corpus, name, seed in _every_run(args):
            r = rescore(corpus, name, seed, args)
            if r is not None:
                print(
                    f"{corpus} {name} seed {seed}: sacreBLEU {r['bleu']}, length ratio "
                    f"{r['length_ratio']}, brevity penalty {r['brevity_penalty']}",
                    flush=True,
                )
        return  # no cell of a page changes: nothing to render
    if not args.render_only:
        todo = [r for r in _every_run(args) if not done(*r, args.minutes, args.results)]
        print(f"{len(todo)} runs to train, {args.minutes:g} minutes each, {args.jobs} at once, "
              f"{args.threads} thread(s) each", flush=True)  # fmt: skip

        def one(numbered):
            i, (corpus, name, seed) = numbered
            print(f"[{i}/{len(todo)}] {corpus} {name} seed {seed}: starts "
                  f"({time.strftime('%H:%M')})", flush=True)  # fmt: skip
            r = train(corpus, name, seed, args)
            render(args.out, args.results, args.title, args.runs)
            print(f"[{i}/{len(todo)}] {corpus} {name} seed {seed}: {r['updates']} updates, best "
                  f"valid ppl {r['best_valid_ppl']}, sacreBLEU {r['bleu']}, chrF2 {r['chrf']} "
                  f"({time.strftime('%H:%M')})", flush=True)  # fmt: skip

        harness.run_all(one, list(enumerate(todo, 1)), args.jobs)
    render(args.out, args.results, args.title, args.runs)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
