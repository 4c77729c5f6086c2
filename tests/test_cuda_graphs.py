"""--cuda-graphs (modules/cuda_graphs.py). On any device: a batch padded up to its bucket
against the plain batch, and the capture's bookkeeping (static inputs, outputs cut back,
gradients handed to autograd, buckets and their limit) against the plain training pass,
with a stand-in that reruns the recorded function where a GPU would replay its kernels.
On CUDA: the graphed pass against the plain one, after the weights have changed under it,
and in bf16."""

import pytest
import torch
from conftest import build, random_batch, random_prev_output, spread_parameters

from luong_plugin.modules.cuda_graphs import (
    FIELDS,
    DecoderGraphs,
    RerunGraph,
    pad_encoder_out,
    pad_tokens,
)
from luong_plugin.modules.options import OptionError
from luong_plugin.modules.precision import cpu_has_native_bf16, run_dtype

VARIANTS = [
    pytest.param(dict(attention_window="global", attention_score="general"), id="global"),
    pytest.param(dict(attention_window="local-m", attention_score="general"), id="local-m"),
    pytest.param(dict(attention_window="local-p", attention_score="general"), id="local-p"),
    pytest.param(dict(attention_window="local-p", attention_score="dot",
                      renormalize_window=True, position_logit_bound=4.0), id="local-p-renorm"),
    pytest.param(dict(attention_window="global", attention_score="location",
                      max_source_positions=12), id="global-location"),
    pytest.param(dict(attention_window="global", attention_score="concat",
                      input_feeding=False), id="global-concat-nofeed"),
]  # fmt: skip


def model_of(variant, device="cpu", dropout=0.0):
    model = build(**variant, dropout=dropout, window_size=2, reverse_source=True)
    return spread_parameters(model).double().to(device).train()


def inputs(model, lengths=(9, 4, 7), target_len=7, seed=0, device="cpu"):
    src, src_lengths = random_batch(model.encoder.dictionary, list(lengths), seed=seed)
    prev = random_prev_output(model.decoder.dictionary, len(lengths), target_len, seed=seed + 1)
    return src.to(device), src_lengths.to(device), prev.to(device)


def training_pass(model, src, lengths, prev, features_of=None):
    """Features, a_t, p_t and every parameter's gradient of one training pass, the loss a
    fixed weighting of the logits (and of p_t) so that every output's gradient counts."""
    model.zero_grad(set_to_none=True)
    encoder_out = model.encoder(src, lengths)
    features_of = features_of or model.decoder.extract_features
    features, extra = features_of(prev, encoder_out)
    dtype = run_dtype(model.decoder)  # the output layer in the decoder's precision, as forward
    with torch.autocast(features.device.type, dtype=dtype, enabled=dtype is not None):
        logits = model.decoder.output_layer(features)  # B x T x V
    g = torch.Generator().manual_seed(5)
    weights = torch.rand(logits.shape, generator=g, dtype=logits.dtype).to(logits.device)
    loss = (logits * weights).sum()
    if extra["p_t"][0] is not None:
        loss = loss + extra["p_t"][0].sum() / 7
    loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    # copies: a graph's outputs are its own buffers, which its next replay overwrites
    kept = [None if x is None else x.detach().clone() for x in (extra["attn"][0], extra["p_t"][0])]
    return (features.detach().clone(), *kept, grads)


def assert_same_pass(got, want, atol=1e-12, grad_atol=1e-10):
    features, attn, p_t, grads = got
    features0, attn0, p_t0, grads0 = want
    torch.testing.assert_close(features, features0, atol=atol, rtol=0)
    for a, b in ((attn, attn0), (p_t, p_t0)):
        assert (a is None) == (b is None)
        if b is not None:
            torch.testing.assert_close(a.detach(), b.detach(), atol=atol, rtol=0)
    assert grads.keys() == grads0.keys()
    for name in grads0:
        torch.testing.assert_close(grads[name], grads0[name], atol=grad_atol, rtol=grad_atol,
                                   msg=name)  # fmt: skip


@pytest.mark.parametrize("S", [12, 40])
@pytest.mark.parametrize("variant", VARIANTS)
def test_a_padded_batch_gives_the_plain_features_and_gradients(variant, S):
    """Extra sentences, source positions and target steps, cut off again: the same
    outputs and gradients as the batch itself (float64). S = 40 takes local attention's
    gathered path where the batch itself (S = 9) scores every position."""
    if S > variant.get("max_source_positions", S):
        pytest.skip("the location score has no weight rows past --max-source-positions")
    model = model_of(variant)
    src, lengths, prev = inputs(model)
    decoder = model.decoder
    plain = training_pass(model, src, lengths, prev, decoder.plain_features)

    def padded(prev, encoder_out):
        fields = pad_encoder_out(encoder_out, 8, S)
        tokens = pad_tokens(prev, 8, 16, decoder.embed_tokens.padding_idx)
        features, extra = decoder.plain_features(tokens, dict(zip(FIELDS, fields)))
        b, t, s = prev.size(0), prev.size(1), encoder_out["src_pad_mask"].size(1)
        attn, p_t = extra["attn"][0], extra["p_t"][0]
        return features[:b, :t], {
            "attn": [None if attn is None else attn[:b, :t, :s]],
            "p_t": [None if p_t is None else p_t[:b, :t]],
        }

    assert_same_pass(training_pass(model, src, lengths, prev, padded), plain)


def graphed(model, step=8, limit=4):
    model.decoder.graphs = DecoderGraphs(model.decoder, step, limit, graph=RerunGraph)
    return model.decoder.graphs


@pytest.mark.parametrize("variant", VARIANTS)
def test_the_graphed_pass_gives_the_plain_one(variant):
    """Through the capture's bookkeeping (the stand-in reruns what a GPU replays): the
    first batch of a bucket is captured, the next replayed, a batch of another shape gets
    its own bucket; each gives the plain pass's outputs and gradients."""
    model = model_of(variant)
    batches = [inputs(model), inputs(model, (5, 8, 3), 6, seed=2), inputs(model, (3, 2, 6), 5, 4),
               inputs(model, (11, 4, 6, 6), 9, seed=6)]  # fmt: skip
    plain = [training_pass(model, *b) for b in batches]
    graphs = graphed(model)
    for batch, want in zip(batches, plain):
        assert_same_pass(training_pass(model, *batch), want)
    if not variant.get("input_feeding", True):  # one cuDNN call: not graphed (cuda_graphs.py)
        assert not graphs.captured
        return
    # B, S, T: the third batch replays the second's bucket; the location score's S stops at
    # its last weight row
    S = min(16, variant.get("max_source_positions", 16))
    assert [key[:3] for key in graphs.captured] == [(8, S, 8), (8, 8, 8), (8, S, 16)]
    assert graphs.eager_batches == 0


@pytest.mark.skipif(not cpu_has_native_bf16(), reason="--precision bf16 needs native bf16")
@pytest.mark.parametrize("window", ["global", "local-p"])
def test_the_graphed_pass_in_bf16_records_without_the_autocast_cache(window, monkeypatch):
    """Under --precision bf16 inside an outer autocast whose cache of weight casts is on
    (fairseq's --amp enters one): the recorded function runs with the cache off, and the
    graphed pass gives the plain one."""
    model = build(attention_window=window, attention_score="general", dropout=0.0,
                  precision="bf16").train()  # fmt: skip
    spread_parameters(model)
    batch = inputs(model)
    with torch.autocast("cpu", dtype=torch.bfloat16, cache_enabled=True):
        want = training_pass(model, *batch)
    graphs = graphed(model)
    seen = []
    plain_features = model.decoder.plain_features

    def recorded(*args, **kwargs):
        seen.append(torch.is_autocast_cache_enabled())
        return plain_features(*args, **kwargs)

    monkeypatch.setattr(model.decoder, "plain_features", recorded)
    with torch.autocast("cpu", dtype=torch.bfloat16, cache_enabled=True):
        got = training_pass(model, *batch)
    assert seen and not any(seen) and len(graphs.captured) == 1
    assert_same_pass(got, want, atol=1e-6, grad_atol=1e-5)


def test_gradients_accumulate_over_graphed_passes():
    """fairseq's --update-freq: two backward passes into the same .grad add up, as in the
    plain pass; a gradient handed to autograd that were the graph's own buffer would be
    overwritten by the second replay."""
    model = model_of(VARIANTS[2].values[0])
    assert_accumulated_as_plain(model, [inputs(model), inputs(model, seed=3)], graphed)


def assert_accumulated_as_plain(model, batches, graphs_on):
    """Backward passes of ``batches`` into the same .grad, plain, then with ``graphs_on(model)``:
    the sums agree."""

    def accumulated():
        model.zero_grad(set_to_none=True)
        for src, lengths, prev in batches:
            features, _ = model.decoder.extract_features(prev, model.encoder(src, lengths))
            model.decoder.output_layer(features).pow(2).mean().backward()
        return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    want = accumulated()
    graphs_on(model)
    got = accumulated()
    for name in want:
        torch.testing.assert_close(got[name], want[name], atol=1e-10, rtol=1e-10, msg=name)


def test_shapes_past_the_limit_take_the_plain_path():
    model = model_of(VARIANTS[0].values[0])
    short, long = inputs(model), inputs(model, (20, 3), 17, seed=2)
    want = training_pass(model, *long)
    graphs = graphed(model, limit=1)
    training_pass(model, *short)
    assert_same_pass(training_pass(model, *long), want)
    assert len(graphs.captured) == 1 and graphs.eager_batches == 1


def test_decoding_and_validation_take_the_plain_path():
    model = model_of(VARIANTS[0].values[0])
    graphs = graphed(model)
    src, lengths, prev = inputs(model)
    with torch.no_grad():
        model.decoder.extract_features(prev, model.encoder(src, lengths))
    model.eval()
    training_pass(model, src, lengths, prev)
    assert not graphs.captured


def test_the_options_build_the_graphs_and_are_checked():
    model = build(cuda_graphs=True, cuda_graph_step=16, cuda_graph_limit=3)
    graphs = model.decoder.graphs
    assert isinstance(graphs, DecoderGraphs) and (graphs.step, graphs.limit) == (16, 3)
    assert build().decoder.graphs is None
    for option in ("cuda_graph_step", "cuda_graph_limit"):
        with pytest.raises(OptionError, match="--" + option.replace("_", "-")):
            build(cuda_graphs=True, **{option: 0})


def test_on_a_cpu_the_option_trains_the_plain_path():
    model = build(cuda_graphs=True).train()
    src, lengths, prev = inputs(model)
    features, _ = model.decoder.extract_features(prev, model.encoder(src, lengths))
    assert features.shape[:2] == prev.shape and not model.decoder.graphs.captured


# ---- on CUDA: real graphs --------------------------------------------------------------
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no GPU")


def cuda_graphed(model, step=8, limit=4):
    model.decoder.graphs = DecoderGraphs(model.decoder, step, limit)
    return model.decoder.graphs


CUDA_VARIANTS = VARIANTS[:5] + [
    pytest.param(dict(attention_window="global", attention_score="general",
                      share_decoder_input_output_embed=True, decoder_out_embed_dim=16),
                 id="global-shared-embeddings"),
]  # fmt: skip


def plain_pass(model, batch):
    graphs, model.decoder.graphs = model.decoder.graphs, None
    try:
        return training_pass(model, *batch)
    finally:
        model.decoder.graphs = graphs


@cuda
@pytest.mark.parametrize("variant", CUDA_VARIANTS)
def test_cuda_the_graphed_pass_gives_the_plain_one(variant):
    """float64 on CUDA: buckets A, A, B, A, B (one memory pool: a replay of A after B reads
    nothing B wrote), and after the weights changed in place, as fairseq's optimizers
    change them; each against the plain pass."""
    model = model_of(variant, "cuda")
    a, a2, b = (inputs(model, device="cuda"), inputs(model, seed=2, device="cuda"),
                inputs(model, (3, 12, 6), 11, seed=4, device="cuda"))  # fmt: skip
    graphs = cuda_graphed(model)
    for k, batch in enumerate([a, a2, b, a, b]):
        if k == 3:
            with torch.no_grad():
                for p in model.parameters():
                    p.mul_(0.9)
        assert_same_pass(training_pass(model, *batch), plain_pass(model, batch), 1e-11, 1e-9)
    assert len(graphs.captured) == 2 and not graphs.failed


@cuda
def test_cuda_gradients_accumulate_across_buckets():
    """--update-freq over batches of two buckets: the .grad sums equal the plain ones."""
    model = model_of(VARIANTS[2].values[0], "cuda")
    batches = [inputs(model, device="cuda"), inputs(model, (3, 12, 6), 11, 4, device="cuda")]
    graphs = []
    assert_accumulated_as_plain(model, batches + batches[:1],
                                lambda m: graphs.append(cuda_graphed(m)))  # fmt: skip
    assert len(graphs[0].captured) == 2 and not graphs[0].failed


@cuda
def test_cuda_a_bucket_is_recorded_while_the_last_pass_is_alive():
    """The last batch's loss still referenced (its autograd graph holds the weights' own
    gradient nodes, made on the default stream) when a new bucket is recorded: the
    recording reads aliases of the weights and succeeds."""
    model = model_of(VARIANTS[0].values[0], "cuda")
    a, b = inputs(model, device="cuda"), inputs(model, (3, 12, 6), 11, seed=4, device="cuda")
    graphs = cuda_graphed(model)
    want = plain_pass(model, b)
    features, _ = model.decoder.extract_features(a[2], model.encoder(*a[:2]))
    kept = model.decoder.output_layer(features).sum()
    kept.backward(retain_graph=True)
    assert_same_pass(training_pass(model, *b), want, 1e-11, 1e-9)
    assert len(graphs.captured) == 2 and not graphs.failed
    del kept


@cuda
def test_cuda_a_failed_recording_leaves_the_plain_path_and_its_dropout_working():
    """A recording that breaks (a synchronisation inside it): the shape takes the plain
    path, whose dropout still draws from the seed as without --cuda-graphs."""
    model = model_of(VARIANTS[0].values[0], "cuda", dropout=0.3)
    batch = inputs(model, device="cuda")
    plain_features = model.decoder.plain_features

    def breaks_a_recording(*args, **kwargs):
        if torch.cuda.is_current_stream_capturing():
            torch.cuda.synchronize()
        return plain_features(*args, **kwargs)

    model.decoder.plain_features = breaks_a_recording
    graphs = cuda_graphed(model)
    training_pass(model, *batch)
    assert len(graphs.failed) == 1 and not graphs.captured
    runs = []
    for features_of in (None, plain_features):  # through DecoderGraphs, and around it
        torch.manual_seed(3)
        runs.append(training_pass(model, *batch, features_of=features_of))
    assert_same_pass(*runs, atol=0, grad_atol=0)


@cuda
def test_cuda_dropout_draws_new_masks_at_every_replay_and_follows_the_seed():
    model = model_of(VARIANTS[0].values[0], "cuda", dropout=0.3)
    batch = inputs(model, device="cuda")
    cuda_graphed(model)
    training_pass(model, *batch)  # the capture (its warm-ups draw masks too)
    runs = []
    for seed in (1, 2, 1):
        torch.manual_seed(seed)
        runs.append(training_pass(model, *batch)[0])
    assert not torch.equal(runs[0], runs[1])
    torch.testing.assert_close(runs[0], runs[2], atol=0, rtol=0)


@cuda
def test_cuda_no_feed_decoders_take_the_plain_path():
    model = model_of(VARIANTS[5].values[0], "cuda", dropout=0.3)
    graphs = cuda_graphed(model)
    training_pass(model, *inputs(model, device="cuda"))
    assert not graphs.captured


@cuda
def test_cuda_a_large_batch_is_graphed():
    """More than 4,096 target tokens (the embedding's backward takes another kernel there)."""
    model = model_of(VARIANTS[2].values[0], "cuda")
    batch = inputs(model, [12] * 64, 72, device="cuda")
    graphs = cuda_graphed(model)
    for _ in range(2):
        assert_same_pass(training_pass(model, *batch), plain_pass(model, batch), 1e-11, 1e-9)
    assert len(graphs.captured) == 1


@cuda
@pytest.mark.parametrize("window", ["global", "local-p"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_cuda_the_graphed_pass_in_half_reads_the_current_weights(window, dtype):
    """--precision bf16 (fp32 weights, bf16 autocast) and fairseq's --fp16 (half weights):
    the weights' casts are recorded in the graph, so after the weights change a replay gives
    the plain pass of the new weights. A batch that fills its bucket (8 x 16 / 8): the plain
    pass runs the same shapes, and so the same kernels."""
    precision = "bf16" if dtype == torch.bfloat16 else "fp32"
    model = build(attention_window=window, attention_score="general", dropout=0.0,
                  precision=precision)  # fmt: skip
    spread_parameters(model)
    model = model.cuda().train()
    if dtype == torch.float16:
        model = model.half()
    batch = inputs(model, [16, 9, 12, 5, 16, 3, 7, 11], 8, device="cuda")
    graphs = cuda_graphed(model)
    training_pass(model, *batch)
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(0.5)
    assert_same_pass(training_pass(model, *batch), plain_pass(model, batch), 1e-3, 1e-2)
    assert len(graphs.captured) == 1 and not graphs.failed


# ---- through fairseq-train, on a CPU with the stand-in ----------------------------------
STAND_IN = """
import sys
from fairseq_cli.train import cli_main
from luong_plugin.modules import cuda_graphs

calls = []
init, call = cuda_graphs.DecoderGraphs.__init__, cuda_graphs.DecoderGraphs.__call__


def stand_in_init(self, decoder, step, limit, graph=None):
    init(self, decoder, step, limit, graph=cuda_graphs.RerunGraph)


def counted_call(self, *args):
    out = call(self, *args)
    calls.append(out is not None)
    return out


cuda_graphs.DecoderGraphs.__init__ = stand_in_init
cuda_graphs.DecoderGraphs.__call__ = counted_call
sys.argv = ["fairseq-train", *sys.argv[1:]]
cli_main()
print(f"GRAPHED {sum(calls)} OF {len(calls)}")
"""


@pytest.mark.slow
def test_fairseq_train_with_the_graphed_pass_logs_the_plain_losses(bible, tmp_path):
    """fairseq-train's own loop (the fused, label-smoothed loss, --update-freq 2, validation)
    with every training batch through the capture's bookkeeping (the CPU stand-in): the
    same training losses as without --cuda-graphs (no dropout, so the same computation)."""
    import re
    import subprocess
    import sys

    from conftest import REPO, train_args

    losses = {}
    for graphs in (False, True):
        args = train_args(
            str(bible / "bin"), str(tmp_path / f"ckpt{graphs}"), "--arch", "luong_tiny",
            "--dropout", "0", "--criterion", "fused_label_smoothed_cross_entropy",
            "--label-smoothing", "0.1", *(["--cuda-graphs"] if graphs else []),
            max_tokens=500, schedule=("--max-update", "6", "--update-freq", "2", "--log-interval",
                                      "1", "--no-save", "--max-epoch", "0"),
        )  # fmt: skip
        run = subprocess.run([sys.executable, "-c", STAND_IN, *map(str, args)], cwd=REPO,
                             capture_output=True, text=True)  # fmt: skip
        out = run.stdout + run.stderr
        assert run.returncode == 0, out[-3000:]
        losses[graphs] = [float(x) for x in re.findall(r"train_inner.*? loss=([\d.]+)", out)]
        if graphs:
            graphed, total = map(int, re.search(r"GRAPHED (\d+) OF (\d+)", run.stdout).groups())
            assert total == 12 and graphed == 12  # 6 updates of 2 batches, none past the limit
    assert len(losses[False]) == 6
    assert losses[True] == pytest.approx(losses[False], abs=2e-3)
