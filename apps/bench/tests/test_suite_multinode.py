"""The multinode suite: a quick run compares phases 1 and 3 under the local launcher and under two
torchrun agents on this host, with phase 3's held-out delay and cost of each path."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.slow

CASES = ("local", "2_nodes")


@pytest.mark.timeout(3000)  # phases 1 (x3), 2 and 3 (x2) in the quick size, on a loaded host
def test_multinode_quick_run(quick, values) -> None:
    r = quick.suite("multinode")
    assert r.params["phases"] == "1, 3" and r.params["ranks"] == 2
    assert r.params["phase3 collectors"] == "1 per machine, 2 in all"
    for case in CASES:
        assert values(r, f"phase1/windows_per_s/{case}")[0] > 0
        assert 0 < values(r, f"phase1/training/{case}")[0] <= values(r, f"phase1/wall/{case}")[0]
        assert values(r, f"phase3/iteration/{case}")[0] > 0
        assert 0 < values(r, f"phase3/training/{case}")[0] <= values(r, f"phase3/wall/{case}")[0]
        assert 0 < values(r, f"phase3/delay/{case}")[0] < 300
        assert values(r, f"phase3/cost/{case}")[0] >= 0
    it = {case: r.figure(f"phase3/iteration/{case}").median for case in CASES}
    assert values(r, "phase3/ratio")[0] == pytest.approx(it["local"] / it["2_nodes"])
    assert values(r, "phase1/ratio")[0] > 0
