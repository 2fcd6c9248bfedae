"""The commands' on-disk cache of compiled programs: where it is, when it is off, and that a
run whose programs come from it is the run a fresh compilation makes, bit for bit."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from fred.runs.host import cpu_fingerprint
from fred.tools import compilation_cache
from fred.tools.compilation_cache import cache_dir
from tests.conftest import tiny


def with_cache(folder: Path) -> dict[str, str]:
    """This process's environment for a fresh process whose cache is ``folder``, not the suite's own."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("JAX_")}
    env["FRED_JAX_CACHE"] = str(folder)
    return env


def test_the_cache_is_per_cpu_under_the_user_cache_folder(tmp_path):
    assert cache_dir({"XDG_CACHE_HOME": str(tmp_path)}) == tmp_path / "fred" / "jax" / cpu_fingerprint()
    assert cache_dir({}) == Path.home() / ".cache" / "fred" / "jax" / cpu_fingerprint()
    assert (
        cache_dir({"FRED_JAX_CACHE": str(tmp_path / "c"), "XDG_CACHE_HOME": "/elsewhere"})
        == tmp_path / "c" / cpu_fingerprint()
    )


@pytest.mark.parametrize("value", ["off", "OFF", "0", "no", "false"])
def test_fred_jax_cache_off_turns_it_off(value):
    assert cache_dir({"FRED_JAX_CACHE": value}) is None


def test_the_fingerprint_names_the_isa_and_hashes_the_rest():
    isa, _, digest = cpu_fingerprint().rpartition("-")
    assert isa and len(digest) == 12 and int(digest, 16) >= 0


def test_a_jax_cache_the_user_set_up_is_left_alone(monkeypatch, tmp_path):
    monkeypatch.setenv("JAX_COMPILATION_CACHE_DIR", str(tmp_path / "theirs"))
    monkeypatch.setenv("FRED_JAX_CACHE", str(tmp_path / "ours"))
    assert compilation_cache.enable() is None
    assert not (tmp_path / "ours").exists()


def test_a_folder_that_cannot_be_made_leaves_the_cache_off(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    env = with_cache(blocker / "cache")  # under a file: it cannot be made
    code = (
        "import jax; from fred.tools.compilation_cache import enable; print(enable(), "
        "jax.config.jax_compilation_cache_dir)"
    )
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["None", "None"]


# One `fred run` in a fresh process, counting the programs it loaded from the cache.
RUN = """
import json, sys
import jax.monitoring
hits = []
def _count(name, **kw):
    if name.endswith("/cache_hits"):
        hits.append(name)
jax.monitoring.register_event_listener(_count)
from fred.tools.cli import main
code = main(["run", sys.argv[1], "--out", sys.argv[2], "--quiet"])
print(json.dumps({"code": code, "hits": len(hits)}))
"""


@pytest.mark.slow  # 8 s on 2 cores: two fresh processes
def test_a_run_from_the_cache_is_the_run_a_fresh_compilation_makes(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(tiny(stop={"max_updates": 20})))
    env = with_cache(tmp_path / "cache")

    def run(out: str) -> dict:
        done = subprocess.run(
            [sys.executable, "-c", RUN, str(path), str(tmp_path / out)],
            env=env,
            capture_output=True,
            text=True,
            check=False,
            timeout=600,
        )  # a hang guard
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout.strip().splitlines()[-1])

    cold = run("cold")
    kept = list((tmp_path / "cache" / cpu_fingerprint()).iterdir())
    warm = run("warm")
    assert cold == {"code": 0, "hits": 0} and kept
    assert warm["code"] == 0 and warm["hits"] > 0  # its programs came from the cache
    summaries = [json.loads((tmp_path / d / "summary.json").read_text()) for d in ("cold", "warm")]
    for key in ("params_sha256", "tape_sha256", "final_eval_loss"):
        assert summaries[0][key] == summaries[1][key], key
    for table in ("events", "updates", "metrics"):
        pd.testing.assert_frame_equal(
            pd.read_parquet(tmp_path / "cold" / f"{table}.parquet"),
            pd.read_parquet(tmp_path / "warm" / f"{table}.parquet"),
        )


def test_an_entry_a_killed_process_left_empty_is_dropped(tmp_path):
    # JAX never replaces an entry: an empty one would make it warn, and compile again, in every run.
    folder = tmp_path / "cache" / cpu_fingerprint()
    folder.mkdir(parents=True)
    (folder / "jit_step-0123-cache").write_bytes(b"")
    (folder / "jit_step-4567-cache").write_bytes(b"kept")
    env = with_cache(tmp_path / "cache")
    subprocess.run(
        [sys.executable, "-c", "from fred.tools.compilation_cache import enable; enable()"],
        env=env,
        check=True,
    )
    assert sorted(p.name for p in folder.iterdir()) == ["jit_step-4567-cache"]
