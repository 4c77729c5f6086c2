"""The bf16 section of the benchmark alone: ``python bench/bf16_alone.py`` with run.py's
options; the report goes to ``--out`` when given, else to stdout."""

import json
import os
import sys

import bf16
import measure
import run
import throughput
import torch
import verdicts


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    args = run.parse_args(argv)
    torch.set_num_threads(args.threads)
    bin_dir = run.ensure_data(args.data)
    child = ["--data", args.data, "--threads", str(args.threads)]

    def memory(name, max_tokens):
        argv = child + ["--max-tokens", str(max_tokens)]
        return measure.memory_in_child(os.path.abspath(run.__file__), name, argv)

    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    results = {
        "bf16": bf16.run_section(
            args, bin_dir, throughput.training, throughput.generation, memory, run.log
        )
    }
    results["bf16"][
        "load"
    ] = f"{load} at the start, {' '.join(f'{x:.2f}' for x in os.getloadavg())} at the end"
    lines = [f"machine: {run.machine(args.threads)}, load average {results['bf16']['load']}"]
    lines += (
        bf16.markdown(results)
        + [""]
        + [f"- {t}: {m} ({v})" for t, m, v in bf16.targets(results, verdicts.verdict)]
    )
    text = "\n".join(lines) + "\n"
    if "--out" in argv:
        with open(args.out, "w") as f:
            f.write(text)
    else:
        print(text)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1, default=str)


if __name__ == "__main__":
    main()
