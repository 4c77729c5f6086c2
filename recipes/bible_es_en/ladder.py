"""The papers' ladders at CPU scale on the Spanish->English Bible, one command.

    python recipes/bible_es_en/ladder.py [--updates N] [--out docs/RESULTS.md]

Trains every model of Luong et al. (2015) Table 1 and Table 4, Bahdanau et al.
(2015) RNNsearch and RNNencdec, and fairseq's own ``lstm`` at the same size,
all with the same budget (``--updates`` updates of ``--max-tokens`` target
tokens, same data, same seed, same optimiser), decodes the test chapters with
beam 5, and writes a markdown table in the papers' layout with our numbers
beside theirs. A model whose checkpoint and scores exist is not trained or
decoded again, so an interrupted ladder resumes where it stopped; ``--force``
redoes everything.

Scaled to 2 CPU cores: 1-layer LSTMs/GRUs of ``--dim`` units instead of 4 x 1000
(Luong) or 1000/620 (Bahdanau), the joint 8K SentencePiece vocabulary of
``prepare.sh`` instead of 50K/30K words, and Adam instead of the papers' SGD or
Adadelta schedules (a few hundred updates cannot follow a 10-epoch schedule).
Everything else is the paper's: the named archs set reversal, dropout 0.2,
attention window and score, input feeding; D is ``--window-size``. Local-p
models train with ``--position-logit-bound`` (default 4; Adam saturates eq. (9)
without it), and one extra row shows local-p (general) without it.
"""

import argparse
import json
import os
import re
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)

from ladder_rows import (  # noqa: E402  (this directory: the script's own)
    BAHDANAU,
    ENSEMBLE,
    LUONG,
    PAPER_BAHDANAU,
    PAPER_TABLE1,
    PAPER_TABLE4,
    PEER,
    TABLE4_LABELS,
)

from luong_plugin.analysis.generate_output import decode_pieces, parse_generate  # noqa: E402
from luong_plugin.analysis.report import score  # noqa: E402


def dims(arch: str, dim: int):
    """The size options that scale one arch family down to ``dim`` units."""
    if arch.startswith("bahdanau"):
        return [
            "--encoder-embed-dim",
            dim,
            "--encoder-hidden-size",
            dim,
            "--decoder-embed-dim",
            dim,
            "--decoder-hidden-size",
            dim,
            "--attention-dim",
            dim,
            "--maxout-dim",
            dim // 2,
        ]
    lstm_sizes = [
        "--encoder-layers",
        "1",
        "--decoder-layers",
        "1",
        "--encoder-embed-dim",
        dim,
        "--encoder-hidden-size",
        dim,
        "--decoder-embed-dim",
        dim,
        "--decoder-hidden-size",
        dim,
        "--decoder-out-embed-dim",
        dim,
    ]
    if arch == "lstm":
        return lstm_sizes + ["--dropout", "0.2"]
    return lstm_sizes


def run(cmd, log_path, threads):
    """Run ``cmd`` to completion; returns its CPU seconds (user + system)."""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    with open(log_path, "w", encoding="utf-8") as log:
        proc = subprocess.Popen(
            [str(c) for c in cmd], stdout=log, stderr=subprocess.STDOUT, env=env, cwd=REPO
        )
        _, status, usage = os.wait4(proc.pid, 0)  # this child's own resource usage
        proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        tail = open(log_path, encoding="utf-8").read()[-3000:]
        raise SystemExit(f"failed ({proc.returncode}): {' '.join(map(str, cmd))}\n{tail}")
    return usage.ru_utime + usage.ru_stime


def valid_ppl(log_path):
    text = open(log_path, encoding="utf-8").read()
    ppl = [float(p) for p in re.findall(r"\| valid \|.*?\| ppl ([0-9.]+)", text)]
    return min(ppl) if ppl else None


class Ladder:
    def __init__(self, args):
        self.args = args
        self.bin = os.path.join(args.data, "bin")
        self.reference = os.path.join(args.data, "raw", "test.en")
        self.tool = lambda name: os.path.join(os.path.dirname(sys.executable), name)
        self.results = {}
        self.lock = threading.Lock()
        self.results_path = os.path.join(args.runs, "results.json")
        if os.path.exists(self.results_path) and not args.force:
            self.results = json.load(open(self.results_path, encoding="utf-8"))

    def save(self):
        with self.lock, open(self.results_path, "w", encoding="utf-8") as f:
            json.dump(self.results, f, indent=1, sort_keys=True)

    def train(self, name, arch, extra):
        a = self.args
        save_dir = os.path.join(a.runs, name)
        ckpt = os.path.join(save_dir, "checkpoint_best.pt")
        entry = self.results.get(name, {})
        if os.path.exists(ckpt) and "wall_s" in entry:
            print(f"[{name}] trained, skipped", flush=True)
            return ckpt
        os.makedirs(save_dir, exist_ok=True)
        for f in os.listdir(save_dir):
            if f.startswith("checkpoint"):
                os.remove(os.path.join(save_dir, f))
        if "local_p" in arch and "--position-logit-bound" not in extra:
            extra = [*extra, "--position-logit-bound", str(a.position_logit_bound)]
        cmd = [
            self.tool("fairseq-train"),
            self.bin,
            "--source-lang",
            "es",
            "--target-lang",
            "en",
            "--user-dir",
            os.path.join(REPO, "luong_plugin"),
            "--arch",
            arch,
            *dims(arch, a.dim),
            *extra,
            "--optimizer",
            "adam",
            "--lr",
            a.lr,
            "--clip-norm",
            "1.0",
            "--criterion",
            "cross_entropy",
            "--max-tokens",
            a.max_tokens,
            "--max-update",
            a.updates,
            "--validate-interval-updates",
            a.updates // 2,
            "--save-dir",
            save_dir,
            "--no-epoch-checkpoints",
            "--keep-best-checkpoints",
            "0",
            "--seed",
            a.seed,
            "--num-workers",
            "0",
            "--no-progress-bar",
            "--log-format",
            "simple",
            "--log-interval",
            "50",
        ]
        if arch.startswith("luong"):
            cmd += ["--window-size", a.window_size]
        if arch != "lstm":  # the plugin's models; fairseq's lstm trains fp32 on a CPU
            cmd += ["--precision", a.precision]
        print(f"[{name}] training {arch} for {a.updates} updates", flush=True)
        start = time.time()
        cpu = run(cmd, os.path.join(save_dir, "train.log"), a.threads)
        self.results[name] = {
            "arch": arch,
            "extra": extra,
            "wall_s": round(time.time() - start),
            "cpu_s": round(cpu),
            "valid_ppl": valid_ppl(os.path.join(save_dir, "train.log")),
            "updates": a.updates,
            "seed": a.seed,
            "precision": "fp32" if arch == "lstm" else a.precision,
        }
        self.save()
        return ckpt

    def raw_pieces(self):
        """The SentencePiece-encoded test set as fairseq's raw text dataset."""
        raw = os.path.join(self.args.runs, "raw_pieces")
        os.makedirs(raw, exist_ok=True)
        links = {
            f"test.es-en.{lang}": os.path.join(self.args.data, "spm", f"test.{lang}")
            for lang in ("es", "en")
        }
        links.update(
            {
                f"dict.{lang}.txt": os.path.join(self.bin, f"dict.{lang}.txt")
                for lang in ("es", "en")
            }
        )
        for name, target in links.items():
            link = os.path.join(raw, name)
            if not os.path.islink(link):
                os.symlink(os.path.abspath(target), link)
        return raw

    def decode(self, key, paths, replace_unk=False):
        """BLEU/chrF of beam 5 on the test chapters; ``key`` names the result."""
        entry = self.results.setdefault(key, {})
        if "bleu" in entry and not self.args.force:
            return entry
        out = os.path.join(self.args.runs, key.replace("/", "_") + ".gen.txt")
        cmd = [
            self.tool("fairseq-generate"),
            self.bin,
            "--source-lang",
            "es",
            "--target-lang",
            "en",
            "--user-dir",
            os.path.join(REPO, "luong_plugin"),
            "--path",
            ":".join(paths),
            "--gen-subset",
            "test",
            "--beam",
            "5",
            "--batch-size",
            "64",
            "--required-batch-size-multiple",
            "1",
            "--max-len-a",
            "1.2",
            "--max-len-b",
            "10",
        ]
        if replace_unk:  # fairseq copies source words only from a raw text dataset
            cmd[1] = self.raw_pieces()
            cmd += ["--dataset-impl", "raw", "--replace-unk", "", "--print-alignment"]
        print(f"[{key}] decoding {len(paths)} model(s)", flush=True)
        start = time.time()
        run(cmd, out, self.args.threads)
        hypotheses = parse_generate(open(out, encoding="utf-8").read())
        references = [line.rstrip("\n") for line in open(self.reference, encoding="utf-8")]
        if len(hypotheses) != len(references):
            raise SystemExit(
                f"{out}: {len(hypotheses)} hypotheses for {len(references)} references"
            )
        texts = [decode_pieces(hypotheses[i].hypothesis) for i in range(len(references))]
        (bleu, bleu_sig), (chrf, chrf_sig) = score(texts, references)
        entry.update(
            bleu=round(bleu.score, 2),
            chrf=round(chrf.score, 2),
            bleu_signature=str(bleu_sig),
            chrf_signature=str(chrf_sig),
            decode_s=round(time.time() - start),
            unk_in_output=sum(h.hypothesis.split().count("<unk>") for h in hypotheses.values()),
        )
        self.save()
        return entry

    def one(self, name, arch, extra):
        self.decode(name, [self.train(name, arch, extra)])

    def all(self):
        a = self.args
        rows = [
            (name, arch, extra)
            for table in (LUONG, BAHDANAU, PEER)
            for name, (arch, extra, _label) in table.items()
            if not a.only or name in a.only
        ]
        with ThreadPoolExecutor(max_workers=a.jobs) as pool:  # each job is a process
            for future in [pool.submit(self.one, *row) for row in rows]:
                future.result()
        # Unk replacement copies the source word aligned to each <unk> (§4.1);
        # it changes a hypothesis only where the model wrote <unk>.
        for name in list(LUONG):
            if name in self.results and "bleu" in self.results[name]:
                before = self.results[name]
                key = name + "+unk"
                if before["unk_in_output"] == 0:
                    self.results[key] = dict(before, replaced=0)
                else:
                    ckpt = os.path.join(a.runs, name, "checkpoint_best.pt")
                    self.decode(key, [ckpt], replace_unk=True)
        members = [n for n in ENSEMBLE if n in self.results and "wall_s" in self.results[n]]
        if len(members) > 1:
            paths = [os.path.join(a.runs, n, "checkpoint_best.pt") for n in members]
            entry = self.decode("ensemble", paths, replace_unk=True)
            entry["members"] = members
        self.save()


def fmt(value, digits=2):
    return "–" if value is None else f"{value:.{digits}f}"


def target_tokens(data):
    """Target tokens per training epoch (pieces + one end-of-sentence per line)."""
    with open(os.path.join(data, "spm", "train.en"), encoding="utf-8") as f:
        return sum(len(line.split()) + 1 for line in f)


def simple_table(r, rows, title, intro, paper, paper_columns):
    """Markdown lines of one table: ppl, BLEU, chrF and times of ``rows``, then the paper's."""
    header = ["Model", "Ppl", "BLEU", "chrF2", "train wall / CPU (s)", *paper_columns]
    lines = [
        "",
        f"## {title}",
        "",
        *intro,
        *([""] if intro else []),
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
    ]
    for name, (_arch, _extra, label) in rows.items():
        e = r.get(name, {})
        if "bleu" in e:
            cells = [
                label,
                fmt(e.get("valid_ppl")),
                f"{e['bleu']:.2f}",
                f"{e['chrf']:.2f}",
                f"{e['wall_s']} / {e['cpu_s']}",
                *paper.get(name, ()),
            ]
            lines.append("| " + " | ".join(cells) + " |")
    return lines


def write_results(results, args, path):
    r = results
    epochs = args.updates * args.max_tokens / target_tokens(args.data)
    any_entry = next(v for v in r.values() if "bleu_signature" in v)
    lines = [
        "# Results: the papers' ladders at CPU scale",
        "",
        "Produced by `make ladder` (`python recipes/bible_es_en/ladder.py`), which trains",
        "and scores every row below and rewrites this file. Spanish→English Bible",
        "(`recipes/bible_es_en/prepare.sh`: 28,702 training pairs, whole chapters held out;",
        "the test set is 999 verses), joint 8K SentencePiece vocabulary.",
        "",
        f"**Budget, the same for every model:** {args.updates} updates of at most",
        f"{args.max_tokens} target tokens (at most {epochs:.1f} epochs), Adam lr {args.lr}, gradient norm 1, cross-entropy, seed {args.seed},",
        f"1 layer of {args.dim} units (embeddings too), window D = {args.window_size} pieces,",
        f"local-p with `--position-logit-bound {args.position_logit_bound:g}` (except the row that says otherwise),",
        f"the plugin's models in `--precision {getattr(args, 'precision', 'fp32')}` (fairseq's `lstm` in fp32),",
        f"{args.jobs} models at a time with {args.threads} thread(s) each. Beam 5; BLEU is sacreBLEU on detokenised output",
        "against the raw reference; perplexity is the best validation perplexity",
        "(measured at half and at the end of the budget). Times are training only:",
        "wall clock and CPU seconds (user + system, all threads).",
        "",
        f"sacreBLEU signature: `{any_entry['bleu_signature']}`",
        "",
        "The paper columns are Luong et al. (2015) on WMT'14 English→German",
        "newstest2014 (4 × 1000 LSTMs, 50K words, 10–12 epochs) and Bahdanau et al.",
        "(2015) on WMT'14 English→French newstest2014: a different language pair and",
        "a scale thousands of times larger. Compare the *steps*, not the values.",
        "",
        "## Luong et al. Table 1: the ladder",
        "",
        "| System | Ppl | BLEU | chrF2 | train wall / CPU (s) | paper Ppl | paper BLEU |",
        "|---|---|---|---|---|---|---|",
    ]
    previous = None
    for name in [
        "base",
        "base_reverse",
        "base_reverse_dropout",
        "global_location_no_feed",
        "global_location",
        "local_p_general",
    ]:
        e = r.get(name, {})
        if "bleu" not in e:
            continue
        gain = "" if previous is None else f" ({e['bleu'] - previous:+.2f})"
        previous = e["bleu"]
        p_ppl, p_bleu = PAPER_TABLE1[name]
        lines.append(
            f"| {LUONG[name][2]} | {fmt(e.get('valid_ppl'))} | {e['bleu']:.2f}{gain} | "
            f"{e['chrf']:.2f} | {e['wall_s']} / {e['cpu_s']} | {p_ppl} | {p_bleu} |"
        )
    if "local_p_general+unk" in r:
        e, b = r["local_p_general+unk"], r["local_p_general"]
        lines.append(
            f"| + unk replace | | {e['bleu']:.2f} ({e['bleu'] - b['bleu']:+.2f}) | "
            f"{e['chrf']:.2f} | | | {PAPER_TABLE1['unk'][1]} |"
        )
    if "ensemble" in r and "bleu" in r["ensemble"]:
        e = r["ensemble"]
        base = r.get("local_p_general+unk", r["local_p_general"])["bleu"]
        lines.append(
            f"| Ensemble {len(e['members'])} models + unk replace | | {e['bleu']:.2f} "
            f"({e['bleu'] - base:+.2f}) | {e['chrf']:.2f} | | | {PAPER_TABLE1['ensemble'][1]} |"
        )
    lines += [
        "",
        "## Luong et al. Table 4: attentional architectures",
        "",
        "All with reverse, dropout and feed input, as in the paper.",
        "",
        "| System | Ppl | BLEU before | after unk | train wall / CPU (s) | paper Ppl | paper before | paper after |",
        "|---|---|---|---|---|---|---|---|",
    ]
    # the unbounded local-p row has no paper counterpart: empty paper cells
    for name in [*PAPER_TABLE4, "local_p_general_plain"]:
        e, u = r.get(name, {}), r.get(name + "+unk", {})
        if "bleu" not in e:
            continue
        paper = PAPER_TABLE4.get(name, ("", "", ""))
        lines.append(
            f"| {TABLE4_LABELS.get(name, LUONG[name][2])} | {fmt(e.get('valid_ppl'))} | {e['bleu']:.2f} | {fmt(u.get('bleu'))} | "
            f"{e['wall_s']} / {e['cpu_s']} | {' | '.join(paper)} |"
        )
    lines += simple_table(
        r,
        BAHDANAU,
        "Bahdanau et al.: RNNsearch vs RNNencdec",
        [
            "Both without dropout, as in the paper; the paper columns are the -50 models (trained",
            "on sentences of up to 50 words), on all test sentences and on those without unknown words.",
        ],
        PAPER_BAHDANAU,
        ["paper BLEU (All)", "paper BLEU (No UNK)"],
    )
    lines += simple_table(r, PEER, "Peer: fairseq's built-in `lstm` at the same size", [], {}, [])
    unk = {n: r[n]["unk_in_output"] for n in LUONG if "unk_in_output" in r.get(n, {})}
    lines += [
        "",
        "## Notes",
        "",
        f"- `<unk>` in the test output of the Luong models: {sum(unk.values())} in all. The",
        "  SentencePiece vocabulary covers every character of the test set, so there is",
        "  (almost) nothing for unk replacement to replace; the rows after unk replacement",
        "  are a measurement of that, and the paper's +1.9 BLEU from it cannot appear here.",
        "- Wall times depend on whatever else the machine runs while the ladder trains;",
        "  CPU seconds are the figure to compare between rows.",
        "- One seed per row: differences of a few tenths of BLEU between such weak models",
        "  are within what another seed could change.",
        "- Local-p without `--position-logit-bound`: trained with Adam, eq. (9)'s",
        "  sigmoid saturates within the first updates and p_t stays at one end of the",
        '  sentence (docs/MODELS.md, "Saturation of p_t"). The bound keeps p_t trainable, but',
        "  a budget this small ends before p_t has moved off the bound: the difference",
        "  between the two local-p (general) rows is noise here. Longer training (the",
        "  demo) shows the bounded p_t learning the diagonal.",
    ]
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    print(f"wrote {path}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--data",
        default=os.path.join(REPO, "data", "bible_es_en"),
        help="prepare.sh output directory",
    )
    parser.add_argument("--runs", default=os.path.join(REPO, "runs", "ladder"))
    parser.add_argument("--out", default=os.path.join(REPO, "docs", "RESULTS.md"))
    parser.add_argument("--updates", type=int, default=400)
    parser.add_argument("--max-tokens", type=int, default=2000)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--window-size", type=int, default=14)
    parser.add_argument(
        "--position-logit-bound",
        type=float,
        default=4.0,
        help="local-p models' --position-logit-bound (0: the paper's plain training)",
    )
    parser.add_argument("--lr", type=float, default=0.003)
    parser.add_argument(
        "--precision",
        choices=["fp32", "bf16"],
        default="bf16",
        help="the plugin's models' --precision (fairseq's lstm: fp32)",
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--jobs",
        type=int,
        default=os.cpu_count() or 1,
        help="models trained at the same time (default: one per core)",
    )
    parser.add_argument("--threads", type=int, default=1, help="threads per job")
    parser.add_argument("--only", nargs="*", help="train only these rows (names as in the code)")
    parser.add_argument("--force", action="store_true", help="retrain and rescore everything")
    args = parser.parse_args(argv)
    os.makedirs(args.runs, exist_ok=True)
    ladder = Ladder(args)
    ladder.all()
    write_results(ladder.results, args, args.out)


if __name__ == "__main__":
    main()
