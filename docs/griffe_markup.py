"""A griffe extension for the docs build (mkdocs.yml: mkdocstrings' python handler, ``extensions``).

The package's docstrings are Google style with three habits of reStructuredText, which mkdocstrings would
render as they stand: examples under ``Example:`` (Google's section is ``Examples:``; ``Example:`` reads as an
admonition, whose doctest output Markdown then takes for links), roles such as ``:func:`make_mix_table```, and
``text::`` before a literal block. This extension rewrites, in the docs only, ``Example:`` as ``Examples:``,
``text::`` as ``text:`` (the indented block is code in Markdown too) and each role as a cross-reference
to the object it names, resolved where the docstring stands. A name that resolves to nothing, or to an object
the site does not render, stays code without a link (an "optional" reference: the strict build does not fail
on it; ``mkdocs build --verbose`` lists them as "Unresolved optional cross-reference").
"""

from __future__ import annotations

import html
import re

import griffe

ROLE = re.compile(r":(?:func|mod|class|data|meth|attr|exc|obj|const):`(~?)\.?([^`]+)`")
EXAMPLE_HEADING = re.compile(r"^(\s*)Example:[ \t]*$", re.MULTILINE)
LITERAL_BLOCK = re.compile(r"(?<=\S)::$", re.MULTILINE)  # reStructuredText's "text::" before an indented block
ROOTS = ("rococo_eval", "rococo_recall", "rococo_dataset", "app")


def _objects(obj):
    """``obj`` and every object defined under it (imported names left out)."""
    yield obj
    for member in obj.members.values():
        if not member.is_alias:
            yield from _objects(member)


def _target(obj, name: str) -> str | None:
    """The full path of ``name`` as written in ``obj``'s docstring, or None where it does not resolve."""
    if name.split(".", 1)[0] in ROOTS:
        return name
    first, _, rest = name.partition(".")
    try:
        path = obj.resolve(first)
    except (griffe.NameResolutionError, ValueError):
        return None
    return f"{path}.{rest}" if rest else path


def _canonical(obj, path: str) -> str:
    """The path where an imported name is defined (documentation is rendered there)."""
    for _ in range(8):
        try:
            member = obj.modules_collection.get_member(path)
        except (KeyError, ValueError, AttributeError):
            return path
        if not member.is_alias:
            return path
        path = member.target_path
    return path


def markup(obj, text: str) -> str:
    """``text`` (one docstring of ``obj``) with ``Examples:`` sections and cross-references."""
    def reference(match):
        short, name = match.group(1) == "~", "".join(match.group(2).split())
        label = html.escape(name.rsplit(".", 1)[-1] if short else name)
        target = _target(obj, name)
        if target is None:
            return f"`{name}`"
        return f'<autoref identifier="{html.escape(_canonical(obj, target))}" optional><code>{label}</code></autoref>'

    return ROLE.sub(reference, LITERAL_BLOCK.sub(":", EXAMPLE_HEADING.sub(r"\1Examples:", text)))


class DocstringMarkup(griffe.Extension):
    """Rewrite the docstrings of every loaded package once it is loaded (see the module's docstring)."""

    def on_package(self, *, pkg, **kwargs) -> None:
        for obj in _objects(pkg):
            if obj.docstring is not None:
                obj.docstring.value = markup(obj, obj.docstring.value)
