"""MkDocs hooks (``hooks:`` in mkdocs.yml): the parts of the docs that the code owns, generated at build time.

A page asks for a generated part with a marker line, ``<!-- generated: NAME -->``; :data:`GENERATORS` names
them. Nothing here is copied from the code: the metric's refused inputs are the cases the tests run, the
layers are import-linter's contract in ``pyproject.toml``, the modules and their summaries are read from the
package, and the commands' options are their own ``--help``. On top of those, :func:`on_files` writes one API
reference page per layer and :func:`on_config` lists them in the navigation.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import importlib.util
import io
import logging
import os
import re
import sys
import textwrap
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "rococo_eval"
# The metric's test cases (BAD_INPUTS: refused inputs and their messages).
METRIC_CASES = ROOT / "tests" / "helpers" / "metric_cases.py"
# The call every refused input changes one or two arguments of (as the metric's tests do).
BASE_CALL = {"predictions": [[0.9, 0.1, 0.5], [0.2, 0.8, 0.1]], "references": [0, 1], "k": 1}
REFERENCE_SECTION = "API reference"  # the nav section the layer pages are appended to
MARKER = re.compile(r"^<!-- generated: ([a-z-]+) -->$", re.MULTILINE)
# The characters a line of a code block holds in Material's content column at 1280 px, at the theme's font size:
# 656 px inside the padding, 8.16 px a character (13.6 px monospace). tests/test_docs.py measures it in chromium.
CODE_COLUMNS = 80
# A subpackage's own docstring, without a heading, at the top of its layer's page.
PACKAGE_DOCSTRING = """::: {}
    options:
      members: false
      show_root_heading: false
      show_root_toc_entry: false"""

log = logging.getLogger("mkdocs.hooks.rococo")


# ---------------------------------------------------------------------------------------------- Markdown helpers

def code(text: str) -> str:
    """``text`` as a Markdown code span (wide enough for the backticks inside it), safe in a table cell."""
    fence = "`" * (max((len(run) for run in re.findall("`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}".replace("|", "\\|")


def prose(text: str) -> str:
    """A message as Markdown: its backtick spans stay code, the rest is escaped; safe in a table cell."""
    parts = re.split(r"(`[^`]*`)", text)
    escaped = [part if part.startswith("`") else re.sub(r"([\\*_\[\]<>#])", r"\\\1", part) for part in parts]
    return "".join(escaped).replace("|", "\\|")


def rst_to_markdown(text: str) -> str:
    """A docstring's reStructuredText literals and roles (``x``, :func:`~a.b`) as Markdown code spans."""
    text = re.sub(r":[a-z]+:`~?([^`]*)`", lambda m: "`" + m.group(1) + "`", text)
    return re.sub(r"``(.+?)``", r"`\1`", text)


def mark_identifiers(html: str) -> str:
    """Give each code span of a table cell that holds no space the class ``identifier``, which extra.css keeps whole.

    CSS cannot tell a name (``image_to_text``, ``'rococo-export'``) from a code phrase that may wrap at its spaces.
    """
    def mark(cell):
        return re.sub(r"<code>([^<\s]+)</code>", r'<code class="identifier">\1</code>', cell.group())

    return re.sub(r"<td\b.*?</td>", mark, html, flags=re.DOTALL)


def table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------- refused inputs

def load_metric_cases():
    """Import the metric's case module, :data:`METRIC_CASES` (with ``tests/`` on the path, as pytest has it)."""
    for folder in (ROOT, ROOT / "tests"):
        if str(folder) not in sys.path:
            sys.path.insert(0, str(folder))
    spec = importlib.util.spec_from_file_location("_docs_metric_cases", METRIC_CASES)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _argument(value) -> str:
    """An argument value as Python source a reader can type."""
    if type(value).__module__ == "numpy":
        return f"np.array({_argument(value.tolist())}, dtype={value.dtype})"
    if isinstance(value, (list, tuple)):
        items = ", ".join(_argument(item) for item in value)
        return f"[{items}]" if isinstance(value, list) else f"({items}{',' if len(value) == 1 else ''})"
    if isinstance(value, float) and (value != value or value in (float("inf"), -float("inf"))):
        return f"float({str(value).lstrip('-')!r})".join(("-", "") if value < 0 else ("", ""))
    return repr(value)


def refused_inputs() -> list[tuple[dict, str]]:
    """Each refused input of the metric's tests and what the metric says to it, by running the metric.

    Raises:
        ValueError: the metric accepted a case, or said something other than what the test expects.
    """
    from rococo_recall import rococo_recall

    cases = load_metric_cases()
    refused = []
    for overrides, expected in cases.BAD_INPUTS:
        try:
            rococo_recall(**{**BASE_CALL, **overrides})
        except ValueError as error:
            message = str(error)
        else:
            raise ValueError(f"the metric accepted {overrides!r}, which {METRIC_CASES.name} says it refuses")
        if not re.search(expected, message):
            raise ValueError(f"for {overrides!r} the metric says {message!r}, the tests expect /{expected}/")
        refused.append((overrides, message))
    return refused


def refused_inputs_table() -> str:
    """The Markdown table of :func:`refused_inputs`, with the call they change."""
    base = ", ".join(f"{name}={_argument(value)}" for name, value in BASE_CALL.items())
    rows = [[code(", ".join(f"{name}={_argument(value)}" for name, value in overrides.items())), prose(message)]
            for overrides, message in refused_inputs()]
    source = METRIC_CASES.relative_to(ROOT).as_posix()
    return (f"Each row changes the call `rococo_recall({base})`; the table is made when the docs are built, by "
            f"running the metric on every case of `BAD_INPUTS` in `{source}` (the cases the tests run).\n\n"
            + table(["input", "what the metric says"], rows))


# ---------------------------------------------------------------------------------------------- the metric's card

def argument_sections(text: str) -> dict[str, list[tuple[str, str]]]:
    """A Google-style ``Args:``/``Returns:``/``Examples:`` text as ``{section: [(name, text), ...]}``.

    Items are the lines indented once (``name: text``), continued by the lines indented further; the items of
    ``Returns:`` and ``Examples:`` are unnamed (``("", text)``), their lines kept as they are.
    """
    sections, section = {}, None
    for line in text.strip("\n").splitlines():
        heading = re.fullmatch(r"(\w[\w ]*):", line)
        if heading:
            section = sections.setdefault(heading.group(1), [])
        elif section is not None and section is sections.get("Args") and re.match(r"    \S", line):
            name, _, rest = line.strip().partition(": ")
            section.append((name, rest))
        elif section is not None and section is sections.get("Args") and section:
            name, rest = section[-1]
            section[-1] = (name, f"{rest} {line.strip()}")
        elif section is not None:
            section.append(("", line[4:]))
    return sections


def metric_arguments() -> str:
    """The metric's arguments and outputs, from the description ``evaluate`` shows (``_KWARGS_DESCRIPTION``)."""
    import rococo_recall

    sections = argument_sections(rococo_recall._KWARGS_DESCRIPTION)
    rows = [[code(name), prose(text)] for name, text in sections["Args"]]
    returns = " ".join(line.strip() for _, line in sections["Returns"])
    example = "\n".join(line for _, line in sections["Examples"])
    return (table(["argument", "meaning"], rows) + f"\n\n**Returns** {prose(returns)}\n\n```pycon\n{example}\n```")


def reference_results() -> str:
    """The published numbers the report and the Space compare with (``REFERENCE_RESULTS``), with their sources."""
    from rococo_eval.reporting.report import REFERENCE_RESULTS

    columns = ["clean_recall@1", "recall@1", "recall@5", "recall@10", "false_rate"]
    rows = []
    for row in REFERENCE_RESULTS:
        values = [f"{row[name]:.2f}" if name in row else "" for name in columns]
        rows.append([prose(row["model"]), prose(row["attack"]), code(row["direction"]), *values, prose(row["source"])])
    return table(["model", "gallery", "direction", "clean R@1", "R@1", "R@5", "R@10", "false rate", "source"], rows)


def dataset_configs() -> str:
    """The dataset's configs: their splits, the table each split reads, the columns, and where their queries are."""
    from rococo_eval.data.configs import CONFIGS, config_features, config_splits, query_config

    rows = []
    for config in CONFIGS:
        splits = ", ".join(f"{code(split)} ({code(table)})" for split, table in config_splits(config).items())
        columns = ", ".join(code(column) for column in config_features(config))
        queries = "" if config == query_config(config) else code(query_config(config))
        rows.append([code(config), splits, columns, queries])
    return table(["config", "splits (table)", "columns", "queries of its gallery"], rows)


# ---------------------------------------------------------------------------------------------- layers and modules

def layers() -> list[list[str]]:
    """The package's layers, bottom first, each a list of module names: import-linter's ``layers`` contract."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["importlinter"]
    contract, = (contract for contract in config["contracts"] if contract["type"] == "layers")
    return [[name.strip() for name in layer.split("|")] for layer in reversed(contract["layers"])]


def _source(module: str) -> Path:
    path = ROOT.joinpath(*module.split("."))
    return path / "__init__.py" if path.is_dir() else path.with_suffix(".py")


def modules_of(name: str) -> list[str]:
    """The modules a layer entry holds: the module itself, or the modules of a subpackage and of its own subpackages
    (sorted)."""
    path = ROOT.joinpath(*name.split("."))
    if not path.is_dir():
        return [name]
    return sorted(".".join((name, *child.relative_to(path).with_suffix("").parts)) for child in path.rglob("*.py")
                  if child.stem != "__init__")


def summary(module: str) -> str:
    """The first paragraph of a module's docstring, on one line."""
    docstring = ast.get_docstring(ast.parse(_source(module).read_text(encoding="utf-8"))) or ""
    return " ".join(docstring.split("\n\n")[0].split())


def layer_slug(layer: list[str]) -> str:
    return "-".join(name.rsplit(".", 1)[-1] for name in layer)


def layer_title(layer: list[str]) -> str:
    return " | ".join(name.rsplit(".", 1)[-1] for name in layer)


def unlayered_modules() -> list[str]:
    """Modules of the package that no layer holds (the contract does not check them)."""
    layered = {module for layer in layers() for name in layer for module in modules_of(name)}
    found = {".".join(path.relative_to(ROOT).with_suffix("").parts) for path in (ROOT / PACKAGE).rglob("*.py")}
    found = {name for name in found if not name.endswith(("__init__", "__main__"))}
    return sorted(found - layered)


def layers_table() -> str:
    """One row per module, layer by layer from the bottom, with its docstring's first paragraph."""
    rows = []
    for number, layer in enumerate(layers(), start=1):
        page = f"reference/{layer_slug(layer)}.md"
        for name in layer:
            for module in modules_of(name):
                rows.append([f"{number}. [{layer_title(layer)}]({page})", f"[{code(module)}][{module}]",
                             prose(rst_to_markdown(summary(module)))])
    return table(["layer (bottom first)", "module", "what it holds (its docstring)"], rows)


def check_layer_order(markdown: str) -> str:
    """Check that a page's numbered list of bold layer names (``1. **catalog**: ...``) is the contract's order."""
    written = re.findall(r"^\d+\. \*\*([a-z_ |]+)\*\*", markdown, re.MULTILINE)
    contract = [layer_title(layer) for layer in layers()]
    if written != contract:
        raise ValueError(f"the page lists the layers {written}, pyproject.toml's contract {contract}")
    return "The build checks this list against the contract."


def layer_page(layer: list[str], number: int, count: int) -> str:
    """The API reference page of one layer: a ``:::`` block per module."""
    below = "nothing of the package" if number == 1 else "only the layers below it"
    packages = [PACKAGE_DOCSTRING.format(name) for name in layer if modules_of(name) != [name]]
    blocks = "\n\n".join(packages + [f"::: {module}" for name in layer for module in modules_of(name)])
    return (f"# {layer_title(layer)}\n\nLayer {number} of {count} from the bottom: it imports {below} "
            f"([the architecture](../architecture.md)).\n\n{blocks}\n")


# ---------------------------------------------------------------------------------------------- commands

@contextlib.contextmanager
def _help_environment():
    saved = {name: os.environ.get(name) for name in ("COLUMNS", "NO_COLOR")}
    os.environ.update(COLUMNS=str(CODE_COLUMNS + 2), NO_COLOR="1")  # argparse formats to COLUMNS - 2
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def fit_code_width(text: str) -> str:
    """``text`` with every line wider than :data:`CODE_COLUMNS` wrapped, its continuations indented under it.

    argparse wraps its help to ``COLUMNS``, but not what it cannot break: a raw description, a long usage word.
    """
    lines = []
    for line in text.splitlines():
        if len(line) <= CODE_COLUMNS:
            lines.append(line)
        else:
            indent = re.match(r" *", line).group() + "  "
            lines += textwrap.wrap(line, CODE_COLUMNS, subsequent_indent=indent, break_on_hyphens=False)
    return "\n".join(lines)


def _help_blocks(title: str, helps: list[tuple[str, str]]) -> str:
    return "\n\n".join(f"{title} `{command}`\n\n```text\n{fit_code_width(text.rstrip())}\n```"
                         for command, text in helps)


def _subcommand_helps(parser: argparse.ArgumentParser) -> list[tuple[str, str]]:
    helps = [(parser.prog, parser.format_help())]
    for action in parser._actions:  # argparse keeps its subcommands in a _SubParsersAction
        if isinstance(action, argparse._SubParsersAction):
            helps += [(sub.prog, sub.format_help()) for sub in action.choices.values()]
    return helps


def rococo_eval_help() -> str:
    """``--help`` of ``rococo-eval`` and of each of its subcommands."""
    from rococo_eval.cli import build_parser

    with _help_environment():
        return _help_blocks("####", _subcommand_helps(build_parser()))


def rococo_dataset_help() -> str:
    """``--help`` of ``python rococo_dataset.py`` and of each of its subcommands (its parser is built in main)."""
    import rococo_dataset

    helps = []
    with _help_environment():
        for argv in ([], ["export"], ["push"]):
            out = io.StringIO()
            with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
                rococo_dataset.main([*argv, "--help"])
            helps.append((" ".join(["python rococo_dataset.py", *argv]), out.getvalue()))
    return _help_blocks("####", helps)


GENERATORS = {
    "metric-arguments": metric_arguments,
    "refused-inputs": refused_inputs_table,
    "reference-results": reference_results,
    "dataset-configs": dataset_configs,
    "layers": layers_table,
    "rococo-eval-help": rococo_eval_help,
    "rococo-dataset-help": rococo_dataset_help,
}


# ---------------------------------------------------------------------------------------------- MkDocs events

def on_config(config):
    """Append one page per layer, bottom first, to the nav's API reference section; put the project on the path."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    section = next((item for item in config["nav"] or [] if isinstance(item, dict) and REFERENCE_SECTION in item),
                   None)
    if section is None:
        raise ValueError(f"mkdocs.yml's nav has no {REFERENCE_SECTION!r} section for the layer pages")
    section[REFERENCE_SECTION] += [{f"Layer {number}: {layer_title(layer)}": f"reference/{layer_slug(layer)}.md"}
                                   for number, layer in enumerate(layers(), start=1)]
    return config


def on_files(files, config):
    """Generate the layer pages of the API reference; warn about modules that no layer holds."""
    from mkdocs.structure.files import File

    all_layers = layers()
    for number, layer in enumerate(all_layers, start=1):
        files.append(File.generated(config, f"reference/{layer_slug(layer)}.md",
                                    content=layer_page(layer, number, len(all_layers))))
    for module in unlayered_modules():
        log.warning("%s is in no layer of pyproject.toml's import-linter contract: the docs leave it out", module)
    return files


def on_page_markdown(markdown, page, config, files):
    """Replace each ``<!-- generated: NAME -->`` line with what :data:`GENERATORS` makes of it.

    ``layer-order-check`` is the one marker that reads the page itself (:func:`check_layer_order`).
    """
    def generate(match):
        name = match.group(1)
        if name == "layer-order-check":
            return check_layer_order(markdown)
        if name not in GENERATORS:
            raise ValueError(f"{page.file.src_uri}: no generator {name!r} (known: {', '.join(GENERATORS)})")
        return GENERATORS[name]()

    return MARKER.sub(generate, markdown)


def on_page_content(html, page, config, files):
    """Keep the names in table cells whole (:func:`mark_identifiers`)."""
    return mark_identifiers(html)
