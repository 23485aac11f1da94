"""Triton's classification extension: an output asked for with
`classification: k` comes back as the top-k entries of each batch row, as
BYTES strings "<value>:<index>[:<label>]"."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from pyserver.kernel.errors import invalid_arg


def load_labels(model_dir: str, config) -> dict[str, list[str]]:
    """Output name -> labels, from each output's label_filename (one label
    per line, in the model folder)."""
    labels = {}
    for out in config.output:
        if out.label_filename:
            path = Path(model_dir) / out.label_filename
            try:
                labels[out.name] = path.read_text().splitlines()
            except OSError as err:
                raise invalid_arg(f"model '{config.name}': cannot read label file {path}: "
                                  f"{err.strerror}") from None
    return labels


def _format(value) -> str:
    # Triton formats with std::to_string: 6 decimals for floating point.
    if isinstance(value, (float, np.floating)):
        return "%f" % float(value)
    if isinstance(value, (bool, np.bool_)):
        return str(int(value))
    return str(int(value))


def classify(name: str, value: np.ndarray, k, labels: list[str] | None, batching: bool) -> np.ndarray:
    if isinstance(k, bool) or not isinstance(k, int) or k <= 0:
        raise invalid_arg(f"classification count for output '{name}' must be a positive integer, "
                          f"got {k!r}")
    if value.dtype == np.object_:
        raise invalid_arg(f"class result not available for output '{name}' of BYTES type")
    rows = value.reshape(value.shape[0], -1) if batching and value.ndim else value.reshape(1, -1)
    k = min(k, rows.shape[1])
    out = np.empty((rows.shape[0], k), dtype=np.object_)
    for r, row in enumerate(rows):
        order = np.argsort(-row.astype(np.float64), kind="stable")[:k]
        for j, idx in enumerate(order):
            text = f"{_format(row[idx])}:{idx}"
            if labels is not None and idx < len(labels):
                text += f":{labels[idx]}"
            out[r, j] = text.encode()
    return out if batching else out.reshape(k)
