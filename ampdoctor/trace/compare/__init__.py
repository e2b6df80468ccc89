"""``ampdoctor trace --compare float32``: the script run twice, in float32 and as written, and
what the two runs' measurements say (``comparison.py``). The parent process (``compare_cli.py``,
``compare_run.py``) does not import torch; ``compare_child.py`` is what each child adds to its
session and report."""
