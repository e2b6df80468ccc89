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


def test_two_swaps_of_one_function_nest_and_put_back_the_package_binding(tmp_path, monkeypatch):
    from ampdoctor.trace.import_hooks import SwapAfterImport

    package = tmp_path / "swap_probe_package"
    package.mkdir()
    (package / "utils.py").write_text("def convert(x):\n    return x + 1\n")
    (package / "__init__.py").write_text("from .utils import convert\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    counted = []

    def counting(original):
        def wrapper(x):
            counted.append(x)
            return original(x)

        return wrapper

    watch = SwapAfterImport("swap_probe_package.utils", "swap_probe_package", "convert", counting)
    off = SwapAfterImport("swap_probe_package.utils", "swap_probe_package", "convert", lambda original: lambda x: x)
    watch.install()
    off.install()
    try:
        import swap_probe_package

        # The package bound what its module held after both ran: the switch, around the counter.
        assert swap_probe_package.convert(1) == 1 and counted == []
        off.remove()
        assert swap_probe_package.convert(1) == 2 and counted == [1]  # the counter is back
        watch.remove()
        assert swap_probe_package.convert(1) == 2 and counted == [1]  # and now the original
        assert swap_probe_package.utils.convert is swap_probe_package.convert
        assert not [finder for finder in sys.meta_path if isinstance(finder, AfterImport)]
    finally:
        for name in ("swap_probe_package", "swap_probe_package.utils"):
            sys.modules.pop(name, None)
