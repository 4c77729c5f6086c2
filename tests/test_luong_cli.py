"""Every `luong` arch parses through fairseq's own CLI parser with --user-dir and
trains a step; bad values stop with a message naming the option."""

import pytest
import torch
from conftest import (
    TinyTask,
    make_dictionary,
    parse_training_args,
    random_batch,
    random_prev_output,
)
from fairseq.models import ARCH_MODEL_REGISTRY

from luong_plugin.models import luong
from luong_plugin.modules.options import OptionError


def build(args):
    task = TinyTask(make_dictionary(20), make_dictionary(23))
    return ARCH_MODEL_REGISTRY[args.arch].build_model(args, task)


@pytest.mark.parametrize("arch", ["luong"] + list(luong.ARCHS))
def test_arch_parses_and_trains_a_step(arch):
    args = parse_training_args(arch)
    for name, value in luong.arch_config(arch).items():
        assert getattr(args, name) == value, name
    model = build(args).train()
    src, lengths = random_batch(model.encoder.dictionary, [5, 3])
    prev = random_prev_output(model.decoder.dictionary, 2, 4)
    target = torch.roll(prev, -1, dims=1)
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    before = [p.detach().clone() for p in model.parameters()]
    logits, _ = model(src, lengths, prev)
    loss = torch.nn.functional.cross_entropy(logits.transpose(1, 2), target)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
    optimizer.step()
    assert torch.isfinite(loss)
    changed = [not torch.equal(b, p) for b, p in zip(before, model.parameters())]
    assert all(changed), [n for (n, _), c in zip(model.named_parameters(), changed) if not c]


def test_command_line_overrides_the_arch():
    args = parse_training_args(
        "luong_wmt_en_de",
        "--no-input-feeding",
        "--no-reverse-source",
        "--attention-window",
        "local-m",
        "--window-size",
        "4",
        "--encoder-layers",
        "2",
    )
    assert (args.input_feeding, args.reverse_source) == (False, False)
    assert (args.attention_window, args.window_size, args.encoder_layers) == ("local-m", 4, 2)
    assert args.decoder_layers == 4  # the arch's value where none was given
    args = parse_training_args("luong_base_wmt_en_de", "--reverse-source")
    assert args.reverse_source is True


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["--attention-score", "foo"],
            "argument --attention-score: invalid choice: 'foo' (choose from 'dot', 'general', 'concat', 'location')",
        ),
        (
            ["--attention-window", "local"],
            "argument --attention-window: invalid choice: 'local' (choose from 'none', 'global', 'local-m', 'local-p')",
        ),
        (["--arch", "luong_huge"], "argument --arch/-a: invalid choice: 'luong_huge'"),
        (["--window-size", "ten"], "argument --window-size: invalid int value: 'ten'"),
        (["--window-size", "0"], "argument --window-size: must be a positive integer, got 0"),
    ],
)
def test_cli_rejects_bad_values(argv, message, capsys):
    with pytest.raises(SystemExit):
        parse_training_args("luong_tiny", *argv)
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["--encoder-hidden-size", "32"],
            "--encoder-hidden-size (32) must equal --decoder-hidden-size (24)",
        ),
        (["--attention-window", "none"], "add --no-input-feeding"),
    ],
)
def test_bad_sizes_stop_at_build_with_the_option_named(argv, message):
    with pytest.raises(OptionError) as err:
        build(parse_training_args("luong_tiny", *argv))
    assert message in str(err.value)
