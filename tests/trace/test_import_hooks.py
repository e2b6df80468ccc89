"""import_hooks.AfterImport: code run right after a module's own, before its importer binds a name."""

from __future__ import annotations

import sys

from ampdoctor.trace.import_hooks import AfterImport


def test_two_hooks_on_one_module_both_run_once_the_outer_last(tmp_path, monkeypatch):
    (tmp_path / "hooked_probe_module.py").write_text("value = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    ran: list[tuple[str, int]] = []

    def seen(tag):
        def ran_after(module):
            ran.append((tag, module.value))
            module.value += 1

        return ran_after

    inner, outer = AfterImport("hooked_probe_module", seen("inner")), AfterImport("hooked_probe_module", seen("outer"))
    sys.meta_path.insert(0, inner)
    sys.meta_path.insert(0, outer)
    try:
        import hooked_probe_module  # noqa: F401  (imported for the hooks)

        assert ran == [("inner", 1), ("outer", 2)]
        assert sys.modules["hooked_probe_module"].value == 3
    finally:
        sys.meta_path.remove(inner)
        sys.meta_path.remove(outer)
        sys.modules.pop("hooked_probe_module", None)


def test_other_modules_and_a_missing_one_are_left_to_the_other_finders(tmp_path, monkeypatch):
    hook = AfterImport("no_such_module_anywhere", lambda module: None)
    sys.meta_path.insert(0, hook)
    try:
        import json  # noqa: F401

        assert hook.find_spec("json", None) is None
        assert hook.find_spec("no_such_module_anywhere", None) is None
    finally:
        sys.meta_path.remove(hook)
