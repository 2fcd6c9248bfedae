"""The TCP window bound on flows between sites (``network.sites.tcp_window_bytes``, SimGrid's TCP_gamma),
against its closed form: a flow's time for n bytes is its one-way latency plus n over the least of its
share of the links and its window over its round trip (twice the one-way latency)."""

from __future__ import annotations

import pytest

from fred.scenario.loading import ScenarioError
from tests.test_sites import NIC_BPS, _sends, _sim

GBIT_BPS, ONE_WAY_S, WINDOW_B = 1.25e8, 0.03, 4 * 2**20  # 1 Gbit/s, 30 ms one way (RTT 60 ms), 4 MiB


def _windowed(window_b: float | None, sharing: str = "fair"):
    # latency_s 0 inside a site: a route between sites is exactly the wide-area link's 30 ms one way
    sites = {"nodes": [1, 1], "latency_s": ONE_WAY_S, "bandwidth_bps": GBIT_BPS, "tcp_window_bytes": window_b}
    return _sim(2, latency_s=0.0, sharing=sharing, sites=sites)


@pytest.mark.parametrize("sharing", ["fair", "rtt"])
def test_a_4_mib_window_cannot_fill_1_gbit_s_over_a_60_ms_round_trip(sharing):
    n = 1e8
    window_bps = WINDOW_B / (2 * ONE_WAY_S)  # 69.9 MB/s: below the link's 125 MB/s
    assert window_bps < GBIT_BPS
    done = _sends(_windowed(WINDOW_B, sharing), [("worker0", "worker1")], n)
    assert done[("worker0", "worker1")] == pytest.approx(ONE_WAY_S + n / min(GBIT_BPS, window_bps), rel=1e-12)


def test_a_window_above_the_bandwidth_delay_product_leaves_the_link_rate():
    n = 1e8
    done = _sends(_windowed(64 * 2**20), [("worker0", "worker1")], n)  # 64 MiB / 60 ms > 1 Gbit/s
    assert done[("worker0", "worker1")] == pytest.approx(ONE_WAY_S + n / GBIT_BPS, rel=1e-12)


def test_without_a_window_the_link_rate_is_the_bound():
    n = 1e8
    done = _sends(_windowed(None), [("worker0", "worker1")], n)
    assert done[("worker0", "worker1")] == pytest.approx(ONE_WAY_S + n / GBIT_BPS, rel=1e-12)


def test_two_windowed_flows_each_get_their_window_when_it_is_below_their_share():
    # two flows out of site 0 share its 125 MB/s (62.5 MB/s each); a 2 MiB window over 60 ms is 35 MB/s
    n, window_b = 1e8, 2 * 2**20
    sim = _sim(
        4,
        latency_s=0.0,
        sites={
            "nodes": [2, 2],
            "latency_s": ONE_WAY_S,
            "bandwidth_bps": GBIT_BPS,
            "tcp_window_bytes": window_b,
        },
    )
    done = _sends(sim, [("worker0", "worker2"), ("worker1", "worker3")], n)
    rate = min(GBIT_BPS / 2, window_b / (2 * ONE_WAY_S))
    assert list(done.values()) == pytest.approx([ONE_WAY_S + n / rate] * 2, rel=1e-12)


def test_a_flow_inside_a_site_is_not_bounded():
    n = 1e8
    sim = _sim(
        4,
        sites={"nodes": [2, 2], "latency_s": ONE_WAY_S, "bandwidth_bps": GBIT_BPS, "tcp_window_bytes": 1024},
    )
    done = _sends(sim, [("worker0", "worker1")], n)
    assert done[("worker0", "worker1")] == pytest.approx(50e-6 + n / NIC_BPS, rel=1e-12)


@pytest.mark.parametrize("window", [0, -1])
def test_a_window_of_no_bytes_is_refused(window):
    with pytest.raises(ScenarioError, match="tcp_window_bytes"):
        _windowed(window)
