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
    logits = model.decoder.output_layer(features)  # B x T x V
    g = torch.Generator().manual_seed(5)
    weights = torch.rand(logits.shape, generator=g, dtype=logits.dtype).to(logits.device)
    loss = (logits * weights).sum()
    if extra["p_t"][0] is not None:
        loss = loss + extra["p_t"][0].sum() / 7
    loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return features.detach(), extra["attn"][0], extra["p_t"][0], grads


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


@pytest.mark.parametrize("variant", VARIANTS)
def test_a_padded_batch_gives_the_plain_features_and_gradients(variant):
    """Extra sentences, source positions and target steps, cut off again: the same
    outputs and gradients as the batch itself (float64)."""
    model = model_of(variant)
    src, lengths, prev = inputs(model)
    decoder = model.decoder
    plain = training_pass(model, src, lengths, prev, decoder.plain_features)

    def padded(prev, encoder_out):
        fields = pad_encoder_out(encoder_out, 8, 12)
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
    # B, S, T: the third batch replays the second's bucket; the location score's S stops at
    # its last weight row
    S = min(16, variant.get("max_source_positions", 16))
    assert [key[:3] for key in graphs.captured] == [(8, S, 8), (8, 8, 8), (8, S, 16)]
    assert graphs.eager_batches == 0


def test_gradients_accumulate_over_graphed_passes():
    """fairseq's --update-freq: two backward passes into the same .grad add up, as in the
    plain pass; a gradient handed to autograd that were the graph's own buffer would be
    overwritten by the second replay."""
    model = model_of(VARIANTS[2].values[0])
    first, second = inputs(model), inputs(model, seed=3)

    def accumulated():
        model.zero_grad(set_to_none=True)
        for src, lengths, prev in (first, second):
            features, _ = model.decoder.extract_features(prev, model.encoder(src, lengths))
            model.decoder.output_layer(features).pow(2).mean().backward()
        return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    want = accumulated()
    graphed(model)
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


@cuda
@pytest.mark.parametrize("variant", VARIANTS[:3] + VARIANTS[4:5])
def test_cuda_the_graphed_pass_gives_the_plain_one(variant):
    """float64 on CUDA: captured, replayed, replayed after the weights changed in place
    (as fairseq's optimizers change them), and a second bucket."""
    model = model_of(variant, "cuda")
    batches = [inputs(model, device="cuda"), inputs(model, seed=2, device="cuda"),
               inputs(model, (3, 12, 6), 11, seed=4, device="cuda")]  # fmt: skip
    graphs = cuda_graphed(model)
    for k, batch in enumerate(batches):
        if k == 1:
            with torch.no_grad():
                for p in model.parameters():
                    p.mul_(0.9)
        got = training_pass(model, *batch)
        graphs_off, model.decoder.graphs = model.decoder.graphs, None
        want = training_pass(model, *batch)
        model.decoder.graphs = graphs_off
        assert_same_pass(got, want, atol=1e-11, grad_atol=1e-9)
    assert len(graphs.captured) == 2


@cuda
@pytest.mark.parametrize("window", ["global", "local-p"])
def test_cuda_the_graphed_pass_in_bf16_reads_the_current_weights(window):
    """Under --precision bf16 (autocast) the weights' bf16 casts are recorded in the graph:
    after the weights change, a replay gives the plain pass of the new weights."""
    model = build(attention_window=window, attention_score="general", dropout=0.0,
                  precision="bf16").cuda().train()  # fmt: skip
    spread_parameters(model)
    batch = inputs(model, device="cuda")
    cuda_graphed(model)
    training_pass(model, *batch)
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(0.5)
    got = training_pass(model, *batch)
    graphs, model.decoder.graphs = model.decoder.graphs, None
    want = training_pass(model, *batch)
    assert_same_pass(got, want, atol=1e-5, grad_atol=1e-4)
    assert len(graphs.captured) == 1
