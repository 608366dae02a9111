"""The AWS regions that exist, as botocore knows them (``botocore/data/partitions.json``: every partition's
regions), so that a misspelt region is refused as unknown, with the nearest real one, rather than as a region where
nothing is offered. botocore is read only for a region none of our catalogues names (a common region costs nothing).
"""

from __future__ import annotations

import difflib
import importlib.util
import json
from functools import cache
from pathlib import Path


@cache
def known_regions() -> frozenset[str]:
    """Every region of every partition in the installed botocore's partitions.json."""
    spec = importlib.util.find_spec("botocore")
    if spec is None or spec.origin is None:
        return frozenset()
    data = json.loads((Path(spec.origin).parent / "data" / "partitions.json").read_text())
    return frozenset(region for partition in data["partitions"] for region in partition["regions"])


def unknown_region(region: str, catalogued: frozenset[str] = frozenset()) -> list[str] | None:
    """None when ``region`` exists (in ``catalogued``, or in botocore's partitions); else the nearest real one (or
    none)."""
    if region in catalogued:
        return None
    regions = known_regions()
    if not regions or region in regions:
        return None  # no botocore to ask: the request builders' own checks still run
    stem = region.rsplit("-", 1)[0]  # eu-west-7: the eu-west regions, the first of them (they tie on spelling)
    same = sorted((r for r in regions if r.rsplit("-", 1)[0] == stem), key=lambda r: int(r.rsplit("-", 1)[1]))
    return same[:1] or difflib.get_close_matches(region, sorted(regions), n=1, cutoff=0.6)
