"""Training and evaluation for the WMT recipes (``python -m luong_plugin.corpora.wmt``).

Training uses the paper's optimisation exactly as ``configs/<arch>.yaml`` states it
(Luong §4.1: SGD lr 1.0, batch 128, gradient norm 5, 10 epochs halving every epoch
after 5, or 12 halving after 8 with dropout; Bahdanau Appendix B.2: Adadelta, batch 80,
gradient norm 1): the YAML's optimisation sections become fairseq-train flags, so the
command line and ``fairseq-hydra-train --config-name <arch>`` train alike.
``--world-size N`` keeps the effective batch (N GPUs x batch/N sentences).

Evaluation decodes the test set with beam search and reports both

- tokenized BLEU, the papers' number: multi-bleu.perl on tokenizer.perl output, i.e.
  sacrebleu with ``tokenize="none", smooth_method="none"`` on the tokenized hypotheses
  and the tokenized reference (case-sensitive, corpus level, no smoothing);
- sacreBLEU on the Moses-detokenized hypotheses against the untokenized reference,
  with its signature.
"""

import json
import os
import shlex
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CONFIG_DIR = os.path.join(REPO, "configs")
USER_DIR = os.path.join(REPO, "luong_plugin")
# configs/<arch>.yaml sections that are optimisation; the model is --arch itself
# (tests/test_configs.py proves the YAML's model section equals the arch).
TRAIN_SECTIONS = ("common", "dataset", "optimization", "optimizer", "lr_scheduler", "criterion")
NAME_FLAGS = {"optimizer": "--optimizer", "lr_scheduler": "--lr-scheduler",
              "criterion": "--criterion"}  # fmt: skip


def fairseq_tool(name):
    """fairseq's console script next to this interpreter, else on PATH."""
    path = os.path.join(os.path.dirname(sys.executable), name)
    return path if os.path.exists(path) else name


def available_configs():
    return sorted(f[: -len(".yaml")] for f in os.listdir(CONFIG_DIR) if f.endswith(".yaml"))


def load_config(name):
    import yaml

    path = os.path.join(CONFIG_DIR, f"{name}.yaml")
    if not os.path.isfile(path):
        raise ValueError(
            f"--config {name!r}: no {path}; choose one of {', '.join(available_configs())}"
        )
    with open(path) as f:
        return yaml.safe_load(f)


def config_flags(cfg, world_size=1):
    """fairseq-train flags for the optimisation sections of a configs/*.yaml dict.

    With ``world_size`` N > 1 each GPU takes batch_size / N sentences, so an update
    still averages the paper's batch."""
    sections = {s: dict(cfg.get(s, {})) for s in TRAIN_SECTIONS}
    if world_size < 1:
        raise ValueError(f"--world-size {world_size}: must be 1 or more")
    if world_size > 1:
        batch = sections["dataset"]["batch_size"]
        if batch % world_size:
            divisors = [n for n in range(1, batch + 1) if batch % n == 0]
            raise ValueError(
                f"--world-size {world_size} does not divide the batch of {batch} "
                f"sentences; choose one of {divisors}"
            )
        sections["dataset"]["batch_size"] = batch // world_size
        sections["common"]["distributed_world_size"] = world_size
    if sections["optimizer"].get("lr", sections["optimization"]["lr"]) != (
        sections["optimization"]["lr"]
    ):
        raise ValueError("optimizer.lr and optimization.lr differ in the config")
    sections["optimizer"].pop("lr", None)
    flags = []
    for section, values in sections.items():
        for key, value in values.items():
            if value is None:
                continue
            flag = NAME_FLAGS[section] if key == "_name" else "--" + key.replace("_", "-")
            if isinstance(value, list):
                value = ",".join(map(str, value))
            flags += [flag, str(value)]
    return flags


# on one GPU, for the Luong input-feeding models: --cuda-graphs, which bench/gpu.py measured
# at the paper's shape to train them fastest (docs/BENCHMARKS.md, "Second sitting:
# --cuda-graphs"), with 32 graphs, where batches of 128 pairs of at most 51 tokens came in
# 20-21 shapes on two corpora and the default 16 left 5-6% of the target tokens to the plain
# path (bench/graph_buckets.py, docs/SPEED.md); in bf16, within one round's spread of the
# fastest precision there (--fp16), and with no loss scaling
GPU_FLAGS = ["--cuda-graphs", "--cuda-graph-limit", "32"]
GPU_PRECISION = ["--precision", "bf16"]
PRECISION_FLAGS = ("--fp16", "--memory-efficient-fp16", "--amp", "--bf16", "--precision")


def gpu_flags(arch, world_size=1, extra=(), cuda=None):
    """What ``train`` adds on one GPU: ``--cuda-graphs`` (32 shapes) and ``--precision bf16``
    for ``arch`` a Luong model with input feeding (read from ``configs/<arch>.yaml``'s model
    section, which tests/test_configs.py holds equal to the arch; ``cuda``: None asks
    torch). Nothing on a CPU or with fairseq's ``--cpu`` in ``extra``, for RNNsearch and
    RNNencdec or decoders without input feeding (not graphed), or with ``world_size`` > 1
    (fairseq's DDP with graphs has not run on GPUs); no precision where ``extra`` sets one.
    A ``--config`` of another arch changes the optimisation only, as the flags it gives."""
    if world_size != 1 or "--cpu" in extra or arch not in available_configs():
        return []
    model = load_config(arch).get("model", {})
    if "cuda_graphs" not in model or not model.get("input_feeding"):
        return []
    if cuda is None:
        import torch

        cuda = torch.cuda.is_available()
    if not cuda:
        return []
    own_precision = any(flag.split("=")[0] in PRECISION_FLAGS for flag in extra)
    return GPU_FLAGS + ([] if own_precision else GPU_PRECISION)


def train_command(recipe, data, arch=None, save_dir=None, config=None, world_size=1, extra=(),
                  plain=False, cuda=None):  # fmt: skip
    """``plain``: as the config states it, without ``gpu_flags``."""
    arch = arch or recipe.arch
    save_dir = save_dir or os.path.join("checkpoints", recipe.name, arch)
    cfg = load_config(config or arch)
    speed = [] if plain else gpu_flags(arch, world_size, extra, cuda)
    return [
        fairseq_tool("fairseq-train"), os.path.join(data, "bin"), "--user-dir", USER_DIR,
        "--task", "translation", "--source-lang", recipe.src, "--target-lang", recipe.tgt,
        "--arch", arch, *config_flags(cfg, world_size), *recipe.train_flags, *speed,
        "--save-dir", save_dir, "--no-epoch-checkpoints", *extra,
    ]  # fmt: skip


def generate_command(recipe, data, checkpoint, beam=10, batch_size=32, unk_replace=False,
                     extra=()):  # fmt: skip
    """Decode the test set from ``bin-raw`` (text, so --replace-unk sees source words)."""
    unk = ["--print-alignment", "--replace-unk", ""] if unk_replace else []
    return [
        fairseq_tool("fairseq-generate"), os.path.join(data, "bin-raw"),
        "--dataset-impl", "raw", "--user-dir", USER_DIR, "--task", "translation",
        "--source-lang", recipe.src, "--target-lang", recipe.tgt, "--path", checkpoint,
        "--gen-subset", "test", "--beam", str(beam), "--batch-size", str(batch_size),
        "--required-batch-size-multiple", "1",  # else fairseq drops the last batch
        *unk, *extra,
    ]  # fmt: skip


def hypotheses(generate_output, n):
    """The ``H-`` lines of fairseq-generate output, in test-set order."""
    rows = {}
    for line in generate_output.splitlines():
        if line.startswith("H-"):
            fields = line.split("\t")  # H-id, score, hypothesis (may be empty)
            rows[int(fields[0][2:])] = fields[2] if len(fields) > 2 else ""
    if sorted(rows) != list(range(n)):
        raise ValueError(f"fairseq-generate returned {len(rows)} hypotheses for {n} sentences")
    return [rows[i] for i in range(n)]


def tokenized_bleu(hyps, refs):
    """multi-bleu.perl: corpus BLEU-4 on whitespace tokens, case-sensitive, no smoothing
    (0 when an n-gram order has no match), brevity penalty exp(1 - r/c) when c < r."""
    from sacrebleu.metrics import BLEU

    metric = BLEU(tokenize="none", smooth_method="none", force=True)
    return metric.corpus_score(hyps, [refs]), metric.get_signature()


def sacre_bleu(detok_hyps, raw_refs):
    from sacrebleu.metrics import BLEU

    metric = BLEU()
    return metric.corpus_score(detok_hyps, [raw_refs]), metric.get_signature()


def detokenize(lines, lang):
    from sacremoses import MosesDetokenizer

    detok = MosesDetokenizer(lang=lang)
    return [detok.detokenize(line.split()) for line in lines]


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read().splitlines()


def write(path, lines):
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(line + "\n" for line in lines)


def score(recipe, data, hyp_tok):
    """Both BLEUs of tokenized hypotheses ``hyp_tok`` on the recipe's test set."""
    tok_ref = read(os.path.join(data, "tok", f"test.{recipe.tgt}"))
    raw_ref = read(os.path.join(data, "ref", f"test.{recipe.tgt}"))
    if len(hyp_tok) != len(tok_ref):
        raise ValueError(f"{len(hyp_tok)} hypotheses for {len(tok_ref)} test sentences")
    detok = detokenize(hyp_tok, recipe.tgt)
    tok, tok_sig = tokenized_bleu(hyp_tok, tok_ref)
    sacre, sacre_sig = sacre_bleu(detok, raw_ref)
    return detok, {
        "recipe": recipe.name, "sentences": len(hyp_tok),
        "tokenized_bleu": round(tok.score, 2), "tokenized_bleu_signature": str(tok_sig),
        "tokenized_bleu_detail": str(tok),
        "sacrebleu": round(sacre.score, 2), "sacrebleu_signature": str(sacre_sig),
        "sacrebleu_detail": str(sacre),
    }  # fmt: skip


def report(scores):
    print(f"tokenized BLEU {scores['tokenized_bleu']:6.2f}  (multi-bleu.perl on "
          f"tokenizer.perl text: {scores['tokenized_bleu_signature']})")  # fmt: skip
    print(f"sacreBLEU      {scores['sacrebleu']:6.2f}  ({scores['sacrebleu_signature']})")
    print(f"on {scores['sentences']} test sentences ({scores['recipe']})")


def evaluate(recipe, data, checkpoint, out=None, beam=10, batch_size=32, unk_replace=False,
             extra=()):  # fmt: skip
    out = out or os.path.dirname(os.path.abspath(checkpoint))
    os.makedirs(out, exist_ok=True)
    n = len(read(os.path.join(data, "tok", f"test.{recipe.src}")))
    cmd = generate_command(recipe, data, checkpoint, beam, batch_size, unk_replace, extra)
    print("[generate]", shlex.join(cmd), flush=True)
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode:
        raise RuntimeError(f"fairseq-generate failed:\n{proc.stderr[-3000:]}")
    stem = "test.unk" if unk_replace else "test"
    write(os.path.join(out, f"{stem}.gen.txt"), proc.stdout.splitlines())
    hyp_tok = hypotheses(proc.stdout, n)
    detok, scores = score(recipe, data, hyp_tok)
    write(os.path.join(out, f"{stem}.hyp.tok"), hyp_tok)
    write(os.path.join(out, f"{stem}.hyp.detok"), detok)
    scores.update(checkpoint=os.path.abspath(checkpoint), beam=beam, unk_replace=unk_replace)
    with open(os.path.join(out, f"{stem}.scores.json"), "w") as f:
        json.dump(scores, f, indent=1)
    return scores


def add_commands(commands):
    # fmt: off
    p = commands.add_parser("train", help="fairseq-train with the paper's optimisation "
                            "(fairseq-train flags after --)")
    p.add_argument("--recipe", required=True)
    p.add_argument("--data", required=True, help="the prepare --out directory")
    p.add_argument("--arch", help="default: the recipe's paper model")
    p.add_argument("--config", help="configs/NAME.yaml for the optimisation (default: --arch)")
    p.add_argument("--save-dir", help="default: checkpoints/RECIPE/ARCH")
    p.add_argument("--world-size", type=int, default=1,
                   help="GPUs; each takes batch/N sentences (default: 1)")
    p.add_argument("--dry-run", action="store_true", help="print the command, run nothing")
    p.add_argument("--plain", action="store_true",
                   help="on a GPU too, train as the config states it: without the "
                   "--cuda-graphs and --precision bf16 a Luong input-feeding model gets there")
    p = commands.add_parser("evaluate", help="decode the test set, print tokenized BLEU "
                            "and sacreBLEU (fairseq-generate flags after --)")
    p.add_argument("--recipe", required=True)
    p.add_argument("--data", required=True, help="the prepare --out directory")
    p.add_argument("--checkpoint", required=True, help="a checkpoint, or a:b for an ensemble")
    p.add_argument("--out", help="default: the checkpoint's directory")
    p.add_argument("--beam", type=int, default=10)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--unk-replace", action="store_true",
                   help="copy the aligned source word into each <unk> (Luong Table 1)")
    p = commands.add_parser("score", help="both BLEUs of a tokenized hypothesis file")
    p.add_argument("--recipe", required=True)
    p.add_argument("--data", required=True, help="the prepare --out directory")
    p.add_argument("--hyp", required=True, help="tokenized hypotheses, one per test line")
    # fmt: on


def run(args, recipe, extra):
    if args.command == "train":
        cmd = train_command(recipe, args.data, args.arch, args.save_dir, args.config,
                            args.world_size, extra, args.plain)  # fmt: skip
        print(shlex.join(cmd), flush=True)
        if not args.dry_run:
            subprocess.run(cmd, check=True)
    elif args.command == "evaluate":
        report(evaluate(recipe, args.data, args.checkpoint, args.out, args.beam,
                        args.batch_size, args.unk_replace, extra))  # fmt: skip
    else:
        report(score(recipe, args.data, read(args.hyp))[1])
