"""A smoke run of the benchmark harness (bench/run.py --quick): every section in its
JSON and its report. It asserts no timing."""

import json
import os
import subprocess
import sys

import pytest
import torch
from conftest import REPO


def _bench_run(*args, env=None):
    """``bench/run.py ARGS`` in a child process from the repository root, output captured."""
    cmd = [sys.executable, os.path.join(REPO, "bench", "run.py"), *map(str, args)]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, env=env)


@pytest.mark.slow
def test_bench_quick_mode_writes_a_report(bible, tmp_path):
    out, raw = tmp_path / "BENCHMARKS.md", tmp_path / "bench.json"
    proc = _bench_run(
        "--quick", "--threads", "1", "--data", bible, "--out", out, "--json", raw,
        env=dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1"),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    results = json.loads(raw.read_text())
    for section in ("train", "generate", "memory", "attention", "attention_train", "profile", "flops",
                    "gemm", "malloc"):  # fmt: skip
        assert results[section], section
    assert all(v["tok_s"] > 0 for v in results["train"].values())
    assert "fairseq lstm, fused loss" in results["malloc"]["train"]
    assert results["malloc"]["allocator"] == "glibc"  # the child runs without tcmalloc
    assert (
        results["memory"]["fairseq lstm"]["peak"] > results["memory"]["fairseq lstm"]["rss_before"]
    )
    text = out.read_text()
    for heading in (
        "## Targets",
        "## Training throughput",
        "## Beam-5 generation",
        "## Peak memory",
        "## Attention cost against the source length",
        "## Where the time goes",
        "## Training with glibc's allocator",
    ):
        assert heading in text, heading
    assert "--quick" in text
    bf16 = results["bf16"]
    if "skipped" in bf16:  # no native bf16 on this CPU: the report says so
        assert "## bf16 mixed precision" in text and bf16["skipped"] in text
    else:
        assert bf16["train"]["global-general feed [bf16]"]["tok_s"] > 0
        assert bf16["gemm"]["bf16"] > 0 and bf16["generate"] and bf16["memory"] and bf16["profile"]
        assert "| global-general feed [bf16] |" in text
        kinds = bf16["kinds"]["ms"]["global-general feed [bf16]"]
        assert all(kinds[kind] > 0 for kind in kinds), kinds
        assert "| global-general feed | products of one step (B rows) |" in text


def test_operator_kinds_tell_a_step_from_the_whole_batch():
    """bench/measure.py's kinds: a matrix product with the batch's rows run once a step is a
    step's; fewer calls, or other rows, are the whole batch's; a B x 1 x K batched product is
    a step's attention; oneDNN's LSTM is the whole batch's; anything else is the rest. A
    profile of a loop of known products splits its time so."""
    sys.path.insert(0, os.path.join(REPO, "bench"))
    import measure

    step, whole, attention, rest = measure.KINDS
    B, T = 8, 5
    assert measure.operator_kind("aten::mm", [[B, 16], [16, 32]], B, T, T) == step
    assert (
        measure.operator_kind("aten::addmm", [[32], [B, 16], [16, 32], [], []], B, T, 2 * T) == step
    )
    assert measure.operator_kind("aten::mm", [[B, 16], [16, 32]], B, T, T - 1) == whole
    assert measure.operator_kind("aten::mm", [[16, B * T], [B * T, 32]], B, T, 1) == whole
    assert (
        measure.operator_kind("aten::addmm_", [[9, 4], [9, 40], [40, 4], [], []], B, T, 1) == whole
    )
    assert measure.operator_kind("aten::bmm", [[B, 1, 16], [B, 16, 7]], B, T, 2 * T) == attention
    assert measure.operator_kind("aten::bmm", [[B, 16, T], [B, T, 7]], B, T, 1) == whole
    assert measure.operator_kind("aten::mkldnn_rnn_layer", [[T, B, 16]], B, T, 1) == whole
    assert measure.operator_kind("aten::add", [[B, 16], [B, 16], []], B, T, T) == rest

    x, w = torch.randn(B, 64), torch.randn(64, 64)
    q, k = torch.randn(B, 1, 64), torch.randn(B, 64, 12)
    big = torch.randn(256, 256)

    def run():
        h = x
        for _ in range(T):
            h = torch.tanh(h.mm(w))  # a step's product, then the rest
            q.bmm(k)  # a step's attention
        big.mm(big)  # the whole batch's

    run()
    ms = measure.profile_kinds(run, B, T)
    assert list(ms) == list(measure.KINDS)
    assert all(ms[kind] > 0 for kind in measure.KINDS), ms


@pytest.mark.slow
def test_micro_encoder_times_both_paths_of_each_batch(bible, tmp_path):
    """bench/micro_encoder.py on a small corpus, one round: a row per batch kind and system,
    the batches counted by their number of source lengths, and bad options refused."""
    script = os.path.join(REPO, "bench", "micro_encoder.py")
    raw = tmp_path / "encoder.json"
    proc = subprocess.run(
        [sys.executable, script, "--data", bible, "--rounds", "1", "--batches", "10", "--threads", "1",
         "--max-tokens", "2000", "--json", raw],
        capture_output=True, text=True, cwd=REPO,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads(raw.read_text())
    assert set(results["counts"]) == {"2000"} and sum(results["counts"]["2000"].values()) == 10
    assert results["rows"] and all(
        r["packed_ms"] > 0 and r["by_length_ms"] > 0 for r in results["rows"]
    )
    assert {r["lengths"] for r in results["rows"]} <= {1, 2, 3, 4}
    assert "| --max-tokens | source lengths |" in proc.stdout
    bad = subprocess.run([sys.executable, script, "--rounds", "0"], capture_output=True, text=True)
    assert bad.returncode == 2 and "--rounds must be a positive integer" in bad.stderr
    bad = subprocess.run([sys.executable, script, "--data", str(tmp_path)], capture_output=True,
                         text=True)  # fmt: skip
    assert bad.returncode == 2 and "no binarised corpus" in bad.stderr


def test_position_step_prints_every_piece_against_global():
    """bench/micro_position_step.py --quick: one row per piece, each with its ratio to global."""
    proc = subprocess.run(
        [sys.executable, os.path.join(REPO, "bench", "micro_position_step.py"), "--quick", "--threads", "1"],
        capture_output=True, text=True, cwd=REPO,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    table = [line.split("|")[1:4] for line in proc.stdout.splitlines() if line.startswith("| ")]
    assert [name.strip() for name, _, _ in table] == [
        "piece",
        "global",
        "local-p",
        "eq. (9)",
        "mask and log G",
        "h_t W_p",
        "loop alone",
    ]
    cells = {name.strip(): (float(us), float(ratio)) for name, us, ratio in table[1:]}
    assert all(us > 0 for us, _ in cells.values())
    assert cells["global"][1] == 1.00
    # each ratio is its time over global's, to the printed digits (a fast piece may print 0.00
    # on a loaded machine: the ratio is read against the times, not against zero)
    peer = cells["global"][0]
    for name, (us, ratio) in cells.items():
        rounding = 0.005 + 0.05 / peer * (1 + us / peer)  # the ratio's digits, the times' 0.05
        assert abs(ratio - us / peer) <= rounding, name


def test_position_step_refuses_a_size_below_one():
    proc = subprocess.run(
        [sys.executable, os.path.join(REPO, "bench", "micro_position_step.py"), "--batch", "0"],
        capture_output=True, text=True, cwd=REPO,
    )  # fmt: skip
    assert proc.returncode == 2 and "--batch must be a positive integer" in proc.stderr


# -- bench/gpu.py: its plumbing on the CPU (--dry-run), its targets from given numbers --------
def _bench_module(name="gpu"):
    import importlib.util

    path = os.path.join(REPO, "bench", f"{name}.py")
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _gpu_module():
    return _bench_module("gpu")


def test_gpu_targets_are_ratios_of_the_same_run():
    _gpu_module()  # puts bench/ on the path
    gpu = _bench_module("gpu_report")
    train = {
        "lstm": {"fp32": {"tokens_per_s": 100.0}, "fp16": {"error": "RuntimeError: x"}},
        "global": {"fp32": {"tokens_per_s": 200.0}, "bf16": {"tokens_per_s": 320.0}},
        "local-p": {"fp32": {"tokens_per_s": 150.0}},
    }
    decode = {"lstm": {"fp32": {"sentences_per_s": 10.0}},
              "global": {"fp16": {"sentences_per_s": 25.0}}}  # fmt: skip
    rows = {t: (m, ok) for t, m, ok in gpu.targets(train, decode)}
    assert rows["global bf16 >= 1.5x global fp32"] == ("1.60x", True)
    # the peer's fastest WORKING setting: its failed --fp16 does not count
    assert rows["global (bf16) >= 3x lstm (fp32)"] == ("3.20x", True)
    assert rows["local-p (fp32) >= 0.9x global (bf16)"] == ("0.47x", False)
    assert rows["beam 10: global (fp16) >= 2x lstm (fp32)"] == ("2.50x", True)
    # with --cuda-graphs: ours in its fastest setting, graphed or not
    train["global+graphs"] = {"fp32": {"tokens_per_s": 250.0}, "amp": {"tokens_per_s": 400.0}}
    train["local-p+graphs"] = {"tf32": {"tokens_per_s": 380.0}}
    rows = {t: (m, ok) for t, m, ok in gpu.targets(train, decode)}
    assert rows["global+graphs amp >= 1.5x global+graphs fp32"] == ("1.60x", True)
    assert rows["global (amp+graphs) >= 3x lstm (fp32)"] == ("4.00x", True)
    assert rows["local-p (tf32+graphs) >= 0.9x global (amp+graphs)"] == ("0.95x", True)


def test_make_bench_keeps_the_gpu_section_of_the_page():
    """bench/run.py rewrites docs/BENCHMARKS.md from its own results, and keeps the section
    bench/gpu.py's runs own, which its header links to."""
    _gpu_module()
    report = _bench_module("report")
    with open(os.path.join(REPO, "docs", "BENCHMARKS.md")) as f:
        page = f.read()
    kept = report.kept_section(page)
    assert kept.startswith("\n## On a GPU") and page.endswith(kept)
    assert report.kept_section("# Benchmarks\n\n## Training throughput\n") == ""


# make bench's pages, one per kind of CPU (Makefile): the page, the folder of its runs' JSONs,
# and whether its CPU has AMX
BENCH_PAGES = {
    "BENCHMARKS.md": ("docs/experiments/bench/", False),
    "BENCHMARKS_AMX.md": ("docs/experiments/bench_amx/", True),
}


@pytest.mark.parametrize("name", list(BENCH_PAGES))
def test_benchmarks_page_is_what_its_json_renders(name, tmp_path):
    """Each of make bench's pages names the JSON of its run in its command line, and rendering
    that JSON (``bench/run.py --render-only``) gives the page back byte for byte: no figure on
    the page is edited by hand, and the length-keyed tables come back in numeric order (JSON
    keeps their keys as strings: 100, 1000, 200 ... unless restored). The run's CPU is the
    page's kind."""
    import re

    _gpu_module()
    report = _bench_module("report")
    with open(os.path.join(REPO, "docs", name)) as f:
        page = f.read()
    named = re.search(r"^- command: `python bench/run\.py [^`]*--json (docs/\S+\.json)", page, re.M)
    assert named, f"{name}'s command names no --json file under docs/"
    folder, amx = BENCH_PAGES[name]
    assert named.group(1).startswith(folder), (name, named.group(1))
    with open(os.path.join(REPO, named.group(1))) as f:
        raw = json.load(f)
    # make bench names its JSON make_bench_<commit>.json: the name and the run's commit agree
    stem = os.path.basename(named.group(1))
    if stem.startswith("make_bench_"):
        assert stem == f"make_bench_{raw['commit'].split('+')[0]}.json", (stem, raw["commit"])
    assert ("amx_bf16" in raw["machine"].get("cpu_bf16", "")) == amx, raw["machine"]
    # the opening names a GPU section only on the page that keeps one (BENCHMARKS.md's)
    assert ("GPU section" in page) == bool(report.kept_section(page)), name
    assert report.page(report.from_json(raw), page) == page
    # the same through the command line, into a copy of the page
    out = tmp_path / "BENCHMARKS.md"
    out.write_text(page)
    proc = _bench_run("--render-only", "--json", os.path.join(REPO, named.group(1)), "--out", out)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert out.read_text() == page
    # without the restored keys the attention table's lengths would sort as strings
    assert report.markdown(raw) != report.markdown(report.from_json(raw))


def test_render_only_needs_the_results():
    proc = _bench_run("--render-only")
    assert proc.returncode == 2 and "--render-only needs --json FILE" in proc.stderr
    proc = _bench_run("--render-only", "--json", "no/such/results.json")
    assert proc.returncode == 2 and "--json no/such/results.json: no such file" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_gpu_failure_line_is_the_error_not_the_traceback_tail():
    gpu = _gpu_module()
    log = "Traceback (most recent call last):\n  File x\nRuntimeError: mat1 and mat2\n\nsome log\n"
    assert gpu.failure(log) == "RuntimeError: mat1 and mat2"


def test_gpu_runs_go_precision_by_precision_and_stop_at_the_deadline(monkeypatch, tmp_path):
    """fp32 first, each precision's training runs then its decodes (from the fp32 runs'
    checkpoints), the results recorded after every run; a model whose fp32 run failed has
    its decodes recorded as not run; past ``--deadline-s`` nothing starts and what is left
    is recorded as not run."""
    import argparse
    import types

    gpu = _gpu_module()
    clock, calls, recorded = [0.0], [], []
    monkeypatch.setattr(gpu, "time", types.SimpleNamespace(time=lambda: clock[0]))

    def fake_train(args, bin_dir, model, precision, save_dir=None):
        calls.append(("train", model, precision))
        clock[0] += 10
        if model == "lstm" and precision == "fp32":
            return {"error": "RuntimeError: out of memory"}  # and no checkpoint
        if save_dir:  # the fp32 run keeps a checkpoint for the decodes
            os.makedirs(save_dir)
            open(os.path.join(save_dir, "checkpoint_last.pt"), "w").close()
        return {"tokens_per_s": 100.0, "peak_gib": 1.0}

    def fake_decode(args, bin_dir, model, precision, checkpoint):
        calls.append(("decode", model, precision))
        clock[0] += 5
        return {"sentences": 8, "sentences_per_s": 2.0, "equal_lengths": True}

    monkeypatch.setattr(gpu, "run_train", fake_train)
    monkeypatch.setattr(gpu, "run_decode", fake_decode)
    args = argparse.Namespace(models=["lstm", "global"], precisions=["bf16", "fp32", "amp"],
                              rounds=1, deadline_s=45, started=0.0, out=str(tmp_path))  # fmt: skip
    train, decode = gpu.run_all(
        args, "bin", str(tmp_path / "runs"), lambda t, d: recorded.append(1)
    )
    assert calls == [
        ("train", "lstm", "fp32"), ("train", "global", "fp32"),  # 0 -> 20 s
        ("decode", "global", "fp32"),  # -> 25 s
        ("train", "global", "bf16"),  # fairseq's lstm has no bf16; -> 35 s
        ("decode", "global", "bf16"),  # -> 40 s
        ("train", "lstm", "amp"),  # starts at 40 s, ends past the deadline (45 s)
    ]  # fmt: skip
    assert train["lstm"]["fp32"] == {"error": "RuntimeError: out of memory"}
    assert decode["lstm"]["fp32"] == {"error": gpu.NO_CHECKPOINT}
    assert train["global"]["amp"] == {"error": gpu.SKIPPED}  # --amp decodes nothing
    assert train["global"]["bf16"]["tokens_per_s"] == 100.0
    assert decode["global"]["bf16"]["sentences_per_s"] == 2.0
    assert len(recorded) == len(calls) + 1  # and lstm's decode, not run
    gpu_report = _bench_module("gpu_report")
    rows = gpu_report.table_rows(decode, ["fp32", "bf16"], gpu_report.decode_cell)
    assert rows[0] == "| lstm | not run (no fp32 checkpoint) |  |"


def test_gpu_probe_dry_run_measures_and_keeps_earlier_models(tmp_path):
    """bench/gpu_probe.py's plumbing on the CPU: one model per process, each adding its rows
    to probe.json (no graphs on a CPU)."""
    for model, precisions in (
        ("lstm", ["fp32"]),
        ("global", ["fp32", "fp32-plain", "fp32+graphs"]),
    ):
        cmd = [sys.executable, os.path.join(REPO, "bench", "gpu_probe.py"), "--dry-run",
               "--out", str(tmp_path / "out"), "--work", str(tmp_path / "work"),
               "--models", model, "--precisions", *precisions]  # fmt: skip
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    runs = json.loads((tmp_path / "out" / "probe.json").read_text())["runs"]
    assert set(runs) == {"lstm fp32", "global fp32", "global fp32-plain", "global fp32+graphs"}
    for row in runs.values():
        assert row["tokens_per_s"] > 0 and row["host_s"] > 0 and row["encoder_s"] > 0, row
    for key in ("lstm fp32", "global fp32"):  # beam search, and the decoder's share of it
        row = runs[key]
        assert row["beam_sentences_per_s"] > 0 and 0 < row["beam_decoder_share"] < 1, row
    assert "beam_sentences_per_s" not in runs["global fp32-plain"]


def test_gpu_probe_swaps_an_encoder_outputs_floats_for_graph_inputs():
    import torch

    _gpu_module()
    probe = _bench_module("gpu_probe")
    x, mask = torch.ones(2, 3), torch.zeros(2, 3, dtype=torch.bool)
    out = {"encoder_out": (x, mask), "final": [x * 2], "n": 3}
    assert [t.tolist() for t in probe.tensors(out)] == [x.tolist(), (x * 2).tolist()]
    leaves = [torch.zeros(2, 3), torch.full((2, 3), 7.0)]
    swapped = probe.with_leaves(out, list(leaves))
    assert swapped["encoder_out"][0] is leaves[0] and swapped["encoder_out"][1] is mask
    assert swapped["final"][0] is leaves[1] and swapped["n"] == 3


@pytest.mark.slow
def test_gpu_benchmark_dry_run_trains_and_decodes(tmp_path):
    """The GPU benchmark's whole path on the CPU: data, fairseq-train with the timed
    worker, a checkpoint, beam 10 at forced lengths (fairseq's half model through the
    CLI: test_half_models.py)."""
    out = tmp_path / "out"
    cmd = [
        sys.executable,
        os.path.join(REPO, "bench", "gpu.py"),
        "--dry-run",
        "--out",
        out,
        "--work",
        tmp_path / "work",
        "--models",
        "global",
        "global+graphs",
        "--precisions",
        "fp32",
    ]
    proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, cwd=REPO)  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    results = json.loads((out / "results.json").read_text())
    assert results["train"]["global"]["fp32"]["tokens_per_s"] > 0, results["train"]
    # --cuda-graphs on a CPU: accepted, trained on the plain path, not decoded
    assert results["train"]["global+graphs"]["fp32"]["tokens_per_s"] > 0, results["train"]
    assert "global+graphs" not in results["decode"]
    decoded = results["decode"]["global"]["fp32"]
    assert decoded["sentences"] == 8 and decoded["equal_lengths"], decoded
    assert "| global |" in (out / "summary.md").read_text()


@pytest.mark.slow
def test_by_length_quick_compares_the_models_at_each_length(bible, tmp_path):
    out = tmp_path / "by_length.json"
    cmd = [sys.executable, os.path.join(REPO, "bench", "by_length.py"), "--quick",
           "--threads", "1", "--data", str(bible / "bin"), "--out", str(out)]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = json.loads(out.read_text())["rows"]
    assert [r["length"] for r in rows] == [8, 40]
    for r in rows:
        assert min(v for k, v in r.items() if k.endswith(" ratio")) > 0
        assert {
            "local-p train ratio",
            "local-m beam ratio",
            "local-p fused scored train ratio",
            "local-p fused gathered train ratio",
        } <= set(r)
    assert "| 40 |" in proc.stdout
