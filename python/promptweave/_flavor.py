"""The two reference frameworks whose behaviour promptweave reproduces."""

from typing import Final, Literal

Flavor = Literal["opencompass", "aisbench"]

OPENCOMPASS: Final = "opencompass"
AISBENCH: Final = "aisbench"
