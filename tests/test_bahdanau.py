"""Bahdanau et al. (2015): the model against a slow, loop-based reference of
Appendix A.2, decoding invariants, the init of Appendix B, the paper's model
sizes, and fairseq's command line."""

import argparse

import pytest
import torch
import torch.nn.functional as F
from bahdanau_reference import reference
from conftest import (
    TinyTask,
    build,
    make_dictionary,
    parse_training_args,
    random_batch,
    random_prev_output,
)
from fairseq.models import ARCH_CONFIG_REGISTRY, ARCH_MODEL_REGISTRY
from torch.testing import assert_close

from luong_plugin.models import bahdanau
from luong_plugin.modules.maxout import Maxout
from luong_plugin.modules.options import OptionError

VARIANTS = [
    dict(attention=attention, readout_state=readout)
    for attention in ("additive", "none")
    for readout in ("previous", "current")
]
VARIANT_IDS = [f"{v['attention']}-{v['readout_state']}" for v in VARIANTS]


def randomized(model, std=0.3, seed=0):
    """Double precision, every parameter (v_a and biases too) random, so that no
    term of the equations vanishes as it does at the paper's init."""
    g = torch.Generator().manual_seed(seed)
    model.double()
    with torch.no_grad():
        for param in model.parameters():
            param.copy_(torch.randn(param.shape, generator=g, dtype=param.dtype) * std)
    return model


@pytest.mark.parametrize("left_pad", [True, False], ids=["left_pad", "right_pad"])
@pytest.mark.parametrize("variant", VARIANTS, ids=VARIANT_IDS)
def test_matches_appendix_a_reference(variant, left_pad):
    model = randomized(build("bahdanau_tiny", **variant))
    pad = model.encoder.padding_idx
    src, lengths = random_batch(model.encoder.dictionary, [5, 2, 7], left_pad=left_pad)
    prev = random_prev_output(model.decoder.dictionary, 3, 6)
    logits, extra = model(src, lengths, prev)
    for b in range(3):
        real = src[b].ne(pad)  # S
        ref_logits, ref_alpha = reference(model, src[b][real], prev[b], variant["readout_state"])
        assert_close(logits[b], ref_logits, atol=1e-5, rtol=0)
        if ref_alpha is None:
            assert extra["attn"][0] is None
            continue
        attn = extra["attn"][0][b]  # T x S, columns of src_tokens
        assert_close(attn[:, real], ref_alpha, atol=1e-5, rtol=0)
        assert attn[:, ~real].abs().sum() == 0


def test_attention_reads_previous_state_and_context_enters_gru():
    model = randomized(build("bahdanau_tiny"))
    src, lengths = random_batch(model.encoder.dictionary, [6, 4])
    prev = random_prev_output(model.decoder.dictionary, 2, 3)
    enc = model.encoder(src, lengths)

    def run():
        state = {}
        logits, extra = model.decoder(prev[:, :1], enc, incremental_state=state)
        s_1 = model.decoder.get_incremental_state(state, "cached_state")["hidden"]
        full_logits, full_extra = model.decoder(prev, enc)
        return logits, s_1, full_extra["attn"][0]

    logits, s_1, attn = run()
    with torch.no_grad():  # the GRU update changes s_1, s_2, ... but not s_0
        model.decoder.gru.W.weight.add_(torch.randn_like(model.decoder.gru.W.weight))
        model.decoder.gru.U.weight.add_(torch.randn_like(model.decoder.gru.U.weight))
    _, s_1_new, attn_new = run()
    assert (s_1_new - s_1).abs().max() > 1e-3
    assert_close(attn_new[:, 0], attn[:, 0])  # α_1 reads s_0
    assert (attn_new[:, 1] - attn[:, 1]).abs().max() > 1e-4  # α_2 reads s_1

    logits, s_1, _ = run()
    with torch.no_grad():  # C c_i enters z_i, r_i and s̃_i
        model.decoder.C.weight.add_(torch.randn_like(model.decoder.C.weight))
    logits_new, s_1_new, _ = run()
    assert (s_1_new - s_1).abs().max() > 1e-3
    assert_close(logits_new, logits)  # readout 'previous': t̃_1 reads s_0, not s_1


def decode_incrementally(model, enc, prev, state, steps):
    outs = [model.decoder(prev[:, : t + 1], enc, incremental_state=state) for t in steps]
    logits = torch.cat([out[0] for out in outs], dim=1)  # B x T x V
    attn = outs[0][1]["attn"][0]
    if attn is not None:
        attn = torch.cat([out[1]["attn"][0] for out in outs], dim=1)  # B x T x S
    return logits, attn


@pytest.mark.parametrize("variant", VARIANTS, ids=VARIANT_IDS)
def test_incremental_equals_full_forward(variant):
    model = randomized(build("bahdanau_tiny", **variant))
    src, lengths = random_batch(model.encoder.dictionary, [5, 3, 7])
    prev = random_prev_output(model.decoder.dictionary, 3, 5)
    enc = model.encoder(src, lengths)
    full, extra = model.decoder(prev, enc)
    logits, attn = decode_incrementally(model, enc, prev, {}, range(5))
    assert_close(logits, full)
    if variant["attention"] == "additive":
        assert_close(attn, extra["attn"][0])


@pytest.mark.parametrize("attention", ["additive", "none"])
def test_reorder_then_continue_equals_permuted_batch(attention):
    model = randomized(build("bahdanau_tiny", attention=attention))
    src, lengths = random_batch(model.encoder.dictionary, [5, 3, 7])
    prev = random_prev_output(model.decoder.dictionary, 3, 6)
    enc = model.encoder(src, lengths)
    state = {}
    decode_incrementally(model, enc, prev, state, range(3))
    new_order = torch.tensor([2, 0, 0, 1])  # beam-style: permuted and duplicated
    enc = model.encoder.reorder_encoder_out(enc, new_order)
    model.decoder.reorder_incremental_state_scripting(state, new_order)
    logits, attn = decode_incrementally(model, enc, prev[new_order], state, range(3, 6))
    expected, extra = model(src[new_order], lengths[new_order], prev[new_order])
    assert_close(logits, expected[:, 3:])
    if attention == "additive":
        assert_close(attn, extra["attn"][0][:, 3:])


def padded(rows, pad, left_pad, max_len):
    out = []
    for row in rows:
        fill = torch.full((max_len - len(row),), pad)
        out.append(torch.cat([fill, row] if left_pad else [row, fill]))
    return torch.stack(out), torch.tensor([len(row) for row in rows])


@pytest.mark.parametrize("attention", ["additive", "none"])
def test_sentence_invariant_to_padding_and_batch(attention):
    model = randomized(build("bahdanau_tiny", attention=attention))
    d, pad = model.encoder.dictionary, model.encoder.padding_idx
    sentence = random_batch(d, [4], seed=3)[0][0]
    others = [random_batch(d, [n], seed=n)[0][0] for n in (7, 2, 5)]
    prev = random_prev_output(model.decoder.dictionary, 1, 5)
    layouts = [  # (rows, left_pad, max_len, row of the sentence)
        ([sentence], True, 4, 0),
        ([others[0], sentence, others[1]], True, 7, 1),
        ([others[0], sentence, others[1]], False, 7, 1),
        ([sentence, others[2]], False, 11, 0),
        ([others[2], others[1], sentence], True, 9, 2),
    ]
    results = []
    for rows, left_pad, max_len, row in layouts:
        src, lengths = padded(rows, pad, left_pad, max_len)
        logits, extra = model(src, lengths, prev.expand(len(rows), -1))
        attn = extra["attn"][0]
        real = src[row].ne(pad)
        results.append((logits[row], None if attn is None else attn[row][:, real]))
    for logits, attn in results[1:]:
        assert_close(logits, results[0][0])
        if attention == "additive":
            assert_close(attn, results[0][1])


@pytest.mark.parametrize("left_pad", [True, False], ids=["left_pad", "right_pad"])
def test_zero_attention_and_zero_annotations_on_padding(left_pad):
    model = randomized(build("bahdanau_tiny"))
    pad = model.encoder.padding_idx
    src, lengths = random_batch(model.encoder.dictionary, [5, 2, 7], left_pad=left_pad)
    prev = random_prev_output(model.decoder.dictionary, 3, 4)
    enc = model.encoder(src, lengths)
    assert enc["encoder_out"][enc["src_pad_mask"]].abs().sum() == 0
    _, extra = model(src, lengths, prev)
    attn = extra["attn"][0]  # B x T x S
    assert attn[src.eq(pad).unsqueeze(1).expand_as(attn)].abs().sum() == 0
    assert_close(attn.sum(-1), torch.ones(3, 4, dtype=attn.dtype))


@pytest.mark.parametrize("attention", ["additive", "none"])
def test_gradients_reach_every_parameter(attention):
    model = randomized(build("bahdanau_tiny", attention=attention, dropout=0.1)).train()
    src, lengths = random_batch(model.encoder.dictionary, [5, 2, 7])
    prev = random_prev_output(model.decoder.dictionary, 3, 4)
    logits, _ = model(src, lengths, prev)
    target = random_prev_output(model.decoder.dictionary, 3, 4, seed=5)
    F.cross_entropy(logits.flatten(0, 1), target.flatten()).backward()
    for name, param in model.named_parameters():
        assert param.grad is not None, name
        assert torch.isfinite(param.grad).all(), name
        assert param.grad.abs().sum() > 0, name


def test_init_follows_appendix_b():
    sizes = dict(encoder_hidden_size=64, decoder_hidden_size=64, attention_dim=64)
    model = build("bahdanau_tiny", n_symbols=200, maxout_dim=64, **sizes)
    enc, dec = model.encoder, model.decoder
    for gru in (enc.forward_gru, enc.backward_gru, dec.gru):
        blocks = gru.recurrent_blocks()  # U, U_z, U_r
        for block in blocks:
            assert block.shape == (64, 64)
            assert_close(block @ block.T, torch.eye(64), atol=1e-5, rtol=0)
        assert not torch.allclose(blocks[1], blocks[2])  # drawn separately
    for name, param in model.named_parameters():
        if name.endswith(("bias", "v_a.weight")):
            assert param.abs().sum() == 0, name
        elif name.endswith(("W_q.weight", "W_k.weight")):  # W_a, U_a
            assert abs(param.std().item() - 0.001) < 1e-4, name
        elif not name.endswith(("U.weight", "U_zr.weight")):
            if name.endswith("embed_tokens.weight"):
                assert param[enc.padding_idx].abs().sum() == 0, name
                param = torch.cat([param[: enc.padding_idx], param[enc.padding_idx + 1 :]])
            assert abs(param.std().item() - 0.01) < 1e-3, name
            assert abs(param.mean().item()) < 1e-3, name


def paper_param_count(attention, Kx=30000, Ky=30000, m=620, n=1000, n_a=1000):
    """Counted from Appendix A.2 (plus one bias per gate, W_s, V, V', U_o, W_o, b_a)."""
    units, k = 500, 2  # l maxout units of pool 2
    gru = 3 * n * m + 3 * n + 3 * n * n  # [W; W_z; W_r] E x + b, U, U_z, U_r
    A = 2 * n if attention else n  # context: annotation h_j or summary c
    encoder = Kx * m + (2 * gru if attention else gru + n * n + n)  # ... + V
    decoder = Ky * m + n * n + n  # E, W_s (V' for RNNencdec)
    if attention:
        decoder += n_a * n + n_a * A + n_a + n_a  # W_a, U_a, v_a, b_a
    decoder += gru + 3 * n * A  # + C, C_z, C_r
    decoder += k * units * (n + m + A) + k * units  # U_o, V_o, C_o, readout bias
    decoder += Ky * units + Ky  # W_o
    return encoder + decoder


def build_on_meta(args, n_symbols=29996):
    task = TinyTask(make_dictionary(n_symbols), make_dictionary(n_symbols))
    with torch.device("meta"):
        return ARCH_MODEL_REGISTRY[args.arch].build_model(args, task), task


@pytest.mark.parametrize(
    "arch, attention, expected",
    [
        ("bahdanau_rnnsearch_wmt_en_fr", True, 80_443_000),
        ("bahdanau_rnnencdec_wmt_en_fr", False, 69_579_000),
    ],
)
def test_paper_param_counts(arch, attention, expected):
    args = argparse.Namespace(arch=arch)
    ARCH_CONFIG_REGISTRY[arch](args)
    model, task = build_on_meta(args)
    assert len(task.source_dictionary) == len(task.target_dictionary) == 30000
    count = sum(param.numel() for param in model.parameters())
    assert count == paper_param_count(attention) == expected


@pytest.mark.parametrize("arch", list(bahdanau.ARCHS))
def test_arch_parses_through_fairseq_cli_and_builds(arch):
    args = parse_training_args(arch)
    for name, value in bahdanau.arch_config(arch).items():
        assert getattr(args, name) == value, name
    if arch == "bahdanau_tiny":
        task = TinyTask(make_dictionary(20), make_dictionary(23))
        model = ARCH_MODEL_REGISTRY[arch].build_model(args, task)
        device = "cpu"
    else:  # the paper's sizes: shapes only, nothing allocated
        model, task = build_on_meta(args, n_symbols=20)
        device = "meta"
    src, lengths = random_batch(task.source_dictionary, [4, 2])
    prev = random_prev_output(task.target_dictionary, 2, 3)
    logits, _ = model(src.to(device), lengths.to(device), prev.to(device))
    assert logits.shape == (2, 3, len(task.target_dictionary))


@pytest.mark.parametrize(
    "argv, option",
    [
        (["--readout-state", "foo"], "--readout-state"),
        (["--attention", "bahdanau"], "--attention"),
    ],
)
def test_cli_rejects_unknown_choices(argv, option, capsys):
    with pytest.raises(SystemExit):
        parse_training_args("bahdanau_tiny", *argv)
    err = capsys.readouterr().err
    assert option in err and "invalid choice" in err


@pytest.mark.parametrize(
    "overrides, option, detail",
    [
        (
            dict(readout_state="foo"),
            "--readout-state",
            "allowed values: current, previous",
        ),
        (dict(attention="dot"), "--attention", "allowed values: additive, none"),
        (dict(maxout_dim=0), "--maxout-dim", "must be a positive integer, got 0"),
        (dict(maxout_pool=0), "--maxout-pool", "must be a positive integer, got 0"),
        (dict(encoder_hidden_size=0), "--encoder-hidden-size", "must be a positive"),
        (dict(decoder_embed_dim=-3), "--decoder-embed-dim", "must be a positive"),
        (dict(attention_dim=0), "--attention-dim", "must be a positive integer"),
        (dict(dropout=1.0), "--dropout", "must be in [0, 1), got 1.0"),
    ],
)
def test_bad_values_raise_errors_naming_the_option(overrides, option, detail):
    with pytest.raises(OptionError) as error:
        build("bahdanau_tiny", **overrides)
    assert option in str(error.value) and detail in str(error.value)


def test_attention_options_and_generation_flags():
    model = build("bahdanau_tiny", attention="none", attention_dim=0)  # dim unused
    with pytest.raises(OptionError, match="--print-alignment needs attention"):
        model.make_generation_fast_(need_attn="hard")  # fairseq's --print-alignment
    model.make_generation_fast_(need_attn=False)
    model = build("bahdanau_tiny")
    src, lengths = random_batch(model.encoder.dictionary, [3, 2])
    prev = random_prev_output(model.decoder.dictionary, 2, 2)
    assert model(src, lengths, prev)[1]["attn"][0].shape == (2, 2, 3)
    model.make_generation_fast_(need_attn=False)
    assert model(src, lengths, prev)[1]["attn"] == [None]


def test_maxout_pools_adjacent_units_and_rejects_indivisible_inputs():
    x = torch.tensor([[1.0, 5.0, -2.0, -3.0, 0.0, 4.0]])
    assert_close(Maxout(2)(x), torch.tensor([[5.0, -2.0, 4.0]]))
    assert_close(Maxout(3)(x), torch.tensor([[5.0, 4.0]]))
    with pytest.raises(OptionError, match="not divisible by --maxout-pool 4"):
        Maxout(4)(x)
