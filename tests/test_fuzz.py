"""Property-based differential test: random valid graphs, platforms and pins (tests/fuzz_cases.py)
compiled by hetgen and run against onnxruntime with its graph optimisations off.

A case passes when every output matches, or when hetgen refuses it cleanly (a ModelError or
PlacementError for something it does not claim, e.g. an operator/dtype combination or an
impossible pin). An internal error, a build failure, any other exception or a wrong value fails.

CI runs a few derandomized examples on a mix of platforms (HG_FUZZ_EXAMPLES, default 15) and on each
shipped platform (HG_FUZZ_PLATFORM_EXAMPLES, default 2); set them higher for a longer local run, or
run benchmarks/fuzz.py (thousands of cases, `--platform all` round-robin, a summary, each failure saved).
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings

from fuzz_cases import FuzzCase, fuzz_cases, run_case
from fuzz_graphs import REPO, SHIPPED_PLATFORMS
from hetgen.platform.loader import load_platform

pytestmark = pytest.mark.cc  # every test here builds C (docs/testing.md)

EXAMPLES = int(os.environ.get("HG_FUZZ_EXAMPLES", "15"))
PLATFORM_EXAMPLES = int(os.environ.get("HG_FUZZ_PLATFORM_EXAMPLES", "2"))


@pytest.mark.external
@settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=EXAMPLES <= 50,  # CI is deterministic; long runs explore
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture],
)
@given(case=fuzz_cases())
def test_random_graph_matches_onnxruntime_or_is_refused(tmp_path_factory, case: FuzzCase):
    outcome = run_case(case, tmp_path_factory.mktemp("fuzz") / "out")
    assert outcome.status in ("pass", "refused"), f"{outcome.status}: {outcome.reason}\n{outcome.detail}"


def _cross_built(name: str) -> bool:
    """Whether the platform's board build needs a cross toolchain (run_case builds it where it is
    installed): any of its targets names one. Read from the file, so a new platform is marked right."""
    platform = load_platform(REPO / "platforms" / f"{name}.yaml")
    return any(target.toolchain.triple for target in platform.targets())


CROSS_BUILT = {name for name in SHIPPED_PLATFORMS if _cross_built(name)}


@pytest.mark.parametrize(
    "platform", [pytest.param(p, marks=pytest.mark.external) if p in CROSS_BUILT else p for p in SHIPPED_PLATFORMS]
)
def test_random_graph_on_each_shipped_platform(tmp_path_factory, platform):
    @settings(
        max_examples=PLATFORM_EXAMPLES,
        deadline=None,
        derandomize=PLATFORM_EXAMPLES <= 50,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(case=fuzz_cases(platform=platform))
    def one(case: FuzzCase):
        outcome = run_case(case, tmp_path_factory.mktemp("fuzz") / "out")
        assert outcome.status in ("pass", "refused"), f"{outcome.status}: {outcome.reason}\n{outcome.detail}"

    one()
