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


def test_too_long_source_names_the_limits_to_raise():
    import numpy as np
    from fairseq.data import LanguagePairDataset
    from fairseq.tasks.fairseq_task import FairseqTask

    from conftest import make_dictionary

    d = make_dictionary()
    src = [torch_row(n) for n in (3, 9)]
    dataset = LanguagePairDataset(src, [len(s) for s in src], d)
    task = FairseqTask.__new__(FairseqTask)
    indices = np.arange(2)
    with pytest.raises(ValueError, match=r"Size of sample #1 .*skip this example with "
                       r"--skip-invalid-size-inputs-valid-test, or raise the limit with "
                       r"--max-source-positions"):
        task.filter_indices_by_size(indices, dataset, max_positions=5)
    kept = task.filter_indices_by_size(indices, dataset, max_positions=5, ignore_invalid_inputs=True)
    assert list(kept) == [0]


def torch_row(n):
    import torch

    return torch.arange(4, 4 + n)
