"""Never leave a truncated ``checkpoint_last.pt`` behind a killed ``fairseq-train``.

fairseq's ``checkpoint_utils.save_checkpoint`` writes the first file of a save
atomically (``torch_persistent_save``: ``NAME.tmp``, then a rename) and makes
every other one with ``PathManager.copy``. With ``--save-interval-updates`` (or
epoch / best checkpoints) the first file is ``checkpoint_E_U.pt`` and
``checkpoint_last.pt`` is such a copy, and without iopath that copy is
``shutil.copyfile``: it truncates ``checkpoint_last.pt``, then writes it. A
process killed during the copy (SIGKILL, the OOM killer, a preempted job) leaves
a truncated ``checkpoint_last.pt``, and the next run, which restores
``checkpoint_last.pt`` by default, stops on an unreadable file.

On import, the ``PathManager`` that ``checkpoint_utils`` sees gets a ``copy``
that writes ``DEST.tmp`` next to the destination and ``os.replace``-s it over
``DEST`` (atomic on POSIX): at any instant ``checkpoint_last.pt`` is either the
previous complete checkpoint or the new one. A stale ``DEST.tmp`` from a killed
copy is overwritten by the next save. Paths that need iopath (``s3://`` ...)
keep fairseq's copy. Scope: a killed process; the data is not fsync-ed, as in
fairseq's own rename, so an operating-system crash or power loss is not covered.
"""

import os
import shutil

from fairseq import checkpoint_utils
from fairseq.file_io import PathManager


def atomic_copy(src_path: str, dst_path: str, overwrite: bool = False) -> bool:
    """``PathManager.copy`` that replaces ``dst_path`` in one step (never truncates it)."""
    if PathManager.path_requires_pathmanager(src_path) or PathManager.path_requires_pathmanager(
        dst_path
    ):
        return PathManager.copy(src_path, dst_path, overwrite=overwrite)
    if not overwrite and os.path.exists(dst_path):
        return False  # iopath's contract for overwrite=False
    tmp_path = dst_path + ".tmp"
    shutil.copyfile(src_path, tmp_path)
    os.replace(tmp_path, dst_path)
    return True


class AtomicCopyPathManager(PathManager):
    """fairseq's ``PathManager`` with :func:`atomic_copy` as ``copy``."""

    copy = staticmethod(atomic_copy)


if not issubclass(checkpoint_utils.PathManager, AtomicCopyPathManager):
    checkpoint_utils.PathManager = AtomicCopyPathManager
