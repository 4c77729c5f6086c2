"""One ladder row x seed: its options, training (resumed from its last checkpoint),
decoding, unk replacement, and the JSON it writes the moment it is done.

A row x seed is done when ``RESULTS/ROW.seedK.json`` exists with the options the
ladder would train it with now (``options``); one with other options is trained
again. Its checkpoints live in ``RUNS/ROW.seedK/`` with ``state.json`` (the options,
wall and CPU seconds so far): an interrupted training resumes from
``checkpoint_last.pt`` (fairseq restores the data iterator and the optimizer), one
with other options starts afresh. Only ``checkpoint_best.pt`` stays once trained.
"""

import os
import re
import shlex
import shutil
import subprocess
import sys
import time

from experiments import harness
from experiments.harness import REPO, VALID, describe_commit, read_json, write_json
from experiments.ladder_rows import DICTIONARY_OF, ENSEMBLE, MEMBERS, ROWS, UNK_ROWS
from luong_plugin.corpora import bible_words, wmt_run

RECIPE = bible_words.RECIPE
DECODE = {"beam": 5, "batch_size": 64, "extra": "--max-len-a 1.2 --max-len-b 10"}
VARIANTS = ("plain", "unk_copy", "unk_dict")  # decodings of a row: as is, <unk> replaced
EPOCH = re.compile(r"epoch \d+:\s+\d+ / (\d+) ")


def resolve_precision(precision: str) -> str:
    """``auto``: as make demo picks (``default_precision``: bf16 on a CPU with native
    bf16, fp32 on a GPU and elsewhere)."""
    if precision != "auto":
        return precision
    from luong_plugin.modules.precision import default_precision

    return default_precision()


def sizes(arch: str, dim: int):
    """The size options that scale one arch family down to 1 layer of ``dim`` units."""
    d = str(dim)
    if arch.startswith("bahdanau"):
        return ["--encoder-embed-dim", d, "--encoder-hidden-size", d, "--decoder-embed-dim", d,
                "--decoder-hidden-size", d, "--attention-dim", d,
                "--maxout-dim", str(dim // 2)]  # fmt: skip
    lstm = ["--encoder-layers", "1", "--decoder-layers", "1", "--encoder-embed-dim", d,
            "--encoder-hidden-size", d, "--decoder-embed-dim", d, "--decoder-hidden-size", d,
            "--decoder-out-embed-dim", d]  # fmt: skip
    return lstm + (["--dropout", "0.2"] if arch == "lstm" else [])


def options(name: str, budget) -> dict:
    """Everything that makes a row x seed's result what it is, paths and seed aside:
    equal options, equal meaning (a changed default cannot change a finished row)."""
    if name == ENSEMBLE:
        raise ValueError("the ensemble's options are its members' (ensemble_options)")
    row = ROWS[name]
    train = ["--arch", row.arch, *row.extra, *sizes(row.arch, budget.dim)]
    if "local_m" in row.arch or "local_p" in row.arch:
        train += ["--window-size", "10"]  # D = 10 words (§3.2)
    if "local_p" in row.arch:  # Adam saturates eq. (9)'s sigmoid without it (docs/MODELS.md)
        train += ["--position-logit-bound", "4"]
    train += ["--optimizer", "adam", "--lr", str(budget.lr), "--clip-norm", "1.0",
              "--criterion", "cross_entropy", "--max-tokens", str(budget.max_tokens),
              "--max-update", str(budget.updates), "--max-epoch", "0"]  # fmt: skip
    return {
        "train": shlex.join(train),
        # fairseq cannot train bf16 on a CPU: its own lstm stays fp32
        "precision": "fp32" if row.arch == "lstm" else budget.precision,
        "validate_every": budget.validate_every,
        "data": {"vocab": budget.vocab, "max_len": bible_words.MAX_LEN},
        "decode": dict(DECODE, variants=list(VARIANTS if name in UNK_ROWS else VARIANTS[:1])),
    }


def ensemble_options(seed: int, results_dir: str, budget) -> dict:
    """The members' options and when each finished (a retrained member redoes the
    ensemble); None until every member has a result at the budget's options."""
    members = {}
    for name in MEMBERS:
        result = read_json(result_path(results_dir, name, seed))
        wanted = options(name, budget)
        if result is None or not same_but_precision(result["options"], wanted):
            return None
        members[name] = {"options": result["options"], "finished": result["finished"]}
    decode = dict(DECODE, variants=list(VARIANTS))
    return {"members": members, "dictionary_of": DICTIONARY_OF, "decode": decode}


def same_but_precision(a: dict, b: dict) -> bool:
    """Options equal but for the precision, which follows the machine."""

    def drop(opts):
        return {k: v for k, v in opts.items() if k != "precision"}

    return drop(a) == drop(b)


def result_path(results_dir: str, name: str, seed: int) -> str:
    return os.path.join(results_dir, f"{name}.seed{seed}.json")


def is_done(results_dir: str, name: str, seed: int, wanted: dict) -> bool:
    """A result exists for these options (else the row x seed is (re)done)."""
    result = read_json(result_path(results_dir, name, seed))
    return result is not None and wanted is not None and result.get("options") == wanted


def run(cmd, log_path, threads, append=False):
    """Run ``cmd``, output to ``log_path``; returns (wall, CPU seconds of the child)."""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    start = time.time()
    with open(log_path, "a" if append else "w", encoding="utf-8") as log:
        proc = subprocess.Popen([str(c) for c in cmd], stdout=log, stderr=subprocess.STDOUT,
                                env=env, cwd=REPO)  # fmt: skip
        _, status, usage = os.wait4(proc.pid, 0)
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        with open(log_path, encoding="utf-8") as f:
            tail = f.read()[-3000:]
        raise RuntimeError(f"failed ({code}): {' '.join(map(str, cmd))}\n{tail}")
    return time.time() - start, usage.ru_utime + usage.ru_stime


def parse_log(text: str):
    """{updates: valid ppl} and the batches per epoch of a fairseq-train log."""
    ppl = {int(u): float(p) for p, u in VALID.findall(text)}
    per_epoch = EPOCH.findall(text)
    return ppl, (int(per_epoch[-1]) if per_epoch else None)


class Runner:
    """Trains and decodes rows x seeds of one ladder: ``args`` holds the budget
    (``options``), ``data`` (prepared), ``runs``, ``results`` and ``threads``."""

    def __init__(self, args, data_stats):
        self.args = args
        self.data_stats = data_stats

    def run_dir(self, name, seed):
        return os.path.join(self.args.runs, f"{name}.seed{seed}")

    def train(self, name, seed, opts):
        """Train to the budget, resuming; -> the run's state (seconds, log facts)."""
        a, run_dir = self.args, self.run_dir(name, seed)
        state_path = os.path.join(run_dir, "state.json")
        state = read_json(state_path)
        if state is None or state["options"] != opts:
            shutil.rmtree(run_dir, ignore_errors=True)
            os.makedirs(run_dir)
            state = {"options": opts, "wall_s": 0.0, "cpu_s": 0.0, "sessions": 0}
        log_path = os.path.join(run_dir, "train.log")
        if not state.get("trained"):
            every = str(opts["validate_every"])
            cmd = [
                wmt_run.fairseq_tool("fairseq-train"), os.path.join(a.data, "bin"), "--task", "translation",
                "--source-lang", RECIPE.src, "--target-lang", RECIPE.tgt,
                "--user-dir", os.path.join(REPO, "luong_plugin"), *shlex.split(opts["train"]),
                *(["--precision", opts["precision"]] if opts["precision"] != "fp32" else []),
                "--seed", str(seed), "--save-dir", run_dir,
                "--save-interval-updates", every, "--validate-interval-updates", every,
                "--keep-interval-updates", "1", "--no-epoch-checkpoints",
                "--num-workers", "0", "--no-progress-bar", "--log-format", "simple",
                "--log-interval", str(max(1, min(50, a.updates // 10))),
            ]  # fmt: skip
            if os.path.exists(os.path.join(run_dir, "checkpoint_last.pt")):
                print(f"[{name} seed {seed}] resuming from checkpoint_last.pt", flush=True)
            write_json(state_path, state)  # the options a later session resumes with
            started = time.time()
            try:
                _, cpu = run(cmd, log_path, a.threads, append=True)
            finally:  # an interrupted session's wall time counts too (not a killed one's)
                state["wall_s"] += time.time() - started
                state["sessions"] += 1
                write_json(state_path, state)
            state["cpu_s"] += cpu
            with open(log_path, encoding="utf-8") as f:
                ppl, _ = parse_log(f.read())
            if a.updates not in ppl:
                raise RuntimeError(f"{name} seed {seed}: no validation at update {a.updates} "
                                   f"in {log_path}")  # fmt: skip
            state["trained"] = True
            write_json(state_path, state)
            for f in os.listdir(run_dir):  # keep the checkpoint the row is decoded from
                if f.startswith("checkpoint") and f != "checkpoint_best.pt":
                    os.remove(os.path.join(run_dir, f))
        with open(log_path, encoding="utf-8") as f:
            state["valid_ppl"], state["updates_per_epoch"] = parse_log(f.read())
        return state

    def unk_dictionary(self, name, seed):
        """``luong-unk-dict`` on the (filtered) training pairs: each source word's most
        often aligned target word; -> (path, entries, seconds)."""
        run_dir, data = self.run_dir(name, seed), self.args.data
        path = os.path.join(run_dir, "unk.dict")
        cmd = [sys.executable, "-m", "luong_plugin.analysis.unk_dict",
               "--path", os.path.join(run_dir, "checkpoint_best.pt"),
               "--data", os.path.join(data, "bin"), "--subword", "none",
               "--source", os.path.join(data, "tok", f"train.{RECIPE.src}"),
               "--target", os.path.join(data, "tok", f"train.{RECIPE.tgt}"),
               "--out", path, "--batch-size", "64"]  # fmt: skip
        wall, cpu = run(cmd, os.path.join(run_dir, "unk_dict.log"), self.args.threads)
        with open(path, encoding="utf-8") as f:
            entries = sum(1 for _ in f)
        return path, entries, round(wall, 1), round(cpu, 1)

    def decode(self, out_dir, paths, variant, unk_dict=None):
        """Beam search on the test set; both BLEUs and the <unk>s of the output."""
        data = self.args.data
        extra = DECODE["extra"].split()
        if variant == "unk_dict":
            extra += ["--print-alignment", "--replace-unk", unk_dict]
        copy = variant == "unk_copy"  # --replace-unk "": the aligned source word itself
        path = ":".join(paths)
        cmd = wmt_run.generate_command(
            RECIPE, data, path, DECODE["beam"], DECODE["batch_size"], copy, extra
        )
        gen = os.path.join(out_dir, f"test.{variant}.gen.txt")
        wall, cpu = run(cmd, gen, self.args.threads)
        n = len(wmt_run.read(os.path.join(data, "tok", f"test.{RECIPE.src}")))
        with open(gen, encoding="utf-8") as f:
            hyps = wmt_run.hypotheses(f.read(), n)
        detok, scores = wmt_run.score(RECIPE, data, hyps)
        wmt_run.write(os.path.join(out_dir, f"test.{variant}.hyp.tok"), hyps)
        wmt_run.write(os.path.join(out_dir, f"test.{variant}.hyp.detok"), detok)
        tokens = [w for h in hyps for w in h.split()]
        scores.update(output_tokens=len(tokens), unk_in_output=tokens.count("<unk>"),
                      decode_s=round(wall, 1), decode_cpu_s=round(cpu, 1))  # fmt: skip
        return scores, hyps

    def decode_all(self, out_dir, paths, variants, unk_dict=None):
        """Every variant's scores; the unk variants say how many <unk>s they replaced
        and the dictionary one how many of those the dictionary changed."""
        scores, hyps = {}, {}
        for variant in variants:
            scores[variant], hyps[variant] = self.decode(out_dir, paths, variant, unk_dict)
        for variant in variants[1:]:
            scores[variant]["replaced"] = scores["plain"]["unk_in_output"]
        if "unk_dict" in scores:
            changed = sum(a != b for c, d in zip(hyps["unk_copy"], hyps["unk_dict"])
                          for a, b in zip(c.split(), d.split()))  # fmt: skip
            scores["unk_dict"]["changed_by_dictionary"] = changed
        return scores

    def common(self, name, seed, opts):
        return {
            "row": name,
            "seed": seed,
            "options": opts,
            "commit": describe_commit(),
            "data": {k: self.data_stats.get(k) for k in
                     ("vocab", "max_len", "train_pairs", "train_kept", "test_unk_rate")},
            "threads": self.args.threads,
            "jobs_at_once": self.args.jobs,
            "machine": harness.machine(),
        }  # fmt: skip

    def row(self, name, seed, opts):
        """Train, decode and write ``RESULTS/NAME.seedK.json``; returns it."""
        state = self.train(name, seed, opts)
        run_dir = self.run_dir(name, seed)
        ckpt = [os.path.join(run_dir, "checkpoint_best.pt")]
        variants = opts["decode"]["variants"]
        result = self.common(name, seed, opts)
        unk_dict = None
        if "unk_dict" in variants:
            unk_dict, *facts = self.unk_dictionary(name, seed)
            result["unk_dict_entries"], result["unk_dict_s"], result["unk_dict_cpu_s"] = facts
        result["scores"] = self.decode_all(run_dir, ckpt, variants, unk_dict)
        updates, per_epoch = self.args.updates, state["updates_per_epoch"]
        result.update(
            updates=updates,
            updates_per_epoch=per_epoch,
            epochs=round(updates / per_epoch, 2) if per_epoch else None,
            train_wall_s=round(state["wall_s"], 1),
            train_cpu_s=round(state["cpu_s"], 1),
            s_per_100_updates=round(100 * state["wall_s"] / updates, 1),
            training_sessions=state["sessions"],
            valid_ppl={str(u): p for u, p in sorted(state["valid_ppl"].items())},
            best_valid_ppl=min(state["valid_ppl"].values()),
            finished=time.strftime("%Y-%m-%d %H:%M:%S"),
        )
        write_json(result_path(self.args.results, name, seed), result)
        return result

    def ensemble(self, seed, opts):
        """The members' best checkpoints decoded together (``--path a:b:...``)."""
        out_dir = self.run_dir(ENSEMBLE, seed)
        os.makedirs(out_dir, exist_ok=True)
        paths = [os.path.join(self.run_dir(m, seed), "checkpoint_best.pt") for m in MEMBERS]
        missing = [p for p in paths if not os.path.exists(p)]
        if missing:
            raise RuntimeError(f"ensemble seed {seed}: {', '.join(missing)} missing; delete "
                               "those members' JSON files to train them again")  # fmt: skip
        unk_dict = os.path.join(self.run_dir(DICTIONARY_OF, seed), "unk.dict")
        if not os.path.exists(unk_dict):
            unk_dict = self.unk_dictionary(DICTIONARY_OF, seed)[0]
        result = self.common(ENSEMBLE, seed, opts)
        result["members"] = list(MEMBERS)
        result["scores"] = self.decode_all(out_dir, paths, list(VARIANTS), unk_dict)
        result["finished"] = time.strftime("%Y-%m-%d %H:%M:%S")
        write_json(result_path(self.args.results, ENSEMBLE, seed), result)
        return result
