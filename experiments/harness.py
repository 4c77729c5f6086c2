"""What every study in experiments/ shares.

Each study is a module run from the repository root as ``python -m experiments.NAME``.
It writes one JSON file per run under ``docs/experiments/NAME/``, beside the pages
rendered from them, the moment the run finishes; a run whose JSON exists is skipped,
so an interrupted study resumes where it stopped. This module holds what they all
need: where things are, which commit and machine a run measured, the valid perplexity
of a fairseq-train log, result files written whole, and a run in a fresh process.
Nothing in ``luong_plugin`` imports it.
"""

import json
import os
import platform
import re
import subprocess
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from decimal import ROUND_HALF_UP, Decimal

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(REPO, "data", "bible_es_en")  # make demo's corpus (recipes/bible_es_en)
PYTHON = os.path.join(REPO, ".venv", "bin", "python")
WITH_TCMALLOC = os.path.join(REPO, "recipes", "with_tcmalloc")
USER_DIR = os.path.join(REPO, "luong_plugin")

VALID = re.compile(r"\| valid on 'valid' subset \|.*?\| ppl ([\d.]+) \|.*?\| num_updates (\d+)")
WALL = re.compile(r"\bwall[= ](\d+)")


def decimal_text(value, decimals: int = 2) -> str:
    """``value`` (a float as its JSON has it, or a Decimal) to ``decimals`` places, ties
    away from zero, from its shortest decimal form: 31.165 prints 31.17, where format()
    rounds the binary float nearest it (31.16499...) down."""
    exact = value if isinstance(value, Decimal) else Decimal(str(value))
    return str(exact.quantize(Decimal(1).scaleb(-decimals), rounding=ROUND_HALF_UP))


def exact_mean(values) -> Decimal:
    """The mean of ``values`` (floats as their JSON has them) in decimal, exact for two or
    four seeds."""
    exact = [Decimal(str(v)) for v in values]
    return sum(exact) / len(exact)


def seed_cell(values: dict, decimals: int = 2, empty: str = "") -> str:
    """A table cell of one run's seeds, {seed: value}: ``mean (seed 1 / seed 2 / …)``, the
    mean exact in decimal from the values as written and rounded as ``decimal_text``; one
    seed's ``value (seed K)``; ``empty`` for none."""
    if not values:
        return empty
    if len(values) == 1:
        ((seed, value),) = values.items()
        return f"{decimal_text(value, decimals)} (seed {seed})"
    each = " / ".join(decimal_text(v, decimals) for _, v in sorted(values.items()))
    return f"{decimal_text(exact_mean(values.values()), decimals)} ({each})"


def results_dir(study: str) -> str:
    return os.path.join(REPO, "docs", "experiments", study)


def result_path(directory: str, name: str, seed: int) -> str:
    return os.path.join(directory, f"{name}.seed{seed}.json")


def describe_commit(paths=("luong_plugin", "recipes", "experiments")) -> str:
    """The commit a run trains, ``+dirty`` when ``paths`` have uncommitted changes."""
    git = ["git", "-C", REPO]
    head = subprocess.run(git + ["rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    dirty = subprocess.run(git + ["status", "--porcelain", *paths], capture_output=True, text=True)
    return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


def machine() -> str:
    """The CPU a run measured, and its core count: a sitting names its machine."""
    name = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    name = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"{name}, {os.cpu_count()} cores"


def sittings(results: dict) -> str:
    """The sittings of a study's results, each once: 'date, commit C, machine; ...'."""
    return "; ".join(sorted({f"{r['started'][:10]}, commit {r['commit']}, {r['machine']}"
                             for r in results.values()}))  # fmt: skip


def valid_ppl(text: str) -> dict:
    """{updates: valid perplexity} of a fairseq-train log."""
    return {int(u): float(p) for p, u in VALID.findall(text)}


def parse_log(text: str):
    """{updates: valid ppl} and the last training wall seconds of a fairseq-train log."""
    walls = [int(m.group(1)) for m in WALL.finditer(text)]
    return valid_ppl(text), (walls[-1] if walls else None)


def at_least_one(parser, args, names) -> None:
    """A parse-time error naming the first of ``names`` (argparse dests: a count, or a
    list of them such as seeds) that holds a value below 1."""
    for name in names:
        value = getattr(args, name)
        values = value if isinstance(value, list) else [value]
        if min(values) < 1:
            option = "--" + name.replace("_", "-")
            parser.error(f"{option} must be >= 1, got {' '.join(map(str, values))}")


def each_once(parser, option: str, values) -> None:
    """A parse-time error when ``option`` names a value twice: the same run twice would
    train twice at once into one folder."""
    if len(set(values)) != len(values):
        parser.error(f"{option} {' '.join(map(str, values))}: each once")


def run_all(one, items, jobs: int) -> None:
    """``one(item)`` for every item, ``jobs`` at once. A failure, or ^C, starts no further
    item; the running ones finish, then the first failure is raised."""
    pool = ThreadPoolExecutor(jobs)
    futures = []
    try:
        futures = [pool.submit(one, item) for item in items]
        wait(futures, return_when=FIRST_EXCEPTION)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    for future in futures:
        if not future.cancelled():
            future.result()


def read_json(path: str):
    """A result file, or None where the run has not finished."""
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def write_json(path: str, value) -> None:
    """Write a result whole: to a temporary file, then moved into place."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        json.dump(value, f, indent=1, ensure_ascii=False)
        f.write("\n")
    os.replace(path + ".tmp", path)


def load_results(directory: str) -> dict:
    """{(name, seed): result} of every JSON file in ``directory``."""
    results = {}
    if os.path.isdir(directory):
        for fname in sorted(os.listdir(directory)):
            if fname.endswith(".json"):
                r = read_json(os.path.join(directory, fname))
                results[(r["name"], r["seed"])] = r
    return results


def run_worker(module: str, variant: str, argv, python: str = PYTHON, threads: int = 1) -> str:
    """``python -m experiments.MODULE --worker VARIANT -- ARGV`` in a fresh process on
    ``threads`` threads (a study that patches the plugin before fairseq-train runs);
    returns its log, raises when it fails."""
    env = dict(
        os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads), PYTHONPATH=REPO
    )
    run = subprocess.run(
        [WITH_TCMALLOC, python, "-m", f"experiments.{module}", "--worker", variant, "--",
         *map(str, argv)],
        capture_output=True, text=True, env=env, cwd=REPO,
    )  # fmt: skip
    log = run.stdout + run.stderr
    if run.returncode != 0:
        raise RuntimeError(f"{module} {variant} failed (exit {run.returncode}):\n{log[-3000:]}")
    return log


COMPARE_PAGE = os.path.join(REPO, "docs", "COMPARE.md")


def render_compare_page(python: str = PYTHON, out: str = COMPARE_PAGE) -> None:
    """docs/COMPARE.md from every study it shows (``python -m experiments.compare_page``),
    in a fresh process so that no study imports the page that imports it."""
    subprocess.run(
        [python, "-m", "experiments.compare_page", "--out", out],
        check=True, cwd=REPO, env=dict(os.environ, PYTHONPATH=REPO),
    )  # fmt: skip
