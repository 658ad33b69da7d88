import socket

import keras
import numpy as np
import pytest
from numpy_reference import random_official_params

TINY = dict(image_size=32, patch_size=8, hidden_size=32, num_layers=2, num_heads=4, mlp_dim=64, classes=5)
"""A ViT small enough for a test: 16 patches of 8x8, D=32, 2 blocks."""


@pytest.fixture
def tiny():
    return dict(TINY)


@pytest.fixture
def images():
    return np.random.default_rng(0).uniform(-1, 1, (2, 32, 32, 3)).astype("float32")


@pytest.fixture(autouse=True)
def _reset_keras_state():
    """Each test starts from float32 and a fresh name scope, whatever the last one set."""
    keras.config.set_dtype_policy("float32")
    keras.utils.set_random_seed(0)
    yield
    keras.config.set_dtype_policy("float32")
    keras.backend.clear_session()


@pytest.fixture
def no_dns(monkeypatch):
    """Every host name lookup fails as it does offline (so nothing can reach the network)."""
    def fail(*args, **kwargs):
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(socket, "getaddrinfo", fail)


@pytest.fixture
def checkpoint_npz(tmp_path):
    path = tmp_path / "tiny.npz"
    np.savez(path, **random_official_params(np.random.default_rng(0)))  # 32x32 images, 4x4 grid, 5 classes
    return str(path)
