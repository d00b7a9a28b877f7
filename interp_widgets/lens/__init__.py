"""Lenses: decode the residual stream of a language model at every layer with its own final norm and head.

- :func:`logit_lens`: the logit lens (nostalgebraist 2020) over a text, a continuation or a generation, at each
  block's output and optionally after attention (``layer:i.resid_mid``); with ``tuned=`` also the tuned lens.
- :class:`TunedLens`: one affine translator per layer trained to minimise KL to the final layer (Belrose et al.
  2023), saved and loaded as safetensors.
- :class:`LensResult`: top-k tokens, target probabilities and ranks, and KL(final ‖ lens) per layer and position,
  with ``to_dataframe()``, ``chart()``, ``save()`` / ``load()`` and ``widget()``; made of the token layout, the
  :class:`LensPositions`, the targets, the :class:`LensReadout`, the :class:`Vocabulary` and the :class:`LensRun`.
- :class:`LensHead`: the model's decoding path (final norm, head, soft-capping).

Example:
    >>> from interp_widgets.lens import logit_lens
    >>> logit_lens(lm, lm_tokenizer, "The room was quiet", progress=False)
    LensResult(6 tokens, 2 layers, lenses=['logit'], targets=['next token'])
"""

from interp_widgets.lens.head import LensHead, model_name, unembedding_hash
from interp_widgets.lens.logit_lens import decode_stats, logit_lens, residual_points
from interp_widgets.lens.result import LensPositions, LensReadout, LensResult, LensRun, Vocabulary
from interp_widgets.lens.tuned import TunedLens, collect_residuals, lens_kl

__all__ = [
    "LensHead",
    "LensPositions",
    "LensReadout",
    "LensResult",
    "LensRun",
    "TunedLens",
    "Vocabulary",
    "collect_residuals",
    "decode_stats",
    "lens_kl",
    "logit_lens",
    "model_name",
    "residual_points",
    "unembedding_hash",
]
