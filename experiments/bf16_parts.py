"""Where does bf16 cost per update? The demo's global model with parts of it kept in fp32.

    python -m experiments.bf16_parts [--variants NAME ...] [--seeds 1 2] [--updates 500]

Trains compare_runs.py's ``global-forward-luong`` (the demo's settings, global attention,
``--precision bf16``) from a seed with some of its products kept in fp32, each run in a
fresh process on one thread, and records the valid perplexity every
``--validate-every`` updates. A part kept in fp32 runs outside autocast on fp32
inputs and weights; everything else stays as ``--precision bf16`` runs it
(luong_plugin/modules/precision.py):

- ``gates_x``: layer 0's input gates from the embeddings, W_x y_{t-1} + b, one
  product over all steps (``luong_loop.input_gates``);
- ``gates``: each step's recurrent product [h̃_{t-1}; h_{t-1}] W (``lstm_step``);
- ``combine``: eq. (5), h̃_t = tanh(W_c [c_t; h_t]);
- ``output``: eq. (6)'s W_s h̃_t (with the demo's shared embeddings, W_s is the
  decoder's embedding matrix: ``gates_x`` and ``output`` are its two products);
- ``decoder``: the whole decoder outside autocast, on the encoder's outputs cast to fp32
  (this also computes the general score's projected keys W_a h̄ in fp32).

The attention of each step (scores, softmax, c_t) runs as precision.py says in
every variant but ``decoder``.

A variant names the parts it keeps in fp32 (VARIANTS); ``bf16`` keeps none (the
demo) and ``fp32`` trains with ``--precision fp32``. Every patched run prints one
marker per part, checked in its log. Each run x seed writes
``docs/experiments/bf16_parts/VARIANT.seedK.json`` when it finishes; one whose JSON
has the same updates is skipped. compare_page.py renders them into docs/COMPARE.md.
"""

import argparse
import json
import os
import sys
from concurrent.futures import ThreadPoolExecutor

from experiments import compare, harness
from experiments.compare_runs import RUNS

RUN = "global-forward-luong"
OUT_DIR = os.path.join(harness.REPO, "docs", "experiments", "bf16_parts")
PARTS = ("gates_x", "gates", "combine", "output", "decoder")
LOOP = ("gates_x", "gates", "combine")  # the input-feeding loop's bf16 products
# name: parts kept in fp32
VARIANTS = {
    "bf16": (),
    "gates_x": ("gates_x",),
    "gates": ("gates",),
    "combine": ("combine",),
    "output": ("output",),
    "loop": LOOP,
    "embedding": ("gates_x", "output"),
    "loop+output": (*LOOP, "output"),
    "decoder": ("decoder",),
    "fp32": (),
}


def marker(part: str) -> str:
    return f"[bf16-parts] {part} kept in fp32"


def told(part: str) -> None:
    print(marker(part), file=sys.stderr, flush=True)


def keep_fp32(parts, patch=setattr, told=told) -> None:
    """Patches the plugin (``patch(owner, name, value)``) so that a model built
    afterwards keeps ``parts`` in fp32 under ``--precision bf16``; ``told(part)``
    for each part patched."""
    import torch

    from luong_plugin.models import luong
    from luong_plugin.modules import luong_decoder, luong_loop
    from luong_plugin.modules.precision import full_precision, step_attention_precision

    Decoder = luong_decoder.LuongDecoder
    if "gates_x" in parts:

        def input_gates_fp32(x, weight, bias):
            with full_precision(x.device):
                return torch.nn.functional.linear(x, weight, bias)  # B x T x 4H

        patch(luong_loop, "input_gates", input_gates_fp32)
        told("gates_x")
    if "gates" in parts:
        concat, step = luong_loop.concat_step_weights, luong_loop.lstm_step

        def concat_fp32(lstm, embed_dim):  # outside autocast: the weights stay fp32
            with full_precision(lstm.weight_hh_l0.device):
                return concat(lstm, embed_dim)

        def step_fp32(gates_in, inputs, h, c, weight):
            with full_precision(inputs.device):
                return step(gates_in.float(), inputs.float(), h, c, weight)

        patch(luong_loop, "concat_step_weights", concat_fp32)
        patch(luong_loop, "lstm_step", step_fp32)
        told("gates")
    if "combine" in parts:

        def attend(
            self, query, proj_keys, encoder_out, steps, combine=None, position=None, source=None
        ):
            """LuongDecoder.attend with eq. (5) outside autocast, W_c in fp32; a step's
            attention takes the plain path (``source``, the fused node's, is not used)."""
            values = encoder_out["encoder_out"]
            with step_attention_precision(query, values):
                context, prob, extras = self.attention(
                    query, proj_keys, values, encoder_out["src_pad_mask"],
                    encoder_out["src_lengths"], steps, position=position,
                )  # fmt: skip
            joint = torch.cat([context, query], dim=-1)  # B x T x (E + H): [c_t; h_t]
            with full_precision(query.device):
                attn_vec = torch.tanh(self.W_c(joint.float()))  # B x T x O
            return attn_vec, prob, extras.get("p_t")

        patch(Decoder, "attend", attend)
        told("combine")
    if "output" in parts:

        def output_layer(self, features, incremental_state=None):
            with full_precision(features.device):
                return self.W_s(features.float())

        patch(Decoder, "output_layer", output_layer)
        told("output")
    if "decoder" in parts:
        set_precision = luong.set_precision

        def decoder_fp32(model, precision):
            set_precision(model, precision)
            model.decoder.compute_dtype = None  # no autocast around the decoder
            encode = model.encoder.forward

            def forward(*args, **kwargs):
                out = encode(*args, **kwargs)
                return {k: v.float() if hasattr(v, "is_floating_point") and v.is_floating_point()
                        else v for k, v in out.items()}  # fmt: skip

            model.encoder.forward = forward
            told("decoder")

        patch(luong, "set_precision", decoder_fp32)  # build_model calls it


def worker(parts, argv) -> None:
    """Runs fairseq-train in this process with ``parts`` kept in fp32."""
    import torch
    from fairseq_cli.train import cli_main  # first: it sets up the log's format

    torch.set_num_threads(1)
    keep_fp32(parts)
    sys.argv = ["fairseq-train", *argv]
    cli_main()


def result_path(variant: str, seed: int) -> str:
    return os.path.join(OUT_DIR, f"{variant}.seed{seed}.json")


def read(variant: str, seed: int):
    path = result_path(variant, seed)
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def train(variant: str, seed: int, args) -> dict:
    options = list(RUNS[RUN][1])
    if variant == "fp32":
        options[options.index("--precision") + 1] = "fp32"
    log = harness.run_worker(
        "bf16_parts", variant, compare.worker_argv(options, seed, args), args.python
    )
    missing = [p for p in VARIANTS[variant] if marker(p) not in log]
    if missing:
        raise RuntimeError(f"{variant} seed {seed}: the patch of {missing} did not take effect")
    ppl, wall = harness.parse_log(log)
    if args.updates not in ppl:
        raise RuntimeError(f"{variant} seed {seed}: no valid ppl at {args.updates} updates")
    result = {
        "variant": variant, "fp32_parts": list(VARIANTS[variant]), "seed": seed,
        "updates": args.updates, "valid_ppl": {str(k): v for k, v in sorted(ppl.items())},
        "wall_s": wall, "options": options, "commit": harness.describe_commit(),
    }  # fmt: skip
    os.makedirs(OUT_DIR, exist_ok=True)
    with open(result_path(variant, seed) + ".tmp", "w") as f:
        json.dump(result, f, indent=1)
    os.replace(result_path(variant, seed) + ".tmp", result_path(variant, seed))
    return result


def table_lines() -> list:
    """docs/COMPARE.md's section on bf16's cost per update; none before a result exists."""
    results = {}
    for variant in VARIANTS:
        for seed in range(1, 10):
            r = read(variant, seed)
            if r:
                results.setdefault(variant, {})[seed] = r
    if not results:
        return []
    checks = sorted({int(c) for v in results.values() for r in v.values() for c in r["valid_ppl"]})
    commits = sorted({r["commit"] for v in results.values() for r in v.values()})
    lines = [
        "## Where bf16 costs per update",
        "",
        f"Rendered from `{os.path.relpath(OUT_DIR, harness.REPO)}/` "
        f"(`python -m experiments.bf16_parts`, commit {', '.join(commits)}): `{RUN}` in bf16 "
        "with the parts a row names kept in fp32 (outside autocast, on fp32 inputs and "
        "weights), one thread per run; valid perplexity, `mean (seed 1 / seed 2 / …)`.",
        "",
        "| variant | kept in fp32 | " + " | ".join(f"ppl @ {c}" for c in checks) + " |",
        "|---|---|" + "---|" * len(checks),
    ]
    for variant, parts in VARIANTS.items():
        if variant not in results:
            continue
        kept = {"bf16": "nothing", "fp32": "everything (`--precision fp32`)"}
        cells = []
        for c in checks:
            values = {s: r["valid_ppl"][str(c)] for s, r in results[variant].items()
                      if str(c) in r["valid_ppl"]}  # fmt: skip
            cells.append(harness.seed_cell(values))
        what = kept.get(variant, ", ".join(f"`{p}`" for p in parts))
        lines.append(f"| `{variant}` | {what} | " + " | ".join(cells) + " |")
    return lines + [""]


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--worker"]:
        if len(argv) < 3 or argv[1] not in VARIANTS or argv[2] != "--":
            sys.exit(f"usage: --worker {{{','.join(VARIANTS)}}} -- FAIRSEQ_ARGS")
        return worker(VARIANTS[argv[1]], argv[3:])
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[1, 2])
    parser.add_argument("--updates", type=int, default=500)
    parser.add_argument("--validate-every", type=int, default=250)
    parser.add_argument("--jobs", type=int, default=2, help="runs at once, one thread each")
    parser.add_argument("--data", default=harness.DATA)
    parser.add_argument("--python", default=harness.PYTHON)
    parser.add_argument("--out", default=harness.COMPARE_PAGE)
    args = parser.parse_args(argv)
    if min(args.updates, args.validate_every, args.jobs, *args.seeds) < 1:
        parser.error("--updates, --validate-every, --jobs and --seeds must be >= 1")
    todo = [(v, s) for v in args.variants for s in args.seeds
            if (read(v, s) or {}).get("updates") != args.updates]  # fmt: skip
    print(f"{len(todo)} runs to train, {args.jobs} at once", flush=True)

    def one(item):
        r = train(*item, args)
        print(f"{item[0]} seed {item[1]}: valid ppl {r['valid_ppl']}", flush=True)
        harness.render_compare_page(args.python, args.out)

    with ThreadPoolExecutor(args.jobs) as pool:
        for _ in pool.map(one, todo):
            pass
    harness.render_compare_page(args.python, args.out)


if __name__ == "__main__":
    main()
