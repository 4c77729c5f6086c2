"""docs/COMPARE.md, from the results of the three studies it shows.

    python -m experiments.compare_page [--out docs/COMPARE.md]

compare.py (learning per update against fairseq's `lstm`), trajectory.py (the fast
paths against the paper's loop, update by update) and bf16_parts.py (which products
bf16 may take) each write their JSON files; this page reads them all. The studies
call it in a fresh process after every run (``harness.render_compare_page``), so none
of them imports another.
"""

import argparse

from experiments import bf16_parts, compare, trajectory
from experiments.harness import COMPARE_PAGE


def render(path: str = COMPARE_PAGE) -> None:
    lines = compare.table_lines() + trajectory.table_lines() + bf16_parts.table_lines()
    with open(path, "w") as f:
        f.write("\n".join(lines))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=COMPARE_PAGE)
    render(parser.parse_args(argv).out)


if __name__ == "__main__":
    main()
