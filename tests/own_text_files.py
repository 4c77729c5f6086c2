"""Line-aligned text files for the tests of luong_plugin/corpora/parallel_text.py and of
recipes/own_text, which reads them."""


def write(path, lines):
    path.write_bytes(b"".join(line.encode() + b"\n" for line in lines))
    return path


def pair(tmp_path, n=200, name="corpus"):
    """A line-aligned pair of ``n`` distinct sentences, ``name.es`` and ``name.en``."""
    src = write(tmp_path / f"{name}.es", [f"la frase número {i}" for i in range(n)])
    tgt = write(tmp_path / f"{name}.en", [f"sentence number {i}" for i in range(n)])
    return src, tgt
