"""The weight gradient's reference: a tap-loop correlation of the padded input with
``dy`` (:func:`helpers.ref_conv`)."""
from __future__ import annotations

import numpy as np

from helpers import explicit_pads, ref_conv


def ref_grad_weight(x, dy, w_shape, *, stride=1, padding=0, dilation=1, groups=1,
                    padding_mode="constant", cval=0):
    """``dW[k, c, t] = sum_{n, o} dy[n, k, o] xpad[n, c, o * s + t * d]`` per group, as
    :func:`ref_conv` of the padded input (channels as the batch) with ``dy``
    (images as the channels): the stride is that kernel's dilation, the dilation its
    stride."""
    r = x.ndim - 2
    pads = ((0, 0), (0, 0)) + explicit_pads(padding, r)
    extra = dict(constant_values=cval) if padding_mode == "constant" else {}
    xp = np.pad(x.astype(np.float64), pads, mode=padding_mode, **extra)
    kg, cg = w_shape[0] // groups, w_shape[1]
    parts = [np.swapaxes(ref_conv(np.swapaxes(xp[:, g * cg:(g + 1) * cg], 0, 1),
                                  np.swapaxes(dy[:, g * kg:(g + 1) * kg], 0, 1),
                                  stride=dilation, dilation=stride), 0, 1)
             for g in range(groups)]
    # (a padded input whose tail no window reaches gives more taps than the kernel's)
    return np.concatenate(parts)[(Ellipsis,) + tuple(slice(0, k) for k in w_shape[2:])]
