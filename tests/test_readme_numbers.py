"""README.md's result tables hold only numbers found in the data they cite.

Each table of the README's "## Results" section follows a caption that cites its data:
Markdown links to the rendered pages (``[docs/BUDGET.md](docs/BUDGET.md)``) and backticked
paths to JSON files or folders of them (`` `docs/experiments/budget/` ``). Every number in the
table's cells, the row label in the first column aside, must appear in that data at the
precision the table prints it: as a value in a cited JSON file or as the mean of one value
over the seeds of one run (``NAME.seedK.json``, as the rendered pages print their cells), or,
for a table that cites no JSON (make bench's page has none), in a cited page's text. The check
is of presence: a number found elsewhere in the cited data passes too.
"""

import json
import os
import re

import pytest

from experiments.harness import decimal_text, exact_mean

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = os.path.join(REPO, "README.md")

NUMBER = re.compile(r"(?<![\w.])[-−]?\d[\d,]*(?:\.\d+)?")
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
PATH = re.compile(r"`((?:docs|experiments|bench)/[^`\s]*)`")
SEED = re.compile(r"\.seed\d+\.json$")


def numbers(text: str) -> list:
    """The numbers of a text as printed, thousands separators and signs normalised."""
    return [n.replace(",", "").replace("−", "-") for n in NUMBER.findall(text)]


def section(text: str, title: str = "## Results") -> str:
    start = text.index(title + "\n")
    end = text.find("\n## ", start + len(title))
    return text[start : end if end >= 0 else len(text)]


def tables(text: str) -> list:
    """[(caption, rows)] of the Markdown tables of ``text``: the caption is the text since
    the previous table, the rows the cells of every line but the header and the rule."""
    found, caption, lines = [], [], text.splitlines()
    i = 0
    while i < len(lines):
        if lines[i].startswith("|"):
            block = []
            while i < len(lines) and lines[i].startswith("|"):
                block.append(lines[i])
                i += 1
            rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in block[2:]]
            found.append(("\n".join(caption), rows))
            caption = []
        else:
            caption.append(lines[i])
            i += 1
    return found


def cited_files(caption: str, root: str = REPO) -> list:
    """The files a caption cites: linked .md / .json pages, backticked files and folders."""
    paths = [p for p in LINK.findall(caption) if p.endswith((".md", ".json"))]
    paths += PATH.findall(caption)
    files = []
    for path in paths:
        full = os.path.normpath(os.path.join(root, path))
        if os.path.isdir(full):
            files += sorted(os.path.join(full, f) for f in os.listdir(full) if f.endswith(".json"))
        elif os.path.isfile(full):
            files.append(full)
    return files


def _leaves(value, prefix=()):
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _leaves(item, prefix + (key,))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _leaves(item, prefix + (i,))
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        yield prefix, float(value)


def data_values(files: list) -> tuple:
    """(the numbers printed in the pages, the numeric values of the JSON files and the
    means of each value over the seeds of a run)."""
    printed, values, runs = set(), [], {}
    for path in files:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        if path.endswith(".json"):
            leaves = dict(_leaves(json.loads(text)))
            values += leaves.values()
            runs.setdefault(SEED.sub("", path), []).append(leaves)
        else:
            printed.update(numbers(text))
    for seeds in runs.values():
        if len(seeds) > 1:
            for key in set.intersection(*(set(s) for s in seeds)):
                # exact in decimal, as the pages' renderers take it (harness.seed_cell)
                values.append(exact_mean(s[key] for s in seeds))
    return printed, values


def found(number: str, printed: set, values: list) -> bool:
    """In the JSON data where the caption cites some (the pages are rendered from it), else
    in the cited pages' text."""
    if not values:
        return number in printed
    decimals = len(number.split(".")[1]) if "." in number else 0
    # rounded as format() does (bench's reports) or half up from the decimal value (the
    # experiments' renderers, harness.decimal_text): they differ only on a tie
    return any(number in (f"{v:.{decimals}f}", decimal_text(v, decimals)) for v in values)


def missing(readme_text: str, root: str = REPO) -> list:
    """'table i, row r: NUMBER' for every number of the Results tables not in its data."""
    problems = []
    for t, (caption, rows) in enumerate(tables(section(readme_text)), 1):
        files = cited_files(caption, root)
        if not files:
            problems.append(f"table {t}: its caption cites no data file")
            continue
        printed, values = data_values(files)
        for row in rows:
            for cell in row[1:]:
                for number in numbers(cell):
                    if not found(number, printed, values):
                        problems.append(f"table {t}, row {row[0]!r}: {number}")
    return problems


def readme_text() -> str:
    with open(README, encoding="utf-8") as f:
        return f.read()


def test_results_has_tables_with_numbers():
    found_tables = tables(section(readme_text()))
    assert len(found_tables) >= 3
    for caption, rows in found_tables:
        assert cited_files(caption), caption
        assert any(numbers(cell) for row in rows for cell in row[1:]), rows


def test_readme_numbers_are_in_their_data():
    assert missing(readme_text()) == []


@pytest.mark.parametrize(
    "cell, ok",
    [("5394", True), ("7.89", True), ("7.88", True), ("5395", False), ("7.90", False)],
)
def test_a_number_absent_from_the_data_is_reported(tmp_path, cell, ok):
    (tmp_path / "docs" / "runs").mkdir(parents=True)
    (tmp_path / "docs" / "PAGE.md").write_text("| x | 7.90 | 5395 |\n")  # the JSON rules
    for seed, (updates, ppl) in ((1, (5390, 7.81)), (2, (5398, 7.96))):
        run = {"updates": updates, "best_valid_ppl": ppl}
        (tmp_path / "docs" / "runs" / f"demo.seed{seed}.json").write_text(json.dumps(run))
    readme = (
        "## Results\n\nData: [docs/PAGE.md](docs/PAGE.md), `docs/runs/`.\n\n"
        f"| run | value |\n|---|---|\n| demo | {cell} |\n\n## Next\n"
    )
    assert (missing(readme, str(tmp_path)) == []) == ok


@pytest.mark.parametrize("cell, ok", [("1.01×", True), ("1.02×", False)])
def test_a_page_without_json_is_read_as_text(tmp_path, cell, ok):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "BENCH.md").write_text("| training | 1.01x |\n")
    readme = (
        "## Results\n\nData: [docs/BENCH.md](docs/BENCH.md).\n\n"
        f"| what | ratio |\n|---|---|\n| training | {cell} |\n"
    )
    assert (missing(readme, str(tmp_path)) == []) == ok
