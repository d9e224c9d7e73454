"""Tiny models gain nothing from intra-op threads; on a shared 2-core machine they lose a lot."""

from specbench_testing import one_thread  # noqa: F401
