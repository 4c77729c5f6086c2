"""An op-level micro-benchmark: the attention module alone against the source length
(a section of run.py).

``decoding_cost``: one decoding step (T = 1, forward, no grad) of global, local-m
and local-p attention, each local window also forced through each path;
``training_cost``: a training step (forward and backward) of global and the
demo's local-p attention, local-p also forced through the sliced and gathered
paths.
"""

import os
import sys

import measure

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LENGTHS = [25, 50, 100, 200, 400, 1000]
TRAIN_LENGTHS = [44, 100, 200, 400]  # 44: two windows of D = 10, the demo's longer verses


def decoding_cost(args, lengths, batch, hidden):
    import torch

    sys.path.insert(0, REPO)
    from luong_plugin.modules.attention import LuongAttention

    torch.manual_seed(1)
    attentions = {}
    for window in ("global", "local-m", "local-p"):
        module = LuongAttention("general", window, hidden, hidden, window_size=10).eval()
        attentions[window] = (module, module.forward)
    # local-p through each implementation whatever S: what gathering saves, and its fixed
    # cost; local-m gathering even where its windows sit together: what slicing saves
    attentions["local-p masked"] = (attentions["local-p"][0], attentions["local-p"][0].masked)
    attentions["local-p gathered"] = (attentions["local-p"][0], attentions["local-p"][0].gathered)
    attentions["local-m gathered"] = (attentions["local-m"][0], attentions["local-m"][0].gathered)
    rounds = max(5, 4 * args.rounds)
    return measure.attention_step_times(attentions, lengths, batch, hidden, rounds)


def training_cost(args, lengths, batch, hidden):
    """Training steps (forward + backward) of global and the demo's local-p
    attention, local-p through each implementation: what the masked path costs
    in training against the sliced and gathered ones."""
    import torch

    sys.path.insert(0, REPO)
    from luong_plugin.modules.attention import LuongAttention

    torch.manual_seed(1)
    glob = LuongAttention("general", "global", hidden, hidden)
    local = LuongAttention("general", "local-p", hidden, hidden, window_size=10,
                           renormalize=True, logit_bound=4.0)  # fmt: skip
    attentions = {
        "global": (glob, glob.forward),
        "local-p": (local, local.forward),
        "local-p sliced": (local, local.sliced),
        "local-p gathered": (local, local.gathered),
    }
    return measure.attention_train_step_times(
        attentions, lengths, batch, hidden, max(3, 2 * args.rounds)
    )
