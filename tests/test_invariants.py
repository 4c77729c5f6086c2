"""Property tests over random batches (hypothesis), for every Luong score x
window and both Bahdanau variants:

- a sentence's outputs and attention do not depend on the other sentences of
  its batch, nor on the padding side or amount (1e-5);
- attention weights are exactly zero on padding;
- beam search with beam 1 (fairseq's SequenceGenerator, incremental decoding)
  equals a hand-written greedy loop over full forward passes;
- an ensemble of one model scores exactly like the model, and an ensemble of
  two copies of a model finds the same hypotheses with the same scores.
"""

import copy
import math

import pytest
import torch
from conftest import build
from fairseq.sequence_generator import SequenceGenerator
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from luong_plugin.modules.scores import SCORES
from luong_plugin.modules.windows import WINDOWS

VARIANTS = {
    **{
        f"luong-{w}-{s}": ("luong_tiny", dict(attention_window=w, attention_score=s))
        for w in WINDOWS
        for s in SCORES
    },
    "luong-base": (
        "luong_tiny",
        dict(attention_window="none", input_feeding=False, decoder_out_embed_dim=24),
    ),
    "rnnsearch": ("bahdanau_tiny", dict(attention="additive")),
    "rnnencdec": ("bahdanau_tiny", dict(attention="none", readout_state="current")),
}
PROPERTY = settings(
    deadline=None,
    max_examples=6,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
_models = {}


def model_for(name):
    """Built once per variant, with weights wide enough to make outputs peaked
    (the paper's inits give near-uniform predictions at random)."""
    if name not in _models:
        arch, kw = VARIANTS[name]
        model = build(arch, **kw)
        generator = torch.Generator().manual_seed(len(_models))
        with torch.no_grad():
            for param in model.parameters():
                param.uniform_(-0.5, 0.5, generator=generator)
        _models[name] = model
    return _models[name]


def tokens(dictionary, n, draw):
    """n - 1 real words and </s>."""
    body = draw(
        st.lists(
            st.integers(dictionary.nspecial, len(dictionary) - 1), min_size=n - 1, max_size=n - 1
        )
    )
    return torch.tensor(body + [dictionary.eos()])


@st.composite
def batches(draw, model):
    src_dict, tgt_dict = model.encoder.dictionary, model.decoder.dictionary
    lengths = draw(st.lists(st.integers(1, 9), min_size=1, max_size=4))
    left_pad = draw(st.booleans())
    width = max(lengths) + draw(st.integers(0, 3))  # extra padding on every row
    rows, sentences = [], []
    for n in lengths:
        sentence = tokens(src_dict, n, draw)
        pad = torch.full((width - n,), src_dict.pad())
        rows.append(torch.cat([pad, sentence]) if left_pad else torch.cat([sentence, pad]))
        sentences.append(sentence)
    T = draw(st.integers(1, 7))
    prev = torch.stack(
        [
            torch.cat([torch.tensor([tgt_dict.eos()]), tokens(tgt_dict, T, draw)[:-1]])
            for _ in lengths
        ]
    )  # B x T: </s> y_1 .. y_{T-1}
    return torch.stack(rows), torch.tensor(lengths), sentences, prev


@pytest.mark.parametrize("name", list(VARIANTS))
@PROPERTY
@given(data=st.data())
def test_sentence_independent_of_batch_and_padding(name, data):
    model = model_for(name)
    src, lengths, sentences, prev = data.draw(batches(model))
    with torch.no_grad():
        out, extra = model(src, lengths, prev)
        attn = extra["attn"][0]  # B x T x S, columns as in src
        pad = src.eq(model.encoder.dictionary.pad())
        if attn is not None:
            assert torch.isfinite(attn).all()
            assert torch.all(attn.masked_select(pad.unsqueeze(1)) == 0)  # exactly zero
        for b, sentence in enumerate(sentences):
            alone, alone_extra = model(sentence[None], lengths[b : b + 1], prev[b : b + 1])
            torch.testing.assert_close(out[b], alone[0], atol=1e-5, rtol=0)
            if attn is not None:
                torch.testing.assert_close(
                    attn[b][:, ~pad[b]], alone_extra["attn"][0][0], atol=1e-5, rtol=0
                )


def greedy(model, sentence, max_len):
    """Greedy decoding by full forward passes over the growing prefix, under
    SequenceGenerator's constraints: never <pad>, no </s> at the first step
    (min_len 1), </s> forced at step max_len. Returns tokens and log-probs."""
    tgt = model.decoder.dictionary
    prefix, scores = [tgt.eos()], []
    for step in range(max_len + 1):
        logits, _ = model(sentence[None], torch.tensor([sentence.numel()]), torch.tensor([prefix]))
        lprobs = torch.log_softmax(logits[0, -1].float(), dim=-1)
        allowed = torch.ones_like(lprobs, dtype=torch.bool)
        allowed[tgt.pad()] = False
        if step == 0:
            allowed[tgt.eos()] = False
        if step == max_len:
            allowed[:] = False
            allowed[tgt.eos()] = True
        token = int(lprobs.masked_fill(~allowed, -math.inf).argmax())
        prefix.append(token)
        scores.append(float(lprobs[token]))
        if token == tgt.eos():
            break
    return prefix[1:], scores


def search(models, src, lengths, beam, max_len):
    generator = SequenceGenerator(
        models, models[0].decoder.dictionary, beam_size=beam, max_len_a=0, max_len_b=max_len
    )
    return generator.generate(models, {"net_input": {"src_tokens": src, "src_lengths": lengths}})


@pytest.mark.parametrize("name", list(VARIANTS))
@PROPERTY
@given(data=st.data())
def test_beam_one_equals_greedy(name, data):
    model = model_for(name)
    src, lengths, sentences, _ = data.draw(batches(model))
    max_len = data.draw(st.integers(1, 8))
    with torch.no_grad():
        hyps = search([model], src, lengths, beam=1, max_len=max_len)
        for b, sentence in enumerate(sentences):
            expected, scores = greedy(model, sentence, max_len)
            best = hyps[b][0]
            assert best["tokens"].tolist() == expected
            torch.testing.assert_close(
                best["positional_scores"], torch.tensor(scores), atol=1e-5, rtol=0
            )
            # normalize_scores: the sum divided by the length, </s> included
            assert best["score"].item() == pytest.approx(sum(scores) / len(scores), abs=1e-5)


@pytest.mark.parametrize(
    "name", ["luong-local-p-general", "luong-local-m-concat", "luong-global-location", "rnnsearch"]
)
@PROPERTY
@given(data=st.data())
def test_ensembles_of_one_model(name, data):
    """An ensemble averages the models' probabilities: one model is scored by its
    own log-probabilities; two copies of it give identical hypotheses and scores."""
    model = model_for(name)
    src, lengths, sentences, _ = data.draw(batches(model))
    with torch.no_grad():
        one = search([model], src, lengths, beam=3, max_len=6)
        two = search([model, copy.deepcopy(model)], src, lengths, beam=3, max_len=6)
        eos = model.decoder.dictionary.eos()
        for b, sentence in enumerate(sentences):
            assert [h["tokens"].tolist() for h in two[b]] == [h["tokens"].tolist() for h in one[b]]
            for hyp, hyp2 in zip(one[b], two[b]):
                torch.testing.assert_close(
                    hyp2["positional_scores"], hyp["positional_scores"], atol=1e-5, rtol=0
                )
                prev = torch.cat([torch.tensor([eos]), hyp["tokens"][:-1]])[None]
                logits, _ = model(sentence[None], lengths[b : b + 1], prev)
                lprobs = torch.log_softmax(logits[0].float(), dim=-1)  # T x V
                own = lprobs.gather(1, hyp["tokens"][:, None]).squeeze(1)
                torch.testing.assert_close(hyp["positional_scores"], own, atol=1e-5, rtol=0)
