"""Strategy tests use tiny models: one thread each (see specbench_testing.one_thread)."""

from specbench_testing import one_thread  # noqa: F401
