"""A larger fuzz (slow suite): thousands of mutated copies of the shipped scenarios through
fred's reader and validation in this process, and a sample through ``fred run`` in a
subprocess under a time and a memory cap. Nothing may end in a traceback or run past its
cap, and every refusal must be a message a person reads (a few lines, none of megabytes).

    pytest -m slow tests/test_fuzz.py -s      # prints the counts: outcomes, exit codes, times

FRED_FUZZ_CASES and FRED_FUZZ_RUNS change how many cases are validated and run (3000, 30);
FRED_FUZZ_SEED picks other mutations. A failure lists the cases with the file that made them
kept under the test's tmp folder, to run again with ``fred run FILE``.
"""

from __future__ import annotations

import collections
import copy
import math
import os
import random
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import yaml

from fred.scenario.loading import ScenarioError, include_profiles, read_yaml, validate

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = sorted(ROOT.glob("scenarios/**/*.yaml"))
CASES = int(os.environ.get("FRED_FUZZ_CASES", "3000"))
RUNS = int(os.environ.get("FRED_FUZZ_RUNS", "30"))
SEED = int(os.environ.get("FRED_FUZZ_SEED", "0"))
CASE_S = 20  # in-process reading and validation of one case
RUN_S = 60  # one fred run, with its start-up and compilation
MEMORY = 4 << 30  # address space of one fred run
SHORT = ["--set", "stop.max_updates=3", "--quiet"]  # a run that passes validation ends after 3 updates

pytestmark = pytest.mark.slow


# ----------------------------------------------------------------------------- mutations
NUMBERS = [
    0,
    -1,
    -0.0,
    1e-320,
    1e-9,
    1e308,
    -1e308,
    math.inf,
    -math.inf,
    math.nan,
    2**63,
    2**64 + 1,
    10**30,
    0.5,
    3,
]
STRINGS = ["", " ", "é" * 40, "🚀" * 30, "\u202e\u0000\t\n", "../../etc/passwd", "null", "1e3", "x" * 5000]
OTHERS = [None, True, False, [], {}, [1, "a", None], {"kind": "nope"}, {"name": "asgd"}]


def leaf_paths(tree: Any, prefix: tuple = ()) -> list[tuple]:
    """Every path in ``tree``, mappings' keys and lists' indices, the root left out."""
    found = []
    items = tree.items() if isinstance(tree, dict) else enumerate(tree) if isinstance(tree, list) else []
    for key, value in items:
        found.append(prefix + (key,))
        found.extend(leaf_paths(value, prefix + (key,)))
    return found


def parent_of(data: Any, path: tuple) -> Any:
    for key in path[:-1]:
        data = data[key]
    return data


def mutate_data(data: dict, rng: random.Random) -> str:
    """One change to the parsed scenario; returns what it did."""
    paths = leaf_paths(data)
    path = rng.choice(paths)
    node, key = parent_of(data, path), path[-1]
    kind = rng.choice(
        ["delete", "type", "number", "number", "scale", "scale", "string", "unknown", "section", "list"]
    )
    if kind == "scale":  # a legal-looking value, often valid: runs the simulator on what people try
        numbers = [p for p in paths if type(parent_of(data, p)[p[-1]]) in (int, float)]
        if not numbers:
            return "scale (no number)"
        path = rng.choice(numbers)
        node, key = parent_of(data, path), path[-1]
        factor = rng.choice([0.1, 0.5, 2, 3, 10])
        node[key] = type(node[key])(node[key] * factor)
    elif kind == "delete" and isinstance(node, dict):
        del node[key]
    elif kind == "number":
        node[key] = rng.choice(NUMBERS)
    elif kind == "string":
        node[key] = rng.choice(STRINGS)
    elif kind == "type":
        node[key] = copy.deepcopy(rng.choice(OTHERS + NUMBERS[:3] + STRINGS[:3]))
    elif kind == "unknown" and isinstance(node, dict):
        node[rng.choice(["wrokers", "lr ", "extra", "🚀", "x" * 300, 7])] = rng.choice(NUMBERS)
    elif kind == "section":  # a section where another belongs
        sections = [k for k, v in data.items() if isinstance(v, dict)]
        if not sections:  # a short scenario (an include and a name or two) may have none
            return "section (none)"
        a, b = rng.choice(sections), rng.choice(sections)
        data[a] = copy.deepcopy(data[b]) if rng.random() < 0.5 else {b: copy.deepcopy(data[b])}
    elif kind == "list":
        node[key] = rng.choice([[], [node[key]] * rng.choice([2, 1000]), [[node[key]]]])
    else:
        node[key] = None
    return f"{kind} {'.'.join(map(str, path))}"


def bomb(levels: int, fan: int) -> str:
    items = ["&l0 lol"] + [f"&l{i} [" + ", ".join([f"*l{i - 1}"] * fan) + "]" for i in range(1, levels + 1)]
    return "[" + ", ".join(items) + "]"


def raw_value(rng: random.Random) -> tuple[str, str]:
    """A YAML value the dumper cannot write: deep, aliased, a huge integer, a tag."""
    kind = rng.choice(["deep", "bomb", "self", "int", "hex", "tag", "merge", "long"])
    if kind == "deep":
        n = rng.choice([30, 63, 65, 200, 1000, 5000])
        brackets = rng.choice(["[]", "{}"])
        inner = "[" * n + "]" * n if brackets == "[]" else "{a: " * n + "1" + "}" * n
        return f"deep {n} {brackets}", inner
    if kind == "bomb":
        levels, fan = rng.randint(2, 9), rng.randint(2, 10)
        return f"bomb {levels}x{fan}", bomb(levels, fan)
    if kind == "self":
        return "self-alias", "&s [1, *s]"
    if kind == "int":
        n = rng.choice([4300, 4301, 5000, 50_000])
        return f"int of {n} digits", "9" * n
    if kind == "hex":
        return "hex int", "0x" + "f" * rng.choice([100, 20_000])
    if kind == "tag":
        return "tag", rng.choice(
            [
                "!!python/object/apply:os.system [echo]",
                "!!binary aGVsbG8=",
                "!!set {a, b}",
                "!!omap [{a: 1}]",
                "!!timestamp 2001-12-14",
                "!!float nan",
                "!nonsense 3",
            ]
        )
    if kind == "merge":
        return "merge", rng.choice(
            ["{<<: {kind: mlp}, kind: cnn}", "{<<: [1, 2]}", "{<<: 3}", "{<<: [{a: 1}, {a: 2}]}"]
        )
    n = rng.choice([10_000, 100_000])
    return f"long {n}", "y" * n


def mutate_text(text: str, rng: random.Random) -> tuple[str, str]:
    """One change to the file's text: what only text can say (bytes, syntax, size)."""
    kind = rng.choice(["truncate", "flip", "duplicate", "bom", "crlf", "tab", "huge", "nul", "latin1"])
    if kind == "truncate":
        return kind, text[: rng.randrange(len(text))]
    if kind == "flip":
        i = rng.randrange(len(text))
        return kind, text[:i] + rng.choice("[]{}:&*!|>'\"#%@`-,?") + text[i + 1 :]
    if kind == "duplicate":
        lines = text.splitlines(keepends=True)
        return kind, text + rng.choice(lines)
    if kind == "bom":
        return kind, "\ufeff" + text
    if kind == "crlf":
        return kind, text.replace("\n", "\r\n")
    if kind == "tab":
        return kind, text.replace("  ", "\t", 1)
    if kind == "huge":  # past the reader's size bound: refused before it is parsed
        return kind, text + "extra: [" + ", ".join(["1.5"] * 220_000) + "]\n"
    if kind == "nul":
        return kind, text + "\x00"
    return kind, text  # latin1: written below as Latin-1 bytes


def make_case(rng: random.Random) -> tuple[str, bytes]:
    """A mutated copy of a shipped scenario: its file's bytes and what was done to it."""
    source = rng.choice(SHIPPED)
    data = yaml.safe_load(source.read_text(encoding="utf-8"))
    done = [source.relative_to(ROOT).as_posix()]
    for _ in range(rng.choice([1, 1, 2, 3])):
        done.append(mutate_data(data, rng))
    if rng.random() < 0.35:  # a raw YAML value at some path
        path = rng.choice(leaf_paths(data))
        parent_of(data, path)[path[-1]] = "__FUZZ__"
        what, raw = raw_value(rng)
        done.append(f"{what} at {'.'.join(map(str, path))}")
        text = yaml.safe_dump(data, sort_keys=False, allow_unicode=True).replace("__FUZZ__", raw, 1)
    else:
        text = yaml.safe_dump(data, sort_keys=False, allow_unicode=rng.random() < 0.5)
    encoding = "utf-8"
    if rng.random() < 0.15:
        what, text = mutate_text(text, rng)
        done.append(what)
        encoding = "latin-1" if what == "latin1" else encoding
    return "; ".join(done), text.encode(encoding, errors="replace")


# ----------------------------------------------------------------------------- checks
def readable(message: str) -> bool:
    """At most 25 lines, each at most the reader's cut (MAX_LINE, and its "… (N characters)")."""
    from fred.scenario.loading import MAX_LINE

    lines = message.splitlines()
    return len(lines) <= 25 and all(len(line) <= MAX_LINE + 40 for line in lines)


class Hung(Exception):
    pass


def validate_case(path: Path) -> tuple[str, str]:
    """(outcome, detail): valid, refused, unreadable (a refusal over 25 lines or the line cut
    a line), crashed (any other exception) or hung (past CASE_S)."""

    def stop(*_):
        raise Hung

    old = signal.signal(signal.SIGALRM, stop)
    signal.alarm(CASE_S)
    try:
        validate(include_profiles(read_yaml(path), path.parent, str(path)), str(path))
        return "valid", ""
    except ScenarioError as err:
        return ("refused", "") if readable(str(err)) else ("unreadable", str(err)[:300])
    except Hung:
        return "hung", f"over {CASE_S} s"
    except Exception as err:  # noqa: BLE001 - the thing counted
        return "crashed", f"{type(err).__name__}: {str(err)[:300]}"
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


CAPPED = (
    f"import os, resource, sys; resource.setrlimit(resource.RLIMIT_AS, ({MEMORY}, {MEMORY})); "
    "os.execv(sys.executable, [sys.executable, '-m', 'fred.tools.cli', *sys.argv[1:]])"
)
# the cap is set in the child itself, which then becomes fred: preexec_fn is unsafe beside the threads below


def run_case(path: Path, out: Path) -> tuple[str, int | None, float, str]:
    """(case, exit status or None where it ran past RUN_S, seconds, stderr) of ``fred run``."""
    command = [sys.executable, "-c", CAPPED, "run", str(path), "--out", str(out), *SHORT]
    start = time.monotonic()
    child = subprocess.Popen(
        command,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        errors="replace",
        start_new_session=True,
        cwd=path.parent,
    )
    try:
        _, err = child.communicate(timeout=RUN_S)
        code: int | None = child.returncode
    except subprocess.TimeoutExpired:
        os.killpg(
            child.pid, signal.SIGKILL
        )  # the process group the child started: itself and what it spawned
        _, err = child.communicate()
        code = None
    return path.name, code, time.monotonic() - start, err


# ----------------------------------------------------------------------------- the test
def test_fuzz_the_shipped_scenarios(tmp_path, capsys):
    rng = random.Random(SEED)
    start = time.monotonic()
    cases: dict[str, str] = {}
    outcomes: dict[str, list[str]] = collections.defaultdict(list)
    problems: list[str] = []
    for i in range(CASES):
        done, body = make_case(rng)
        path = tmp_path / f"case{i:05d}.yaml"
        path.write_bytes(body)
        cases[path.name] = done
        outcome, detail = validate_case(path)
        outcomes[outcome].append(path.name)
        if outcome in ("crashed", "hung", "unreadable"):
            problems.append(f"{path}: {outcome} ({done}): {detail}")
    validated_s = time.monotonic() - start

    # fred run on a sample: half that passed validation (short runs), half that did not
    sample_rng = random.Random(SEED + 1)
    valid, refused = outcomes["valid"], outcomes["refused"] + outcomes["unreadable"]
    sample = sample_rng.sample(valid, min(len(valid), RUNS // 2)) + sample_rng.sample(
        refused, min(len(refused), RUNS - RUNS // 2)
    )
    with ThreadPoolExecutor(2) as pool:
        ran = list(pool.map(lambda name: run_case(tmp_path / name, tmp_path / "runs" / name), sample))
    codes = collections.Counter("hang" if code is None else code for _, code, _, _ in ran)
    tracebacks = 0
    for name, code, _seconds, err in ran:
        if "Traceback" in err:
            tracebacks += 1
            problems.append(f"{tmp_path / name}: fred run traceback ({cases[name]}):\n{err[-1500:]}")
        elif code is None:
            problems.append(f"{tmp_path / name}: fred run did not end within {RUN_S} s ({cases[name]})")
        elif code not in (0, 1, 2) or (code == 2 and not readable(err)):
            problems.append(f"{tmp_path / name}: fred run exit {code} ({cases[name]}): {err[-600:]}")
    total_s = time.monotonic() - start

    with capsys.disabled():
        print(
            f"\nfuzz (seed {SEED}): {CASES} cases from {len(SHIPPED)} shipped scenarios, validated in "
            f"{validated_s:.0f} s: "
            + ", ".join(
                f"{k} {len(outcomes[k])}" for k in ("valid", "refused", "unreadable", "crashed", "hung")
            )
        )
        print(
            f"fred run on {len(ran)} of them (timeout {RUN_S} s, {MEMORY >> 30} GiB): exit codes "
            + ", ".join(f"{k}: {v}" for k, v in sorted(codes.items(), key=str))
            + f"; tracebacks {tracebacks}, hangs {codes.get('hang', 0)}; slowest "
            f"{max((s for _, _, s, _ in ran), default=0):.0f} s; "
            f"total {total_s:.0f} s"
        )
        for line in problems[:30]:
            print("  " + line)
    assert not problems, f"{len(problems)} cases crashed, hung or were answered unreadably (listed above)"
