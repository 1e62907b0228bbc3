"""One logging format for the parent and the spawned ranks (which do not inherit handlers)."""

from __future__ import annotations

import logging

__all__ = ["LOG_FORMAT", "setup_logging"]

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def setup_logging(level: int = logging.INFO) -> None:
    """Configure the root logger unless this process already did."""
    if not logging.getLogger().handlers:
        logging.basicConfig(level=level, format=LOG_FORMAT, datefmt="%H:%M:%S")
