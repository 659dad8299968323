"""The Δ-script generator (thesis §2.4) and the Δ-script it produces: the driver in
:mod:`idivm.generator.generate` (``generate``, ``check_supported``), the Δ-script in
:mod:`idivm.generator.script`, its minimization in :mod:`idivm.generator.minimize` and
its caches in :mod:`idivm.generator.caches`.  The package imports none of them itself, so
that the rules of :mod:`idivm.rules` can build statements of :mod:`idivm.generator.script`
while the driver instantiates them."""
