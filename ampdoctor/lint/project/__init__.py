"""Lint the project, not the file: per-module summaries, a link step, cross-module rules.

Real training code is split: a ``train.py`` that makes the GradScaler, an ``engine.py`` with the
per-epoch loop, a ``utils.py`` with ``save_checkpoint``. The rules of ``lint/rules`` look inside
one module; this package follows what crosses a module or function boundary:

* ``summary.py`` — what each function of a module does with scalers, optimizers, autocast,
  backward, clipping and checkpoints, which parameter plays which role, and the calls it makes
  that may land in the project's own code. Built from the module's ``AmpFacts`` (the same walk
  the rules use) and stored as plain JSON-able data, so the cache can keep it per file content.
* ``root.py`` — the project a list of files belongs to (pre-commit hands over only the changed
  ones): the nearest folder above them with ``pyproject.toml``, ``setup.cfg`` or ``.git``
  (without one, the linted files themselves).
* ``store.py`` — the summaries of a project's files, cached by content hash beside the result
  cache; unchanged files are never read again.
* ``link.py`` — resolves a call to the function it lands in, through the project's own imports
  (absolute and relative), re-exports, ``self.``/``cls.`` methods and their base classes, simple
  aliases (``save = utils.save_checkpoint``) and objects of the project's classes, to a bounded
  depth. A call it cannot resolve with certainty resolves to nothing.
* ``checks.py`` — the cross-module rules, each a query over linked summaries. A finding is
  anchored where the fix goes, with related locations for the other half.
"""
