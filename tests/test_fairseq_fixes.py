"""--replace-unk with the (source, target) pairs fairseq's generator produces."""

import pytest
from fairseq import utils

import luong_plugin  # noqa: F401  (installs the fix)
from luong_plugin.fairseq_fixes import source_positions


def test_pairs_become_one_source_position_per_target_word():
    assert source_positions([(2, 0), (0, 1), (2, 2)], 3) == [2, 0, 2]


def test_replace_unk_copies_the_aligned_source_word():
    hypo = "the <unk> of <unk>"
    src = "la casa de Jehová"
    alignment = [(0, 0), (1, 1), (2, 2), (3, 3)]
    assert utils.replace_unk(hypo, src, alignment, {}, "<unk>") == "the casa of Jehová"
    assert utils.replace_unk(hypo, src, alignment, {"casa": "house"}, "<unk>") == "the house of Jehová"


def test_per_target_lists_still_work():
    assert utils.replace_unk("a <unk>", "x y", [0, 1], {}, "<unk>") == "a y"


def test_missing_alignment_is_a_clear_error():
    import torch

    with pytest.raises(ValueError, match="add --print-alignment"):
        utils.replace_unk("a <unk>", "x y", torch.empty(0), {}, "<unk>")
    assert utils.replace_unk("a b", "x y", torch.empty(0), {}, "<unk>") == "a b"
