"""The convolution by definition, in float64, for the tests that replay a kernel's layout in numpy."""

from __future__ import annotations

import numpy as np


def direct(x, w, p) -> np.ndarray:
    """Each output channel m sums its group's input channels' windows of the zero-padded input
    (x: [channels, h, w]; w: [out_channels, channels per group, k_h, k_w]; p: the kernel's
    geometry, as its template variables name it)."""
    out_channels, cin_group = w.shape[0], w.shape[1]
    cout_group = out_channels // (x.shape[0] // cin_group)
    xp = np.pad(x.astype(np.float64), ((0, 0), (p["pad_h"], p["in_h"]), (p["pad_w"], p["in_w"])))
    out = np.zeros((out_channels, p["out_h"], p["out_w"]))
    rows = np.arange(p["out_h"]) * p["stride_h"]
    cols = np.arange(p["out_w"]) * p["stride_w"]
    for m in range(out_channels):
        first = (m // cout_group) * cin_group
        for c in range(cin_group):
            for kh in range(p["k_h"]):
                for kw in range(p["k_w"]):
                    window = xp[first + c][np.ix_(rows + kh * p["dil_h"], cols + kw * p["dil_w"])]
                    out[m] += w[m, c, kh, kw] * window
    return out
