"""Training and generation throughput of systems built by name, every system
interleaved round by round on the same batches: sections of run.py (and of bf16.py,
whose systems are built through these)."""

import functools
import os

import measure
from systems import (
    FUSED,
    FUSED_CRITERION,
    REFERENCE,
    SIZES,
    build,
    common_args,
    split,
    system,
    with_criterion,
)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
USER_DIR = os.path.join(REPO, "luong_plugin")


def build_system(name: str, common, sizes=SIZES):
    import torch

    torch.manual_seed(1)
    name, precision = split(name)  # "... [bf16]": --precision bf16
    spec = system(name)
    if spec.fused_loss:
        common = with_criterion(common, FUSED_CRITERION)
    args, task, model, criterion = build(list(spec.args) + precision, common, USER_DIR, sizes)
    if spec.step_by_step:  # every forward through the per-step loop (luong_loop.py)
        from luong_plugin.modules.luong_loop import per_step_features

        model.decoder.extract_features = functools.partial(per_step_features, model.decoder)
    return args, task, model, criterion


def dims_of(args, task) -> dict:
    return {
        "H": args.decoder_hidden_size,
        "C": args.decoder_embed_dim,
        "O": args.decoder_out_embed_dim,
        "E": args.encoder_hidden_size,
        "L": args.decoder_layers,
        "V": len(task.target_dictionary),
        "D": 10,
        "pad": task.target_dictionary.pad(),
    }


def training(args, bin_dir, names, dropout, criterion, batches_per_round, sizes=SIZES):
    """tok/s of each system, interleaved; returns (results, batches, dims)."""
    common = common_args(bin_dir, dropout, criterion, args.max_tokens)
    built = {name: build_system(name, common, sizes) for name in names}
    _, task, _, _ = built[names[0]]
    batches = measure.train_batches(task, args.max_tokens, batches_per_round, skip=1)
    jobs = {
        name: measure.make_update(model, crit, batches)
        for name, (_, _, model, crit) in built.items()
    }
    seconds, raw = measure.median_rounds(jobs, args.rounds)
    tokens = measure.target_tokens(batches)
    results = {
        name: {"tok_s": tokens / s, "seconds": s, "rounds": raw[name]}
        for name, s in seconds.items()
    }
    dims = dims_of(built[names[0]][0], task)
    return results, batches, dims, built


def decoder_path(args, built, batches):
    """Seconds of the decoder's feature path (forward + backward) of the no-feed
    model, fused against per-step, and of each system's output layer + loss."""
    model = built["global-general"][2]
    jobs = {
        "fused": measure.make_decoder_pass(model, batches, step_by_step=False),
        "per-step": measure.make_decoder_pass(model, batches, step_by_step=True),
    }
    shared = [
        n
        for n in (
            REFERENCE,
            "global-general feed",
            REFERENCE + FUSED,
            "global-general feed" + FUSED,
        )
        if n in built
    ]
    for name in shared:
        jobs["output " + name] = measure.make_output_pass(built[name][2], built[name][3], batches)
    seconds, _ = measure.median_rounds(jobs, args.rounds)
    return {
        "fused": seconds["fused"],
        "per_step": seconds["per-step"],
        "output": {name: seconds["output " + name] for name in shared},
    }


def generation(args, bin_dir, names, sentences, batch_size):
    import torch  # noqa: F401

    common = common_args(bin_dir, 0.0, "cross_entropy", args.max_tokens)
    built = {name: build_system(name, common) for name in names}
    _, task, _, _ = built[names[0]]
    batches = measure.test_batches(task, sentences, batch_size)
    n_sentences = sum(b["nsentences"] for b in batches)
    generated = {name: [] for name in names}
    jobs = {
        name: measure.make_generate(model, task.target_dictionary, batches, 5, generated[name])
        for name, (_, _, model, _) in built.items()
    }
    seconds, _ = measure.median_rounds(jobs, args.rounds)
    return {
        name: {
            "sent_s": n_sentences / s,
            "seconds": s,
            "sentences": n_sentences,
            "tokens": generated[name][-1],
        }
        for name, s in seconds.items()
    }
