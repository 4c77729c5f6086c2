"""The papers' WMT recipes: which published archives and files make up each
corpus, its vocabulary size, length limit and default arch (wmt.py prepares them).
Plain dataclasses and no imports of the package: wmt.py runs as a script too."""

import dataclasses


@dataclasses.dataclass(frozen=True)
class Archive:
    name: str  # file name as published
    url: str


# Copied from fairseq's examples/translation/prepare-wmt14en2{de,fr}.sh (training
# data), WMT'14 dev.tgz as fetched by common WMT'14 preparation scripts, and
# sacrebleu 2.6.0's dataset table (test sets).
ARCHIVES = {
    a.name: a
    for a in [
        Archive("training-parallel-europarl-v7.tgz",
                "http://statmt.org/wmt13/training-parallel-europarl-v7.tgz"),
        Archive("training-parallel-commoncrawl.tgz",
                "http://statmt.org/wmt13/training-parallel-commoncrawl.tgz"),
        Archive("training-parallel-nc-v9.tgz",
                "http://statmt.org/wmt14/training-parallel-nc-v9.tgz"),
        Archive("training-parallel-un.tgz",
                "http://statmt.org/wmt13/training-parallel-un.tgz"),
        Archive("training-giga-fren.tar", "http://statmt.org/wmt10/training-giga-fren.tar"),
        Archive("dev.tgz", "http://www.statmt.org/wmt14/dev.tgz"),
        Archive("test-filtered.tgz", "https://statmt.org/wmt14/test-filtered.tgz"),
        Archive("test.tgz", "https://statmt.org/wmt15/test.tgz"),
    ]
}  # fmt: skip


@dataclasses.dataclass(frozen=True)
class Parallel:
    """Two files, one per language, as extracted from ``archive``.
    ``pattern`` holds ``{lang}`` (and ``{pair}``, the pair in WMT's order)."""

    name: str
    archive: str
    pattern: str
    sgml: bool = False  # test sets: ``pattern`` gives src/ref names with ``{side}``

    def path(self, lang, src, tgt, pair):
        side = "src" if lang == src else "ref"
        return self.pattern.format(lang=lang, pair=pair, side=side)


@dataclasses.dataclass(frozen=True)
class Recipe:
    name: str
    src: str
    tgt: str
    pair: str  # WMT's file naming: "de-en", "fr-en"
    train: tuple
    valid: tuple
    test: Parallel
    vocab: int  # words per language
    max_len: int  # training pairs longer than this (either side) are dropped
    arch: str  # the default --arch (a configs/<arch>.yaml gives the optimisation)
    paper: str
    train_flags: tuple = ()  # added to the config's optimisation flags

    def files(self, parts):
        """``[(part, lang, relative path)]`` for ``parts``, source language first."""
        return [
            (part, lang, part.path(lang, self.src, self.tgt, self.pair))
            for part in parts
            for lang in (self.src, self.tgt)
        ]

    def raw_files(self):
        return self.files(self.train + self.valid + (self.test,))


EUROPARL = Parallel(
    "europarl-v7", "training-parallel-europarl-v7.tgz", "training/europarl-v7.{pair}.{lang}"
)
COMMONCRAWL = Parallel(
    "commoncrawl", "training-parallel-commoncrawl.tgz", "commoncrawl.{pair}.{lang}"
)
NEWS_COMMENTARY = Parallel(
    "news-commentary-v9", "training-parallel-nc-v9.tgz", "training/news-commentary-v9.{pair}.{lang}"
)
UN = Parallel("un", "training-parallel-un.tgz", "un/undoc.2000.{pair}.{lang}")
GIGA = Parallel("giga-fren", "training-giga-fren.tar", "giga-fren.release2.fixed.{lang}.gz")
NEWSTEST2012 = Parallel("newstest2012", "dev.tgz", "dev/newstest2012.{lang}")
NEWSTEST2013 = Parallel("newstest2013", "dev.tgz", "dev/newstest2013.{lang}")
NEWSTEST2014_DE = Parallel(
    "newstest2014", "test-filtered.tgz", "test/newstest2014-deen-{side}.{lang}.sgm", sgml=True
)
NEWSTEST2014_FR = Parallel(
    "newstest2014", "test-filtered.tgz", "test/newstest2014-fren-{side}.{lang}.sgm", sgml=True
)
NEWSTEST2015_DE = Parallel("newstest2015", "test.tgz",
                           "test/newstest2015-deen-{side}.{lang}.sgm", sgml=True)  # fmt: skip

LUONG_TRAIN = (EUROPARL, COMMONCRAWL, NEWS_COMMENTARY)
RECIPES = {
    r.name: r
    for r in [
        Recipe("wmt14_en_de", "en", "de", "de-en", LUONG_TRAIN, (NEWSTEST2013,),
               NEWSTEST2014_DE, vocab=50000, max_len=50, arch="luong_wmt_en_de",
               paper="Luong et al. (2015) Tables 1 and 4"),
        Recipe("wmt15_de_en", "de", "en", "de-en", LUONG_TRAIN, (NEWSTEST2013,),
               NEWSTEST2015_DE, vocab=50000, max_len=50, arch="luong_wmt_en_de",
               paper="Luong et al. (2015) Table 3"),
        Recipe("wmt14_en_fr", "en", "fr", "fr-en",
               (EUROPARL, COMMONCRAWL, UN, NEWS_COMMENTARY, GIGA),
               (NEWSTEST2012, NEWSTEST2013), NEWSTEST2014_FR, vocab=30000, max_len=50,
               arch="bahdanau_rnnsearch_wmt_en_fr", paper="Bahdanau et al. (2015) Table 1",
               # §4.2: "We trained each model for approximately 5 days."
               train_flags=("--stop-time-hours", "120")),
    ]
}  # fmt: skip


def get_recipe(name):
    if name not in RECIPES:
        raise ValueError(f"--recipe {name!r}: choose one of {', '.join(RECIPES)}")
    return RECIPES[name]
