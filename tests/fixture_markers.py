"""Read `# expect: slug[status]` and `# miss: slug: reason` markers from fixture files with tokenize."""
from __future__ import annotations

import io
import re
import tokenize
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

_EXPECT = re.compile(r"#\s*expect:\s*(?P<body>.+)$")
_MISS = re.compile(r"#\s*miss:\s*(?P<slug>[a-z0-9-]+)\s*:")
_ITEM = re.compile(r"^(?P<slug>[a-z0-9-]+)(?:\[(?P<status>[a-z-]+)\])?$")


@dataclass(frozen=True)
class Marker:
    line: int
    slug: str
    status: Optional[str] = None
    miss: bool = False


def read_markers(path: Path) -> list[Marker]:
    markers: list[Marker] = []
    source = Path(path).read_bytes()
    for tok in tokenize.tokenize(io.BytesIO(source).readline):
        if tok.type != tokenize.COMMENT:
            continue
        line = tok.start[0]
        m = _EXPECT.search(tok.string)
        if m:
            for item in m.group("body").split(","):
                im = _ITEM.match(item.strip())
                if not im:
                    raise ValueError(f"{path}:{line}: bad expect marker item {item!r}")
                markers.append(Marker(line, im.group("slug"), im.group("status")))
            continue
        m = _MISS.search(tok.string)
        if m:
            markers.append(Marker(line, m.group("slug"), None, miss=True))
    return markers
