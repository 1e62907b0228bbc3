"""Make `_tjdist_workers` importable by name: spawned ranks unpickle functions from it, and
multiprocessing's spawn hands the parent's sys.path to its children."""

import sys
from pathlib import Path

TESTS_DIR = str(Path(__file__).resolve().parent)
if TESTS_DIR not in sys.path:
    sys.path.insert(0, TESTS_DIR)
