"""Tiny models gain nothing from intra-op threads; on a shared 2-core machine they lose a lot."""

import pytest
import torch


@pytest.fixture(autouse=True)
def _one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
