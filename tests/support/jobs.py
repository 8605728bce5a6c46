"""Jobs for `tasks.in_own_process`'s tests: module functions, so that a fork server's child can import them."""

from __future__ import annotations

import os
import signal
import time

import numpy as np


def squares(n: int) -> np.ndarray:
    return np.arange(n, dtype=np.int64) ** 2


def refuse(message: str) -> None:
    raise ValueError(message)


def sleep(seconds: float) -> str:
    time.sleep(seconds)
    return "slept"


def killed() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def pid() -> int:
    return os.getpid()
