"""Invariants of the `luong` model: incremental == full forward, beam reordering,
padding and batch independence, gradients, param counts, option errors."""

import itertools

import pytest
import torch
from conftest import build, make_dictionary, random_batch, random_prev_output

from luong_plugin.models.luong import ARCHS, arch_config
from luong_plugin.modules import luong_loop
from luong_plugin.modules.options import OptionError
from luong_plugin.modules.scores import SCORES as SCORE_NAMES
from luong_plugin.modules.windows import WINDOWS as WINDOW_NAMES

VARIANTS = [
    dict(attention_window=w, attention_score=s, input_feeding=f, reverse_source=r)
    for w, s, f, r in itertools.product(
        list(WINDOW_NAMES),
        list(SCORE_NAMES),
        [True, False],
        [True, False],
    )
] + [
    dict(attention_window="none", input_feeding=False, reverse_source=r, decoder_out_embed_dim=24)
    for r in (True, False)
]


def variant_id(v):
    return "-".join(
        str(v[k])
        for k in ("attention_window", "attention_score", "input_feeding", "reverse_source")
        if k in v
    )


def decode_incrementally(model, src, lengths, prev, new_order=None, swap_at=None):
    enc = model.encoder(src, lengths)
    state = {}
    outs, attns = [], []
    for t in range(1, prev.size(1) + 1):
        if swap_at is not None and t == swap_at:
            enc = model.encoder.reorder_encoder_out(enc, new_order)
            model.decoder.reorder_incremental_state_scripting(state, new_order)
            prev = prev.index_select(0, new_order)
            outs = [o.index_select(0, new_order) for o in outs]
            attns = [a.index_select(0, new_order) for a in attns if a is not None]
        out, extra = model.decoder(prev[:, :t], enc, incremental_state=state)
        outs.append(out)
        attns.append(extra["attn"][0])
    attn = None if attns[0] is None else torch.cat(attns, 1)
    return torch.cat(outs, 1), attn


@pytest.mark.parametrize("kw", VARIANTS, ids=variant_id)
def test_incremental_equals_full_forward(kw):
    model = build(**kw)
    src, lengths = random_batch(model.encoder.dictionary, [9, 4, 6, 1])
    prev = random_prev_output(model.decoder.dictionary, 4, 7)
    full, extra = model(src, lengths, prev)
    inc, inc_attn = decode_incrementally(model, src, lengths, prev)
    torch.testing.assert_close(inc, full, atol=1e-5, rtol=0)
    if kw["attention_window"] != "none":
        torch.testing.assert_close(inc_attn, extra["attn"][0], atol=1e-5, rtol=0)


def test_generation_builds_the_step_weights_once_per_call(monkeypatch):
    """Without autograd the input-feeding path keeps its concatenated LSTM weights
    in the incremental state: built once per generation call, reordering leaves
    them alone, and a new call after the weights changed sees the new ones."""
    model = build(attention_window="local-p", attention_score="general", input_feeding=True)
    model.eval()
    built = []
    concat = luong_loop.concat_step_weights
    monkeypatch.setattr(
        luong_loop, "concat_step_weights", lambda lstm, C: built.append(C) or concat(lstm, C)
    )
    src, lengths = random_batch(model.encoder.dictionary, [9, 4, 6])
    prev = random_prev_output(model.decoder.dictionary, 3, 6)
    new_order = torch.tensor([2, 2, 0, 1])
    with torch.no_grad():
        before, _ = model(src, lengths, prev)
        reordered, _ = decode_incrementally(model, src, lengths, prev, new_order, swap_at=4)
        assert len(built) == 2  # the full forward's, then one for six steps
        expected, _ = model(src.index_select(0, new_order), lengths[new_order], prev[new_order])
        torch.testing.assert_close(reordered, expected, atol=1e-5, rtol=0)
        model.decoder.lstm.weight_hh_l0.data.mul_(0.5)  # as an optimizer step would
        again, _ = decode_incrementally(model, src, lengths, prev)
        full, _ = model(src, lengths, prev)
        torch.testing.assert_close(again, full, atol=1e-5, rtol=0)
        assert not torch.allclose(again, before)  # the new weights were used
    assert len(built) == 5  # the second call built its own; each full forward too


@pytest.mark.parametrize("window", list(WINDOW_NAMES))
def test_reorder_then_continue_equals_permuted_batch(window):
    model = build(attention_window=window, attention_score="general")
    src, lengths = random_batch(model.encoder.dictionary, [9, 4, 6])
    prev = random_prev_output(model.decoder.dictionary, 3, 6)
    new_order = torch.tensor([2, 2, 0, 1])  # beam search duplicates and drops rows
    reordered, _ = decode_incrementally(model, src, lengths, prev, new_order, swap_at=4)
    expected, _ = model(src.index_select(0, new_order), lengths[new_order], prev[new_order])
    torch.testing.assert_close(reordered, expected, atol=1e-5, rtol=0)


def _single(model, tokens, prev):
    src = tokens.unsqueeze(0)
    out, extra = model(src, torch.tensor([tokens.numel()]), prev.unsqueeze(0))
    attn = extra["attn"][0]
    return out[0], None if attn is None else attn[0]


@pytest.mark.parametrize(
    "kw",
    [v for v in VARIANTS if not v["reverse_source"] or v["attention_window"] == "local-p"],
    ids=variant_id,
)
def test_output_independent_of_padding_and_batch(kw):
    model = build(**kw)
    d = model.encoder.dictionary
    lengths = [8, 3, 5]
    prev = random_prev_output(model.decoder.dictionary, 3, 6)
    outs = {}
    for left_pad, extra_pad in [(True, 0), (False, 0), (True, 4), (False, 3)]:
        src, lens = random_batch(d, lengths, left_pad=left_pad, max_len=max(lengths) + extra_pad)
        out, extra = model(src, lens, prev)
        outs[(left_pad, extra_pad)] = (src, out, extra["attn"][0])
    for i, n in enumerate(lengths):
        tokens = outs[(False, 0)][0][i, :n]
        alone, alone_attn = _single(model, tokens, prev[i])
        for (left_pad, _), (src, out, attn) in outs.items():
            torch.testing.assert_close(out[i], alone, atol=1e-5, rtol=0)
            if attn is None:
                continue
            real = src[i].ne(d.pad())
            assert torch.equal(src[i][real], tokens)  # same sentence
            torch.testing.assert_close(attn[i][:, real], alone_attn, atol=1e-5, rtol=0)
            assert attn[i][:, ~real].abs().max() == 0 if (~real).any() else True


def test_attention_map_indexes_src_tokens_columns():
    """Left-padded input: the map's non-zero columns are exactly the real tokens."""
    model = build(attention_window="global", attention_score="general")
    src, lengths = random_batch(model.encoder.dictionary, [7, 2, 4], left_pad=True)
    prev = random_prev_output(model.decoder.dictionary, 3, 5)
    _, extra = model(src, lengths, prev)
    attn = extra["attn"][0]  # B x T x S
    real = src.ne(model.encoder.dictionary.pad())
    assert torch.all(attn.masked_select(~real.unsqueeze(1)) == 0)
    torch.testing.assert_close(attn.sum(-1), torch.ones(3, 5), atol=1e-6, rtol=0)


@pytest.mark.parametrize("window", list(WINDOW_NAMES))
@pytest.mark.parametrize("score", list(SCORE_NAMES))
def test_gradients_reach_every_parameter(window, score):
    model = build(attention_window=window, attention_score=score).train()
    src, lengths = random_batch(model.encoder.dictionary, [9, 4, 6])
    prev = random_prev_output(model.decoder.dictionary, 3, 6)
    out, _ = model(src, lengths, prev)
    out.log_softmax(-1).sum().backward()
    for name, param in model.named_parameters():
        assert param.grad is not None, name
        assert torch.isfinite(param.grad).all(), name
        assert param.grad.abs().sum() > 0, name


def test_unsorted_batch_matches_sorted_batch():
    model = build()
    src, lengths = random_batch(model.encoder.dictionary, [3, 9, 5, 7])
    prev = random_prev_output(model.decoder.dictionary, 4, 5)
    order = torch.argsort(lengths, descending=True)
    unsorted_out, _ = model(src, lengths, prev)
    sorted_out, _ = model(src[order], lengths[order], prev[order])
    torch.testing.assert_close(unsorted_out[order], sorted_out, atol=1e-6, rtol=0)


def test_init_is_uniform_in_range():
    model = build("luong_tiny", init_range=0.05)
    for name, param in model.named_parameters():
        assert param.abs().max() <= 0.05, name
    big = torch.cat([p.flatten() for p in model.parameters()])
    assert big.min() < -0.045 and big.max() > 0.045


def forget_slices(model):
    """{name: (forget gate's b_ih, the rest of the LSTM's parameters)} per LSTM layer."""
    out = {}
    for part in ("encoder", "decoder"):
        lstm = getattr(model, part).lstm
        H = lstm.hidden_size
        for name, param in lstm.named_parameters():
            if name.startswith("bias_ih"):
                rest = torch.cat([param[:H], param[2 * H :]])
                out[f"{part}.{name}"] = (param[H : 2 * H], rest)
    return out


@pytest.mark.parametrize("bias", [1.0, -0.5])
def test_forget_gate_bias_moves_only_the_forget_gates(bias):
    """--forget-gate-bias b: b_ih[H:2H] (torch's gate order i, f, g, o) of every layer of
    both LSTMs is b + U(-r, r); every other parameter is the default init, draw for draw."""
    torch.manual_seed(3)
    plain = build("luong_tiny", init_range=0.05)
    torch.manual_seed(3)
    biased = build("luong_tiny", init_range=0.05, forget_gate_bias=bias)
    slices, plain_slices = forget_slices(biased), forget_slices(plain)
    assert len(slices) == 4  # luong_tiny: 2 encoder + 2 decoder layers
    for name, (forget, rest) in slices.items():
        plain_forget, plain_rest = plain_slices[name]
        torch.testing.assert_close(forget, plain_forget + bias, atol=1e-6, rtol=0)
        torch.testing.assert_close(rest, plain_rest, atol=0, rtol=0)
        assert ((forget - bias).abs() <= 0.05 + 1e-6).all(), name
    seen = {f"{p}.lstm.{n}" for p, n in (k.split(".", 1) for k in slices)}
    plain_params = dict(plain.named_parameters())
    for name, param in biased.named_parameters():
        if name not in seen:
            torch.testing.assert_close(param, plain_params[name], atol=0, rtol=0)


def test_forget_gate_bias_reaches_the_gates():
    """The bias shows where the cell uses it: a 1-step decoder from zero state has
    σ(f) = σ(b + ...) — a big b keeps c_{t-1}, checked on the LSTM's own step."""
    torch.manual_seed(0)
    model = build("luong_tiny", forget_gate_bias=20.0)
    lstm = model.decoder.lstm
    x = torch.zeros(1, 1, lstm.input_size)
    c0 = torch.full((lstm.num_layers, 1, lstm.hidden_size), 0.7)
    h0 = torch.zeros_like(c0)
    with torch.no_grad():
        _, (_, c1) = torch.nn.LSTM.forward(lstm, x, (h0, c0))
    # c_1 = σ(f) c_0 + σ(i) tanh(g) with σ(f) ≈ 1 and |σ(i) tanh(g)| <= 0.5 · tanh(0.3)
    assert (c1[0] - 0.7).abs().max() < 0.5 * torch.tanh(torch.tensor(0.3)) + 1e-3


# -- parameter counts with a 50K/50K vocabulary ---------------------------------


def lstm_params(input_size, hidden, layers):
    per_layer = lambda n_in: 4 * hidden * (n_in + hidden) + 2 * 4 * hidden  # noqa: E731
    return per_layer(input_size) + (layers - 1) * per_layer(hidden)


def expected_params(cfg, vocab=50000):
    E, H, O, L = (
        cfg["encoder_embed_dim"],
        cfg["encoder_hidden_size"],
        cfg["decoder_out_embed_dim"],
        cfg["encoder_layers"],
    )
    C = cfg["decoder_embed_dim"]
    n = vocab * E + lstm_params(E, H, L)  # source embedding, encoder
    feed = O if cfg["input_feeding"] else 0
    n += vocab * C + lstm_params(C + feed, H, L)  # target embedding, decoder
    n += O * vocab + vocab  # W_s, eq. (6)
    if cfg["attention_window"] != "none":
        n += (H + H) * O  # W_c, eq. (5)
        n += {
            "dot": 0,
            "general": H * H,
            "concat": H * (H + H) + H,
            "location": H * cfg["max_source_positions"],
        }[cfg["attention_score"]]
        if cfg["attention_window"] == "local-p":
            n += H * H + H  # W_p, v_p, eq. (9)
    return n


@pytest.mark.parametrize("arch", [a for a in ARCHS if a.endswith("wmt_en_de")])
def test_param_count_50k_vocab(arch):
    with torch.device("meta"):
        model = build(
            arch, n_symbols=50000 - 4, n_tgt_symbols=50000 - 4
        )  # fairseq adds 4 special symbols
    assert len(model.encoder.dictionary) == len(model.decoder.dictionary) == 50000
    count = sum(p.numel() for p in model.parameters())
    assert count == expected_params(arch_config(arch))


def test_best_system_size():
    # 4 x 1000 LSTMs, 50K vocabularies: ~ 221M parameters, 61% of them embeddings/softmax
    with torch.device("meta"):
        model = build("luong_wmt_en_de", n_symbols=50000 - 4, n_tgt_symbols=50000 - 4)
    count = sum(p.numel() for p in model.parameters())
    assert 200e6 < count < 240e6


# -- option errors ----------------------------------------------------------------


@pytest.mark.parametrize(
    "overrides, message",
    [
        (
            dict(attention_score="foo"),
            "--attention-score: unknown value 'foo'; allowed values: concat, dot, general, location",
        ),
        (dict(attention_window="bar"), "--attention-window"),
        (dict(window_size=0), "--window-size must be a positive integer, got 0"),
        (dict(window_size=-2, attention_window="local-m"), "--window-size"),
        (dict(encoder_layers=3), "--encoder-layers (3) must equal --decoder-layers (2)"),
        (dict(decoder_hidden_size=30), "--encoder-hidden-size (24) must equal"),
        (dict(attention_window="none"), "--no-input-feeding"),
        (
            dict(attention_window="none", input_feeding=False),
            "--decoder-out-embed-dim (20) must equal",
        ),
        (dict(dropout=1.5), "--dropout must be in [0, 1)"),
        (dict(encoder_embed_dim=0), "--encoder-embed-dim must be a positive integer"),
        (dict(share_decoder_input_output_embed=True), "--share-decoder-input-output-embed"),
    ],
)
def test_bad_options_raise_clear_errors(overrides, message):
    with pytest.raises(OptionError) as err:
        build("luong_tiny", **overrides)
    assert message in str(err.value)


def test_location_score_rejects_source_longer_than_its_maximum():
    model = build(attention_score="location", attention_window="global", max_source_positions=8)
    src, lengths = random_batch(model.encoder.dictionary, [9, 4])
    prev = random_prev_output(model.decoder.dictionary, 2, 3)
    with pytest.raises(OptionError, match="source length 9 exceeds --max-source-positions 8"):
        model(src, lengths, prev)
    src, lengths = random_batch(model.encoder.dictionary, [8, 4])
    out, _ = model(src, lengths, prev)  # at the maximum: fine
    assert torch.isfinite(out).all()


def test_dot_score_needs_equal_sizes():
    from luong_plugin.modules.scores import build_score

    with pytest.raises(OptionError, match="--attention-score dot needs"):
        build_score("dot", 24, 32)


def test_one_token_sources_all_windows():
    for window in WINDOW_NAMES:
        model = build(attention_window=window)
        src, lengths = random_batch(model.encoder.dictionary, [1, 1])
        prev = random_prev_output(model.decoder.dictionary, 2, 4)
        out, extra = model(src, lengths, prev)
        assert torch.isfinite(out).all()
        assert torch.all(extra["attn"][0] <= 1.0)


def test_dictionary_helper_sizes():
    assert len(make_dictionary(10)) == 14


def test_base_model_refuses_print_alignment():
    model = build(attention_window="none", input_feeding=False, decoder_out_embed_dim=24)
    with pytest.raises(OptionError, match="--print-alignment needs attention"):
        model.make_generation_fast_(need_attn="hard")


@pytest.mark.parametrize("window", ["global", "local-p"])
def test_incremental_state_started_on_a_whole_prefix(window):
    """A first call with a prefix of several tokens runs all of them, then steps on."""
    model = build(attention_window=window)
    src, lengths = random_batch(model.encoder.dictionary, [7, 3])
    prev = random_prev_output(model.decoder.dictionary, 2, 6)
    full, _ = model(src, lengths, prev)
    enc = model.encoder(src, lengths)
    state = {}
    first, _ = model.decoder(prev[:, :4], enc, incremental_state=state)
    steps = [model.decoder(prev[:, :t], enc, incremental_state=state)[0] for t in (5, 6)]
    torch.testing.assert_close(torch.cat([first] + steps, 1), full, atol=1e-5, rtol=0)
