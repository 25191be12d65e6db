"""Where the tests are: the repository's root and the tests' folder, whatever folder a test lives in."""

from pathlib import Path

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
