"""The GPU benchmark: fairseq's `lstm` and ours at the paper's shape, each precision flag.

    python bench/gpu.py --out DIR               # on one GPU (--models, --precisions: a subset)
    python bench/gpu.py --out DIR --dry-run     # the same plumbing on a CPU, tiny models

Trains, through fairseq-train as a user runs it, at Luong et al.'s shape (4 x 1000 LSTMs,
1000-dim embeddings, 50K words a side; RNNsearch at Bahdanau et al.'s 1000 / 620) on
synthetic text (Zipf-distributed words, 10-50 a sentence, batches of 128 sentences):

- fairseq's ``lstm_luong_wmt_en_de`` in fp32, ``--fp16`` and ``--amp``;
- ours: global (general), local-p (general, the paper's best) and RNNsearch, each in fp32,
  ``--fp16``, ``--amp`` and ``--precision bf16``;
- ours with ``--cuda-graphs`` (models ``global+graphs``, ``local-p+graphs``): trained only,
  ``--graph-updates`` updates timed after ``--graph-warmup``, so that every bucket's graph
  is captured before the timing (results.json says how many were, and whether any was
  captured later);
- ``tf32``: fp32 with cuBLAS's products in TF32 (torch's ``TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1``
  set for the run, no option of fairseq's), for fairseq's lstm and ours alike; trained only.

Each run trains ``--updates`` updates with Adam; the target tokens per second of the
updates after ``--warmup`` are timed in the trainer's own step (forward, backward and
optimizer step, synchronised with the GPU at its end), with the peak GPU memory. The runs
go one after the other, precision by precision (fp32 first, then ``--precisions``' order):
each precision's training runs, model by model, ``--rounds`` times in alternating order (the
median counts), then beam-10 decoding (fairseq-generate) of each of those models in that
precision from a checkpoint of its fp32 run, with every hypothesis forced to
``--decode-len`` tokens (``--min-len`` = ``--max-len-b``, ``--max-len-a 0``): an untrained
model's lengths must not decide the figure. ``--deadline-s`` starts no run after it. Writes
``results.json`` after every run and ``summary.md`` at the end (device, driver, torch, CUDA,
cuDNN; the tables; the targets the project sets for a GPU) under ``--out``, and the logs of
failed runs.

On a machine without a package registry, carry the wheels bench/gpu_wheels.sh makes and
run bench/gpu_run.sh there. The report and the targets: gpu_report.py.
"""

import argparse
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)

from gpu_report import GRAPHS, summary  # noqa: E402

USER_DIR = os.path.join(REPO, "luong_plugin")
MARK = "GPU_BENCH "  # the worker's result line

LUONG_GLOBAL = ["--arch", "luong_global_general_wmt_en_de"]
LUONG_LOCAL_P = ["--arch", "luong_wmt_en_de"]  # local-p (general): the paper's best
RNNSEARCH = ["--arch", "bahdanau_rnnsearch_wmt_en_fr"]
LSTM = ["--arch", "lstm_luong_wmt_en_de"]
PRECISIONS = {
    "fp32": [],
    "tf32": [],  # fp32 with cuBLAS's products in TF32: TF32_ENV set for the run
    "fp16": ["--fp16"],
    "amp": ["--amp"],
    "bf16": ["--precision", "bf16"],  # ours only: fairseq's --bf16 needs a TPU
}
TF32_ENV = {"TORCH_ALLOW_TF32_CUBLAS_OVERRIDE": "1"}  # torch's switch, no code change
GRAPH_KEYS = ("graphs", "eager")  # --cuda-graphs runs' counts, in the worker's result
OURS = ("fp32", "tf32", "fp16", "amp", "bf16")
MODELS = {  # name: (arch options, precisions it is trained in, ours)
    "lstm": (LSTM, ("fp32", "tf32", "fp16", "amp"), False),
    "global": (LUONG_GLOBAL, OURS, True),
    "local-p": (LUONG_LOCAL_P, OURS, True),
    "rnnsearch": (RNNSEARCH, OURS, True),
    "global" + GRAPHS: (LUONG_GLOBAL + ["--cuda-graphs"], OURS, True),
    "local-p" + GRAPHS: (LUONG_LOCAL_P + ["--cuda-graphs"], OURS, True),
}
# tiny sizes for --dry-run (the archs keep the papers' sizes otherwise)
DRY_SIZES = {
    "lstm": ["--encoder-embed-dim", "16", "--encoder-hidden-size", "16", "--encoder-layers", "1",
             "--decoder-embed-dim", "16", "--decoder-hidden-size", "16", "--decoder-layers", "1",
             "--decoder-out-embed-dim", "16"],
    "rnnsearch": ["--encoder-embed-dim", "16", "--encoder-hidden-size", "16",
                  "--decoder-embed-dim", "16", "--decoder-hidden-size", "16",
                  "--attention-dim", "16", "--maxout-dim", "8"],
}  # fmt: skip
for _name in ("global", "local-p", "global" + GRAPHS, "local-p" + GRAPHS):
    DRY_SIZES[_name] = DRY_SIZES["lstm"]


# -- data -----------------------------------------------------------------------------------
def zipf_corpus(path, n, vocab, lengths, seed):
    """``n`` lines of words w0 .. w{vocab-1}, Zipf-distributed (p(w_k) ~ 1/(k+1)), of
    ``lengths`` (lo, hi) words; the source and target are drawn independently."""
    import numpy as np

    rng = np.random.default_rng(seed)
    p = 1.0 / np.arange(1, vocab + 1)
    p /= p.sum()
    with open(path, "w") as f:
        for _ in range(n):
            words = rng.choice(vocab, size=int(rng.integers(lengths[0], lengths[1] + 1)), p=p)
            f.write(" ".join(f"w{k}" for k in words) + "\n")


def make_data(out, vocab, n_train, n_test, python, workers):
    """Raw text, full 50K-word dictionaries, and fairseq-preprocess's binary data, made
    again unless an earlier run made them with the same sizes."""
    raw, bin_dir = os.path.join(out, "raw"), os.path.join(out, "bin")
    stamp, params = os.path.join(out, "params.json"), [vocab, n_train, n_test]
    if os.path.exists(stamp):
        with open(stamp) as f:
            if json.load(f) == params:
                return bin_dir
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(raw)
    for s, (split, n) in enumerate((("train", n_train), ("valid", n_test), ("test", n_test))):
        for k, lang in enumerate(("src", "tgt")):
            zipf_corpus(os.path.join(raw, f"{split}.{lang}"), n, vocab, (10, 50), 10 * s + k)
    for lang in ("src", "tgt"):  # every word in the dictionary: V is the paper's 50K
        with open(os.path.join(raw, f"dict.{lang}.txt"), "w") as f:
            f.writelines(f"w{k} {vocab - k}\n" for k in range(vocab))
    cmd = [python, "-m", "fairseq_cli.preprocess", "--source-lang", "src", "--target-lang", "tgt",
           "--trainpref", f"{raw}/train", "--validpref", f"{raw}/valid", "--testpref", f"{raw}/test",
           "--srcdict", f"{raw}/dict.src.txt", "--tgtdict", f"{raw}/dict.tgt.txt",
           "--destdir", bin_dir, "--workers", str(workers)]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
    if proc.returncode != 0:
        sys.exit(f"error: fairseq-preprocess failed:\n{(proc.stdout + proc.stderr)[-3000:]}")
    with open(stamp, "w") as f:
        json.dump(params, f)
    return bin_dir


# -- the worker: fairseq-train in this process, its steps timed -------------------------------
def train_worker(argv, warmup):
    """fairseq-train with ``argv``; prints one MARK line: target tokens/s of the updates
    after ``warmup`` (the trainer's step, synchronised at its end), peak GPU memory."""
    import torch
    from fairseq.trainer import Trainer

    cuda = torch.cuda.is_available() and "--cpu" not in argv
    timed = {"tokens": 0, "seconds": 0.0, "steps": 0}
    original = Trainer.train_step

    def train_step(self, samples, *args, **kwargs):
        start = time.perf_counter()
        out = original(self, samples, *args, **kwargs)
        if cuda:
            torch.cuda.synchronize()
        if self.get_num_updates() > warmup:
            timed["tokens"] += sum(s.get("ntokens", 0) for s in samples if s)
            timed["seconds"] += time.perf_counter() - start
            timed["steps"] += 1
        graphs = getattr(getattr(self.model, "decoder", None), "graphs", None)
        if graphs is not None:  # --cuda-graphs: buckets captured, by the timing's start too
            timed["graphs"] = len(graphs.captured)
            timed["eager_batches"] = graphs.eager_batches
            if self.get_num_updates() <= warmup:
                timed["graphs_before_timing"] = len(graphs.captured)
        return out

    Trainer.train_step = train_step
    # fairseq's trainer resets the peak-memory count after every update (to log gb_free), so
    # that max_memory_allocated at the end would be what a run holds between updates: kept
    torch.cuda.reset_peak_memory_stats = lambda *args, **kwargs: None
    from fairseq_cli.train import cli_main

    sys.argv = ["fairseq-train", *argv]
    cli_main()
    peak = torch.cuda.max_memory_allocated() / 2**30 if cuda else None
    rate = timed["tokens"] / timed["seconds"] if timed["seconds"] else None
    result = {"tokens_per_s": rate, "steps": timed["steps"], "peak_gib": peak}
    result.update({k: v for k, v in timed.items() if k.startswith(GRAPH_KEYS)})
    print(MARK + json.dumps(result))


def run_train(args, bin_dir, model, precision, save_dir=None):
    arch, _, _ = MODELS[model]
    flags = PRECISIONS[precision]
    updates, warmup = args.updates, args.warmup
    if model.endswith(GRAPHS):  # timed once every bucket's graph is captured
        updates, warmup, save_dir = args.graph_updates, args.graph_warmup, None
    if args.dry_run and precision == "fp16":  # fairseq's --fp16 optimizer needs CUDA
        flags = ["--memory-efficient-fp16"]
    argv = [
        bin_dir, "--user-dir", USER_DIR, *arch, *(DRY_SIZES[model] if args.dry_run else []),
        *flags, "--optimizer", "adam", "--lr", "0.001", "--clip-norm", "5",
        "--batch-size", str(args.batch), "--max-tokens", str(args.batch * 60),
        "--required-batch-size-multiple", "1", "--max-update", str(updates),
        "--max-epoch", "0", "--disable-validation", "--seed", "1", "--num-workers", "0",
        "--log-format", "simple", "--log-interval", "10", "--no-progress-bar",
        *(["--save-dir", save_dir, "--no-epoch-checkpoints", "--no-save-optimizer-state"]
          if save_dir else ["--no-save"]),
        *(["--cpu"] if args.dry_run else []),
    ]  # fmt: skip
    cmd = [args.python, os.path.abspath(__file__), "--worker", str(warmup), "--", *argv]
    start = time.time()
    proc = run_worker(args, cmd, TF32_ENV if precision == "tf32" else {})
    log = proc.stdout + proc.stderr
    found = [line for line in proc.stdout.splitlines() if line.startswith(MARK)]
    if proc.returncode != 0 or not found:
        return {"error": failure(log), "log": log, "wall_s": round(time.time() - start, 1)}
    result = json.loads(found[-1][len(MARK) :])
    result["wall_s"] = round(time.time() - start, 1)
    return result


def decode_flags(model, precision):
    """fairseq-generate's precision options, or None: --amp is training only, fairseq's
    lstm has no bf16, --cuda-graphs graphs training only, and TF32 is timed in training."""
    if precision in ("amp", "tf32") or model.endswith(GRAPHS):
        return None
    if precision == "bf16" and not MODELS[model][2]:
        return None
    return {"fp32": [], "fp16": ["--fp16"],
            "bf16": ["--model-overrides", "{'precision': 'bf16'}"]}[precision]  # fmt: skip


def run_decode(args, bin_dir, model, precision, checkpoint):
    flags = decode_flags(model, precision)
    n = args.decode_len
    cmd = [
        args.python, "-m", "fairseq_cli.generate", bin_dir, "--user-dir", USER_DIR,
        "--path", checkpoint, "--gen-subset", "test", "--beam", "10",
        "--batch-size", str(args.decode_batch), "--required-batch-size-multiple", "1",
        "--min-len", str(n), "--max-len-a", "0", "--max-len-b", str(n), *flags,
        *(["--cpu"] if args.dry_run else []),
    ]  # fmt: skip
    proc = run_worker(args, cmd)
    log = proc.stdout + proc.stderr
    speed = re.search(r"Translated ([\d,]+) sentences .*?\(([\d.]+) sentences/s", log)
    if proc.returncode != 0 or not speed:
        return {"error": failure(log), "log": log}
    lengths = [len(line.split("\t")[2].split()) for line in proc.stdout.splitlines()
               if line.startswith("H-")]  # fmt: skip
    return {
        "sentences": int(speed.group(1).replace(",", "")),
        "sentences_per_s": float(speed.group(2)),
        "equal_lengths": bool(lengths) and set(lengths) == {n},
    }


def run_worker(args, cmd, env=None) -> subprocess.CompletedProcess:
    """One fairseq-train or -generate process (``env``: more environment variables),
    stopped after ``--run-timeout-s`` (a hung run must not take the rest of a short GPU
    loan): then exit code -9 and a last line that says so."""
    try:
        return subprocess.run(cmd, capture_output=True, text=True, cwd=REPO,
                              env=dict(worker_env(), **(env or {})),
                              timeout=args.run_timeout_s)  # fmt: skip
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        err = e.stderr.decode() if isinstance(e.stderr, bytes) else (e.stderr or "")
        err += f"\nerror: stopped after --run-timeout-s {args.run_timeout_s:g}\n"
        return subprocess.CompletedProcess(cmd, -9, out, err)


def worker_env():
    return dict(
        os.environ, PYTHONPATH=os.pathsep.join(filter(None, [REPO, os.environ.get("PYTHONPATH")]))
    )


def failure(log: str) -> str:
    """The last line of a traceback or an error message."""
    lines = [line for line in log.strip().splitlines() if line.strip()]
    for line in reversed(lines):
        if re.match(r"^(\w+(\.\w+)*(Error|Exception)|error:|AssertionError|RuntimeError)", line):
            return line.strip()[:300]
    return (lines[-1] if lines else "no output")[:300]


# -- the run ----------------------------------------------------------------------------------
def environment(python: str) -> dict:
    probe = (
        "import json, torch, platform; c = torch.cuda.is_available(); print(json.dumps({"
        "'device': torch.cuda.get_device_name(0) if c else platform.processor() or 'CPU', "
        "'torch': torch.__version__, 'cuda': torch.version.cuda, "
        "'cudnn': torch.backends.cudnn.version() if c else None, "
        "'bf16': bool(c and torch.cuda.is_bf16_supported())}))"
    )
    proc = subprocess.run([python, "-c", probe], capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"error: {python} cannot import torch:\n{proc.stderr[-3000:]}")
    env = json.loads(proc.stdout)
    smi = shutil.which("nvidia-smi")
    if smi:
        query = [smi, "--query-gpu=driver_version,memory.total", "--format=csv,noheader"]
        env["driver"] = subprocess.run(query, capture_output=True, text=True).stdout.strip()
    env["python"] = platform.python_version()
    env["host"] = platform.node()
    return env


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


SKIPPED = "skipped: past --deadline-s"
NO_CHECKPOINT = "skipped: no fp32 checkpoint"


def past_deadline(args) -> bool:
    return args.deadline_s is not None and time.time() - args.started > args.deadline_s


def run_all(args, bin_dir, runs_dir, record):
    """(train, decode): {model: {precision: the median over rounds, or a failure}} and
    {model: {precision: result}}. Precision by precision in ``--precisions``' order, but fp32
    first (the decodes start from its checkpoints): each precision's training runs (rounds in
    alternating order), then its decodes, so that the precisions before the one running at
    ``--deadline-s`` are whole. ``record(train, decode)`` after each run; past the deadline no
    run starts, and the ones left are recorded as skipped, as is the decode of a model whose
    fp32 run left no checkpoint (it failed or did not run)."""
    train, decode = {}, {}
    for precision in sorted(args.precisions, key=lambda p: p != "fp32"):  # as given, fp32 first
        jobs = [m for m, (_, precisions, _) in MODELS.items()
                if m in args.models and precision in precisions]  # fmt: skip
        for r in range(args.rounds):
            for model in jobs if r % 2 == 0 else list(reversed(jobs)):
                rounds = train.setdefault(model, {}).setdefault(precision, [])
                if past_deadline(args):
                    rounds.append({"error": SKIPPED})
                    continue
                save = os.path.join(runs_dir, model) if (r == 0 and precision == "fp32") else None
                result = run_train(args, bin_dir, model, precision, save)
                if "log" in result:
                    with open(os.path.join(args.out, "failed_train.log"), "a") as f:
                        f.write(
                            f"== {model} {precision} round {r + 1}\n{result.pop('log')[-4000:]}\n"
                        )
                rounds.append(result)
                shown = result.get("tokens_per_s") or result.get("error")
                print(f"[train] round {r + 1} {model} {precision}: {shown}", flush=True)
                record(collapse(train), decode)
        for model in jobs:
            checkpoint = os.path.join(runs_dir, model, "checkpoint_last.pt")
            if decode_flags(model, precision) is None:
                continue
            if past_deadline(args):
                result = {"error": SKIPPED}
            elif not os.path.exists(checkpoint):
                result = {"error": NO_CHECKPOINT}
            else:
                result = run_decode(args, bin_dir, model, precision, checkpoint)
            decode.setdefault(model, {})[precision] = result
            shown = result.get("sentences_per_s") or result.get("error")
            print(f"[decode] {model} {precision}: {shown}", flush=True)
            record(collapse(train), decode)
    return collapse(train), decode


def collapse(train: dict) -> dict:
    """The median over rounds of each model x precision, or its failure."""
    out = {}
    for model, table in train.items():
        for p, rounds in table.items():
            ok = [r for r in rounds if not r.get("error")]
            if not rounds:
                continue  # not run yet
            if ok:
                out.setdefault(model, {})[p] = {
                    "tokens_per_s": median([r["tokens_per_s"] for r in ok]),
                    "peak_gib": median([r.get("peak_gib") for r in ok]),
                    "rounds": [r["tokens_per_s"] for r in ok],
                    # --cuda-graphs: buckets captured, before the timed updates too, and
                    # batches past the limit (the last round's)
                    **{k: v for k, v in ok[-1].items() if k.startswith(GRAPH_KEYS)},
                    "wall_s": [r.get("wall_s") for r in ok],  # each round's process, seconds
                }
            else:
                out.setdefault(model, {})[p] = {"error": rounds[-1]["error"]}
    return out


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--worker"]:  # fairseq-train in this process: bench/gpu.py --worker W -- ARGS
        return train_worker(argv[3:], int(argv[1]))
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True, help="folder for results.json, summary.md, logs")
    p.add_argument("--work", default=None, help="data and checkpoints (default: OUT/../gpu_work)")
    p.add_argument("--dry-run", action="store_true", help="tiny models on the CPU")
    p.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    p.add_argument("--precisions", nargs="+", default=list(PRECISIONS), choices=list(PRECISIONS))
    p.add_argument("--updates", type=int, default=40)
    p.add_argument("--warmup", type=int, default=30, help="updates not timed")
    p.add_argument(
        "--graph-updates",
        type=int,
        default=80,
        help="updates of the --cuda-graphs runs (64 batches an epoch at the defaults)",
    )
    p.add_argument(
        "--graph-warmup",
        type=int,
        default=64,
        help="--cuda-graphs runs: updates not timed (each bucket's capture among them)",
    )
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--batch", type=int, default=128, help="sentences per batch")
    p.add_argument("--vocab", type=int, default=50000)
    p.add_argument("--train-sentences", type=int, default=8192)
    p.add_argument("--decode-sentences", type=int, default=256)
    p.add_argument("--decode-len", type=int, default=30)
    p.add_argument("--decode-batch", type=int, default=64)
    p.add_argument("--workers", type=int, default=8)
    p.add_argument("--python", default=sys.executable)
    p.add_argument(
        "--run-timeout-s",
        type=float,
        default=300,
        help="stop one training or decoding run after this many seconds",
    )
    p.add_argument(
        "--deadline-s",
        type=float,
        default=None,
        help="start no run after this many seconds (the rest are recorded as skipped)",
    )
    args = p.parse_args(argv)
    args.started = time.time()
    if args.dry_run:  # the same plumbing in seconds
        args.vocab, args.train_sentences, args.decode_sentences = 300, 256, 8
        args.batch, args.updates, args.warmup, args.decode_len = 16, 4, 2, 6
        args.graph_updates, args.graph_warmup = 5, 2
    if not 0 <= args.warmup < args.updates:
        p.error("--warmup must be >= 0 and below --updates")
    if not 0 <= args.graph_warmup < args.graph_updates:
        p.error("--graph-warmup must be >= 0 and below --graph-updates")
    start = time.time()
    os.makedirs(args.out, exist_ok=True)
    work = args.work or os.path.join(os.path.dirname(os.path.abspath(args.out)), "gpu_work")
    env = environment(args.python)
    print(f"[gpu] {env}", flush=True)
    bin_dir = make_data(os.path.join(work, "data"), args.vocab, args.train_sentences,
                        args.decode_sentences, args.python, args.workers)  # fmt: skip
    runs_dir = os.path.join(work, "runs")
    shutil.rmtree(runs_dir, ignore_errors=True)  # fairseq would resume an earlier checkpoint

    def save(train, decode):  # after every run: a run cut short keeps what it measured
        with open(os.path.join(args.out, "results.json"), "w") as f:
            json.dump({"environment": env, "train": train, "decode": decode,
                       "minutes": (time.time() - start) / 60, "args": vars(args)}, f, indent=1)  # fmt: skip

    train, decode = run_all(args, bin_dir, runs_dir, save)
    minutes = (time.time() - start) / 60
    logs = {f"{m} {p}": r.pop("log") for m, t in decode.items() for p, r in t.items() if "log" in r}
    save(train, decode)
    text = summary(env, args, train, decode, minutes)
    with open(os.path.join(args.out, "summary.md"), "w") as f:
        f.write(text)
    if logs:
        with open(os.path.join(args.out, "failed_decodes.log"), "w") as f:
            f.writelines(f"== {k}\n{v[-4000:]}\n" for k, v in logs.items())
    print(text)


if __name__ == "__main__":
    main()
