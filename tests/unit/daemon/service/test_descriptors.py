"""The stream connection cap leaves RESERVE descriptors free, and never goes below one."""

from __future__ import annotations

import resource

from pulsar_bruce.service import descriptors
from pulsar_bruce.service.descriptors import RESERVE, stream_connection_cap


def test_the_cap_leaves_the_reserve_free() -> None:
    assert stream_connection_cap(256, 1024, 20) == 256
    assert stream_connection_cap(256, 128, 20) == 128 - 20 - RESERVE
    assert stream_connection_cap(256, 64, 20) == 1


def test_the_soft_limit_is_raised_to_the_hard_one() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        if hard != resource.RLIM_INFINITY and hard > 256:
            resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))
        raised = descriptors.raise_soft_limit()
        assert raised == resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        assert raised >= min(hard, 1 << 20) or hard == resource.RLIM_INFINITY
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert descriptors.in_use() > 0
