"""The papers' ladders at CPU scale on the Spanish->English Bible at word level.

    python -m experiments.ladder [--rows NAME ...] [--seeds 1 2] [--render-only]

Trains every row of Luong et al. (2015) Table 1 and Table 4, Bahdanau et al. (2015)
RNNencdec and RNNsearch, and fairseq's own ``lstm`` with one budget (``--updates``
updates of ``--max-tokens`` tokens, 1 layer of ``--dim`` units, Adam), two seeds each,
on the word-level data of ``luong_plugin/corpora/bible_words.py`` (prepared here from
``prepare.sh``'s raw verses when missing); decodes the test set with beam 5, the Table 4
rows again with unk replacement (copying the aligned source word, and with a dictionary
``luong-unk-dict`` learns from the training data), and the attentional Luong models of
each seed together as Table 1's ensemble. Every finished row x seed writes
``docs/experiments/ladder/ROW.seedK.json`` (``ladder_train.py``); a row x seed whose
JSON has the current options is skipped, an interrupted one resumes from its last
checkpoint, and ``docs/RESULTS.md`` with ``docs/img/ladder.png`` is rendered from the
JSON files after every row (``ladder_render.py``).
"""

import argparse
import logging
import os
import sys
import threading
import time
import warnings
from concurrent.futures import ThreadPoolExecutor, as_completed

from experiments.harness import REPO
from experiments.ladder_render import render
from experiments.ladder_rows import ENSEMBLE, MEMBERS, NAMES
from experiments.ladder_train import (
    Runner,
    ensemble_options,
    is_done,
    options,
    read_json,
    resolve_precision,
    write_json,
)
from luong_plugin.corpora import bible_words

UNK_RATE_KS = (4000, 5000, 6000, 8000, 10000, 20000)
DEFAULT_SEEDS = (1, 2)


def batches_per_epoch(data: str, max_tokens: int) -> int:
    """Training batches of one epoch, as fairseq-train builds them (its "/ N")."""
    from fairseq import options as fairseq_options
    from fairseq import tasks
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    argv = [os.path.join(data, "bin"), "--task", "translation", "-s", "es", "-t", "en",
            "--arch", "lstm", "--max-tokens", str(max_tokens)]  # fmt: skip
    with warnings.catch_warnings():  # hydra's deprecation notices
        warnings.simplefilter("ignore")
        logging.disable(logging.INFO)
        try:
            parser = fairseq_options.get_training_parser()
            args = fairseq_options.parse_args_and_arch(parser, argv)
            task = tasks.setup_task(convert_namespace_to_omegaconf(args).task)
            task.load_dataset("train")
            batches = task.get_batch_iterator(
                dataset=task.dataset("train"), max_tokens=max_tokens,
                max_positions=(1024, 1024), ignore_invalid_inputs=True,
                required_batch_size_multiple=8, seed=1, epoch=1,
            )  # fmt: skip
        finally:
            logging.disable(logging.NOTSET)
    return len(batches)


def prepare_data(args) -> dict:
    """The word-level data (rebuilt only when stale) and ``RESULTS/data.json``: its
    statistics, the test <unk> rates for several K, batches per epoch."""
    stats = bible_words.prepare(args.raw_dir, args.data, args.vocab, workers=args.jobs)
    path = os.path.join(args.results, "data.json")
    keep = ("vocab", "max_len", "train_pairs", "train_kept", "valid_pairs", "test_pairs",
            "train_unk_rate_es", "train_unk_rate_en", "test_unk_rate")  # fmt: skip
    summary = {k: stats[k] for k in keep}
    data = read_json(path) or {}
    if data.get("prepare") != summary:
        ks = sorted(set(UNK_RATE_KS) | {args.vocab})
        data = {"prepare": summary, "unk_rates": bible_words.unk_rates(args.raw_dir, ks)}
    data["copyable_unks"] = bible_words.copyable_unks(args.data)
    per_epoch = data.setdefault("batches_per_epoch", {})
    if str(args.max_tokens) not in per_epoch:
        per_epoch[str(args.max_tokens)] = batches_per_epoch(args.data, args.max_tokens)
    write_json(path, data)
    return stats


def hms(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m{seconds % 60:02d}s"


class Progress:
    """Prints "row i of N", the time spent and an estimate of the time left: from this
    run's pace once a row x seed finished, before that from the finished JSONs' seconds."""

    def __init__(self, total, jobs, prior_s):
        self.total, self.jobs, self.prior_s = total, jobs, prior_s
        self.start, self.started, self.finished = time.time(), 0, 0
        self.lock = threading.Lock()

    def begin(self, what):
        with self.lock:
            self.started += 1
            spent = time.time() - self.start
            left = self.total - self.finished
            if self.finished:
                estimate = f"about {hms(spent / self.finished * left)} left"
            elif self.prior_s:
                estimate = f"about {hms(self.prior_s * left / self.jobs)} left (earlier rows)"
            else:
                estimate = "time left: estimated once a row has finished"
            print(f"row {self.started} of {self.total}: {what} | {hms(spent)} spent, "
                  f"{estimate}", flush=True)  # fmt: skip

    def end(self):
        with self.lock:
            self.finished += 1


def prior_seconds(results_dir, updates):
    """Mean seconds of a finished row x seed (training scaled to ``updates``, the
    dictionary, decoding), from the JSON files."""
    seconds = []
    if os.path.isdir(results_dir):
        for fname in os.listdir(results_dir):
            r = read_json(os.path.join(results_dir, fname)) if ".seed" in fname else None
            if r and r.get("updates"):
                decode = sum(s.get("decode_s", 0) for s in r["scores"].values())
                train = r["train_wall_s"] / r["updates"] * updates
                seconds.append(train + r.get("unk_dict_s", 0) + decode)
    return sum(seconds) / len(seconds) if seconds else None


def plan(args):
    """-> ([(row, seed) to train], [seeds whose ensemble is to decode]), in order: a row x
    seed whose JSON has the current options is done; an ensemble is redone when it is
    not done or one of its members is trained again."""
    train = [(n, s) for n in args.rows if n != ENSEMBLE for s in args.seeds
             if not is_done(args.results, n, s, options(n, args))]  # fmt: skip
    ensembles = []
    for seed in args.seeds if ENSEMBLE in args.rows else []:
        opts = ensemble_options(seed, args.results, args)
        retrained = any((m, seed) in train for m in MEMBERS)
        if retrained or opts is None or not is_done(args.results, ENSEMBLE, seed, opts):
            ensembles.append(seed)
    return train, ensembles


def run_ladder(args):
    train, ensembles = plan(args)
    print(f"{len(train)} row x seed runs to train, {len(ensembles)} ensemble(s) to decode; "
          f"{args.jobs} at once, {args.threads} thread(s) each, ours in {args.precision}",
          flush=True)  # fmt: skip
    runner = Runner(args, prepare_data(args))
    progress = Progress(len(train) + len(ensembles), args.jobs,
                        prior_seconds(args.results, args.updates))  # fmt: skip
    lock, failures = threading.Lock(), []

    def one(name, seed):
        progress.begin(f"{name} seed {seed}")
        try:
            r = runner.row(name, seed, options(name, args))
            s = r["scores"]["plain"]
            print(f"  done {name} seed {seed}: ppl {r['best_valid_ppl']}, BLEU (tok.) "
                  f"{s['tokenized_bleu']}, sacreBLEU {s['sacrebleu']}", flush=True)  # fmt: skip
        except RuntimeError as error:
            failures.append(f"{name} seed {seed}: {error}")
            print(f"  FAILED {name} seed {seed}: {str(error)[-2000:]}", flush=True)
        finally:
            progress.end()
            with lock:
                do_render(args)

    with ThreadPoolExecutor(args.jobs) as pool:
        for future in as_completed([pool.submit(one, n, s) for n, s in train]):
            future.result()
    for seed in ensembles:
        opts = ensemble_options(seed, args.results, args)
        progress.begin(f"ensemble seed {seed}" + ("" if opts else ": members missing, skipped"))
        try:
            if opts:
                r = runner.ensemble(seed, opts)["scores"]
                print(f"  done ensemble seed {seed}: BLEU (tok.) {r['plain']['tokenized_bleu']}"
                      f", {r['unk_copy']['tokenized_bleu']} with unk copy", flush=True)  # fmt: skip
        except RuntimeError as error:
            failures.append(f"ensemble seed {seed}: {error}")
        finally:
            progress.end()
        do_render(args)
    print(f"{hms(time.time() - progress.start)} in all", flush=True)
    return failures


def do_render(args):
    """The page lists the whole ladder: two seeds of every row, and any other seed run."""
    seeds = sorted(set(DEFAULT_SEEDS) | set(args.seeds))
    r, todo, other = render(args, args.results, args.out, args.plot, seeds)
    print(f"wrote {args.out}: {len(r)} row x seed results, {len(todo) + len(other)} to run",
          flush=True)  # fmt: skip


def positive(text):
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text}: expected an integer of 1 or more")
    return value


def parse_args(argv=None):
    # fmt: off
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", nargs="+", choices=NAMES, default=NAMES, metavar="NAME",
                   help=f"rows to run (default: all): {', '.join(NAMES)}")
    p.add_argument("--seeds", nargs="+", type=positive, default=list(DEFAULT_SEEDS))
    p.add_argument("--render-only", action="store_true",
                   help="rewrite --out and --plot from the JSON files; train nothing")
    p.add_argument("--prepare-only", action="store_true",
                   help="prepare the word-level data and RESULTS/data.json, then render")
    g = p.add_argument_group("budget (the same for every row; part of each row's options)")
    g.add_argument("--updates", type=positive, default=1500)
    g.add_argument("--max-tokens", type=positive, default=2000)
    g.add_argument("--dim", type=positive, default=256, help="units per layer, embeddings")
    g.add_argument("--lr", type=float, default=0.003, help="Adam's learning rate")
    g.add_argument("--vocab", type=positive, default=bible_words.VOCAB,
                   help="K: words per language")
    g.add_argument("--validate-every", type=positive, default=250, help="updates")
    g.add_argument("--precision", choices=["auto", "bf16", "fp32"], default="auto",
                   help="our models' (fairseq's lstm: fp32); auto: bf16 where native")
    g = p.add_argument_group("where and how")
    g.add_argument("--raw-dir", default=os.path.join(REPO, "data", "bible_es_en", "raw"),
                   help="prepare.sh's raw verses")
    g.add_argument("--data", default=os.path.join(REPO, "data", "bible_es_en", "words"),
                   help="the word-level data (prepared here when missing)")
    g.add_argument("--runs", default=os.path.join(REPO, "runs", "ladder"),
                   help="checkpoints and logs")
    g.add_argument("--results", default=os.path.join(REPO, "docs", "experiments", "ladder"),
                   help="one JSON per row x seed")
    g.add_argument("--out", default=os.path.join(REPO, "docs", "RESULTS.md"))
    g.add_argument("--plot", default=os.path.join(REPO, "docs", "img", "ladder.png"))
    g.add_argument("--jobs", type=positive, default=os.cpu_count() or 1,
                   help="rows trained at once (default: one per core)")
    g.add_argument("--threads", type=positive, default=1, help="threads per job")
    # fmt: on
    args = p.parse_args(argv)
    if args.dim < 2:
        p.error(f"--dim {args.dim}: expected 2 or more (Bahdanau's maxout has --dim / 2 units)")
    if args.lr <= 0:
        p.error(f"--lr {args.lr}: expected a positive learning rate")
    if len(set(args.seeds)) != len(args.seeds):
        p.error(f"--seeds {' '.join(map(str, args.seeds))}: each seed once")
    args.rows = [n for n in NAMES if n in args.rows]  # the ladder's order
    if args.render_only and args.precision == "auto":
        args.precision = "bf16"  # render ignores precision; no need to probe the machine
    args.precision = resolve_precision(args.precision)
    return args


def main(argv=None):
    args = parse_args(argv)
    if args.render_only or args.prepare_only:
        if args.prepare_only:
            prepare_data(args)
        do_render(args)
        return
    failures = run_ladder(args)
    if failures:
        sys.exit("failed:\n" + "\n".join(failures))


if __name__ == "__main__":
    main()
