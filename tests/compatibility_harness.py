"""What tests/test_compatibility.py runs every fairseq feature with: the models under
test and fairseq-train's command line for them, fairseq's command-line tools run in
this process, readers of what they print, and the outcome of each feature on each
model, rendered as docs/COMPATIBILITY.md."""

import contextlib
import io
import logging
import os
from collections import defaultdict

import forked_tools
from conftest import REPO, VENV_BIN, generate_args, tool_env, train_args

# ---- the models, and what each test records -------------------------------------------

TINY = ["--encoder-embed-dim", "16", "--decoder-embed-dim", "16"]
LUONG = ["--arch", "luong_tiny", "--dropout", "0.2"]
BAHDANAU = ["--arch", "bahdanau_tiny", "--dropout", "0.2"]
MODELS = {  # name: (training options, has attention weights)
    "Luong global": ([*LUONG, "--attention-window", "global"], True),
    "Luong local-p": ([*LUONG, "--attention-window", "local-p"], True),
    "Luong local-m": ([*LUONG, "--attention-window", "local-m"], True),
    "Luong Base": (
        [
            *LUONG,
            "--attention-window",
            "none",
            "--no-input-feeding",
            "--decoder-out-embed-dim",
            "24",
        ],
        False,
    ),
    "Luong global, source not reversed": (
        [*LUONG, "--attention-window", "global", "--no-reverse-source"],
        True,
    ),
    "RNNsearch": (BAHDANAU, True),
    "RNNencdec": ([*BAHDANAU, "--attention", "none", "--readout-state", "current"], False),
    "fairseq lstm": (
        [
            "--arch",
            "lstm",
            *TINY,
            "--encoder-hidden-size",
            "24",
            "--decoder-hidden-size",
            "24",
            "--decoder-out-embed-dim",
            "16",
            "--dropout",
            "0.2",
        ],
        True,
    ),
}
NAMES = list(MODELS)
PLUGIN = [n for n in NAMES if n != "fairseq lstm"]
UPDATES = 8  # the first run; the resumed run adds 2
OUTCOMES = defaultdict(dict)  # feature -> model -> "works" | "refused: ..." | "mended: ..."
MENDED = {
    "--diverse-beam-groups": "fairseq bug mended (IndexError)",
    "--print-step": "fairseq bug mended (KeyError 'steps')",
}


def record(feature, model, outcome="works"):
    OUTCOMES[feature][model] = MENDED.get(feature, outcome) if outcome == "works" else outcome


# ---- fairseq's command-line tools -----------------------------------------------------


def fairseq_train(data, save_dir, options, *extra):
    return [
        os.path.join(VENV_BIN, "fairseq-train"),
        *train_args(data, save_dir, *options, max_tokens=1000, schedule=("--update-freq", "2")),
        "--log-interval",
        "1",
        "--eval-bleu",
        "--eval-bleu-detok",
        "space",
        "--eval-bleu-remove-bpe",
        "sentencepiece",
        "--eval-bleu-args",
        '{"beam": 1, "max_len_b": 8}',
        "--best-checkpoint-metric",
        "bleu",
        "--maximize-best-checkpoint-metric",
        "--validate-interval-updates",
        str(UPDATES),
        "--max-valid-steps",
        "1",
        *extra,
    ]


def run_parallel(commands, jobs=2):
    """Run fairseq console scripts' commands two at a time (a 2-core machine), each in a
    process of its own (forked_tools); their stdout then stderr, in order."""
    outputs, running = [None] * len(commands), []
    for i, (tool, *args) in enumerate(commands):
        running.append((i, [tool, *args], forked_tools.start(tool, args, tool_env(), REPO)))
        if len(running) == jobs or i == len(commands) - 1:
            for j, command, started in running:
                status, out, err = started.wait()
                output = out + err
                assert status == 0, f"{' '.join(map(str, command))}\n{output[-3000:]}"
                outputs[j] = output
            running = []
    return outputs


def cli(tool, *argv):
    """fairseq-generate / -interactive / -validate, parsed and run as the CLI does,
    in this process. Returns what it prints."""
    from fairseq import options
    from fairseq_cli import generate, interactive, validate

    # no data-loader worker processes: each would cost seconds to start and to join
    argv = [str(a) for a in argv] + ["--num-workers", "0"]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        if tool == "validate":  # it logs its results through the progress bar's logger
            progress_logger = logging.getLogger("fairseq.logging.progress_bar")
            progress_logger.setLevel(logging.INFO)
            handler = logging.StreamHandler(out)
            progress_logger.addHandler(handler)
            parser = options.get_validation_parser()
            args = options.parse_args_and_arch(parser, argv)
            override_parser = options.get_validation_parser()
            override_args = options.parse_args_and_arch(
                override_parser, argv, suppress_defaults=True
            )
            try:
                validate.main(args, override_args)
            finally:
                progress_logger.removeHandler(handler)
        else:
            module = generate if tool == "generate" else interactive
            parser = (
                options.get_interactive_generation_parser()
                if tool == "interactive"
                else options.get_generation_parser()
            )
            module.main(options.parse_args_and_arch(parser, argv))
    return out.getvalue()


def gen(bible, trained, name, *extra, path=None):
    path = path or trained[name][0]
    return cli("generate", *generate_args(bible / "bin", path, "--seed", "1", *extra, batch_size=8))


# ---- what they print -------------------------------------------------------------------


def hypotheses(output):
    """{sentence id: [(score, text), ...]} from the H- lines, in printed order."""
    rows = defaultdict(list)
    for line in output.splitlines():
        if line.startswith("H-"):
            head, score, *text = line.split("\t")
            rows[int(head[2:])].append((float(score), text[0] if text else ""))
    return rows


def positional_scores(output):
    return {
        line.split("\t")[0]: line.split("\t")[1]
        for line in output.splitlines()
        if line.startswith("P-")
    }


def n_test(bible):
    return len((bible / "spm" / "test.en").read_text().splitlines())


# ---- the table -------------------------------------------------------------------------


def render() -> str:
    lines = [
        "# fairseq features on every model",
        "",
        "Generated by `tests/test_compatibility.py` (`LUONG_WRITE_DOCS=1 pytest",
        "tests/test_compatibility.py` rewrites it): tiny models of every architecture of the",
        "plugin and fairseq's own `lstm` as the control, each feature run through fairseq's",
        "command-line tools or the hub and checked for what it must do (n-best distinct and",
        "sorted, the prefix kept, the constraint in the output, `--retain-dropout` changing the",
        "scores, `--score-reference` scoring the reference, an ensemble of a model with itself",
        "decoding as the model). The `fairseq-hydra-train` configs are trained by",
        "`tests/test_configs.py`.",
        "",
        "- **works**: the feature does what it must.",
        "- **refused**: stops with the message shown (the model has nothing to give).",
        "- **fairseq bug mended**: fails in this fairseq on every model, fairseq's `lstm`",
        "  included; importing the plugin mends it (`luong_plugin/fairseq_fixes.py`).",
        "",
        "| feature | " + " | ".join(NAMES) + " |",
        "|---|" + "---|" * len(NAMES),
    ]
    for feature, by_model in OUTCOMES.items():
        lines.append(
            f"| {feature} | " + " | ".join(by_model.get(n, "not run") for n in NAMES) + " |"
        )
    return "\n".join(lines) + "\n"
