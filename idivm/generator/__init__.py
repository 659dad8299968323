"""The Δ-script generator (thesis §2.4): the driver in :mod:`idivm.generator.generate`
(``generate``, ``check_supported``), the minimization in :mod:`idivm.generator.minimize` and
the caches in :mod:`idivm.generator.caches`; the Δ-script it produces is a value of
:mod:`idivm.script`, which the rules of :mod:`idivm.rules` build statements of too.  The
package imports none of its modules itself."""
