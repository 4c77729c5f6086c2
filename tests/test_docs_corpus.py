"""The English→French Debian documentation corpus: its sources (pages and catalogs found in
the packages), deduplication, the document split, the length profile, and one end-to-end run
of recipes/docs_en_fr/prepare.sh on the real packages. The catalogs' reader and cleaning:
test_mo.py; the pages' blocks and their pairing: test_docs_pages.py."""

import json
import os
import re
import subprocess
import sys
import time

import pytest
from mo_files import write_mo

from luong_plugin.corpora import debian_docs

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# -------------------------------------------------------- sources, dedup and splits


def make_root(tmp_path):
    """Two packages: a help tree with three English/French page pairs (one with
    unequal blocks) and one catalog, repeating strings across both."""
    root = tmp_path / "root"
    pages = {
        "a.html": (
            "<p>Open the file.</p><p>Save the file.</p>",
            "<p>Ouvrez le fichier.</p><p>Enregistrez le fichier.</p>",
        ),
        "sub/b.html": (
            "<p>Open the file.</p><p>Close the window.</p>",
            "<p>Ouvrez le fichier.</p><p>Fermez la fenêtre.</p>",
        ),
        "c.html": ("<p>One.</p><p>Two.</p>", "<p>Un et deux.</p>"),
    }
    for rel, (en, fr) in pages.items():
        for lang, text in (("en", en), ("fr", fr)):
            path = root / "help-pkg" / "help" / lang / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(f"<html><body>{text}</body></html>", encoding="utf-8")
    mo_dir = root / "ui-pkg" / "locale"
    mo_dir.mkdir(parents=True)
    write_mo(
        mo_dir / "app.mo",
        {
            "Save the file.": "Enregistrez le fichier.",
            "_Quit": "_Quitter",
            "%s saved": "%s enregistré",
        },
    )
    sources = (
        debian_docs.Pages("help", "help-pkg", "help-pkg", "help/en", "help/fr", ".html"),
        debian_docs.Catalogs("ui", "ui-pkg", "locale", "*.mo", "_"),
    )
    return root, sources


def test_extract_documents_pairs_pages_and_catalogs_and_deduplicates(tmp_path):
    root, sources = make_root(tmp_path)
    stats = {}
    documents = dict(debian_docs.extract_documents(root, sources, stats))
    assert documents == {
        "help:a.html": [
            ("help:a.html#0", "Open the file.", "Ouvrez le fichier."),
            ("help:a.html#1", "Save the file.", "Enregistrez le fichier."),
        ],
        "help:sub/b.html": [("help:sub/b.html#1", "Close the window.", "Fermez la fenêtre.")],
        "ui:app.mo": [("ui:app.mo#2", "Quit", "Quitter")],
    }
    assert stats["help"]["pages with unequal blocks"] == 1
    assert stats["help"]["dropped: duplicate"] == 1
    assert stats["ui"]["dropped: duplicate"] == 1
    assert stats["ui"]["catalog strings with placeholders or markup only"] == 1


def test_missing_package_names_it_and_how_to_fetch_it(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"help-pkg is not unpacked.*apt-get download"):
        debian_docs.extract_documents(tmp_path, make_root(tmp_path)[1])
    with pytest.raises(SystemExit, match="libreoffice-help-en-us is not unpacked"):
        debian_docs.main(["extract", "--root", str(tmp_path), "--out", str(tmp_path / "o")])


def fake_documents(n_docs=40, size=5, catalog=300):
    documents = [
        (
            f"help:p{d}.html",
            [(f"help:p{d}.html#{i}", f"English {d} {i}", f"Français {d} {i}") for i in range(size)],
        )
        for d in range(n_docs)
    ]
    documents.append(
        ("ui:app.mo", [(f"ui:app.mo#{i}", f"Label {i}", f"Libellé {i}") for i in range(catalog)])
    )
    return documents


def test_held_out_splits_are_whole_documents():
    splits, docs = debian_docs.split_documents(fake_documents(), seed=3, n_valid=50, n_test=60)
    assert len(splits["valid"]) == 50 and len(splits["test"]) == 60
    for split, pairs in splits.items():
        assert {debian_docs.document_of(ref) for ref, _, _ in pairs} == docs[split]
    assert not docs["train"] & docs["valid"] and not docs["train"] & docs["test"]
    assert not docs["valid"] & docs["test"]
    assert "ui:app.mo" in docs["train"]  # catalogs only train
    for split in ("valid", "test"):  # every pair of a held-out page is held out
        for doc in docs[split]:
            assert sum(debian_docs.document_of(r) == doc for r, _, _ in splits[split]) == 5
    again, _ = debian_docs.split_documents(fake_documents(), seed=3, n_valid=50, n_test=60)
    assert again == splits
    other, _ = debian_docs.split_documents(fake_documents(), seed=4, n_valid=50, n_test=60)
    assert other["test"] != splits["test"]


def test_held_out_sentences_seen_in_training_are_dropped():
    documents = [
        (
            "help:a.html",
            [("help:a.html#0", "Save", "Enregistrer"), ("help:a.html#1", "Quit", "Quitter")],
        ),
        ("ui:app.mo", [("ui:app.mo#0", "Save", "Sauvegarder")]),
    ]
    splits, _ = debian_docs.split_documents(documents, seed=1, n_valid=20, n_test=0)
    assert [en for _, en, _ in splits["valid"]] == ["Quit"]


def test_large_documents_are_not_held_out():
    documents = [("help:big.html", [(f"help:big.html#{i}", f"E{i}", f"F{i}") for i in range(20)])]
    splits, _ = debian_docs.split_documents(documents, seed=1, n_valid=100, n_test=100)
    assert len(splits["train"]) == 20


def test_length_profile():
    profile = debian_docs.length_profile(list(range(1, 101)))
    assert profile == {
        "lines": 100,
        "median": 50.5,
        "p90": 91,
        "p99": 100,
        "mean": 50.5,
        "max": 100,
    }
    assert debian_docs.length_profile([]) == {"lines": 0}


def test_packages_unpack_english_and_french_only():
    patterns = debian_docs.package_patterns()
    assert set(patterns) == {
        p
        for s in debian_docs.SOURCES
        for p in (
            (s.en_package, s.fr_package) if isinstance(s, debian_docs.Pages) else (s.package,)
        )
    }
    for package, found in patterns.items():
        for pattern in found:
            assert pattern.startswith("./usr/")
            assert not re.search(r"/de([-_][A-Z]{2})?/", pattern)  # English and French only
            assert pattern.count("*") <= 1


# ----------------------------------------------------------------------- end to end


def count_lines(path):
    with open(path, encoding="utf-8") as f:
        return sum(1 for _ in f)


def test_prepare_sh_without_a_registry_names_the_package(tmp_path):
    """apt-get (here a stand-in that fails as it does offline) is retried once after
    an update, then prepare.sh stops, naming the package; the cache is left clean."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool, script in (
        ("apt-get", 'echo "E: Unable to locate package $2" >&2; exit 100'),
        ("sudo", '"$@"'),
    ):
        (bin_dir / tool).write_text(f"#!/bin/sh\n{script}\n")
        (bin_dir / tool).chmod(0o755)
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}", PYTHON=sys.executable)
    cmd = ["bash", "recipes/docs_en_fr/prepare.sh", "--out", tmp_path / "out"]
    proc = subprocess.run(
        [*cmd, "--debs", tmp_path / "debs"], cwd=REPO, capture_output=True, text=True, env=env
    )
    assert proc.returncode == 1
    assert "cannot fetch Debian package libreoffice-help-en-us" in proc.stderr
    assert "Unable to locate package libreoffice-help-en-us" in proc.stderr
    assert "updating the package lists once" in proc.stdout
    assert os.listdir(tmp_path / "debs") == ["unpacked"]
    assert not (tmp_path / "out" / "raw").exists()


@pytest.mark.slow
def test_prepare_sh_on_the_real_packages(tmp_path):
    """prepare.sh fetches the real .deb files into the shared cache (data/debs, or
    DEB_CACHE) on its first run: here LibreOffice's three (about 6 MB: its help pages
    and catalogs), so that a fresh machine downloads little; the other sources' readers
    are tested on built pages and catalogs above."""
    out = tmp_path / "docs"
    cmd = [
        "bash",
        "recipes/docs_en_fr/prepare.sh",
        "--sources",
        "libreoffice-help libreoffice-ui",
        "--out",
        out,
        "--max-train",
        "2000",
        "--valid",
        "60",
        "--test",
        "30",
        "--vocab",
        "1000",
    ]
    env = dict(os.environ, PYTHON=sys.executable)
    started = time.perf_counter()
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        pytest.fail(
            "recipes/docs_en_fr/prepare.sh failed (it needs apt-get to reach a Debian "
            f"package registry the first time):\n{proc.stderr[-3000:]}\n{proc.stdout[-2000:]}"
        )
    elapsed = time.perf_counter() - started
    counts = {"train": 2000, "valid": 60, "test": 30}
    docs = {}
    for split, limit in counts.items():
        n = count_lines(out / "raw" / f"refs.{split}")
        assert 0 < n <= limit and (split != "train" or n == limit)
        for lang in ("en", "fr"):
            assert count_lines(out / "raw" / f"{split}.{lang}") == n
            assert count_lines(out / "spm" / f"{split}.{lang}") == n
            for ext in ("bin", "idx"):
                assert (out / "bin" / f"{split}.en-fr.{lang}.{ext}").stat().st_size > 0
        with open(out / "raw" / f"refs.{split}", encoding="utf-8") as f:
            docs[split] = {debian_docs.document_of(line.strip()) for line in f}
    assert not docs["train"] & docs["valid"] and not docs["train"] & docs["test"]
    assert not docs["valid"] & docs["test"]
    lengths = json.loads((out / "lengths.json").read_text())
    assert lengths["pieces"]["test"]["fr"]["lines"] == count_lines(out / "raw" / "test.fr")
    stats = json.loads((out / "raw" / "stats.json").read_text())
    assert set(stats["sources"]) == {"libreoffice-help", "libreoffice-ui"}
    assert all(counts["pairs"] > 0 for counts in stats["sources"].values())
    assert not list(out.glob("**/*.tmp*"))
    # a second run rebuilds nothing
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "[extract] up to date, skipped" in proc.stdout
    assert "[fairseq-preprocess] up to date, skipped" in proc.stdout
    print(f"prepare.sh: {elapsed:.0f} s")


def test_an_unknown_source_is_refused_with_the_known_ones(capsys):
    with pytest.raises(SystemExit) as exit_:
        debian_docs.main(["packages", "--sources", "libreoffice-help", "wesnoth"])
    assert "--sources: unknown wesnoth; known: " in str(exit_.value)
    assert "gimp-help" in str(exit_.value)


def test_packages_of_some_sources_only():
    selected = debian_docs.select_sources(["libreoffice-help", "libreoffice-ui"])
    packages = debian_docs.package_patterns(selected)
    assert set(packages) == {"libreoffice-help-en-us", "libreoffice-help-fr", "libreoffice-l10n-fr"}
