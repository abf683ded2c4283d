"""JSON for model files and checkpoints: NumPy scalars and arrays as plain values."""

import numpy as np

__all__ = ["json_default"]


def json_default(o):
    """``json.dumps(..., default=json_default)``: NumPy values as Python ones."""
    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.floating):
        return float(o)
    if isinstance(o, np.bool_):
        return bool(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    raise TypeError(f"cannot store {type(o).__name__} in a dqkm model file or checkpoint")
