"""luong_plugin/analysis/lenpen.py: the choice, the values it takes, and its command end to
end with a stand-in for fairseq-generate whose output depends on --lenpen, scored against
sacreBLEU run on the same strings directly."""

import json
import os
import sys

import pytest

from luong_plugin.analysis import lenpen

REFERENCES = ["the cat sat on the mat .", "a dog ran in the park today .", "it is raining ."]
# what the stand-in prints for each --lenpen: shorter output at 1, the references at 1.4
OUTPUTS = {
    "1": ["the cat sat .", "a dog ran .", "it is ."],
    "1.4": REFERENCES,
    "2": ["the cat sat on the mat on the mat .", "a dog ran in the park today and .", "it is ."],
}

STAND_IN = r"""
import os, sys
args = sys.argv[1:]
lenpen = args[args.index("--lenpen") + 1]
with open(os.environ["CALLS"], "a") as f:
    f.write(lenpen + "\n")
if os.environ.get("FAIL") == lenpen:
    print("stand-in failed", file=sys.stderr)
    sys.exit(3)
outputs = %r
for i, line in enumerate(outputs[lenpen]):
    # SentencePiece pieces, as fairseq-generate prints them: ▁ before each word
    print(f"H-{i}\t-1.0\t" + " ".join("\u2581" + w for w in line.split()))
print("2026-01-01 | INFO | fairseq_cli.generate | Translated 3 sentences (9 tokens)",
      file=sys.stderr)
"""


def test_the_highest_bleu_is_chosen_and_a_tie_goes_to_the_value_nearest_1():
    assert lenpen.choose({0.6: 20, 1.0: 21, 1.4: 22}) == 1.4
    assert lenpen.choose({0.6: 22, 1.0: 21, 1.8: 22}) == 0.6
    assert lenpen.choose({1.0: 22, 1.4: 22}) == 1.0
    assert lenpen.choose({0.6: 22, 1.4: 22}) == 0.6  # equally far: the smaller
    with pytest.raises(ValueError):
        lenpen.choose({})


def test_auto_is_the_recipes_values_and_a_list_is_checked():
    assert lenpen.parse_lenpens("auto") == list(lenpen.LENPENS) and 1.0 in lenpen.LENPENS
    assert lenpen.parse_lenpens("1,1.4") == [1.0, 1.4] and lenpen.parse_lenpens("0") == [0.0]
    for bad in ("x", "-1", "1,,2", "inf", "nan", ""):
        with pytest.raises(Exception, match="expected auto or values >= 0"):
            lenpen.parse_lenpens(bad)
    for same in ("1,1.0", "1,1.0000001"):  # the second would name the same file
        with pytest.raises(Exception, match="each value once"):
            lenpen.parse_lenpens(same)


def test_the_checkpoint_is_the_first_of_path():
    assert lenpen.checkpoint_of(["g", "--path", f"a.pt{os.pathsep}b.pt"]) == "a.pt"
    assert lenpen.checkpoint_of(["g", "--path=c.pt"]) == "c.pt"
    with pytest.raises(ValueError, match="no --path"):
        lenpen.checkpoint_of(["g", "--beam", "5"])


class Ran:
    def __init__(self, returncode, out, err):
        self.returncode, self.stdout, self.stderr = returncode, out, err


def search(tmp_path, values, capsys, monkeypatch, beam="5", program=sys.executable, **env):
    """lenpen.py's command, in this process, with the stand-in as the command after --."""
    stand_in = tmp_path / "generate.py"
    stand_in.write_text(STAND_IN % OUTPUTS)
    checkpoint = tmp_path / "checkpoint_best.pt"
    if not checkpoint.exists():
        checkpoint.write_text("")
    reference = tmp_path / "valid.en"
    reference.write_text("\n".join(REFERENCES) + "\n")
    argv = [
        "--reference", reference, "--out-dir", tmp_path / "valid", "--lenpens", values,
        "--", program, stand_in, "--path", checkpoint, "--beam", beam,
    ]  # fmt: skip
    monkeypatch.setenv("CALLS", str(tmp_path / "calls"))
    monkeypatch.delenv("FAIL", raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    capsys.readouterr()
    try:
        lenpen.main(list(map(str, argv)))
        code = 0
    except SystemExit as stop:
        code = stop.code
    out, err = capsys.readouterr()
    return Ran(code, out, err)


def calls(tmp_path):
    return (tmp_path / "calls").read_text().split()


def test_the_search_scores_each_decoding_and_prints_the_choice(tmp_path, capsys, monkeypatch):
    from sacrebleu.metrics import BLEU, CHRF

    run = search(tmp_path, "1,1.4,2", capsys, monkeypatch)
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines()[-1] == "1.4" and calls(tmp_path) == ["1", "1.4", "2"]
    result = json.loads((tmp_path / "valid" / "lenpen.json").read_text())
    assert result["chosen"] == 1.4 and result["sentences"] == 3
    for value, hypotheses in OUTPUTS.items():
        bleu = BLEU().corpus_score(hypotheses, [REFERENCES])
        assert result["scores"][value]["bleu"] == round(bleu.score, 2)
        assert result["scores"][value]["chrf"] == round(
            CHRF().corpus_score(hypotheses, [REFERENCES]).score, 2
        )
        assert result["scores"][value]["length_ratio"] == round(bleu.sys_len / bleu.ref_len, 3)
        assert f"[lenpen] {value}: valid sacreBLEU {bleu.score:.2f}" in run.stderr

    # whole decodings by this checkpoint and command are read again, not redone
    again = search(tmp_path, "1,1.4", capsys, monkeypatch)
    assert again.stdout.splitlines()[-1] == "1.4" and calls(tmp_path) == ["1", "1.4", "2"]
    # a decoding cut short (its log without the closing count) decodes again
    log = tmp_path / "valid" / "lenpen1.4.txt.log"
    log.write_text("INFO | fairseq_cli.generate | no closing count: killed\n")
    search(tmp_path, "1,1.4", capsys, monkeypatch)
    assert calls(tmp_path)[3:] == ["1.4"]
    # so does another command (the beam, here)
    search(tmp_path, "2", capsys, monkeypatch, beam="4")
    assert calls(tmp_path)[4:] == ["2"]
    # and a newer checkpoint
    checkpoint = tmp_path / "checkpoint_best.pt"
    os.utime(checkpoint, (os.path.getmtime(checkpoint) + 100,) * 2)
    search(tmp_path, "1", capsys, monkeypatch)
    assert calls(tmp_path)[5:] == ["1"]


def test_a_failed_decoding_stops_the_search_naming_its_log(tmp_path, capsys, monkeypatch):
    run = search(tmp_path, "1,1.4", capsys, monkeypatch, FAIL="1.4")
    assert run.returncode == 1 and run.stdout == ""
    log = tmp_path / "valid" / "lenpen1.4.txt.log"
    assert f"fairseq-generate failed (exit 3): see {log}" in run.stderr
    assert not (tmp_path / "valid" / "lenpen.json").exists()
    assert not (tmp_path / "valid" / "lenpen1.4.txt").exists()  # no half output kept
    # the next search decodes 1.4 again (1 is whole and is read again)
    again = search(tmp_path, "1,1.4", capsys, monkeypatch)
    assert again.returncode == 0 and calls(tmp_path) == ["1", "1.4", "1.4"]


def test_a_missing_program_or_checkpoint_is_one_error_line(tmp_path, capsys, monkeypatch):
    run = search(tmp_path, "1", capsys, monkeypatch, program=str(tmp_path / "no-such-program"))
    assert run.returncode == 1 and "no-such-program: No such file or directory" in run.stderr
    assert "Traceback" not in run.stderr and not (tmp_path / "valid" / "lenpen1.txt.tmp").exists()
    (tmp_path / "checkpoint_best.pt").unlink()
    with pytest.raises(SystemExit) as stop:
        lenpen.main(["--reference", str(tmp_path / "valid.en"), "--out-dir", str(tmp_path / "o"),
                     "--", "g", "--path", str(tmp_path / "checkpoint_best.pt")])  # fmt: skip
    assert stop.value.code == 2 and "no such checkpoint" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--lenpens", "1,x", "--", "g", "--path", "c.pt"], "expected auto or values >= 0"),
        (["--", "g", "--path", "c.pt", "--lenpen", "2"], "must not set --lenpen"),
        (["--", "g", "--beam", "5"], "no --path CHECKPOINT"),
        ([], "no fairseq-generate command after --"),
    ],
)
def test_bad_input_is_refused_naming_the_option(argv, message, tmp_path, capsys):
    reference = tmp_path / "valid.en"
    reference.write_text("x\n")
    with pytest.raises(SystemExit) as stop:
        lenpen.main(["--reference", str(reference), "--out-dir", str(tmp_path / "o"), *argv])
    assert stop.value.code == 2 and message in capsys.readouterr().err
    assert not (tmp_path / "o").exists()
