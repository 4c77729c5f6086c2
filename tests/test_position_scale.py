"""--position-scale: S of local-p's eq. (9), p_t = S · sigmoid(v_pᵀ tanh(W_p h_t)).

Luong's code (lmthang/nmt.matlab) computes mu = scales .* (srcLens - 1) + 1 in 1-based
positions (code/layers/attnLayerForward.m line 106), where srcLens counts the words and an
end symbol the encoder never reads (code/preprocess/prepareData.m line 23): 0-based,
p_t = (words) · sigmoid(.). The model's S_b counts the words only by default, so the
default ``paper`` (S = S_b) is also Luong's code's; with ``--attend-source-eos`` S_b counts
fairseq's final ``</s>`` as his srcLens counts its end symbol, and ``luong-code``
(S = S_b - 1) gives his p_t. Checked here:
- ``luong-code`` against the loop reference's ``_luong_code_position``, written from his
  variables (tests/luong_reference.py), for every sentence of a padded batch, either side;
  the default against the reference's eq. (9) with S = S_b;
- with no input feeding h_t does not depend on attention, so the two settings see the same
  logit and p_t(luong-code) · S_b = p_t(paper) · (S_b - 1), sentence by sentence;
- every fast path (the training loop's one-node eq. (9), the fast input-feeding loop, the
  sliced and gathered attention) equals the plain path under both settings;
- incremental decoding equals the full forward under ``luong-code``;
- a bad value, a window other than local-p, and ``luong-code`` without
  ``--attend-source-eos`` are refused with a message naming the option.
"""

import pytest
import torch
from conftest import (
    assert_fast_loop_equals_the_paper_loop,
    build,
    parse_training_args,
    position_steps,
    random_batch,
    random_prev_output,
    spread_parameters,
)
from luong_reference import Options, reference_batch

from luong_plugin.modules import attention as attention_module
from luong_plugin.modules.attention import LuongAttention
from luong_plugin.modules.options import OptionError
from luong_plugin.modules.scores import SCORES as SCORE_NAMES
from luong_plugin.modules.windows import POSITION_SCALES, LocalPredictiveWindow

SCORES = list(SCORE_NAMES)
SCALES = list(POSITION_SCALES)  # "paper", "luong-code"
LENGTHS = [12, 4, 7]  # tokens, </s> included: 11, 3 and 6 words
TARGET_LEN = 9
D = 3  # luong_tiny's window_size
ATOL = 1e-5


def _model(scale="luong-code", attend_eos=True, **overrides):
    options = dict(
        attention_window="local-p",
        position_scale=scale,
        attend_source_eos=attend_eos,
        dropout=0.0,
    )
    return spread_parameters(build("luong_tiny", **{**options, **overrides}))


def _opts(scale, attend_eos, score="general", feed=True, reverse=True):
    return Options(
        window="local-p",
        score=score,
        input_feeding=feed,
        reverse_source=reverse,
        window_size=D,
        attend_eos=attend_eos,
        position_scale=scale,
    )


def _batch(model, pad="left", lengths=LENGTHS):
    src, src_lengths = random_batch(model.encoder.dictionary, lengths, left_pad=pad == "left")
    prev = random_prev_output(model.decoder.dictionary, len(lengths), TARGET_LEN)
    return src, src_lengths, prev


def _attended(src_row, padding_idx, attend_eos):
    """S_b of one row: its real tokens, less the final </s> unless it is attended."""
    tokens = int(src_row.ne(padding_idx).sum())
    return tokens if attend_eos else tokens - 1


# -- against the loop reference ---------------------------------------------------------


@pytest.mark.parametrize("reverse", [True, False], ids=["reverse", "forward"])
@pytest.mark.parametrize("feed", [True, False], ids=["feed", "nofeed"])
@pytest.mark.parametrize("score", SCORES)
@pytest.mark.parametrize(
    "scale, attend_eos",
    [("luong-code", True), ("paper", True), ("paper", False)],
    ids=["luong-code", "paper-attend-eos", "paper"],
)
def test_local_p_matches_reference(scale, attend_eos, score, feed, reverse):
    """Logits, attention and p_t of every sentence of a padded batch, either side, against
    the reference: Luong's mu - 1 for ``luong-code``, eq. (9) with S = S_b otherwise."""
    model = _model(
        scale, attend_eos, attention_score=score, input_feeding=feed, reverse_source=reverse
    )
    padding_idx = model.encoder.dictionary.pad()
    src, _, prev = _batch(model)
    refs = reference_batch(
        model, _opts(scale, attend_eos, score, feed, reverse), src, prev, padding_idx
    )
    for pad in ("left", "right"):
        src, src_lengths, prev = _batch(model, pad)
        with torch.no_grad():
            logits, extra = model(src, src_lengths, prev)
        for b, ref in enumerate(refs):
            where = f"{pad}-padded sentence {b} ({LENGTHS[b]} tokens)"
            # float32 p_t is off by ~1e-6: it must not sit where floor(p_t) flips
            frac = ref.p_t - torch.floor(ref.p_t)
            assert torch.all((frac > 1e-5) & (frac < 1 - 1e-5)), f"p_t too near an integer, {where}"
            torch.testing.assert_close(
                extra["p_t"][0][b].double(),
                ref.p_t.double(),
                atol=ATOL,
                rtol=0,
                msg=f"p_t, {where}",
            )
            torch.testing.assert_close(
                logits[b].double(), ref.logits, atol=ATOL, rtol=0, msg=f"logits, {where}"
            )
            cols = src[b].ne(padding_idx).nonzero().squeeze(1)
            torch.testing.assert_close(
                extra["attn"][0][b][:, cols].double(),
                ref.attn,
                atol=ATOL,
                rtol=0,
                msg=f"attention, {where}",
            )
            # p_t in [0, S): S = S_b - 1 words for luong-code, S_b otherwise
            S = _attended(src[b], padding_idx, attend_eos) - (scale == "luong-code")
            assert float(ref.p_t.max()) < S and float(ref.p_t.min()) >= 0, where


def test_luong_code_is_s_b_minus_one_and_paper_is_s_b_per_sentence():
    """No input feeding: h_t, hence eq. (9)'s logit, does not depend on attention, so the
    two settings with the same weights give p_t = (S_b - 1) σ and S_b σ of one σ."""
    luong = _model("luong-code", input_feeding=False)
    paper = build(
        "luong_tiny",
        attention_window="local-p",
        attend_source_eos=True,
        dropout=0.0,
        input_feeding=False,
    )
    paper.load_state_dict(luong.state_dict())
    padding_idx = luong.encoder.dictionary.pad()
    for pad in ("left", "right"):
        src, src_lengths, prev = _batch(luong, pad)
        with torch.no_grad():
            p_luong = luong(src, src_lengths, prev)[1]["p_t"][0].double()  # B x T
            p_paper = paper(src, src_lengths, prev)[1]["p_t"][0].double()  # B x T
        for b in range(len(LENGTHS)):
            S_b = _attended(src[b], padding_idx, attend_eos=True)
            assert S_b == LENGTHS[b]  # the words and </s>
            sigma = p_paper[b] / S_b  # the sigmoid of eq. (9)
            assert float(sigma.min()) > 0.02 and float(sigma.max()) < 0.98  # spread, unsaturated
            torch.testing.assert_close(p_luong[b], (S_b - 1) * sigma, atol=1e-5, rtol=0)


# -- fast paths == plain path ---------------------------------------------------------


@pytest.mark.parametrize("scale", SCALES)
@pytest.mark.parametrize("bound", [0.0, 1.5], ids=["nobound", "bound"])
def test_position_step_equals_the_plain_path(scale, bound):
    """Eq. (9) step by step as the decoder's loop runs it in training (``loop_weights``:
    one autograd node per step) against the plain modules: p_t, eq. (10)'s prior and the
    gradients of the query, W_p and v_p."""
    torch.manual_seed(0)
    B, T, H, S = 4, 6, 8, 12
    window = LocalPredictiveWindow(H, window_size=3, logit_bound=bound, position_scale=scale)
    window = window.double()
    with torch.no_grad():
        window.v_p.weight.mul_(8)  # logits on both sides of ±bound
    queries = torch.randn(B, T, H, dtype=torch.float64)
    lengths = torch.tensor([12, 9, 1, 7])  # S_b = 1: S = 0 under luong-code
    weights = torch.randn(B, T, S, dtype=torch.float64)

    plain, looped = [position_steps(window, queries, lengths, weights, looped)
                     for looped in (False, True)]  # fmt: skip
    torch.testing.assert_close(looped[0], plain[0], atol=1e-12, rtol=0)
    torch.testing.assert_close(looped[1], plain[1], atol=1e-12, rtol=0)
    for got, want in zip(looped[2], plain[2]):
        torch.testing.assert_close(got, want, atol=1e-10, rtol=1e-10)
        assert got.abs().sum() > 0
    # the scale the option names, from the module's own logit
    S_eq9 = (lengths - POSITION_SCALES[scale]).double().unsqueeze(1)  # B x 1
    expected = S_eq9 * torch.sigmoid(window.logit(queries)).detach()
    torch.testing.assert_close(plain[0], expected, atol=1e-12, rtol=0)


LONG = [60, 12, 33]  # past TRAIN_GATHER_FROM windows of 7: training takes the gathered path


@pytest.mark.parametrize("lengths", [[11, 3, 7], LONG], ids=["short", "long"])
@pytest.mark.parametrize("scale", SCALES)
def test_fast_loop_equals_the_paper_loop(scale, lengths):
    """The fast input-feeding loop (luong_loop.run, with eq. (9) as one node per step)
    against the decoder's ``paper_loop``, in training, with dropout: outputs and every
    parameter's gradient."""
    model = build(
        "luong_tiny",
        attention_window="local-p",
        position_scale=scale,
        attend_source_eos=True,
        dropout=0.3,
    )
    paper_grads = assert_fast_loop_equals_the_paper_loop(model, lengths, lengths is LONG)
    assert "decoder.attention.window.W_p.weight" in paper_grads


@pytest.mark.parametrize("path", ["sliced", "gathered"])
@pytest.mark.parametrize("scale", SCALES)
def test_sliced_and_gathered_attention_equal_masked(scale, path):
    """The attention module's sliced and gathered paths against the masked one, forward
    and backward, in float64."""
    g = torch.Generator().manual_seed(0)
    B, T, S, H = 4, 8, 40, 24
    module = LuongAttention("general", "local-p", H, H, window_size=3, position_scale=scale)
    module = spread_parameters(module).double()
    lengths = torch.tensor([40, 5, 1, 31])  # 1: S = 0 under luong-code
    pad_mask = torch.arange(S).unsqueeze(0) >= lengths.unsqueeze(1)  # B x S
    keys = torch.randn(B, S, H, generator=g, dtype=torch.float64).masked_fill(
        pad_mask.unsqueeze(-1), 0.0
    )  # B x S x E
    queries = 2 * torch.randn(B, T, H, generator=g, dtype=torch.float64)  # B x T x H
    weights = torch.rand(B, T, S, generator=g, dtype=torch.float64)
    results = {}
    for name in ("masked", path):
        module.zero_grad()
        query, values = queries.clone().requires_grad_(), keys.clone().requires_grad_()
        context, probs, extras = getattr(module, name)(
            query, module.precompute(values), values, pad_mask, lengths, torch.arange(T)
        )
        (context.pow(2).sum() + (probs * weights).sum()).backward()
        grads = [query.grad, values.grad] + [p.grad.clone() for p in module.parameters()]
        results[name] = (context, probs, extras["p_t"], grads)
    (context, probs, p_t, grads), masked = results[path], results["masked"]
    for what, a, b in (
        ("context", context, masked[0]),
        ("probs", probs, masked[1]),
        ("p_t", p_t, masked[2]),
    ):
        torch.testing.assert_close(a, b, atol=1e-9, rtol=0, msg=what)
    for a, b in zip(grads, masked[3]):
        torch.testing.assert_close(a, b, atol=1e-9, rtol=0)
    if scale == "luong-code":
        assert torch.all(p_t[2] == 0)  # S_b = 1: S = 0
    assert float(p_t[0].detach().max()) > 20  # windows far down the 40-token row too


@pytest.mark.parametrize("path", ["forward", "sliced", "gathered"])
def test_model_on_long_sources_matches_reference(path, monkeypatch):
    """Sources of 30 tokens leave the masked path: the path ``forward`` picks, or always
    the sliced or the gathered one, against the reference of Luong's p_t."""
    if path != "forward":
        calls = []

        def forced(self, query, proj_keys, values, *rest, position=None):
            calls.append(path)
            return getattr(self, path)(query, proj_keys, values, *rest)

        monkeypatch.setattr(LuongAttention, "forward", forced)
    model = _model("luong-code")
    src, src_lengths = random_batch(model.encoder.dictionary, [30, 4, 17])
    assert src.size(1) >= attention_module.GATHER_FROM * (2 * D + 1)
    prev = random_prev_output(model.decoder.dictionary, 3, TARGET_LEN)
    with torch.no_grad():
        logits, extra = model(src, src_lengths, prev)
    padding_idx = model.encoder.dictionary.pad()
    refs = reference_batch(model, _opts("luong-code", True), src, prev, padding_idx)
    for b, ref in enumerate(refs):
        torch.testing.assert_close(logits[b].double(), ref.logits, atol=ATOL, rtol=0)
        torch.testing.assert_close(extra["p_t"][0][b].double(), ref.p_t.double(), atol=ATOL, rtol=0)
        cols = src[b].ne(padding_idx).nonzero().squeeze(1)
        torch.testing.assert_close(
            extra["attn"][0][b][:, cols].double(), ref.attn, atol=ATOL, rtol=0
        )
    if path != "forward":
        assert calls


# -- incremental decoding -------------------------------------------------------------


@pytest.mark.parametrize("feed", [True, False], ids=["feed", "nofeed"])
def test_incremental_equals_full_forward(feed):
    """Step by step with fairseq's incremental state, reordered half way as beam search
    does, equals the full forward of the reordered batch: outputs, attention and p_t."""
    model = _model("luong-code", input_feeding=feed)
    src, src_lengths, prev = _batch(model, lengths=[9, 4, 6, 1])
    new_order = torch.tensor([2, 0, 3, 1])
    with torch.no_grad():
        full, extra = model(src, src_lengths, prev)
        enc, state = model.encoder(src, src_lengths), {}
        outs, attns, p_ts = [], [], []
        for t in range(1, prev.size(1) + 1):
            if t == 5:
                enc = model.encoder.reorder_encoder_out(enc, new_order)
                model.decoder.reorder_incremental_state_scripting(state, new_order)
                prev = prev.index_select(0, new_order)
                outs, attns, p_ts = (
                    [x.index_select(0, new_order) for x in xs] for xs in (outs, attns, p_ts)
                )
            out, step = model.decoder(prev[:, :t], enc, incremental_state=state)
            outs.append(out)
            attns.append(step["attn"][0])
            p_ts.append(step["p_t"][0])
    full_order = {
        name: x.index_select(0, new_order)
        for name, x in (("logits", full), ("attn", extra["attn"][0]), ("p_t", extra["p_t"][0]))
    }
    torch.testing.assert_close(torch.cat(outs, 1), full_order["logits"], atol=1e-5, rtol=0)
    torch.testing.assert_close(torch.cat(attns, 1), full_order["attn"], atol=1e-5, rtol=0)
    torch.testing.assert_close(torch.cat(p_ts, 1), full_order["p_t"], atol=1e-5, rtol=0)
    # the one-token source (</s> alone): S = S_b - 1 = 0, p_t = 0, all weight on </s>
    row = int((new_order == 3).nonzero())
    assert torch.all(torch.cat(p_ts, 1)[row] == 0)


# -- bad options -----------------------------------------------------------------------


def test_unknown_value_on_the_command_line(capsys):
    with pytest.raises(SystemExit):
        parse_training_args("luong_tiny", "--position-scale", "luong")
    assert (
        "argument --position-scale: invalid choice: 'luong' (choose from 'paper', 'luong-code')"
        in capsys.readouterr().err
    )


def test_the_command_line_sets_it_and_every_arch_keeps_the_paper():
    args = parse_training_args(
        "luong_tiny", "--position-scale", "luong-code", "--attend-source-eos"
    )
    assert args.position_scale == "luong-code"
    assert parse_training_args("luong_wmt_en_de").position_scale == "paper"


@pytest.mark.parametrize(
    "overrides, message",
    [
        (
            dict(position_scale="luong"),
            "--position-scale: unknown value 'luong'; allowed values: luong-code, paper",
        ),
        (
            dict(position_scale="luong-code", attend_source_eos=True, attention_window="global"),
            "--position-scale sets S of local-p's eq. (9); it needs --attention-window "
            "local-p, got global",
        ),
        (
            dict(position_scale="luong-code", attend_source_eos=True, attention_window="local-m"),
            "--position-scale sets S of local-p's eq. (9); it needs --attention-window "
            "local-p, got local-m",
        ),
        (
            dict(position_scale="luong-code", attention_window="local-p"),
            "--position-scale luong-code takes S = S_b - 1, Luong's srcLens - 1 where S_b "
            "counts the final </s>; it needs --attend-source-eos",
        ),
    ],
    ids=["unknown", "global", "local-m", "no-attend-eos"],
)
def test_bad_position_scale_is_refused(overrides, message):
    with pytest.raises(OptionError) as error:
        build("luong_tiny", **overrides)
    assert str(error.value).startswith(message)


def test_the_window_refuses_an_unknown_scale():
    with pytest.raises(OptionError, match="^--position-scale: unknown value 'S'; allowed values"):
        LocalPredictiveWindow(8, position_scale="S")
