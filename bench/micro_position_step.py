"""An op-level micro-benchmark: what a local-p training step costs over a global one,
piece by piece.

    python bench/micro_position_step.py [--threads 2] [--rounds 40] [--batch 27] [--quick]

Times, per target step of a training recurrence (forward and backward, autograd
on, as the input-feeding loop records a step), interleaved round by round and
median over rounds:

- ``global``: global attention (general score), the peer;
- ``local-p``: the demo's local-p attention (D = 14, sigma 5, renormalised,
  logit bound 4), eq. (9) through the loop's own path (``loop_weights``: W_p in
  fp32, as ``luong_loop.position_dtype`` gives on a CPU, the weight gradients one GEMM
  over all steps);
- ``eq. (9)``: the window's ``centre`` alone on that path (p_t from h_t);
- ``mask and log G``: the window's ``mask`` (window and eq. (10)) from a given p_t;
- ``h_t W_p``: eq. (9)'s product alone (forward, no autograd), the thin GEMM;
- ``loop alone``: the bookkeeping the two rows above share (a step's input, its
  sum into the loss and their backward), to subtract from them.

Each row is printed with its ratio to ``global``. Defaults: the demo's first timed
batch (27 sentences, 73 target steps), H = 256, sources of 40 to 60 positions.
"""

import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

import measure  # noqa: E402


def pieces(batch: int, hidden: int, src_len: int, steps: int, dtype):
    """name -> a job running ``steps`` target steps (and their backward where trained)."""
    import torch

    from luong_plugin.modules.attention import LuongAttention
    from luong_plugin.modules.windows import Centre

    torch.manual_seed(1)
    glob = LuongAttention("general", "global", hidden, hidden)
    local = LuongAttention("general", "local-p", hidden, hidden, window_size=14,
                           renormalize=True, logit_bound=4.0, position_sigma=5.0)  # fmt: skip
    g = torch.Generator().manual_seed(src_len)
    keys = torch.randn(batch, src_len, hidden, generator=g)  # B x S x E
    queries = torch.randn(steps, batch, 1, hidden, generator=g)  # T x B x 1 x H
    lengths = torch.randint(src_len * 2 // 3, src_len + 1, (batch,), generator=g)  # B
    lengths[0] = src_len
    pad_mask = torch.arange(src_len).unsqueeze(0) >= lengths.unsqueeze(1)  # B x S
    positions = torch.arange(src_len)  # S
    window = local.window

    source = (keys, queries, pad_mask, lengths)

    def inputs():  # T x [B x 1 x H], one leaf per step, as each step's h_t is its own tensor
        return [q.clone().requires_grad_() for q in queries]

    def position_only():
        h = inputs()
        weights, total = window.loop_weights(dtype), 0.0
        for t in range(steps):
            total = total + window.centre(h[t], torch.tensor([t]), lengths, weights).p_t.sum()
        total.backward()

    def loop_only():
        h = inputs()
        total = 0.0
        for t in range(steps):
            torch.tensor([t])
            total = total + h[t].sum()
        total.backward()

    centres = torch.rand(steps, batch, 1, generator=g) * lengths.view(1, -1, 1)  # T x B x 1: p_t

    def mask_only():
        p = [c.clone().requires_grad_() for c in centres]  # T x [B x 1], one leaf per step
        total = 0.0
        for t in range(steps):
            centre = Centre(p[t], torch.floor(p[t]).long())  # B x 1 each
            mask = window.mask(queries[t], torch.tensor([t]), lengths, positions, centre)
            total = total + mask.prior.masked_fill(mask.outside, 0.0).sum()
        total.backward()

    w_p = window.W_p.weight.detach().t().to(dtype)  # H x H
    rows = [q.to(dtype) for q in queries.squeeze(2)]  # T x [B x H]

    def product_only():
        with torch.no_grad():
            for x in rows:
                x.mm(w_p)

    return {
        "global": measure.attention_train_job(glob, glob, *source),
        "local-p": measure.attention_train_job(
            local, local, *source, lambda: {"position": window.loop_weights(dtype)}
        ),
        "eq. (9)": position_only,
        "mask and log G": mask_only,
        "h_t W_p": product_only,
        "loop alone": loop_only,
    }


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=40)
    p.add_argument("--batch", type=int, default=27)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--src-len", type=int, default=60)
    p.add_argument("--steps", type=int, default=73)
    p.add_argument("--quick", action="store_true", help="tiny sizes: a smoke test")
    args = p.parse_args(argv)
    for name in ("threads", "rounds", "batch", "hidden", "src_len", "steps"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be a positive integer")
    if args.quick:
        args.rounds, args.batch, args.hidden, args.src_len, args.steps = 2, 3, 16, 8, 4
    import torch

    torch.set_num_threads(args.threads)
    dtype = torch.float32  # eq. (9)'s products on a CPU (luong_loop.position_dtype)
    jobs = pieces(args.batch, args.hidden, args.src_len, args.steps, dtype)
    seconds, _ = measure.median_rounds(jobs, args.rounds, warmup=2)
    print(f"batch {args.batch}, H = {args.hidden}, S <= {args.src_len}, {args.steps} steps, "
          f"{args.threads} threads, eq. (9)'s products in {str(dtype)[6:]}, median of "
          f"{args.rounds} interleaved rounds; microseconds per target step")  # fmt: skip
    print("\n| piece | µs per step | × global |\n|---|---:|---:|")
    for name, s in seconds.items():
        per_step = s / args.steps * 1e6
        print(f"| {name} | {per_step:.1f} | {s / seconds['global']:.2f} |")


if __name__ == "__main__":
    main()
