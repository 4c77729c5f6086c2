"""Command-line inputs shared by the analysis tools."""

import argparse
import os
from typing import Callable, List, Optional, Tuple


def read_lines(path: str, option: str) -> List[str]:
    """The lines of a UTF-8 text file; a missing file is a ValueError naming ``option``."""
    try:
        with open(path, encoding="utf-8") as f:
            return f.read().splitlines()
    except OSError as e:
        raise ValueError(f"{option} {path}: {e.strerror}")


def named(spec: str, default_name: Optional[Callable[[str], str]] = None) -> Tuple[str, str]:
    """``NAME=PATH`` -> (NAME, PATH); a bare PATH (or one that exists with its
    "=") is named ``default_name(PATH)``, by default the path itself."""
    name, sep, path = spec.partition("=")
    if sep and name and not os.path.exists(spec):
        return name, path
    return (default_name or str)(spec), spec


def tool_parser(doc: str) -> argparse.ArgumentParser:
    """A tool's parser: its module docstring's first paragraph as the description,
    the rest (usage examples, formats) as the epilog, kept as written."""
    head, _, rest = doc.partition("\n\n")
    return argparse.ArgumentParser(
        description=head, epilog=rest, formatter_class=argparse.RawDescriptionHelpFormatter
    )
