"""Where each code is implemented and tested: the one table from a code to its modules.

The rule pages (``rules/AMPxxx.md``, read by ``catalog.py``) say what a code means: its name,
severity and documentation. This table says which modules report it and which tests exercise
it. A module's place in the package says what kind of check it is:

- ``lint.rules.*``   a file-local lint rule (a ``LintRule`` class with ``@register``);
- ``lint.project.*`` a project check, across functions and modules (a ``Check`` in
  ``lint/project/checks.py`` ``PROJECT_CHECKS``, whose function lives in that module);
- ``trace.rules.*``  a runtime rule (a function with ``@rule``) that reports the code from a run;
- anything else: the code is reported by that module directly (AMP000, a file that cannot be
  linted).

Every registry checks itself against this table: ``@register``, ``Check`` and ``@rule`` refuse a
code reported from a module its row does not name, and the lint and trace registries import
the modules the table names (there is no other list of them to keep). ``tests/test_house.py``
checks the other direction: every module a row names reports the code, every catalog code has a
row, and every test module a row names exists and mentions the code. ``ampdoctor rule CODE``
prints the row.

Adding a code: its page in ``rules/``, its row here, then the check in the module the row names
(``CONTRIBUTING.md``).
"""

from __future__ import annotations

from .records import Record

PACKAGE = "ampdoctor"


class Row(Record):
    """``modules``: the modules that report the code, relative to the package (``lint.rules.step_order``);
    ``tests``: test modules that exercise it, relative to ``tests/``, beside the page's own
    examples (run by ``tests/test_catalog.py`` and ``tests/trace/test_trace_rule_pages.py``)."""

    __slots__ = ("modules", "tests")

    def __init__(self, modules: tuple[str, ...], tests: tuple[str, ...]) -> None:
        self.modules = modules
        self.tests = tests


def _row(*modules: str, tests: tuple[str, ...]) -> Row:
    return Row(modules, tests)


_PROTOCOL = "lint.rules.scaler_use"
_ORDER = "lint.rules.step_order"
_SETUP = "lint.rules.scaler_setup"
_UNSCALE = "lint.rules.unscale_and_update"
_AUTOCAST = "lint.rules.autocast_misuse"
_REGION = "lint.rules.region_contents"
_RANGE = "lint.rules.float16_range"
_AT_RUN_TIME = "trace.rules.protocol_rules"
_FLOAT8 = "lint.rules.float8_training"
_FLOAT8_LAYERS = "lint.rules.float8_layers"

CODES: dict[str, Row] = {
    "AMP000": _row("lint.engine", tests=("test_lint_odd_input.py", "test_properties.py")),
    # AMP1xx: what runs inside autocast regions.
    "AMP101": _row(
        _AUTOCAST,
        "lint.project.checks",
        "lint.project.region_calls",
        _AT_RUN_TIME,
        tests=("test_project_event_dispatch.py", "test_project_region_calls.py", "trace/test_trace_protocol.py"),
    ),
    "AMP102": _row(
        _AUTOCAST,
        "lint.project.region_calls",
        tests=("test_project_event_dispatch.py", "test_project_region_calls.py"),
    ),
    "AMP103": _row(_AUTOCAST, tests=("test_held_and_delegated.py", "test_precision_real_code.py")),
    "AMP104": _row(_REGION, tests=("test_region_numeric_rules.py",)),
    "AMP105": _row(
        _REGION,
        "lint.project.float16_reach",
        "trace.rules.census_rules",
        "trace.rules.error_rules",
        tests=("test_region_numeric_rules.py", "test_project_float16.py", "trace/test_trace_protocol.py"),
    ),
    "AMP106": _row(_REGION, tests=("test_region_numeric_rules.py",)),
    "AMP107": _row(_REGION, tests=("test_region_numeric_rules.py",)),
    # AMP2xx: the GradScaler protocol.
    "AMP201": _row(
        _UNSCALE,
        "lint.project.checks",
        _AT_RUN_TIME,
        tests=("test_protocol_rules.py", "test_project_engine_protocol.py", "trace/test_trace_protocol.py"),
    ),
    "AMP202": _row(
        _UNSCALE,
        "lint.project.handed_steps",
        _AT_RUN_TIME,
        tests=(
            "test_protocol_rules.py",
            "test_project_protocol_helpers.py",
            "test_project_handed_steps.py",
            "trace/test_diagnoses.py",
        ),
    ),
    "AMP203": _row(_PROTOCOL, _AT_RUN_TIME, tests=("test_protocol_rules.py", "trace/test_trace_protocol.py")),
    "AMP204": _row(
        _PROTOCOL,
        _AT_RUN_TIME,
        tests=("test_protocol_rules.py", "test_held_and_delegated.py", "trace/test_trace_protocol.py"),
    ),
    "AMP205": _row(
        _PROTOCOL,
        "lint.project.checks",
        _AT_RUN_TIME,
        tests=("test_protocol_rules.py", "test_protocol_paths.py", "test_project_snapshots.py"),
    ),
    "AMP206": _row(
        _ORDER, tests=("test_protocol_rules.py", "test_protocol_paths.py", "test_project_engine_protocol.py")
    ),
    "AMP207": _row(_ORDER, tests=("test_protocol_rules.py",)),
    "AMP208": _row(
        _ORDER,
        "lint.project.update_twice",
        tests=("test_protocol_rules.py", "test_protocol_paths.py", "test_project_shared_step.py"),
    ),
    "AMP209": _row(_SETUP, "lint.project.checks", tests=("test_protocol_rules.py", "test_rules_gates_and_setup.py")),
    "AMP210": _row(
        _SETUP,
        "lint.project.unscaled_float16",
        tests=("test_protocol_rules.py", "test_held_and_delegated.py", "test_project_scaler_default.py"),
    ),
    "AMP211": _row(
        _SETUP,
        "lint.project.checkpoints",
        tests=("test_project_snapshots.py", "test_project_link.py", "test_project_fixtures.py"),
    ),
    "AMP212": _row(_SETUP, tests=("test_protocol_rules.py",)),
    "AMP213": _row(_SETUP, tests=("test_protocol_rules.py",)),
    # AMP3xx: float16's range.
    "AMP301": _row(
        _RANGE,
        "lint.project.float16_reach",
        "trace.rules.error_rules",
        tests=("test_region_numeric_rules.py", "test_project_float16.py", "test_rules_gates_and_setup.py"),
    ),
    "AMP302": _row(_RANGE, tests=("test_region_numeric_rules.py", "test_textscan.py")),
    "AMP303": _row(
        _RANGE,
        "lint.project.half_returned",
        _AT_RUN_TIME,
        tests=("test_region_numeric_rules.py", "test_project_half_returned.py", "trace/test_trace_protocol.py"),
    ),
    # AMP4xx: APIs and migrations.
    "AMP401": _row("lint.rules.deprecated_api", tests=("test_region_numeric_rules.py", "test_fixtures.py")),
    "AMP402": _row("lint.rules.apex_and_trainer_amp", tests=("test_apex_migration.py", "test_region_numeric_rules.py")),
    "AMP403": _row("lint.rules.apex_and_trainer_amp", tests=("test_region_numeric_rules.py",)),
    # AMP5xx: what a traced run measured.
    "AMP501": _row("trace.rules.scale_rules", tests=("trace/test_trace_rules.py", "trace/test_trace_fixtures.py")),
    "AMP502": _row(
        "trace.rules.scale_rules", tests=("trace/test_trace_fixtures.py", "trace/test_trace_distributed.py")
    ),
    "AMP503": _row("trace.rules.nonfinite_rules", tests=("trace/test_trace_fixtures.py", "trace/test_trace_rules.py")),
    "AMP504": _row(
        "trace.rules.nonfinite_rules", tests=("trace/test_trace_backward.py", "trace/test_trace_fixtures.py")
    ),
    "AMP505": _row(
        "trace.rules.underflow_rules",
        tests=("trace/test_trace_rules.py", "trace/test_diagnoses.py", "trace/test_whatif.py"),
    ),
    "AMP506": _row(
        "trace.rules.activation_rules", tests=("trace/test_trace_runner.py", "trace/test_trace_fixtures.py")
    ),
    "AMP507": _row("trace.rules.census_rules", tests=("trace/test_trace_fixtures.py", "trace/test_diagnoses.py")),
    "AMP508": _row("trace.rules.census_rules", tests=("trace/test_diagnoses.py", "trace/test_trace_fixtures.py")),
    "AMP509": _row("trace.rules.census_rules", tests=("trace/test_trace_fixtures.py",)),
    "AMP510": _row(
        "trace.rules.underflow_rules", tests=("trace/test_trace_session.py", "trace/test_trace_fixtures.py")
    ),
    "AMP511": _row("trace.rules.rank_rules", tests=("trace/test_trace_distributed.py",)),
    "AMP512": _row("trace.rules.compare_rules", tests=("trace/test_compare.py", "trace/test_trace_hardware_rules.py")),
    "AMP513": _row("trace.rules.compare_rules", tests=("trace/test_compare.py", "trace/test_trace_cast_causes.py")),
    "AMP514": _row("trace.rules.compare_rules", tests=("trace/test_compare.py", "trace/test_trace_hardware_rules.py")),
    "AMP515": _row("trace.rules.float8_rules", tests=("trace/test_trace_float8.py", "trace/test_mx_training.py")),
    "AMP516": _row("trace.rules.float8_rules", tests=("trace/test_trace_float8.py", "trace/test_mx_training.py")),
    "AMP517": _row("trace.rules.float8_rules", tests=("trace/test_trace_float8.py", "trace/test_mx_training.py")),
    "AMP518": _row("trace.rules.float8_rules", tests=("trace/test_trace_float8.py",)),
    "AMP519": _row("trace.rules.float8_rules", tests=("trace/test_trace_float8.py", "trace/test_mx_training.py")),
    "AMP520": _row("trace.rules.float8_rules", tests=("trace/test_trace_float8.py",)),
    "AMP521": _row("trace.rules.float8_rules", tests=("trace/test_float8_scales.py", "trace/test_mx_training.py")),
    "AMP522": _row("trace.rules.float8_rules", tests=("trace/test_mx_training.py",)),
    # AMP6xx: float8 training.
    "AMP601": _row(_FLOAT8, tests=("test_float8_rules.py", "test_fixtures.py")),
    "AMP602": _row(_FLOAT8, tests=("test_float8_rules.py", "test_fixtures.py")),
    "AMP603": _row(_FLOAT8, tests=("test_float8_rules.py", "test_fixtures.py")),
    "AMP604": _row(_FLOAT8, tests=("test_float8_rules.py",)),
    "AMP605": _row(_FLOAT8, tests=("test_float8_rules.py", "test_fixtures.py")),
    "AMP606": _row(_FLOAT8, tests=("test_float8_rules.py",)),
    "AMP607": _row(_FLOAT8, tests=("test_float8_rules.py",)),
    "AMP608": _row(_FLOAT8, tests=("test_float8_rules.py",)),
    "AMP609": _row(_FLOAT8_LAYERS, tests=("test_float8_layers.py",)),
    "AMP610": _row(_FLOAT8_LAYERS, tests=("test_float8_layers.py",)),
}


def modules_of(code: str, kind: str = "") -> tuple[str, ...]:
    """The modules that report ``code`` (dotted, relative to the package), those under ``kind``
    (``"lint.rules."``, ``"lint.project."``, ``"trace.rules."``) where given."""
    row = CODES.get(code)
    if row is None:
        return ()
    return tuple(module for module in row.modules if module.startswith(kind))


def modules_under(kind: str) -> tuple[str, ...]:
    """Every module under ``kind`` that reports a code, once each, in the table's order."""
    found: dict[str, None] = {}
    for row in CODES.values():
        for module in row.modules:
            if module.startswith(kind):
                found[module] = None
    return tuple(found)


def check_registration(code: str, module: str, kind: str) -> None:
    """Refuse ``code`` reported from ``module`` (a full dotted name) where the table does not
    name that module for it: a registry calls this as each check registers."""
    relative = module.removeprefix(PACKAGE + ".")
    if relative not in modules_of(code, kind):
        raise ValueError(
            f"{code} is reported from {module}, which ampdoctor/codes.py does not name for it"
            f" (its row: {', '.join(modules_of(code)) or 'none'})"
        )


def paths_of_modules(code: str) -> list[str]:
    """The row's modules as paths in the source tree (``ampdoctor/lint/rules/step_order.py``)."""
    return [f"{PACKAGE}/{module.replace('.', '/')}.py" for module in modules_of(code)]


def paths_of_tests(code: str) -> list[str]:
    """The row's test modules as paths in the source tree (``tests/test_protocol_rules.py``)."""
    row = CODES.get(code)
    return [] if row is None else [f"tests/{name}" for name in row.tests]
