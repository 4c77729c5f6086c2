"""Helpers fairseq does not ship: tiny dictionaries, models built by arch name,
padded batches in either padding side, and the command lines of fairseq's tools
(``train_args``, ``generate_args``, ``parse_training_args``), built in one place."""

import argparse
import contextlib
import os
import subprocess
import sys

import forked_tools
import pytest
import torch
from fairseq.data import Dictionary

import luong_plugin  # noqa: F401  (registers the models)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VENV_BIN = os.path.dirname(sys.executable)
USER_DIR = os.path.join(REPO, "luong_plugin")
# fairseq drops a last batch smaller than --required-batch-size-multiple (default 8)
# when it builds batches, so without this flag a test set loses sentences (fairseq
# issue #5036); every generation command in this project passes it.
ALL_SENTENCES = ("--required-batch-size-multiple", "1")


class TinyTask:
    def __init__(self, src_dict, tgt_dict):
        self.source_dictionary = src_dict
        self.target_dictionary = tgt_dict


def make_dictionary(n_symbols: int = 20) -> Dictionary:
    d = Dictionary()
    for i in range(n_symbols):
        d.add_symbol(f"w{i}")
    return d


def build(arch: str = "luong_tiny", n_symbols: int = 20, n_tgt_symbols=None, **overrides):
    """Build a model by arch name through fairseq's arch functions, in eval mode.

    The target vocabulary defaults to 3 more symbols than the source one, so a
    mix-up of the two shows up as a shape error."""
    from fairseq.models import ARCH_CONFIG_REGISTRY, ARCH_MODEL_REGISTRY

    args = argparse.Namespace(arch=arch, **overrides)
    ARCH_CONFIG_REGISTRY[arch](args)
    n_tgt_symbols = n_symbols + 3 if n_tgt_symbols is None else n_tgt_symbols
    task = TinyTask(make_dictionary(n_symbols), make_dictionary(n_tgt_symbols))
    model = ARCH_MODEL_REGISTRY[arch].build_model(args, task)
    return model.eval()


def random_batch(dictionary, lengths, left_pad=True, seed=0, max_len=None):
    """src_tokens (EOS-terminated, padded on one side) for the given lengths."""
    g = torch.Generator().manual_seed(seed)
    max_len = max_len or max(lengths)
    rows = []
    for n in lengths:
        body = torch.randint(dictionary.nspecial, len(dictionary), (n - 1,), generator=g)
        seq = torch.cat([body, torch.tensor([dictionary.eos()])])
        pad = torch.full((max_len - n,), dictionary.pad())
        rows.append(torch.cat([pad, seq]) if left_pad else torch.cat([seq, pad]))
    return torch.stack(rows), torch.tensor(lengths)


def random_prev_output(dictionary, batch_size, length, seed=1):
    g = torch.Generator().manual_seed(seed)
    body = torch.randint(
        dictionary.nspecial, len(dictionary), (batch_size, length - 1), generator=g
    )
    eos = torch.full((batch_size, 1), dictionary.eos())
    return torch.cat([eos, body], dim=1)


def spread_parameters(model, seed: int = 0):
    """Parameters wider than the ±0.1 init (v_p wider still), so attention is far from
    uniform and local-p's p_t moves: differences between variants show."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            scale = 1.0 if name.endswith("v_p.weight") else 0.5
            param.copy_((torch.rand(param.shape, generator=g) * 2 - 1) * scale)
    return model


# Every kind of model, for the tests that run each in another precision
# (test_precision.py, test_half_models.py): each score x window, with and without
# input feeding, the Base model, RNNsearch and RNNencdec.
def _variants():
    from luong_plugin.modules.scores import SCORES
    from luong_plugin.modules.windows import WINDOWS

    luong = [
        pytest.param(dict(attention_window=w, attention_score=s, input_feeding=feed),
                     id=f"luong-{w}-{s}-{'feed' if feed else 'nofeed'}")
        for w in WINDOWS for s in SCORES for feed in (True, False)
    ]  # fmt: skip
    base = pytest.param(
        dict(attention_window="none", input_feeding=False, decoder_out_embed_dim=24),
        id="luong-base",
    )
    bahdanau = [
        pytest.param(dict(arch="bahdanau_tiny"), id="rnnsearch"),
        pytest.param(dict(arch="bahdanau_tiny", attention="none", readout_state="current"), id="rnnencdec"),
    ]  # fmt: skip
    return luong + [base] + bahdanau


VARIANTS = _variants()


def batch(model, device, lengths=(9, 4, 7), target_len=8):
    """src_tokens, src_lengths and prev_output_tokens of a random batch, on ``device``."""
    src, src_lengths = random_batch(model.encoder.dictionary, list(lengths))
    prev = random_prev_output(model.decoder.dictionary, len(lengths), target_len)
    return src.to(device), src_lengths.to(device), prev.to(device)


def close(a, b, tol, scale=1.0):
    return (a.float() - b.float()).abs().max().item() <= tol * scale


def steps_to_compare(logits32, extra32, extra16, lengths, p_t_tol):
    """The target steps (B x T, bool) where a model run in half precision can be held to
    its fp32 twin: all of them, but for local-p. Its p_t stays fp32 and within
    ``p_t_tol`` x S of the twin's; its window sits on floor(p_t), so where rounding
    carries p_t across an integer the window moves by one, and the steps from there
    on differ by more than rounding (input feeding carries it on). That may only
    happen next to an integer, and most steps are still compared."""
    steps = torch.ones(logits32.shape[:2], dtype=torch.bool, device=logits32.device)  # B x T
    p_t32 = extra32.get("p_t", [None])[0]
    if p_t32 is None:
        return steps
    p_t16 = extra16["p_t"][0]
    assert p_t16.dtype == torch.float32  # positions are never half
    assert close(p_t16, p_t32, p_t_tol, scale=lengths.max().item())
    moved = torch.floor(p_t16) != torch.floor(p_t32)  # B x T
    gap = (p_t32 - torch.round(p_t32)).abs()[moved]
    assert bool((gap <= p_t_tol * lengths.max().item()).all()), gap
    steps = moved.long().cumsum(dim=1) == 0
    assert steps.float().mean() > 0.5
    return steps


@contextlib.contextmanager
def recorded_step_sources():
    """``luong_loop.step_source`` recording what it gives each pass of the fast loop (an
    ``attention_step.StepSource``, or None where the plain path runs), in the list this
    yields; restored after."""
    from luong_plugin.modules import luong_loop

    sources, step_source = [], luong_loop.step_source

    def record(*args):
        sources.append(step_source(*args))
        return sources[-1]

    luong_loop.step_source = record
    try:
        yield sources
    finally:
        luong_loop.step_source = step_source


def assert_fast_loop_equals_the_paper_loop(
    model, src_lengths, gathered=False, steps=8, device="cpu"
):
    """The fast input-feeding loop (luong_loop.run) against the decoder's ``paper_loop``
    on one batch, in training with the same dropout masks: every output of the loop and
    every parameter's gradient (float64: to 1e-12 and 1e-10). ``gathered``: the sources
    are long enough that the paper loop's attention (the plain path) gathers the windows,
    and so does the fast loop's fused step (attention_step.py, its gathered form); checked too.
    On ``device`` (on CUDA both loops take torch's fused LSTM cell kernel: the fast one
    through luong_loop.fused_lstm_cell, the paper's through ``torch.lstm_cell``).
    Returns the paper loop's gradients."""
    from luong_plugin.modules import attention as attention_module
    from luong_plugin.modules import attention_step
    from luong_plugin.modules.luong_loop import run

    model = spread_parameters(model).double().to(device).train()
    decoder = model.decoder
    src, lengths = (t.to(device) for t in random_batch(model.encoder.dictionary, src_lengths))
    if gathered:
        width = decoder.attention.window.width
        assert src.size(1) >= attention_module.TRAIN_GATHER_FROM * width
        assert src.size(1) >= attention_step.GATHER_FROM * width
    prev = random_prev_output(decoder.dictionary, len(src_lengths), steps).to(device)
    results = []
    with recorded_step_sources() as sources:
        for loop in (run, lambda dec, *args: dec.paper_loop(*args)):
            model.zero_grad()
            torch.manual_seed(3)  # the same dropout masks: both loops draw them in one order
            encoder_out = model.encoder(src, lengths)
            x = decoder.dropout(decoder.embed_tokens(prev))  # B x T x C
            time = torch.arange(steps, device=device)  # T
            out = loop(decoder, x, decoder.initial_state(encoder_out), encoder_out, time)
            loss = decoder.output_layer(out.attn_vec).pow(2).mean()
            (loss + out.cell.sum() + out.hidden.sum()).backward()
            grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
            results.append((out, grads))
    if gathered:  # the fast loop's fused step took its gathered form
        assert [source.window is not None for source in sources] == [True], sources
    (fast, fast_grads), (paper, paper_grads) = results
    for field in fast._fields:
        a, b = getattr(fast, field), getattr(paper, field)
        if b is None:
            assert a is None, field
        else:
            torch.testing.assert_close(a, b, atol=1e-12, rtol=0, msg=field)
    assert fast_grads.keys() == paper_grads.keys()
    for name in paper_grads:
        torch.testing.assert_close(fast_grads[name], paper_grads[name], atol=1e-10, rtol=1e-10,
                                   msg=name)  # fmt: skip
    return paper_grads


def position_steps(window, queries, lengths, weights, looped):
    """Local-p's eq. (9) and eq. (10)'s prior step by step over ``queries`` (B x T x H),
    as the decoder's training loop runs them (``looped``: ``window.loop_weights``, one
    autograd node per step) or through the plain modules, then a loss of either sign per
    element (``weights``, B x T x S) backward. Returns p_t (B x T), the prior
    (B x T x S) and the gradients of the query and of each window parameter."""
    window.zero_grad()
    query = queries.clone().requires_grad_()
    loop = window.loop_weights(queries.dtype) if looped else None
    positions = torch.arange(weights.size(-1))  # S
    p_ts, priors = [], []
    for t in range(queries.size(1)):
        p_t, _ = window.centre(query[:, t : t + 1], torch.arange(t, t + 1), lengths, loop)
        priors.append(window.prior(p_t, positions))
        p_ts.append(p_t)
    p_t, prior = torch.cat(p_ts, 1), torch.cat(priors, 1)  # B x T, B x T x S
    ((weights * prior).sum() + p_t.sum()).backward()
    grads = [query.grad] + [param.grad.clone() for param in window.parameters()]
    return p_t.detach(), prior.detach(), grads


@pytest.fixture(autouse=True)
def _deterministic():
    torch.manual_seed(0)
    yield


@pytest.fixture(autouse=True, scope="session")
def _one_thread():
    # the models under test are tiny: thread start-up costs more than it saves,
    # and on a loaded 2-core machine it costs a lot more
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


# ---- fairseq command-line tools on real text (one build per test session) ----


def tool_env():
    """The environment a fairseq tool runs in here: one thread (tiny models)."""
    return dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")


def run_tool(tool, *args, input=None):
    """Run fairseq's console script ``tool`` in a process of its own that skips the
    imports (forked_tools): (exit status, stdout, stderr)."""
    return forked_tools.run(os.path.join(VENV_BIN, tool), args, tool_env(), REPO, input=input)


def fairseq(tool, *args, input=None):
    """The same, which must succeed: its stdout then stderr."""
    status, out, err = run_tool(tool, *args, input=input)
    command = " ".join([tool, *map(str, args)])
    assert status == 0, f"{command}\n{out[-3000:]}\n{err[-3000:]}"
    return out + err


def train_args(data, save_dir, *model, max_tokens=2000, schedule=(), log_format="simple"):
    """fairseq-train's arguments (without the tool) for a short run of a tiny model: the
    data and the plugin, ``model`` (arch and model options), Adam at lr 0.01, ``schedule``
    (--max-update, --update-freq, ...), seed 1, no data-loader workers, no progress bar,
    no epoch checkpoints; ``log_format`` None leaves fairseq's default."""
    return [
        data,
        "--user-dir",
        USER_DIR,
        *model,
        "--optimizer",
        "adam",
        "--lr",
        "0.01",
        "--max-tokens",
        max_tokens,
        *schedule,
        "--save-dir",
        save_dir,
        "--no-epoch-checkpoints",
        "--seed",
        "1",
        "--num-workers",
        "0",
        "--no-progress-bar",
        *(("--log-format", log_format) if log_format else ()),
    ]


def train(data, save_dir, *extra, arch="luong_tiny", updates=30):
    args = train_args(data, save_dir, "--arch", arch, schedule=("--max-update", updates))
    return fairseq("fairseq-train", *args, *extra)


def generate_args(data, path, *extra, beam=5, batch_size=16, max_len_b=12):
    """fairseq-generate's arguments (without the tool) on the test set, every sentence
    kept (ALL_SENTENCES), with a fixed length cap (a = 0: the cap must not depend on the
    batch's longest source)."""
    return [
        data,
        "--user-dir",
        USER_DIR,
        "--path",
        path,
        "--beam",
        beam,
        "--batch-size",
        batch_size,
        "--max-len-a",
        "0",
        "--max-len-b",
        max_len_b,
        "--gen-subset",
        "test",
        *ALL_SENTENCES,
        *extra,
    ]


def generate(data, path, *extra, **decoding):
    return fairseq("fairseq-generate", *generate_args(data, path, *extra, **decoding))


def parse_training_args(arch, *extra):
    """The arguments of ``arch`` through fairseq-train's own parser (no data needed)."""
    from fairseq import options

    parser = options.get_training_parser()
    argv = ["/no/data", "--user-dir", USER_DIR, "--arch", arch, "--task", "translation"]
    return options.parse_args_and_arch(parser, argv + list(extra))


def parse(output, prefix):
    """{sentence id: text} for lines like 'H-12\\t-0.3\\ttext'."""
    rows = {}
    for line in output.splitlines():
        if line.startswith(prefix + "-"):
            head, *rest = line.split("\t")
            rows[int(head[len(prefix) + 1 :])] = rest[-1] if rest else ""
    return rows


@pytest.fixture(scope="session")
def bible(tmp_path_factory):
    out = tmp_path_factory.mktemp("bible")
    subprocess.run(
        [
            "bash",
            "recipes/bible_es_en/prepare.sh",
            "--out",
            out,
            "--vocab",
            "1000",
            "--max-train",
            "2000",
            "--valid",
            "60",
            "--test",
            "30",
        ],
        cwd=REPO,
        check=True,
        capture_output=True,
        env=dict(os.environ, PYTHON=os.path.join(VENV_BIN, "python")),
    )
    return out


@pytest.fixture(scope="session")
def word_level(bible, tmp_path_factory):
    """A word-level vocabulary small enough that outputs contain <unk>."""
    out = tmp_path_factory.mktemp("words")
    raw = bible / "raw"
    fairseq(
        "fairseq-preprocess",
        "--source-lang",
        "es",
        "--target-lang",
        "en",
        "--trainpref",
        raw / "train",
        "--validpref",
        raw / "valid",
        "--testpref",
        raw / "test",
        "--nwordssrc",
        "150",
        "--nwordstgt",
        "150",
        "--destdir",
        out / "bin",
        "--workers",
        "1",
        "--dataset-impl",
        "raw",  # --replace-unk reads the original source words
    )
    return out


# -- figures ----------------------------------------------------------------------------
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def assert_png(path, width=None, height=None):
    """A real PNG of the expected size (pixels) that is not one flat colour."""
    import matplotlib.image as mpimg
    import numpy as np

    with open(path, "rb") as f:
        assert f.read(8) == PNG_SIGNATURE
    image = mpimg.imread(path)
    if width is not None:
        assert image.shape[:2] == (height, width)
    assert np.ptp(image[..., :3]) > 0.5
    return image
