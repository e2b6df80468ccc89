"""AMP402's fix: the apex → torch.amp migration.

``plan.py`` decides on the ``ast`` fact model whether a module can be migrated and where each
change goes; ``migration.py`` (with ``imports.py`` for the import statements) applies that plan
as a libcst codemod, imported only when ``--fix``/``--diff`` applies it.
"""
