"""matplotlib for the analysis tools: the Agg backend (no display needed) and
quiet logging (fairseq switches the root logger to DEBUG, and matplotlib then
logs every font it probes)."""

import logging


def pyplot():
    logging.getLogger("matplotlib").setLevel(logging.WARNING)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save(fig, path: str) -> str:
    fig.tight_layout()
    fig.savefig(path)
    pyplot().close(fig)
    return path
