"""Let torch's safe unpickler (``weights_only=True``) load fairseq checkpoints.

torch >= 2.6 loads with ``weights_only=True``. fairseq checkpoints may hold:
- an ``argparse.Namespace`` (``state["args"]``, written by fairseq versions that
  stored the command line; readable by this fairseq);
- numpy arrays and scalars in ``extra_state["metrics"]`` (e.g. the BLEU meter's
  n-gram counts when training with ``--eval-bleu``).
This module allow-lists exactly those globals, once, at import. None of them
can run code: ``_reconstruct`` only accepts an allow-listed subtype (ndarray),
and an object array's elements are themselves unpickled by the safe unpickler.
``weights_only`` is never switched off and ``torch.load`` is not patched.
"""

import argparse

import numpy as np
import torch

_multiarray = np.core.multiarray

SAFE_GLOBALS = [
    argparse.Namespace,
    (_multiarray._reconstruct, "numpy.core.multiarray._reconstruct"),
    (_multiarray.scalar, "numpy.core.multiarray.scalar"),
    np.ndarray,
    np.dtype,
] + [type(np.dtype(kind)) for kind in ("bool", "int32", "int64", "float32", "float64")]

torch.serialization.add_safe_globals(SAFE_GLOBALS)
