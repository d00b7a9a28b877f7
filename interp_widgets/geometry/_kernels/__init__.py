"""Internal kernels of the geometry package, by concern: ``inputs`` (validation, float64 clouds), ``products``
(cosine sums, Grams, float32 blocked sums with error bounds), ``eigen`` (float64 and fast float32 eigensolves),
``isoscore`` (IsoScore and shrinkage terms) and ``bundles`` (every representation metric of one cloud at once).
The public metrics (:mod:`~interp_widgets.geometry.cosine`, :mod:`~interp_widgets.geometry.isotropy`,
:mod:`~interp_widgets.geometry.spectral`, :mod:`~interp_widgets.geometry.subspaces`), the alignment and the monitor
share them.
"""
