#!/usr/bin/env python3
"""Writes src/unserved-intents.e5-small-q4.f32 from src/unserved-intents.txt, and
src/unserved-intents.e5-small-q4.request-means.f32 (the mean of the same requests encoded as
requests, English then Chinese: what language-neutral cosines centre a request on, with its
script's tools' mean).

The bank's requests are encoded like tools (as documents) by the embedded encoder through the
tool-search bench's --probe mode, which writes each "tool"'s vector:

    python3 crates/tool-search/scripts/write_unserved_vectors.py probe   # writes /tmp/unserved-probe.json
    (cd crates/mcp-bridge && cargo bench -p toolwright-mcp-bridge --bench tool_search -- \
        --embedder e5 --probe /tmp/unserved-probe.json)
    python3 crates/tool-search/scripts/write_unserved_vectors.py write   # reads its .features.json

Then set E5_SMALL_ID (src/unserved.rs) to the encoder's id, and refit E5_SMALL_FIT_MODEL on dev.
"""
import json
import struct
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
TEXTS = HERE / "src" / "unserved-intents.txt"
OUT = HERE / "src" / "unserved-intents.e5-small-q4.f32"
MEANS = HERE / "src" / "unserved-intents.e5-small-q4.request-means.f32"
PROBE = Path("/tmp/unserved-probe.json")


def main() -> None:
    bank = [l.strip() for l in TEXTS.read_text(encoding="utf-8").splitlines() if l.strip()]
    if sys.argv[1:] == ["probe"]:
        spec = {"tools": [{"name": "", "description": b} for b in bank], "queries": bank}
        PROBE.write_text(json.dumps(spec, ensure_ascii=False), encoding="utf-8")
        print(f"wrote {PROBE}")
    elif sys.argv[1:] == ["write"]:
        features = json.loads(Path(f"{PROBE}.features.json").read_text(encoding="utf-8"))
        texts = [t["text"] for t in features["tools"]]
        if texts != bank:
            sys.exit("the probe's texts are not the bank's: run `probe` and the bench again")
        with OUT.open("wb") as f:
            for t in features["tools"]:
                f.write(struct.pack(f"<{len(t['vector'])}f", *t["vector"]))
        print(f"wrote {OUT}: {len(bank)} vectors")
        # The probe's "requests" are the same texts encoded as requests (queries).
        queries = [q["query"] for q in features["requests"]]
        if queries != bank:
            sys.exit("the probe's requests are not the bank's: run `probe` and the bench again")
        half = len(bank) // 2  # the English half, then the same requests in Chinese
        with MEANS.open("wb") as f:
            for rows in (features["requests"][:half], features["requests"][half:]):
                dims = len(rows[0]["vector"])
                mean = [0.0] * dims
                for r in rows:
                    norm = sum(x * x for x in r["vector"]) ** 0.5
                    for i, x in enumerate(r["vector"]):
                        mean[i] += x / norm / len(rows)
                f.write(struct.pack(f"<{dims}f", *mean))
        print(f"wrote {MEANS}: 2 means")
    else:
        sys.exit("usage: write_unserved_vectors.py probe|write")


if __name__ == "__main__":
    main()
