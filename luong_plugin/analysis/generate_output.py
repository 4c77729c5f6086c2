"""Read what ``fairseq-generate`` prints: sources, hypotheses, references and
(with ``--print-alignment soft``) each hypothesis's attention rows."""

from dataclasses import dataclass, field
from typing import Dict, List, Optional


@dataclass
class Translation:
    source: str = ""  # S-: source pieces (no EOS)
    reference: str = ""  # T-
    hypothesis: str = ""  # H- (first, i.e. best)
    score: float = 0.0
    attention: Optional[List[List[float]]] = None  # target step x source token (+ EOS each)
    extra: Dict[str, str] = field(default_factory=dict)


def parse_generate(text: str) -> Dict[int, Translation]:
    rows: Dict[int, Translation] = {}
    for line in text.splitlines():
        if len(line) < 3 or line[1] != "-" or line[0] not in "STHA":
            continue
        head, _, rest = line.partition("\t")
        try:
            i = int(head[2:])
        except ValueError:
            continue
        row = rows.setdefault(i, Translation())
        if head[0] == "S":
            row.source = rest
        elif head[0] == "T":
            row.reference = rest
        elif head[0] == "H" and not row.hypothesis:
            score, _, row.hypothesis = rest.partition("\t")
            row.score = float(score)
        elif head[0] == "A" and row.attention is None and "," in rest:
            row.attention = [[float(p) for p in col.split(",")] for col in rest.split()]
    return rows


def decode_pieces(text: str) -> str:
    """SentencePiece pieces -> text (what ``--post-process sentencepiece`` does)."""
    return text.replace(" ", "").replace("\u2581", " ").strip()
