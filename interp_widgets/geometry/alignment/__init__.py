"""Gradient–subspace alignment (arXiv 2604.08764): the tangent proxy (``proxy``, :class:`TangentProxy`), when it is
fitted (``schedule``, :class:`ProxySchedule`), its matched-rank normal controls (``controls``,
:func:`normal_controls`) and the alignment of gradients with the proxy against the controls (``measure``,
:func:`gradient_alignment`).

Example:
    >>> import torch
    >>> from interp_widgets.geometry.alignment import TangentProxy, normal_controls
    >>> normal_controls(TangentProxy.from_basis(torch.eye(8)[:, :2]), 3).shape
    torch.Size([3, 8, 2])
"""

from interp_widgets.geometry.alignment.controls import normal_controls
from interp_widgets.geometry.alignment.measure import gradient_alignment
from interp_widgets.geometry.alignment.result import AlignmentResult
from interp_widgets.geometry.alignment.proxy import TangentProxy
from interp_widgets.geometry.alignment.schedule import ProxySchedule

__all__ = ["AlignmentResult", "ProxySchedule", "TangentProxy", "gradient_alignment", "normal_controls"]
