"""The YAML reader under scenarios and profiles: the safe loader, with bounds on what a file
may ask of it, so that a mistake or a hostile file gets a message, never a hang or a traceback.

- A file must be a regular file of at most :data:`MAX_FILE_BYTES`: a FIFO, a device or a
  socket blocked the reader for ever; PyYAML reads about 50 kB a second, so a larger file
  is minutes of parsing. fred's own files (a run's or a checkpoint's resolved
  ``scenario.yaml``) have no size limit: a scenario under the limit, with up to 16 included
  files under it too, resolves to more, and its run must still resume, replay and load.
- Lists and mappings nest at most :data:`MAX_DEPTH` deep: the reader recurses once per
  level, and 1,000 levels ended in a ``RecursionError``.
- Aliases (``*name``) may repeat at most :data:`MAX_ALIAS_VALUES` values in all, counted as
  expanded: nine levels of nine-fold aliases ("billion laughs") is 387 million values from
  a few lines, which hung the reader; an alias inside its own anchor is an endless value.
- An integer of more than Python's 4,300 digits is refused naming its field.

Merge keys (``<<: *defaults``) work as YAML defines them: the keys written beside one win.
"""

from __future__ import annotations

import math
import os
import re
import stat
import sys
from pathlib import Path
from typing import Any

import yaml

MAX_FILE_BYTES = 1 << 20  # a scenario is a few kB; the largest shipped one is under 2 kB
MAX_DEPTH = 64  # lists and mappings in one another; the shipped scenarios nest 4 deep
MAX_ALIAS_VALUES = 100_000  # values repeated by aliases, expanded: a 300 x 300 matrix used once more
_MERGE = "tag:yaml.org,2002:merge"


class Refused(yaml.YAMLError):
    """A file the reader will not expand: too deep, too many aliases, a number too long."""

    def __init__(self, problem: str, mark: yaml.error.Mark | None = None):
        super().__init__(problem)
        self.problem, self.problem_mark = problem, mark


def yaml_problem(err: yaml.YAMLError) -> str:
    """One line for a YAML error: where it is, and what (a syntax error, or a bound passed)."""
    where = getattr(err, "problem_mark", None)
    at = f"line {where.line + 1}, column {where.column + 1}: " if where else ""
    if isinstance(err, Refused):
        return f"{at}{err.problem}"
    return f"YAML syntax error at {at}{getattr(err, 'problem', None) or err}"


def read_text(path: str | Path, bounded: bool = True) -> str:
    """The UTF-8 text of ``path``; a ``ValueError`` saying what is wrong with the file where it
    is missing, a directory, not a regular file, too large (when ``bounded``) or not UTF-8.

    It is opened without blocking and checked before it is read: opening a FIFO for reading
    waits for a writer, and reading a device such as ``/dev/zero`` never ends.
    """
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:  # named by the path looked at, whatever folder it was given from
        raise ValueError(f"no such file: {os.path.abspath(path)}") from None
    except IsADirectoryError:  # Windows; elsewhere a directory opens and fstat tells
        raise ValueError(f"{path} is a directory; give a .yaml file") from None
    except OSError as err:  # a name too long, no permission, a loop of links
        raise ValueError(f"cannot open {shown(str(path))}: {err.strerror}; give a readable file") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        if stat.S_ISDIR(mode):
            raise ValueError(f"{path} is a directory; give a .yaml file")
        kind = (
            "a FIFO (named pipe)"
            if stat.S_ISFIFO(mode)
            else "a socket"
            if stat.S_ISSOCK(mode)
            else "a device"
        )
        raise ValueError(f"{path} is {kind}, not a regular file; save the YAML to a file and give that")
    with os.fdopen(fd, "rb") as file:
        data = file.read(MAX_FILE_BYTES + 1) if bounded else file.read()
    if bounded and len(data) > MAX_FILE_BYTES:
        raise ValueError(
            f"{path} is over {MAX_FILE_BYTES >> 20} MiB, and a scenario or a profile is a few kB (the "
            "reader would take minutes); give long lists by name where the field allows it (topology: ring)"
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ValueError(f"{path} is not UTF-8 text (byte {err.start}); save the file as UTF-8") from None


class NumbersLoader(yaml.SafeLoader):
    """The safe loader, bounded as the module says, and reading ``1e-3`` and ``1.25e9`` as
    numbers: YAML 1.1, which PyYAML follows, wants ``1.0e-3`` and ``1.25e+9`` and reads the
    usual spellings as strings."""

    def __init__(self, stream: Any):
        super().__init__(stream)
        self._depth = 0
        self._open: list[str] = []  # anchors of the collections being composed
        self._sizes: dict[int, int] = {}  # id(node) -> values it stands for, aliases expanded
        self._repeated = 0  # values aliases stand for, in all
        self._root: yaml.Node | None = None

    def compose_node(self, parent: Any, index: Any) -> yaml.Node:
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent):
            if event.anchor in self._open:
                raise Refused(
                    f"the alias *{event.anchor} is inside its own anchor &{event.anchor}: an endless value",
                    event.start_mark,
                )
            node = super().compose_node(parent, index)
            self._repeated += self._sizes.get(id(node), 1)
            if self._repeated > MAX_ALIAS_VALUES:
                raise Refused(
                    f"aliases (*name) repeat more than {MAX_ALIAS_VALUES:,} values in all; write the values "
                    "out, or use fewer aliases",
                    event.start_mark,
                )
            return node
        collection = isinstance(event, yaml.CollectionStartEvent)
        if collection and self._depth >= MAX_DEPTH:
            raise Refused(
                f"lists and mappings nested more than {MAX_DEPTH} deep; a scenario needs a few levels",
                event.start_mark,
            )
        anchor = getattr(event, "anchor", None)
        self._depth += collection
        self._open.append(anchor)
        try:
            node = super().compose_node(parent, index)
        finally:
            self._depth -= collection
            self._open.pop()
        children = (
            node.value
            if isinstance(node, yaml.SequenceNode)
            else ([n for pair in node.value for n in pair] if isinstance(node, yaml.MappingNode) else [])
        )
        self._sizes[id(node)] = 1 + sum(self._sizes.get(id(c), 1) for c in children)
        return node

    def flatten_mapping(self, node: yaml.MappingNode) -> None:
        """YAML's merge keys, as the spec has them: a key written beside ``<<`` wins over a
        merged one, and of ``<<: [*a, *b]`` the earlier mapping wins. PyYAML's own kept both
        pairs, and which one a mapping merging this one got depended on whether Python had
        interned the key's string (``c: {<<: *m}`` with ``m: &m {<<: *b, x: 2}`` got ``b``'s ``x``)."""
        merged: list[tuple[yaml.Node, yaml.Node]] = []
        own: list[tuple[yaml.Node, yaml.Node]] = []
        for key_node, value_node in node.value:
            if key_node.tag != _MERGE:
                if key_node.tag == "tag:yaml.org,2002:value":  # a bare "=" key, as PyYAML reads it
                    key_node.tag = "tag:yaml.org,2002:str"
                own.append((key_node, value_node))
                continue
            sources = value_node.value if isinstance(value_node, yaml.SequenceNode) else [value_node]
            for source in sources:
                if not isinstance(source, yaml.MappingNode):
                    raise yaml.constructor.ConstructorError(
                        "while constructing a mapping",
                        node.start_mark,
                        f"a merge key (<<) takes a mapping or a list of mappings, not a {source.id}",
                        source.start_mark,
                    )
                self.flatten_mapping(source)
                merged.extend(source.value)
        if not merged:
            node.value = own
            return
        pairs: dict[Any, tuple[yaml.Node, yaml.Node]] = {}
        for i, pair in enumerate(merged + own):
            key = self.construct_object(pair[0], deep=True)
            try:
                hash(key)
            except TypeError:  # the constructor refuses an unhashable key; keep it for that
                key = ("unhashable", i)
            if i >= len(merged) or key not in pairs:  # own keys win; of merged ones the first
                pairs[key] = pair
        node.value = list(pairs.values())

    def construct_document(self, node: yaml.Node) -> Any:
        self._root = node
        return super().construct_document(node)

    def construct_yaml_int(self, node: yaml.ScalarNode) -> int:
        try:
            value = super().construct_yaml_int(node)
        except ValueError:  # Python's "Exceeds the limit (4300 digits) for integer string conversion"
            value = None
        limit = sys.get_int_max_str_digits() or 4300  # 0: no limit set; still no field's
        if value is None or abs(value).bit_length() > limit * math.log2(10):  # 0x and 0b have no limit
            digits = (
                sum(c.isdigit() for c in str(node.value))
                if value is None
                else int(abs(value).bit_length() * math.log10(2))
            )
            where = _path_to(self._root, node)
            raise Refused(
                f"{where + ': ' if where else ''}an integer of {digits:,} digits; Python reads at most "
                f"{limit:,} (written in decimal), and no field needs more than a few",
                node.start_mark,
            )
        return value


NumbersLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$"),
    list("-+.0123456789"),
)
NumbersLoader.add_constructor("tag:yaml.org,2002:int", NumbersLoader.construct_yaml_int)


class UniqueKeysLoader(NumbersLoader):
    """:class:`NumbersLoader`, refusing a key given twice in one mapping (YAML keeps the last
    silently: a second ``cluster:`` section replaced the first, workers and all). The keys a
    merge key (``<<``) brings in are not given twice: the ones written beside it win."""

    def __init__(self, stream: Any):
        super().__init__(stream)
        self._checked: set[int] = set()

    def _check_unique(self, node: yaml.MappingNode) -> None:
        """Before a merge key is flattened into ``node`` (which adds keys written elsewhere)."""
        if id(node) in self._checked:
            return
        self._checked.add(id(node))
        seen: set[Any] = set()
        for key_node, _ in node.value:
            if key_node.tag == _MERGE:
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                if key in seen:
                    raise yaml.constructor.ConstructorError(
                        None,
                        None,
                        f"the key {shown(key)} is given twice; merge the two into one",
                        key_node.start_mark,
                    )
                seen.add(key)
            except TypeError:  # a list as a key: the constructor refuses it, saying where
                continue

    def flatten_mapping(self, node: yaml.MappingNode) -> None:
        self._check_unique(node)
        super().flatten_mapping(node)

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        if isinstance(node, yaml.MappingNode):
            self._check_unique(node)
        return super().construct_mapping(node, deep=deep)


def _path_to(root: yaml.Node | None, target: yaml.Node) -> str:
    """The dotted path (``cluster.workers``) of ``target`` under ``root``, or '' if not found."""
    stack: list[tuple[yaml.Node, tuple]] = [(root, ())] if root is not None else []
    seen: set[int] = set()
    while stack:
        node, path = stack.pop()
        if node is target:
            return ".".join(map(str, path))
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, yaml.SequenceNode):
            stack.extend((child, path + (i,)) for i, child in enumerate(node.value))
        elif isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                stack.append((value, path + (key.value if isinstance(key, yaml.ScalarNode) else "?",)))
    return ""


MAX_SHOWN = 200  # characters of a value a message shows


def shown(value: Any, limit: int = MAX_SHOWN) -> str:
    """``repr(value)``, cut to ``limit`` characters saying how long it was: a message never
    echoes a megabyte-long value (an alias bomb's, a pasted list)."""
    try:
        text = repr(value)
    except ValueError:  # an int too long for str() (Python's limit on digits), or one inside a list
        if isinstance(value, int):
            return f"<an integer of about {int(value.bit_length() * math.log10(2)):,} digits>"
        return f"<a {type(value).__name__} holding an integer too long to show>"
    except RecursionError:
        return f"<a {type(value).__name__} nested too deep to show>"
    if len(text) <= limit:
        return text
    return f"{text[: limit - 1]}… ({len(text):,} characters)"
